"""``'connector' = 'jdbc'``: the Flink JDBC connector's options, read into a
`JdbcConnect` and what it builds (a `SqlLookupFunction` or a `SqlTableSource`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from connectors.sql import SqlTable
from connectors.sql.jdbc.drivers import JdbcConnect, choose_driver
from connectors.sql.jdbc.url import parse_jdbc_url
from connectors.sql.lookup_function import SqlLookupFunction
from connectors.sql.source import SqlTableSource
from lookup.function import LookupFunction
from lookup.table_options import Keys, TableOptions, non_empty_text
from spark_lookup import options as opts
from spark_lookup.credentials import Secret
from spark_lookup.errors import ConfigError
from spark_lookup.identifiers import qualified_name, validate_identifier
from spark_lookup.options import ConfigOption
from spark_lookup.schema import SchemaLike

__all__ = ["JdbcTableOptions"]


def _password(value: object, key: str) -> Secret:
    if isinstance(value, Secret):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"option {key!r} must be a string, got {type(value).__name__}")
    return Secret(value)


def _table_name(value: object, key: str) -> str:
    qualified_name(value, f"option {key!r}")
    assert isinstance(value, str)
    return value


def _column(value: object, key: str) -> str:
    return validate_identifier(value, f"option {key!r}")


_PARTITION_NOTE = "used by FULL loads; all four scan.partition.* keys or none"

JDBC_URL: ConfigOption[Any] = ConfigOption(
    "url", parse_jdbc_url, None,
    "the JDBC URL: jdbc:postgresql://host:port/db, jdbc:mysql://..., jdbc:mariadb://..., "
    "jdbc:sqlite:/path/file.db")
TABLE_NAME: ConfigOption[str] = ConfigOption(
    "table-name", _table_name, None, "the table: table or schema.table")
DRIVER: ConfigOption[str] = ConfigOption(
    "driver", non_empty_text, None,
    "the Python driver: adbc, psycopg, psycopg2, pymysql, mysql-connector, mysqlclient, "
    "sqlite3 (default: ADBC where installed for the database, else the first DB-API "
    "driver installed); a JDBC driver class (org.postgresql.Driver) means the default")
USERNAME: ConfigOption[str] = ConfigOption(
    "username", non_empty_text, None, "the user (over the URL's)")
PASSWORD: ConfigOption[Secret] = ConfigOption(
    "password", _password, None, "the password (over the URL's); never shown")
PARTITION_COLUMN: ConfigOption[str] = ConfigOption(
    "scan.partition.column", _column, None,
    f"the integer column a full load is chunked by; {_PARTITION_NOTE}")
PARTITION_NUM: ConfigOption[int] = ConfigOption(
    "scan.partition.num", opts.positive_int, None, f"how many chunks; {_PARTITION_NOTE}")
PARTITION_LOWER: ConfigOption[int] = ConfigOption(
    "scan.partition.lower-bound", opts.parse_int, None,
    f"the column's smallest expected value; {_PARTITION_NOTE}")
PARTITION_UPPER: ConfigOption[int] = ConfigOption(
    "scan.partition.upper-bound", opts.parse_int, None,
    f"the column's largest expected value; {_PARTITION_NOTE}")
FETCH_SIZE: ConfigOption[int] = ConfigOption(
    "scan.fetch-size", opts.non_negative_int, None,
    "accepted and not applied: every driver already streams a load in batches")


@dataclass(frozen=True)
class JdbcTableOptions(TableOptions):
    """``'connector' = 'jdbc'``: a PostgreSQL, MySQL/MariaDB or SQLite table read through
    ``lookup.SqlLookupFunction`` or ``scan.SqlTableSource``."""

    connector: ClassVar[str] = "jdbc"
    OPTIONS: ClassVar[tuple[ConfigOption[Any], ...]] = (
        JDBC_URL, TABLE_NAME, DRIVER, USERNAME, PASSWORD, PARTITION_COLUMN, PARTITION_NUM,
        PARTITION_LOWER, PARTITION_UPPER, FETCH_SIZE)
    IGNORED: ClassVar[Mapping[str, str]] = {
        "sink.": "a lookup table is only read",
        "connection.max-retry-timeout": "connections are retried by 'lookup.max-retries' "
                                        "with backoff",
        "scan.auto-commit": "reads always run in autocommit mode or end with a rollback",
    }

    table_name: str | None
    connect: JdbcConnect | None
    """The connection factory (None without ``'url'``); it holds the password."""
    partition: tuple[str, int, int, int] | None
    """``scan.partition.*``: column, number of chunks, lower and upper bound."""
    fetch_size: int | None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> JdbcTableOptions:
        url = JDBC_URL.get(options)
        user = USERNAME.get(options)
        password = PASSWORD.get(options)
        driver = DRIVER.get(options)
        connect = None
        if url is not None:
            connect = JdbcConnect(
                choose_driver(driver, url, DRIVER.key), url,
                user if user is not None else url.user,
                password if password is not None else url.password)
        return cls(TABLE_NAME.get(options), connect, _partition(options),
                   FETCH_SIZE.get(options))

    @property
    def driver(self) -> str | None:
        """The Python driver chosen (``'adbc'``, ``'psycopg'``, ``'pymysql'``...)."""
        return None if self.connect is None else self.connect.driver

    def _table(self) -> tuple[JdbcConnect, str]:
        return self.required(self.connect, JDBC_URL), self.required(self.table_name, TABLE_NAME)

    def key_columns(self, given: Keys, schema: SchemaLike | None) -> list[str]:
        if given is not None:
            return super().key_columns(given, schema)
        connect, table = self._table()
        primary_key = SqlTable(connect, table, schema=schema).plan().primary_key
        if not primary_key:
            raise ConfigError(f"table {table!r} has no primary key: pass key_columns")
        return list(primary_key)

    def function(self, key_columns: Keys, schema: SchemaLike | None) -> LookupFunction:
        connect, table = self._table()
        return SqlLookupFunction(connect, table, self.key_columns(key_columns, schema),
                                 schema=schema)

    def source(self, key_columns: list[str], schema: SchemaLike | None) -> SqlTableSource:
        connect, table = self._table()
        if self.partition is None:
            return SqlTableSource(connect, table, schema=schema)
        column, count, lower, upper = self.partition
        return SqlTableSource(connect, table, schema=schema, split_column=column,
                              chunk_count=count, split_bounds=(lower, upper))


def _partition(options: Mapping[str, Any]) -> tuple[str, int, int, int] | None:
    keys = (PARTITION_COLUMN, PARTITION_NUM, PARTITION_LOWER, PARTITION_UPPER)
    given = [o.key for o in keys if options.get(o.key) is not None]
    if not given:
        return None
    if len(given) < len(keys):
        missing = [o.key for o in keys if o.key not in given]
        raise ConfigError(f"options {given} need {missing} too: the scan.partition.* keys "
                          "go together (all four or none), as in Flink")
    column, count = PARTITION_COLUMN.require(options), PARTITION_NUM.require(options)
    lower, upper = PARTITION_LOWER.require(options), PARTITION_UPPER.require(options)
    if lower > upper:
        raise ConfigError(f"option {PARTITION_LOWER.key!r} ({lower}) is above "
                          f"{PARTITION_UPPER.key!r} ({upper})")
    return column, count, lower, upper
