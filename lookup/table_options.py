"""The connector half of a Flink table's ``WITH (...)`` options: ``'connector'`` =
``'jdbc'``, ``'filesystem'``, ``'delta'`` or ``'redis'`` and each one's keys, read into
what builds a provider's lookup function (``lookup.cache`` NONE or PARTIAL) or scan
source (FULL). [`LookupOptions`][] is the entry point.

Every key and value given is checked when the options are read (on the driver): an
unknown key is a [`ConfigError`][] naming it and the key it
resembles; a connector's required keys are checked when a provider is built from them.
A password (``'password'``, or in a URL) is held by a `Secret`
inside the connection factory and never shown.
"""

from __future__ import annotations

import difflib
import logging
import os
import string
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, TypeVar
from urllib.parse import unquote, urlsplit

from connectors.redis.client import check_redis_url
from connectors.sql.jdbc.drivers import JdbcConnect, choose_driver
from connectors.sql.jdbc.secret import Secret
from connectors.sql.jdbc.url import parse_jdbc_url
from lookup.function import LookupFunction
from spark_lookup import options as opts
from spark_lookup.credentials import redact_credentials
from spark_lookup.errors import ConfigError
from spark_lookup.identifiers import qualified_name, validate_identifier
from spark_lookup.options import ConfigOption
from spark_lookup.schema import SchemaLike
from spark_lookup.shown import shown

__all__ = [
    "CONNECTORS",
    "DeltaTableOptions",
    "FileTableOptions",
    "JdbcTableOptions",
    "RedisTableOptions",
    "TableOptions",
    "connector_hint",
    "connector_of",
    "shown_options",
    "table_options",
]

log = logging.getLogger("lookup")

T = TypeVar("T")
_Options = TypeVar("_Options", bound="TableOptions")
Keys = Sequence[str] | str | None


# --- parsers of option values (each names its key, never shows a password)

def _text(value: object, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"option {key!r}: expected a non-empty string, got {shown(value)}")
    return value


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


def _choice(*names: str) -> Callable[[object, str], str]:
    def parse(value: object, key: str) -> str:
        text = value.strip().lower() if isinstance(value, str) else ""
        if text not in names:
            raise ConfigError(f"option {key!r}: expected one of {', '.join(names)}, got "
                              f"{shown(value)}")
        return text

    return parse


def _local_path(value: object, key: str) -> str:
    path = _text(value, key)
    parts = urlsplit(path)
    if parts.scheme == "file":
        path = unquote(parts.path)
    elif "://" in path:
        raise ConfigError(f"option {key!r}: {path!r}: only local paths (or file:// URIs) are "
                          "read by the filesystem connector; use 'delta' for object stores")
    # Resolved here, on the driver: executors have working directories of their own.
    return os.path.abspath(path)


# --- the connectors

