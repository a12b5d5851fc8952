"""What a SQL table looks like: columns, types, primary key, unique and NOT NULL
columns, read from the catalogs of SQLite and PostgreSQL (other DB-API drivers get none,
so the caller must say what the catalog would have)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

from spark_lookup.errors import ConnectorError, SparkLookupError
from spark_lookup.sql import validate_identifier

SQLITE = "sqlite"
POSTGRES = "postgres"
OTHER = "other"


@dataclass(frozen=True)
class ColumnInfo:
    """One column: its declared type, whether it is NOT NULL, and how Spark sees it."""

    name: str
    db_type: str
    not_null: bool
    spark_type: T.DataType | None
    """The Spark type inferred from ``db_type``; None if there is none."""
    textual: bool
    """True if the column's type is textual (read as STRING without a cast)."""


@dataclass(frozen=True)
class TableInfo:
    """The catalog facts a scan needs; empty for drivers without catalog support."""

    driver: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...]
    unique_columns: frozenset[str]

    def column(self, name: str) -> ColumnInfo | None:
        return next((c for c in self.columns if c.name == name), None)


def driver_of(connection: Any) -> str:
    """``"sqlite"``, ``"postgres"`` (psycopg 3 or psycopg2) or ``"other"``."""
    module = type(connection).__module__.split(".")[0]
    if module == "sqlite3":
        return SQLITE
    if module in ("psycopg", "psycopg2"):
        return POSTGRES
    return OTHER


def driver_error(connection: Any) -> type[BaseException]:
    """The DB-API ``Error`` class of the connection's driver (``Exception`` if unknown)."""
    module = sys.modules.get(type(connection).__module__.split(".")[0])
    error = getattr(module, "Error", None)
    return error if isinstance(error, type) and issubclass(error, Exception) else Exception


@contextmanager
def translate_errors(what: str, error: type[BaseException] = Exception) -> Iterator[None]:
    """Raise driver errors (``error``) as :class:`ConnectorError` naming ``what``."""
    try:
        yield
    except SparkLookupError:
        raise
    except error as exc:
        raise ConnectorError(f"{what} failed: {type(exc).__name__}: {exc}") from exc


def open_connection(factory: Callable[[], Any], table: str) -> Any:
    """Call the connection factory; its errors become a ConnectorError naming ``table``."""
    with translate_errors(f"connecting to read table {table!r}"):
        return factory()


def query(connection: Any, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
    """Run ``sql`` and return all rows (catalog queries are small)."""
    cursor = connection.cursor()
    try:
        cursor.execute(sql, params)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def describe_table(connection: Any, table: str, table_sql: str) -> TableInfo:
    """The catalog facts of ``table`` (validated; ``table_sql`` is its quoted form).

    Raises
    ------
    ConnectorError
        If the table does not exist or the catalog cannot be read; names the table.
    """
    driver = driver_of(connection)
    with translate_errors(f"reading the catalog of table {table!r}", driver_error(connection)):
        if driver == SQLITE:
            return _describe_sqlite(connection, table)
        if driver == POSTGRES:
            return _describe_postgres(connection, table_sql)
    return TableInfo(OTHER, (), (), frozenset())


def _sqlite_pragma(name: str, table: str, argument: str | None = None) -> str:
    """``PRAGMA [schema.]name(argument)``; the argument defaults to the table itself.
    Names are validated identifiers; an index name from the catalog is escaped."""
    parts = [validate_identifier(p, "table name") for p in table.split(".")]
    if argument is None:
        argument = '"' + parts[-1] + '"'
    schema = f'"{parts[-2]}".' if len(parts) >= 2 else ""
    return f"PRAGMA {schema}{name}({argument})"


def _describe_sqlite(connection: Any, table: str) -> TableInfo:
    rows = query(connection, _sqlite_pragma("table_info", table))
    if not rows:
        raise ConnectorError(f"table {table!r} does not exist (sqlite)")
    primary_key = tuple(name for _, name in sorted((r[5], r[1]) for r in rows if r[5]))
    columns = []
    for _, name, declared, notnull, _, pk_position in rows:
        declared = declared or ""
        # An INTEGER PRIMARY KEY is the rowid: never NULL, whatever the flag says.
        rowid = len(primary_key) == 1 and pk_position and declared.upper() == "INTEGER"
        spark_type = _sqlite_type(declared)
        textual = isinstance(spark_type, T.StringType)
        columns.append(ColumnInfo(name, declared, bool(notnull or rowid), spark_type, textual))
    unique = set(primary_key) if len(primary_key) == 1 else set()
    for index in query(connection, _sqlite_pragma("index_list", table)):
        index_name, is_unique = index[1], index[2]
        partial = index[4] if len(index) > 4 else 0
        if not is_unique or partial:
            continue
        escaped = '"' + str(index_name).replace('"', '""') + '"'
        info = query(connection, _sqlite_pragma("index_info", table, escaped))
        if len(info) == 1 and info[0][2] is not None:
            unique.add(info[0][2])
    return TableInfo(SQLITE, tuple(columns), primary_key, frozenset(unique))


_DECIMAL = re.compile(r"^\s*(?:decimal|numeric)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)", re.I)


def _sqlite_type(declared: str) -> T.DataType | None:
    """SQLite's type affinity rules, refined for the names people use for dates,
    booleans and decimals (stored as text, integers or reals, converted on read)."""
    upper = declared.upper()
    if "BOOL" in upper:
        return T.BooleanType()
    if "INT" in upper:
        return T.LongType()
    if upper.startswith(("DATETIME", "TIMESTAMP")):
        return T.TimestampNTZType()
    if upper.startswith("DATE"):
        return T.DateType()
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return T.StringType()
    if "BLOB" in upper:
        return T.BinaryType()
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return T.DoubleType()
    match = _DECIMAL.match(declared)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2) or 0)
        if 1 <= precision <= 38 and scale <= precision:
            return T.DecimalType(precision, scale)
    if upper.startswith(("DECIMAL", "NUMERIC")):
        return T.DoubleType()
    return None


