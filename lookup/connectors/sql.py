"""SqlLookupFunction: rows of a database table by key, over DB-API 2.0.

sqlite3 (the embedded default) and PostgreSQL (psycopg 3) are supported fully; other
DB-API drivers work when given a schema (no inference, no type casts).
"""

from __future__ import annotations

import logging
import re
import sqlite3
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from pyspark.sql import types as T

from cache.base import Key, Row, check_key
from lookup.connectors._types import (
    NO_MATCH,
    UnsupportedTypeError,
    ValueConversionError,
    from_text,
    key_coercer,
    normalize_key,
    spark_type_name,
)
from lookup.function import LookupFunction
from spark_lookup.errors import ConfigError, ConnectorError
from spark_lookup.schema import SchemaLike, parse_schema
from spark_lookup.sql import Dialect, dialect_of, qualified_name, validate_identifier

__all__ = ["SqlLookupFunction"]

log = logging.getLogger(__name__)

ConnectionFactory = Callable[[], Any]

# Most parameters one statement may bind, when the driver cannot say.
_POSTGRES_MAX_PARAMS = 65535  # the wire protocol counts parameters in 16 bits
_SQLITE_DEFAULT_MAX_PARAMS = 32766  # SQLITE_MAX_VARIABLE_NUMBER since sqlite 3.32.0
_SQLITE_OLD_MAX_PARAMS = 999  # ... and before it
_OTHER_MAX_PARAMS = 999

_SQLITE = "sqlite3"
_POSTGRES = "psycopg"


def _driver_name(connection: Any) -> str:
    return type(connection).__module__.split(".")[0]


def _driver_error_types(connection: Any) -> tuple[tuple[type[BaseException], ...], tuple[
    type[BaseException], ...
]]:
    """(any driver error, connection-level driver errors) of ``connection``'s driver."""
    module = sys.modules.get(_driver_name(connection))

    def types(*names: str) -> tuple[type[BaseException], ...]:
        found = (getattr(module, name, None) for name in names)
        return tuple(t for t in found if isinstance(t, type) and issubclass(t, BaseException))

    return types("Error") or (Exception,), types("OperationalError", "InterfaceError")


def _close_quietly(resource: Any) -> None:
    try:
        resource.close()
    except Exception:  # a broken or foreign-thread connection: drop it
        log.debug("closing %r failed", resource, exc_info=True)


# --- schema inference (on the driver, at construction) ------------------------------

_SQLITE_DECIMAL = re.compile(r"^(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$")


def _sqlite_spark_type(declared: str) -> str | None:
    """Spark type of a sqlite column from its declared type, following sqlite's own
    affinity rules, with the conventional names for booleans, dates and decimals."""
    text = declared.upper().strip()
    base = text.split("(")[0].strip()
    if "INT" in text:
        return "BIGINT"  # sqlite integers are 64-bit whatever the declared width
    if base in ("BOOLEAN", "BOOL"):
        return "BOOLEAN"
    if base == "DATE":
        return "DATE"
    if base in ("DATETIME", "TIMESTAMP"):
        return "TIMESTAMP_NTZ"
    if any(part in text for part in ("CHAR", "CLOB", "TEXT")):
        return "STRING"
    if "BLOB" in text:
        return "BINARY"
    if any(part in text for part in ("REAL", "FLOA", "DOUB")):
        return "DOUBLE"
    match = _SQLITE_DECIMAL.match(text)
    if match and int(match.group(1)) <= 38:
        return f"DECIMAL({match.group(1)}, {match.group(2) or 0})"
    if base in ("DECIMAL", "NUMERIC"):
        return "DOUBLE"  # sqlite keeps NUMERIC values as 64-bit integers or floats
    return None


_PG_SIMPLE = {
    "int2": "SMALLINT",
    "int4": "INT",
    "int8": "BIGINT",
    "float4": "FLOAT",
    "float8": "DOUBLE",
    "bool": "BOOLEAN",
    "text": "STRING",
    "varchar": "STRING",
    "bpchar": "STRING",
    "name": "STRING",
    "citext": "STRING",
    "uuid": "STRING",
    "bytea": "BINARY",
    "date": "DATE",
    "timestamp": "TIMESTAMP_NTZ",
    "timestamptz": "TIMESTAMP",
}
_PG_NUMERIC = re.compile(r"^numeric\((\d+),(-?\d+)\)$")