class TableOptions(ABC):
    """One connector's options, checked: what builds the lookup function of a NONE or
    PARTIAL provider (`function`) and the scan source of a FULL one
    (`source`), on the driver."""

    connector: ClassVar[str]
    OPTIONS: ClassVar[tuple[ConfigOption[Any], ...]]
    """The connector's keys, in documentation order."""
    IGNORED: ClassVar[Mapping[str, str]] = {}
    """Flink keys accepted and not applied (a key, or a prefix ending in ``.``), each
    with the reason."""
    FOREIGN: ClassVar[Mapping[str, str]] = {}
    """Keys of other Flink connectors of the same name, refused with what to write here."""

    @classmethod
    def from_options(cls: type[_Options], options: Mapping[str, Any]) -> _Options:
        """Check the keys and values given (the required ones are checked on use); by
        default the fields are the values of `OPTIONS`, in order."""
        fields: Any = cls  # a dataclass of the connector's fields
        built: _Options = fields(*(option.get(options) for option in cls.OPTIONS))
        return built

    @classmethod
    def ignored(cls, key: str) -> str | None:
        """Why ``key`` is accepted and not applied, or None when it is not such a key."""
        for name, reason in cls.IGNORED.items():
            if key == name or (name.endswith(".") and key.startswith(name)):
                return reason
        return None

    @classmethod
    def check_keys(cls, options: Mapping[str, Any]) -> None:
        """Refuse a key this connector does not know, naming the key it resembles."""
        known = {"connector", *(o.key for o in cls.OPTIONS), *(o.key for o in opts.LOOKUP_OPTIONS)}
        applied = {}
        for key, value in options.items():
            if key in cls.FOREIGN and key not in known:
                raise ConfigError(f"unknown option {key!r} of connector {cls.connector!r}: "
                                  f"{cls.FOREIGN[key]}")
            reason = cls.ignored(key) if isinstance(key, str) else None
            if reason is None:
                applied[key] = value
            else:
                log.info("option %r of connector %r is accepted and not applied: %s", key,
                         cls.connector, reason)
        opts.check_known_keys(applied, known, prefix="",
                              where=f" of connector {cls.connector!r}")

    def required(self, value: T | None, option: ConfigOption[Any]) -> T:
        """``value``, the parsed value of ``option``; a ConfigError naming it if absent."""
        if value is None:
            raise ConfigError(f"missing required option {option.key!r} of connector "
                              f"{self.connector!r}: {option.description}")
        return value

    def key_columns(self, given: Keys, schema: SchemaLike | None) -> list[str]:
        """``given``, else the table's primary key where its catalog has one.

        Raises
        ------
        ConfigError
            When none is given and the table has none.
        """
        if given is not None:
            return [given] if isinstance(given, str) else list(given)
        raise ConfigError(f"a {self.connector!r} table declares no primary key: pass "
                          "key_columns")

    def function(self, key_columns: Keys, schema: SchemaLike | None) -> LookupFunction:
        """The lookup function of a NONE or PARTIAL provider.

        Raises
        ------
        ConfigError
            For a connector read only whole (files, Delta): lookups of a key would
            read every file for each batch of misses; its tables take ``lookup.cache``
            FULL.
        """
        raise ConfigError(
            f"connector {self.connector!r} is looked up through a full cache only: set "
            "'lookup.cache' = 'FULL' with its reload options (a lookup by key would read "
            "the whole table for each batch of misses: there is no index to find a key by)"
        )

    @abstractmethod
    def source(self, key_columns: list[str], schema: SchemaLike | None) -> Any:
        """The ``scan.Source`` a FULL provider loads."""


_PARTITION_NOTE = "used by FULL loads; all four scan.partition.* keys or none"

JDBC_URL: ConfigOption[Any] = ConfigOption(
    "url", parse_jdbc_url, None,
    "the JDBC URL: jdbc:postgresql://host:port/db, jdbc:mysql://..., jdbc:mariadb://..., "
    "jdbc:sqlite:/path/file.db")
TABLE_NAME: ConfigOption[str] = ConfigOption(
    "table-name", _table_name, None, "the table: table or schema.table")
DRIVER: ConfigOption[str] = ConfigOption(
    "driver", _text, None,
    "the Python driver: adbc, psycopg, psycopg2, pymysql, mysql-connector, mysqlclient, "
    "sqlite3 (default: ADBC where installed for the database, else the first DB-API "
    "driver installed); a JDBC driver class (org.postgresql.Driver) means the default")
USERNAME: ConfigOption[str] = ConfigOption(
    "username", _text, None, "the user (over the URL's)")
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
        from connectors.sql import SqlTable

        connect, table = self._table()
        primary_key = SqlTable(connect, table, schema=schema).plan().primary_key
        if not primary_key:
            raise ConfigError(f"table {table!r} has no primary key: pass key_columns")
        return list(primary_key)

    def function(self, key_columns: Keys, schema: SchemaLike | None) -> LookupFunction:
        from connectors.sql.lookup_function import SqlLookupFunction

        connect, table = self._table()
        return SqlLookupFunction(connect, table, self.key_columns(key_columns, schema),
                                 schema=schema)

    def source(self, key_columns: list[str], schema: SchemaLike | None) -> Any:
        from scan import SqlTableSource

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