_PG_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_PG_PRIMARY_KEY = """
SELECT a.attname
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = %s::regclass AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)
"""

_PG_UNIQUE = """
SELECT a.attname
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = %s::regclass AND i.indisunique AND i.indnkeyatts = 1
  AND i.indpred IS NULL AND i.indexprs IS NULL
"""


def _describe_postgres(connection: Any, table_sql: str) -> TableInfo:
    # The quoted name is bound as text and resolved by regclass, search_path included.
    params = [table_sql]
    columns = tuple(
        ColumnInfo(name, db_type, bool(not_null), *_postgres_type(db_type))
        for name, db_type, not_null in query(connection, _PG_COLUMNS, params)
    )
    primary_key = tuple(r[0] for r in query(connection, _PG_PRIMARY_KEY, params))
    unique = {r[0] for r in query(connection, _PG_UNIQUE, params)}
    connection.rollback()  # end the catalog transaction: no snapshot held open
    return TableInfo(POSTGRES, columns, primary_key, frozenset(unique))


_PG_SIMPLE: dict[str, T.DataType] = {
    "smallint": T.ShortType(),
    "integer": T.IntegerType(),
    "bigint": T.LongType(),
    "real": T.FloatType(),
    "double precision": T.DoubleType(),
    "boolean": T.BooleanType(),
    "bytea": T.BinaryType(),
    "date": T.DateType(),
}
_PG_TEXT = re.compile(r"^(text|name|citext|character varying(\(\d+\))?|character(\(\d+\))?)$")


def _postgres_type(db_type: str) -> tuple[T.DataType, bool]:
    """The Spark type of a PostgreSQL ``format_type``, and whether the type is textual
    (the driver returns ``str``). A STRING column of a non-textual type is read through
    a ``::text`` cast; types with no Spark counterpart (uuid, json, enums, intervals,
    ...) are read that way."""
    if db_type.endswith("[]"):
        element, textual = _postgres_type(db_type[:-2])
        if isinstance(element, T.StringType) and not textual:
            return T.StringType(), False  # e.g. uuid[]: read whole, as text
        return T.ArrayType(element), False
    if _PG_TEXT.match(db_type):
        return T.StringType(), True
    if db_type in _PG_SIMPLE:
        return _PG_SIMPLE[db_type], False
    if db_type.startswith("timestamp") and db_type.endswith("with time zone"):
        return T.TimestampType(), False
    if db_type.startswith("timestamp"):
        return T.TimestampNTZType(), False
    match = re.match(r"^numeric\((\d+),(\d+)\)$", db_type)
    if match and int(match.group(1)) <= 38:
        return T.DecimalType(int(match.group(1)), int(match.group(2))), False
    if db_type == "numeric":
        return T.DecimalType(38, 18), False
    return T.StringType(), False