@dataclass(frozen=True)
class _PgColumn:
    name: str
    typname: str
    typtype: str
    category: str
    formatted: str
    cast_name: str  # the type's quoted, schema-qualified name, without a modifier


def _pg_spark_type(column: _PgColumn) -> str | None:
    simple = _PG_SIMPLE.get(column.typname)
    if simple is not None:
        return simple
    if column.typtype == "e":
        return "STRING"  # an enum reads as its label
    if column.typname == "numeric":
        match = _PG_NUMERIC.match(column.formatted.replace(" ", ""))
        if match is None:
            return "DECIMAL(38, 18)"  # unconstrained numeric, as Spark's JDBC reader does
        precision, scale = int(match.group(1)), int(match.group(2))
        if precision <= 38 and 0 <= scale <= precision:
            return f"DECIMAL({precision}, {scale})"
    return None


_PG_COLUMNS_SQL = """
SELECT a.attname, t.typname, t.typtype, t.typcategory,
       pg_catalog.format_type(a.atttypid, a.atttypmod),
       pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(t.typname)
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE a.attrelid = pg_catalog.to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def _fetch(connection: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    cursor = connection.cursor()
    try:
        cursor.execute(sql, params)
        return list(cursor.fetchall())
    finally:
        _close_quietly(cursor)


def _pg_columns(connection: Any, table: str, quoted_table: str) -> list[_PgColumn]:
    rows = _fetch(connection, _PG_COLUMNS_SQL, [quoted_table])
    if not rows:
        raise ConnectorError(f"PostgreSQL has no table or view {table!r} (searched as "
                             f"{quoted_table}, on the search_path when unqualified)")
    return [_PgColumn(*row) for row in rows]


def _sqlite_columns(connection: Any, table: str) -> list[tuple[str, str]]:
    parts = table.split(".")
    schema = f'"{parts[-2]}".' if len(parts) > 1 else ""
    rows = _fetch(connection, f'PRAGMA {schema}table_info("{parts[-1]}")')
    if not rows:
        raise ConnectorError(f"sqlite has no table or view {table!r}")
    return [(row[1], row[2] or "") for row in rows]


def _infer_columns(
    connection: Any, table: str, quoted_table: str
) -> list[tuple[str, str | None, str]]:
    """``(column, Spark DDL type or None if unmapped, declared type)`` of each column of
    ``table``, in table order."""
    driver = _driver_name(connection)
    if driver == _SQLITE:
        return [
            (name, _sqlite_spark_type(declared), declared or "no declared type")
            for name, declared in _sqlite_columns(connection, table)
        ]
    if driver == _POSTGRES:
        return [
            (column.name, _pg_spark_type(column), column.formatted)
            for column in _pg_columns(connection, table, quoted_table)
        ]
    raise ConfigError(
        f"cannot infer the schema of table {table!r} over {driver!r} connections: "
        "pass schema= (inference knows sqlite3 and psycopg)"
    )


# --- what a connection's driver needs (built once per function, on first use) ---------


def _sqlite_bind(value: Any) -> Any:
    # sqlite3's default date adapters are deprecated (3.12); this is the same text.
    if isinstance(value, datetime):
        return value.isoformat(" ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)  # compared with NUMERIC affinity, so '1.50' equals 1.5
    return value


def _sqlite_result_converter(data_type: T.DataType) -> Callable[[Any], Any] | None:
    """sqlite returns what it stored (text, integer, real, blob); read it as Spark's type."""
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        return lambda v: float(v) if type(v) is int else v
    if isinstance(data_type, T.BooleanType):
        text = from_text(data_type)
        return lambda v: bool(v) if type(v) is int else (text(v) if isinstance(v, str) else v)
    if isinstance(data_type, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        text = from_text(data_type)
        return lambda v: text(v) if isinstance(v, str) else v
    if isinstance(data_type, T.DecimalType):
        exponent = Decimal(1).scaleb(-data_type.scale)
        decimal_type = data_type

        def decimal(value: Any) -> Any:
            if isinstance(value, Decimal):
                return value
            try:
                # sqlite stored a float or text approximation; round to the declared scale.
                number = Decimal(repr(value) if isinstance(value, float) else str(value))
                return number.quantize(exponent, rounding=ROUND_HALF_EVEN)
            except (InvalidOperation, ValueError) as exc:
                raise ValueConversionError(
                    f"cannot read {value!r:.60} as {spark_type_name(decimal_type)}"
                ) from exc

        return decimal
    return None


def _postgres_result_converter(data_type: T.DataType) -> Callable[[Any], Any] | None:
    if isinstance(data_type, (T.StringType, T.VarcharType, T.CharType)):
        return lambda v: v if type(v) is str else str(v)  # uuid, enums of other types
    return None


def _uuid_text(coerce: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Text keys of a uuid column: canonical form, and text no uuid can equal never
    matches (PostgreSQL would fail the whole statement on it)."""

    def canonical(value: Any) -> Any:
        text = coerce(value)
        if not isinstance(text, str):
            return text
        try:
            return str(uuid.UUID(text))
        except ValueError:
            return NO_MATCH

    return canonical


@dataclass(frozen=True)
class _Plan:
    """How to query through one driver: placeholders, casts, key and value conversion."""

    dialect: Dialect
    coercers: tuple[Callable[[Any], Any], ...]
    bind: Callable[[Any], Any] | None
    casts: tuple[str | None, ...]
    converters: tuple[tuple[int, Callable[[Any], Any]], ...]
    max_params: int


@dataclass
class _Connection:
    raw: Any
    rollback: str  # after a read: "never" (autocommit), "if-open", or "always"
    errors: tuple[type[BaseException], ...]
    connection_errors: tuple[type[BaseException], ...]

    def end_read(self) -> None:
        """End the transaction a read may have begun, so no session idles in one (and a
        sqlite reader does not keep reading an old snapshot)."""
        if self.rollback == "always" or (
            self.rollback == "if-open" and getattr(self.raw, "in_transaction", True)
        ):
            self.raw.rollback()


def _prepare(connection: Any) -> _Connection:
    """Reads in autocommit mode where the driver has it (psycopg, sqlite3 of Python
    3.12+ set to explicit transactions); otherwise a rollback after each read. Legacy
    sqlite3 opens no transaction for a SELECT, and says so (``in_transaction``)."""
    autocommit = getattr(connection, "autocommit", None)
    if autocommit is False:
        try:
            connection.autocommit = True
            autocommit = True
        except Exception:  # some drivers refuse; rollback then
            log.debug("cannot set autocommit on %r", connection, exc_info=True)
    if autocommit is True:
        rollback = "never"
    elif _driver_name(connection) == _SQLITE:
        rollback = "if-open"
    else:
        rollback = "always"
    errors, connection_errors = _driver_error_types(connection)
    return _Connection(connection, rollback, errors, connection_errors)


class SqlLookupFunction(LookupFunction):
    """Looks rows of a database table up by key, over DB-API 2.0 (sqlite3, psycopg 3).

    Built on the driver and pickled to executors as its configuration: the connection
    factory, table, columns and schema. ``connection_factory`` is a zero-argument
    callable returning a new DB-API connection; it must be picklable (a module-level
    function or a ``functools.partial`` of one; Spark's cloudpickle also takes lambdas).
    Connections are opened where the function runs, one per thread that uses it (sqlite3
    connections belong to their thread), in :meth:`open` or at the first lookup.

    Queries. A batch of keys is ONE statement, a join of the table with the keys as a
    ``VALUES`` list, each key tagged with its position, so rows come back to the key
    that asked for them exactly, whatever the database's comparison rules (collations,
    sqlite's type affinity, ``char(n)`` padding)::

        WITH "_lk"("_lk_i", "_lk_0") AS (VALUES (0, ?), (1, ?), ...)
        SELECT "_lk"."_lk_i", "_lt"."id", ... FROM "_lk"
        JOIN "customers" AS "_lt" ON "_lt"."id" = "_lk"."_lk_0"

    Both sqlite and PostgreSQL answer it from an index on the key columns. A batch is
    split only when it would bind more parameters than the driver allows (sqlite: its
    ``SQLITE_LIMIT_VARIABLE_NUMBER``, 32766 by default since 3.32.0 and 999 before;
    PostgreSQL: 65535) or more keys than ``max_batch_size``. On PostgreSQL each key
    parameter of a non-numeric column is cast to the column's type (read once from the
    catalog), so text keys meet ``uuid``, ``citext`` or enum columns on their terms.

    Identifiers (table, columns) are validated and double-quoted before any SQL runs;
    values are always bound parameters. Rows come back in schema order; the order of a
    key's rows is the database's.

    Keys. A key holding None or NaN (or any value no column value can equal: an integer
    beyond the column type's range, a non-integral float for an integer column, text
    with a NUL character on PostgreSQL, text that is no uuid for a ``uuid`` column)
    matches nothing and is never sent. Numbers are normalized to the column's type
    first (``1.0`` finds ``1`` in a BIGINT column); a key asked twice, or as ``1`` and
    ``1.0``, is sent once. A key value of the wrong kind, such as a str for a BIGINT
    column, raises :class:`ConfigError` naming the key and column (whatever the other
    values of the key), before any SQL runs.

    Transactions and failures. Reads run in autocommit mode where the driver has it
    (psycopg), else are followed by a rollback, so no session stays idle in a
    transaction. A driver error discards the connection, and the next call opens a new
    one; a connection that broke while idle (a restarted server, ``pg_terminate_backend``)
    is replaced and the statement retried once, at once. Other errors raise
    :class:`ConnectorError` naming the table and key, with the driver's error as cause.

    Schema inference (``schema=None``) runs on the driver at construction:

    - sqlite, from ``PRAGMA table_info`` and sqlite's affinity rules: a declared type
      containing INT -> BIGINT; BOOLEAN/BOOL -> BOOLEAN; DATE -> DATE;
      DATETIME/TIMESTAMP -> TIMESTAMP_NTZ; CHAR/CLOB/TEXT -> STRING; BLOB -> BINARY;
      REAL/FLOA/DOUB -> DOUBLE; DECIMAL(p,s)/NUMERIC(p,s) -> DECIMAL(p,s) (p <= 38);
      unconstrained DECIMAL/NUMERIC -> DOUBLE. Dates and timestamps are read from ISO
      text, booleans from 0/1, decimals rounded to their scale.
    - PostgreSQL, from ``pg_catalog`` (the table found as ``to_regclass`` finds it):
      smallint -> SMALLINT, integer -> INT, bigint -> BIGINT, real -> FLOAT,
      double precision -> DOUBLE, numeric(p,s) -> DECIMAL(p,s) (p <= 38),
      numeric -> DECIMAL(38,18), boolean -> BOOLEAN, text/varchar/char/name/citext/uuid
      and enums -> STRING, bytea -> BINARY, date -> DATE,
      timestamp -> TIMESTAMP_NTZ, timestamptz -> TIMESTAMP.
    - Any other column type is a :class:`ConfigError` naming it: pass ``schema=``, or
      ``columns=`` without it.

    Parameters
    ----------
    connection_factory : callable
        Zero-argument callable returning a new DB-API 2.0 connection; picklable.
    table : str
        ``table``, ``schema.table`` or ``catalog.schema.table``; each part a plain
        identifier (letters, digits, ``_``, ``$``), matched case-sensitively.
    key_columns : str or sequence of str
        The key columns, in key order.
    columns : sequence of str, optional
        Columns to return, in order (default: the schema's, or all the table's). With a
        schema, they must be its field names.
    schema : str or StructType, optional
        The dimension schema (field names are column names); inferred when omitted.
    max_batch_size : int, optional
        Most keys per statement (default: as many as the parameter limit allows).

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an invalid identifier, a key column not among the
        columns, a key column type no key can have, or a schema that cannot be inferred.
    ConnectorError
        If inference cannot reach the table.

    Examples
    --------
    >>> import functools, sqlite3
    >>> connect = functools.partial(sqlite3.connect, ":memory:")
    >>> customers = SqlLookupFunction(connect, "customers", key_columns=["id"],
    ...                               schema="id BIGINT, name STRING")
    >>> customers.key_columns
    ['id']
    """

    def __init__(
        self,
        connection_factory: ConnectionFactory,
        table: str,
        key_columns: str | Sequence[str],
        columns: Sequence[str] | None = None,
        schema: SchemaLike | None = None,
        *,
        max_batch_size: int | None = None,
    ) -> None:
        if not callable(connection_factory):
            raise ConfigError(
                f"connection_factory must be a zero-argument callable returning a DB-API "
                f"connection, got {connection_factory!r:.80}"
            )
        self._table_sql = qualified_name(table)
        self._table = table
        keys = [key_columns] if isinstance(key_columns, str) else list(key_columns)
        for name in keys:
            validate_identifier(name, "key column")
        if columns is not None:
            columns = [columns] if isinstance(columns, str) else list(columns)
            for name in columns:
                validate_identifier(name, "column")
        if max_batch_size is not None and (
            not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool)
            or max_batch_size < 1
        ):
            raise ConfigError(f"max_batch_size must be a positive int, got {max_batch_size!r}")
        self._factory = connection_factory
        self._columns_arg = columns
        self._max_batch_size = max_batch_size
        if schema is None:
            schema = self._inferred_schema(columns)
        struct = parse_schema(schema, f"schema of table {table!r}")
        names = struct.fieldNames()
        for name in names:
            validate_identifier(name, "column")
        if columns is not None and list(columns) != names:
            raise ConfigError(
                f"columns {columns} must be the schema's field names in order {names}"
            )
        self.schema = schema
        self.key_columns = keys
        self._struct = struct
        self.key_fields()
        self._key_types = [struct[name].dataType for name in keys]
        for name, data_type in zip(keys, self._key_types, strict=True):
            try:
                key_coercer(data_type)
            except UnsupportedTypeError as exc:
                raise ConfigError(f"key column {name!r} of table {table!r}: {exc}") from exc
        self._select_sql = ", ".join(f'"_lt"."{name}"' for name in names)
        self._join_sql = " AND ".join(
            f'"_lt"."{name}" = "_lk"."_lk_{i}"' for i, name in enumerate(keys)
        )
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._open_connections: list[_Connection] = []
        self._plan: _Plan | None = None

    def _inferred_schema(self, columns: list[str] | None) -> str:
        connection = self._connect()
        try:
            try:
                inferred = _infer_columns(connection, self._table, self._table_sql)
            except _driver_error_types(connection)[0] as exc:
                raise ConnectorError(
                    f"cannot read the columns of table {self._table!r}: {exc}"
                ) from exc
        finally:
            _close_quietly(connection)
        types = {name: spark for name, spark, _ in inferred}
        if columns is None:
            chosen = [name for name, _, _ in inferred]
        else:
            absent = [name for name in columns if name not in types]
            if absent:
                raise ConfigError(f"table {self._table!r} has no column(s) {absent}")
            chosen = list(columns)
        unmapped = [
            f"{name} ({declared})" for name, spark, declared in inferred
            if name in chosen and spark is None
        ]
        if unmapped:
            raise ConfigError(
                f"cannot infer the Spark type of column(s) {', '.join(unmapped)} of table "
                f"{self._table!r}: pass schema=, or columns= without them"
            )
        for name in chosen:
            try:
                validate_identifier(name, f"column of table {self._table!r}")
            except ConfigError as exc:
                raise ConfigError(f"{exc}; pass columns= without it") from exc
        return ", ".join(f"`{name}` {types[name]}" for name in chosen)

    @property
    def struct(self) -> T.StructType:
        """The dimension schema as a ``StructType``."""
        return self._struct

    @property
    def table(self) -> str:
        """The table name, as given."""
        return self._table

    def __getstate__(self) -> dict[str, Any]:
        # Configuration only: connections are per process (and per thread).
        return {
            "connection_factory": self._factory,
            "table": self._table,
            "key_columns": list(self.key_columns),
            "columns": self._columns_arg,
            "schema": self.schema,
            "max_batch_size": self._max_batch_size,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __repr__(self) -> str:
        return (
            f"SqlLookupFunction(table={self._table!r}, key_columns={list(self.key_columns)}, "
            f"schema={self._struct.simpleString()!r})"
        )

    # --- connections

    def _connect(self) -> Any:
        try:
            connection = self._factory()
        except Exception as exc:
            raise ConnectorError(
                f"cannot connect to the database of table {self._table!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if connection is None:
            raise ConnectorError(
                f"connection_factory of table {self._table!r} returned None"
            )
        return connection

    def _acquire(self) -> tuple[_Connection, bool]:
        """This thread's connection, and whether it was just opened."""
        current: _Connection | None = getattr(self._local, "connection", None)
        if current is not None:
            return current, False
        connection = _prepare(self._connect())
        self._local.connection = connection
        with self._lock:
            self._open_connections.append(connection)
        return connection, True

    def _discard(self, connection: _Connection) -> None:
        if getattr(self._local, "connection", None) is connection:
            self._local.connection = None
        with self._lock:
            if connection in self._open_connections:
                self._open_connections.remove(connection)
        _close_quietly(connection.raw)

    def open(self) -> None:
        """Connect (this thread) and read what the driver needs; fails early if the
        database cannot be reached."""
        connection, _ = self._acquire()
        self._plan_for(connection)

    def close(self) -> None:
        """Close every connection this function opened."""
        with self._lock:
            connections, self._open_connections = self._open_connections, []
        self._local = threading.local()
        for connection in connections:
            _close_quietly(connection.raw)

    def _plan_for(self, connection: _Connection) -> _Plan:
        plan = self._plan
        if plan is not None:
            return plan
        raw = connection.raw
        driver = _driver_name(raw)
        dialect = dialect_of(raw)
        casts: list[str | None] = [None] * len(self.key_columns)
        coercers = [key_coercer(t, nul_in_text=driver != _POSTGRES) for t in self._key_types]
        bind = None
        converter_of: Callable[[T.DataType], Callable[[Any], Any] | None]
        if driver == _POSTGRES:
            try:
                catalog = {c.name: c for c in _pg_columns(raw, self._table, self._table_sql)}
                connection.end_read()
            except connection.errors as exc:
                self._discard(connection)
                raise ConnectorError(
                    f"cannot read the column types of table {self._table!r}: {exc}"
                ) from exc
            for i, name in enumerate(self.key_columns):
                column = catalog.get(name)
                if column is None:
                    raise ConnectorError(f"table {self._table!r} has no column {name!r}")
                if column.category != "N":  # numbers compare across types; others not
                    casts[i] = column.cast_name
                if column.typname == "uuid":
                    coercers[i] = _uuid_text(coercers[i])
            max_params = _POSTGRES_MAX_PARAMS
            converter_of = _postgres_result_converter
        elif driver == _SQLITE:
            bind = _sqlite_bind
            getlimit = getattr(raw, "getlimit", None)  # Python 3.11+
            if getlimit is not None:
                max_params = int(getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))  # type: ignore[attr-defined]
            elif sqlite3.sqlite_version_info >= (3, 32, 0):
                max_params = _SQLITE_DEFAULT_MAX_PARAMS
            else:
                max_params = _SQLITE_OLD_MAX_PARAMS
            converter_of = _sqlite_result_converter
        else:
            max_params = _OTHER_MAX_PARAMS
            converter_of = _no_converter
        converters = []
        for index, field in enumerate(self._struct.fields):
            converter = converter_of(field.dataType)
            if converter is not None:
                converters.append((index, converter))
        plan = _Plan(
            dialect=dialect,
            coercers=tuple(coercers),
            bind=bind,
            casts=tuple(casts),
            converters=tuple(converters),
            max_params=max_params,
        )
        self._plan = plan
        return plan

    # --- lookups

    def lookup(self, key: Key) -> Sequence[Row]:
        """The rows whose key columns equal ``key``; one query.

        Runs on executors. Raises as :meth:`lookup_batch` does.
        """
        return self.lookup_batch([key])[key]

    def lookup_batch(self, keys: Sequence[Key]) -> Mapping[Key, Sequence[Row]]:
        """The rows of every key of ``keys`` (an entry for each, empty for no match), in
        one query per batch (split only above the parameter limit or
        ``max_batch_size``).

        Runs on executors, possibly from several threads (each has its connection).

        Raises
        ------
        ConfigError
            For a key of the wrong length, or a key value of a type that can never
            equal its column's (naming the key and column).
        ConnectorError
            If the database fails; the message names the table and a key.
        TypeError
            If a key is not a tuple.
        """
        width = len(self.key_columns)
        result: dict[Key, list[Row]] = {}
        candidates: list[Key] = []
        for key in keys:
            check_key(key)
            if len(key) != width:
                raise ConfigError(
                    f"key {key!r:.80} has {len(key)} value(s); table {self._table!r} is "
                    f"looked up by {width}: {list(self.key_columns)}"
                )
            if key in result:
                continue  # asked twice (or as 1 and 1.0, equal keys): answered once
            result[key] = []
            if None not in key:
                candidates.append(key)
        if not candidates:
            return result
        plan = self._plan_for(self._acquire()[0])
        # Normalized key -> the keys asked that normalize to it (1 and 1.0, say).
        askers: dict[tuple[Any, ...], list[Key]] = {}
        for key in candidates:
            normalized = normalize_key(
                key, self.key_columns, plan.coercers, f"for table {self._table!r}"
            )
            if normalized is not None:
                askers.setdefault(normalized, []).append(key)
        if not askers:
            return result
        unique = list(askers)
        per_query = max(1, plan.max_params // width)
        if self._max_batch_size is not None:
            per_query = min(per_query, self._max_batch_size)
        for start in range(0, len(unique), per_query):
            chunk = unique[start : start + per_query]
            rows = self._query(plan, chunk, askers)
            for index, row in rows:
                for key in askers[chunk[index]]:
                    result[key].append(row)
        return result

    def _statement(self, plan: _Plan, count: int) -> str:
        width = len(self.key_columns)
        dialect = plan.dialect
        escape = dialect.paramstyle in ("format", "pyformat")
        slots = []
        for i, cast in enumerate(plan.casts):
            if cast is not None and escape:
                cast = cast.replace("%", "%%")
            slots.append((i, cast))
        rows = []
        position = 0
        for index in range(count):
            parts = [str(index)]
            for _, cast in slots:
                placeholder = dialect.placeholder(position)
                position += 1
                parts.append(placeholder if cast is None else f"CAST({placeholder} AS {cast})")
            rows.append("(" + ", ".join(parts) + ")")
        names = ", ".join(['"_lk_i"', *(f'"_lk_{i}"' for i in range(width))])
        return (
            f'WITH "_lk"({names}) AS (VALUES {", ".join(rows)}) '
            f'SELECT "_lk"."_lk_i", {self._select_sql} FROM "_lk" '
            f'JOIN {self._table_sql} AS "_lt" ON {self._join_sql}'
        )

    def _query(
        self,
        plan: _Plan,
        chunk: list[tuple[Any, ...]],
        askers: Mapping[tuple[Any, ...], list[Key]],
    ) -> list[tuple[int, Row]]:
        sql = self._statement(plan, len(chunk))
        values = [v for key in chunk for v in key]
        if plan.bind is not None:
            values = [plan.bind(v) for v in values]
        params = plan.dialect.params(values)
        first_key = askers[chunk[0]][0]
        for attempt in (1, 2):
            connection, fresh = self._acquire()
            try:
                fetched = _fetch(connection.raw, sql, params)  # type: ignore[arg-type]
                connection.end_read()
            except connection.errors as exc:
                self._discard(connection)
                if attempt == 1 and not fresh and isinstance(exc, connection.connection_errors):
                    log.info(
                        "connection to the database of table %r broke (%s); reconnecting",
                        self._table, exc,
                    )
                    continue
                raise ConnectorError(
                    f"lookup in table {self._table!r} of {len(chunk)} key(s) failed (first "
                    f"key {first_key!r:.80}): {type(exc).__name__}: {exc}"
                ) from exc
            return self._rows(plan, fetched, chunk, askers)
        raise AssertionError("unreachable")  # pragma: no cover

    def _rows(
        self,
        plan: _Plan,
        fetched: list[tuple[Any, ...]],
        chunk: list[tuple[Any, ...]],
        askers: Mapping[tuple[Any, ...], list[Key]],
    ) -> list[tuple[int, Row]]:
        out = []
        for record in fetched:
            index = record[0]
            row = tuple(record[1:])
            if plan.converters:
                values = list(row)
                for position, convert in plan.converters:
                    value = values[position]
                    if value is not None:
                        try:
                            values[position] = convert(value)
                        except ValueConversionError as exc:
                            key = askers[chunk[index]][0]
                            field = self._struct.fields[position].name
                            raise ConnectorError(
                                f"table {self._table!r}, key {key!r:.80}, column "
                                f"{field!r}: {exc}"
                            ) from exc
                row = tuple(values)
            out.append((index, row))
        return out


def _no_converter(data_type: T.DataType) -> None:
    return None