FILE_PATH: ConfigOption[str] = ConfigOption(
    "path", _local_path, None, "a Parquet or CSV file or directory: a local path or file:// URI")
FILE_FORMAT: ConfigOption[str] = ConfigOption(
    "format", _choice("parquet", "csv"), None, "parquet or csv (with a header row)")


@dataclass(frozen=True)
class FileTableOptions(TableOptions):
    """``'connector' = 'filesystem'``: Parquet or CSV files read by ``scan.FileSource``,
    through a full cache."""

    connector: ClassVar[str] = "filesystem"
    OPTIONS: ClassVar[tuple[ConfigOption[Any], ...]] = (FILE_PATH, FILE_FORMAT)
    IGNORED: ClassVar[Mapping[str, str]] = {
        "sink.": "a lookup table is only read",
        "source.monitor-interval": "each load lists the files present then",
    }

    path: str | None
    format: str | None

    def source(self, key_columns: list[str], schema: SchemaLike | None) -> Any:
        from scan import FileSource

        return FileSource(self.required(self.path, FILE_PATH),
                          self.required(self.format, FILE_FORMAT), schema=schema)


DELTA_PATH: ConfigOption[str] = ConfigOption(
    "table-path", _text, None, "the Delta table's directory or URI (s3://, abfss://...)")
DELTA_VERSION: ConfigOption[int] = ConfigOption(
    "versionAsOf", opts.non_negative_int, None,
    "a table version to pin (default: the latest at each load)")


@dataclass(frozen=True)
class DeltaTableOptions(TableOptions):
    """``'connector' = 'delta'``: a Delta Lake table read by ``scan.DeltaSource``,
    through a full cache."""

    connector: ClassVar[str] = "delta"
    OPTIONS: ClassVar[tuple[ConfigOption[Any], ...]] = (DELTA_PATH, DELTA_VERSION)

    table_path: str | None
    version: int | None

    def source(self, key_columns: list[str], schema: SchemaLike | None) -> Any:
        from scan import DeltaSource

        return DeltaSource(self.required(self.table_path, DELTA_PATH), version=self.version,
                           schema=schema)


def _redis_url(value: object, key: str) -> str:
    url = check_redis_url(value, f"option {key!r}")
    if "password=" in urlsplit(url).query.lower():
        # Only a password in the authority is redacted wherever the URL is shown.
        raise ConfigError(f"option {key!r}: {_redacted(url)!r}: give the password in the "
                          "URL's authority (redis://:password@host:6379/0), not as a parameter")
    return url


REDIS_URL: ConfigOption[str] = ConfigOption(
    "url", _redis_url, None, "redis://[[user]:password@]host[:port][/db], rediss:// (TLS)")
KEY_TEMPLATE: ConfigOption[str] = ConfigOption(
    "key-template", _text, None, "the Redis key of a lookup key: 'user:{id}'")
VALUE_TYPE: ConfigOption[str] = ConfigOption(
    "value-type", _choice("hash", "json", "string"), "hash", "hash, json or string")
ESCAPE: ConfigOption[bool] = ConfigOption(
    "escape", opts.parse_bool, False, "percent-encode separators inside key parts")
SOCKET_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "socket-timeout", opts.positive_duration, None,
    "bound of one command (default 5 s; 30 s for a FULL load)")
CONNECT_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "connect-timeout", opts.positive_duration, None, "bound of connecting (default 5 s)")
RETRIES: ConfigOption[int] = ConfigOption(
    "retries", opts.non_negative_int, None,
    "immediate retries of a command after a connection error")
MAX_KEYS: ConfigOption[int] = ConfigOption(
    "max-keys-per-command", opts.positive_int, None, "keys per MGET (default 1000)")


@dataclass(frozen=True)
class RedisTableOptions(TableOptions):
    """``'connector' = 'redis'``: the options of ``lookup.RedisLookupFunction`` (and of
    ``scan.RedisScanSource`` for a full cache), hyphenated. Redis values carry no
    types: the provider needs ``schema``."""

    connector: ClassVar[str] = "redis"
    OPTIONS: ClassVar[tuple[ConfigOption[Any], ...]] = (
        REDIS_URL, KEY_TEMPLATE, VALUE_TYPE, ESCAPE, SOCKET_TIMEOUT, CONNECT_TIMEOUT, RETRIES,
        MAX_KEYS)
    FOREIGN: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(("host", "port", "database", "password", "redis-mode"),
                        "this connector reads the server from 'url' = "
                        "'redis://[:password@]host[:port][/db]' (the option is another Flink "
                        "Redis connector's)"),
        **dict.fromkeys(("command", "value.data.structure"),
                        "'key-template' ('user:{id}') and 'value-type' (hash, json or string) "
                        "say how rows are kept here (the option is another Flink Redis "
                        "connector's)"),
    }

    url: str | None
    key_template: str | None
    value_type: str
    escape: bool
    socket_timeout: timedelta | None
    connect_timeout: timedelta | None
    retries: int | None
    max_keys_per_command: int | None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RedisTableOptions:
        template = KEY_TEMPLATE.get(options)
        if template is not None:
            _placeholders(template)
        value_type, escape = VALUE_TYPE.get(options), ESCAPE.get(options)
        assert value_type is not None  # both have defaults
        assert escape is not None
        return cls(REDIS_URL.get(options), template, value_type, escape,
                   SOCKET_TIMEOUT.get(options), CONNECT_TIMEOUT.get(options),
                   RETRIES.get(options), MAX_KEYS.get(options))

    def __repr__(self) -> str:
        url = None if self.url is None else _redacted(self.url)
        return (f"RedisTableOptions(url={url!r}, key_template={self.key_template!r}, "
                f"value_type={self.value_type!r})")

    def key_columns(self, given: Keys, schema: SchemaLike | None) -> list[str]:
        """``given``, else the key template's placeholders in order."""
        if given is not None:
            return super().key_columns(given, schema)
        return _placeholders(self.required(self.key_template, KEY_TEMPLATE))

    def _schema(self, schema: SchemaLike | None) -> SchemaLike:
        if schema is None:
            raise ConfigError("connector 'redis' needs schema= (the table's columns): Redis "
                              "values carry no types")
        return schema

    def function(self, key_columns: Keys, schema: SchemaLike | None) -> LookupFunction:
        from connectors.redis.lookup_function import RedisLookupFunction

        extra: dict[str, Any] = {name: value for name, value in (
            ("socket_timeout", self.socket_timeout), ("connect_timeout", self.connect_timeout),
            ("retries", self.retries), ("max_keys_per_command", self.max_keys_per_command),
        ) if value is not None}
        return RedisLookupFunction(
            self.required(self.url, REDIS_URL), self.required(self.key_template, KEY_TEMPLATE),
            self._schema(schema), self.key_columns(key_columns, schema), self.value_type,
            escape=self.escape, **extra)

    def source(self, key_columns: list[str], schema: SchemaLike | None) -> Any:
        from scan import RedisScanSource

        extra: dict[str, Any] = ({} if self.socket_timeout is None
                                 else {"socket_timeout": self.socket_timeout})
        return RedisScanSource(
            self.required(self.url, REDIS_URL), value_type=self.value_type,
            schema=self._schema(schema), key_template=self.required(self.key_template,
                                                                    KEY_TEMPLATE),
            key_columns=key_columns, escape=self.escape, **extra)


def _placeholders(template: str) -> list[str]:
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ConfigError(f"option {KEY_TEMPLATE.key!r}: {template!r}: {exc}") from exc
    if not fields:
        raise ConfigError(f"option {KEY_TEMPLATE.key!r}: {template!r} has no {{column}} "
                          "placeholder")
    return fields


CONNECTORS: Mapping[str, type[TableOptions]] = {
    cls.connector: cls
    for cls in (JdbcTableOptions, FileTableOptions, DeltaTableOptions, RedisTableOptions)
}
"""The connectors a provider is built from, by their ``'connector'`` value."""


def connector_of(options: Mapping[str, Any]) -> type[TableOptions] | None:
    """The connector ``options`` name, or None when they name none or one this library
    does not build (``'kafka'``)."""
    name = options.get("connector")
    if name is None:
        return None
    if not isinstance(name, str):
        raise ConfigError(f"option 'connector' must be a string, got {shown(name)}")
    return CONNECTORS.get(name.strip().lower())


def table_options(options: Mapping[str, Any]) -> TableOptions | None:
    """The connector options of ``options``, checked; None when no connector is named,
    or one this library does not build (``'kafka'``: the provider then needs its
    lookup function or source, and the connector's keys are left alone).

    Raises
    ------
    ConfigError
        For an unknown key of the connector (naming the key it resembles) or a bad
        value; without ``'connector'``, for any key but ``lookup.*`` (naming the
        connector whose key it is, or the key it resembles).
    """
    kind = connector_of(options)
    if kind is None:
        if "connector" not in options:
            _check_keys_without_connector(options)
        return None
    kind.check_keys(options)
    return kind.from_options(options)


def _check_keys_without_connector(options: Mapping[str, Any]) -> None:
    known = {"connector", *(o.key for o in opts.LOOKUP_OPTIONS)}
    unknown = [key for key in options if isinstance(key, str) and key not in known]
    # A misspelt key first: it may be the missing 'connector'.
    opts.check_known_keys({key: None for key in unknown
                           if difflib.get_close_matches(key, known, n=1)}, known, prefix="")
    for key in unknown:
        owners = [name for name, kind in CONNECTORS.items()
                  if key in {o.key for o in kind.OPTIONS}]
        if owners:
            raise ConfigError(f"option {key!r} is an option of connector "
                              f"{' or '.join(map(repr, owners))}: give 'connector' too "
                              "(without one, only the lookup.* options are read)")
    opts.check_known_keys(options, known, prefix="")


def connector_hint(name: str) -> str:
    """``"; did you mean 'jdbc'?"`` for a connector name close to one built here."""
    close = difflib.get_close_matches(name.strip().lower(), list(CONNECTORS), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


_WHOLE_TABLE_DEFAULTS = {"lookup.cache": "FULL",
                         "lookup.full-cache.periodic-reload.interval": "1 h"}
_FLINK_FILE_TTL = "lookup.join.cache.ttl"


def with_connector_defaults(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with what Flink implies for a connector read only whole: a
    ``filesystem`` or ``delta`` table without ``'lookup.cache'`` is a full cache
    reloaded every hour (Flink's filesystem lookup reloads after
    ``lookup.join.cache.ttl``, 60 min by default, which is read as the reload interval).

    Raises
    ------
    ConfigError
        When ``lookup.join.cache.ttl`` and the reload interval are both given.
    """
    given = dict(options)
    name = given.get("connector")
    if not isinstance(name, str) or name.strip().lower() not in ("filesystem", "delta"):
        return given
    interval = "lookup.full-cache.periodic-reload.interval"
    if _FLINK_FILE_TTL in given:
        if interval in given:
            raise ConfigError(f"give {_FLINK_FILE_TTL!r} (Flink's filesystem key) or "
                              f"{interval!r}, not both")
        given[interval] = given.pop(_FLINK_FILE_TTL)
    if "lookup.cache" not in given:
        given["lookup.cache"] = _WHOLE_TABLE_DEFAULTS["lookup.cache"]
    if (opts.CACHE.get(given) == "FULL"
            and "lookup.full-cache.reload-strategy" not in given and interval not in given):
        given[interval] = _WHOLE_TABLE_DEFAULTS[interval]
    return given


def shown_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as they may be kept and shown: the password a
    `Secret`, URLs without their passwords."""
    kept = dict(options)
    if isinstance(kept.get("password"), str):
        kept["password"] = Secret(kept["password"])
    if isinstance(kept.get("url"), str):
        kept["url"] = _redacted(kept["url"])
    return kept


def _redacted(url: str) -> str:
    """A JDBC or Redis URL without its password (``user:password@`` or ``password=``)."""
    return redact_credentials(url)
