"""MySQL and MariaDB (pymysql, mysql-connector-python, mysqlclient): backtick quoting,
the ``information_schema`` queries, its rows of the type table, lookups by ``IN``
lists, the connection pinned to UTC, ``max_execution_time`` / ``max_statement_time``, and
full loads through connectorx where it is installed.

Design notes: DESIGN.md, connectors/ ``connectors/sql/dialects/mysql.py``.
"""

from __future__ import annotations

import itertools
import logging
import re
import ssl
from collections.abc import Iterator, Sequence
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any
from urllib.parse import quote as url_quote

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from connectors.errors import MYSQL_TRANSIENT
from connectors.sql.catalog import ColumnInfo, TableInfo
from connectors.sql.dialects.base import (
    ConnectionLike,
    Dialect,
    KeyBinding,
    LookupPlan,
    LookupStatement,
    kept_positions,
)
from connectors.sql.flavor import MYSQL, Flavor
from connectors.sql.types import ColumnRead
from spark_lookup.errors import ConnectorError, TransientConnectorError
from spark_lookup.identifiers import validate_identifier
from spark_lookup.type_families import (
    FLOAT_TYPES,
    INTEGER_TYPES,
    NUMBER_TYPES,
    STRING_TYPES,
    TIMESTAMP_TYPES,
)

__all__ = ["MysqlDialect"]

log = logging.getLogger("connectors")

_MAX_KEYS = 10_000
"""Keys per lookup statement: an ``IN`` list this long stays well inside the default
``max_allowed_packet`` and MySQL's range optimizer memory (beyond which it would scan)."""

# --- the catalog ---------------------------------------------------------------------------

# A schema-qualified table names its database; an unqualified one is the connection's.
_COLUMNS = """
SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, DATA_TYPE, COALESCE(COLLATION_NAME, '')
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s
ORDER BY ORDINAL_POSITION
"""
_INDEXES = """
SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s
ORDER BY INDEX_NAME, SEQ_IN_INDEX
"""

# --- the type table ------------------------------------------------------------------------

_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
"""Read as the driver's text; ENUM and SET too go through CAST (mysql-connector gives a
SET as a Python set)."""
_BYTES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_SIGNED: dict[str, T.DataType] = {
    "tinyint": T.ByteType(), "smallint": T.ShortType(), "mediumint": T.IntegerType(),
    "int": T.IntegerType(), "integer": T.IntegerType(), "bigint": T.LongType(),
}
_UNSIGNED: dict[str, T.DataType] = {
    "tinyint": T.ShortType(), "smallint": T.IntegerType(), "mediumint": T.IntegerType(),
    "int": T.LongType(), "integer": T.LongType(), "bigint": T.DecimalType(20, 0),
}
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)")
_INTEGER_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32,
                 "bigint": 64}
_NUMBERS = _INTEGERS | {"year", "bit", "decimal", "numeric", "float", "double", "real"}
"""Spark types a FLOAT column is read as by its exact value."""
_BIT = re.compile(r"^bit\((\d+)\)")
_SPATIAL = frozenset({"geometry", "point", "linestring", "polygon", "multipoint",
                      "multilinestring", "multipolygon", "geometrycollection"})


def _bits(column: ColumnInfo) -> int:
    match = _BIT.match(column.db_type)
    return int(match.group(1)) if match else 1


class MysqlDialect(Dialect):
    """MySQL and MariaDB through any of their DB-API drivers."""

    backend = MYSQL
    discovers = True

    # --- identifiers

    def quote(self, name: str, what: str = "identifier") -> str:
        """Validate ``name`` and quote it with backticks (MySQL reads double quotes as
        string literals unless ANSI_QUOTES is set)."""
        return "`" + validate_identifier(name, what) + "`"

    # --- catalog and type table

    def describe(self, connection: ConnectionLike, table: str, table_sql: str) -> TableInfo:
        parts = table.split(".")
        if len(parts) > 2:
            raise ConnectorError(f"MySQL table names are table or database.table, not {table!r}")
        database = parts[0] if len(parts) == 2 else None
        params = connection.flavor.params([database, parts[-1]])
        rows = connection.rows(_COLUMNS, params, "reading the columns")
        if not rows:
            where = f"database {database!r}" if database else "the connection's database"
            raise ConnectorError(f"MySQL has no table or view {table!r} in {where}")
        columns = tuple(
            ColumnInfo(name=_text(name), db_type=_text(column_type).lower(),
                       not_null=_text(nullable) == "NO", type_name=_text(data_type).lower(),
                       collation=_text(collation))
            for name, column_type, nullable, data_type, collation in rows
        )
        indexes: dict[str, tuple[bool, list[str]]] = {}
        for index, non_unique, column in connection.rows(_INDEXES, params, "reading the indexes"):
            _, names = indexes.setdefault(_text(index), (not int(non_unique), []))
            names.append(_text(column))
        primary_key = tuple(indexes.get("PRIMARY", (True, []))[1])
        unique_columns = frozenset(names[0] for unique, names in indexes.values()
                                   if unique and len(names) == 1)
        return TableInfo(MYSQL, columns, primary_key, unique_columns)

    def natural_type(self, column: ColumnInfo) -> T.DataType | None:
        kind, declared = column.type_name, column.db_type
        if kind in _INTEGERS:
            if kind == "tinyint" and declared.startswith("tinyint(1)"):
                return T.BooleanType()  # BOOL, BOOLEAN
            return (_UNSIGNED if "unsigned" in declared else _SIGNED)[kind]
        if kind in ("decimal", "numeric"):
            match = _DECIMAL.match(declared)
            precision, scale = (int(match.group(1)), int(match.group(2))) if match else (10, 0)
            return T.DecimalType(precision, scale) if precision <= 38 else T.StringType()
        if kind == "float":
            return T.FloatType()
        if kind in ("double", "real"):
            return T.DoubleType()
        if kind == "bit":
            bits = _bits(column)
            return T.BooleanType() if bits == 1 else (
                T.LongType() if bits < 64 else T.DecimalType(20, 0))
        if kind == "year":
            return T.IntegerType()
        if kind == "date":
            return T.DateType()
        if kind == "datetime":
            return T.TimestampNTZType()
        if kind == "timestamp":
            return T.TimestampType()
        if kind in _BYTES:
            return T.BinaryType()
        if kind in _SPATIAL:
            return None
        return T.StringType()  # text, enum, set, json, time, uuid, inet...

    def read(self, column: ColumnInfo, quoted: str, target: T.DataType, *,
             rowid: bool = False) -> ColumnRead:
        kind = column.type_name
        text = f"CAST({quoted} AS CHAR)"
        if kind == "bit":
            # BIT comes as bytes; its number is what every type reads.
            number = f"CAST({quoted} AS UNSIGNED)"
            if isinstance(target, (*INTEGER_TYPES, T.BooleanType)):
                return ColumnRead(number, pa.int64()) if _bits(column) < 64 else ColumnRead(
                    f"CAST({number} AS CHAR)", pa.string())
            return ColumnRead(f"CAST({number} AS CHAR)", pa.string())
        if isinstance(target, STRING_TYPES):
            if kind in _TEXT:
                return ColumnRead(quoted, pa.string())
            if kind in _BYTES:
                return ColumnRead(f"CONVERT({quoted} USING utf8mb4)", pa.string())
            return ColumnRead(text, pa.string())
        if isinstance(target, T.BinaryType):
            if kind in _BYTES:
                return ColumnRead(quoted, pa.binary())
            return ColumnRead(f"CAST({quoted} AS BINARY)", pa.binary())
        if isinstance(target, (*INTEGER_TYPES, T.BooleanType)) and kind in _INTEGERS | {"year"}:
            if kind == "bigint" and "unsigned" in column.db_type:
                return ColumnRead(text, pa.string())  # beyond 2^63: read as digits
            return ColumnRead(quoted, pa.int64())
        if kind == "float" and isinstance(target, NUMBER_TYPES):
            # MySQL prints a FLOAT to six digits (16777216 as 16777200, 1.0000001 as 1);
            # widened to DOUBLE it is its exact value, which its keys are compared as.
            return ColumnRead(f"CAST({quoted} AS DOUBLE)", pa.float64())
        if isinstance(target, FLOAT_TYPES) and kind in (
                "double", "real", *_INTEGERS):
            return ColumnRead(quoted, pa.float64())
        if kind in _TEXT:
            return ColumnRead(quoted, pa.string())  # text read as a number, a date...
        if kind in _BYTES:
            return ColumnRead(f"CONVERT({quoted} USING utf8mb4)", pa.string())
        # Decimals as exact digits, dates and times as MySQL prints them (zero dates
        # included: bad values), everything else as its text.
        return ColumnRead(text, pa.string())

    def key_binding(self, column: ColumnInfo | None, spark: T.DataType) -> KeyBinding:
        truth = (isinstance(spark, T.BooleanType) and column is not None
                 and column.type_name in _NUMBERS)
        return KeyBinding(text=isinstance(spark, STRING_TYPES), exact=True, truth=truth)

    def key_refusal(self, column: ColumnInfo, spark: T.DataType) -> str | None:
        """A lookup asks the database for a superset of the rows whose key reads as the
        key asked (its index serves it) and keeps the rows that read as it exactly, so
        the database must find every such row. It cannot where its comparison of the
        stored values is not their Spark values' (the key type rounds them, or MySQL
        compares them by another rule)."""
        kind, name = column.type_name, spark.simpleString().upper()
        if kind == "json":
            return "MySQL compares JSON as JSON values, not as the text read"
        if kind in ("enum", "set") and not isinstance(spark, STRING_TYPES):
            return "MySQL compares an ENUM or SET with a number by its position in the list"
        if isinstance(spark, T.BooleanType) and kind not in _NUMBERS:
            return ("only a number's truth (non-zero) can be asked of the database ('true' "
                    "compares as 0); declare it STRING")
        if isinstance(spark, FLOAT_TYPES):
            bits = 24 if isinstance(spark, T.FloatType) else 53
            if not _holds_exactly(column, bits):
                return (f"{name} rounds its values, so several stored values may read as "
                        "one key, and the database's equality finds only the one equal to "
                        f"it; declare the column's own type ({_own_type(self, column)})")
        if kind == "float" and isinstance(spark, (*STRING_TYPES, T.BinaryType)):
            return ("MySQL prints a FLOAT to six digits: the text read is not the value the "
                    "database compares; declare it FLOAT")
        if (isinstance(spark, T.DecimalType) and kind not in _NUMBERS) or (
                isinstance(spark, TIMESTAMP_TYPES)
                and kind in _TEXT | _BYTES):
            return (f"text is read as a {name} in forms the database compares as other "
                    f"text ('1.1' and '1.10'); declare it STRING")
        return None

    def ordered_time(self, column: ColumnInfo | None, target: T.DataType) -> bool:
        """DATE as DATE; DATETIME and TIMESTAMP as either timestamp (text without an
        offset, read as UTC's wall clock, the connection's zone)."""
        if column is None:
            return False
        if isinstance(target, T.DateType):
            return column.type_name == "date"
        return column.type_name in ("datetime", "timestamp")

    def unread_time_sql(self, column_sql: str, earliest: str) -> str:
        """Besides those before year 1, the zero dates and dates with a zero month or
        day ('2024-00-10', stored outside strict mode): MySQL orders them among the
        others, and they read as bad values."""
        return (f"({column_sql} < {earliest} OR MONTH({column_sql}) = 0 "
                f"OR DAYOFMONTH({column_sql}) = 0)")

    # --- values

    def bindable(self, value: Any) -> Any:
        """Timestamps as naive UTC text (the connection's zone is UTC), as every driver
        sends them alike."""
        if isinstance(value, datetime):
            if value.tzinfo is not None:
                value = value.astimezone(timezone.utc).replace(tzinfo=None)
            return value.isoformat(" ")
        if isinstance(value, date):
            return value.isoformat()
        if isinstance(value, Decimal):
            return str(value)
        return value

    def sendable(self, bindings: Sequence[KeyBinding], arrays: Sequence[pa.Array]
                 ) -> pa.Array | None:
        """Infinite keys are not sent: MySQL stores no infinity (nor NaN, which no key
        holds), and its SQL has no literal for one."""
        return kept_positions([pc.is_finite(array) for array in arrays
                               if pa.types.is_floating(array.type)])

    # --- statements

    def max_keys(self, connection: ConnectionLike, width: int) -> int:
        return _MAX_KEYS

    def lookup_statement(self, plan: LookupPlan, flavor: Flavor, chunk: list[pa.Array]
                         ) -> LookupStatement:
        """``key IN (...)``, or ``(a, b) IN ((...), ...)`` for composite keys: measured
        as fast as ``JSON_TABLE`` and faster than a derived table of the keys
        (benchmarks/mysql.py), served by an index on the key. The rows are matched back
        to their keys by value (exactly, see the module). Integer and floating keys are
        written as literals built by Arrow (no Python object per key; a float as the
        double literal of its exact value), others are bound. A BOOLEAN key of a number
        column asks for its truth, as the column reads: ``<> 0`` for true, ``= 0`` for
        false, each with the IN list of the other key columns of the keys holding it."""
        columns = [plan.column_sql(name) for name in plan.key_columns]
        truths = [i for i, binding in enumerate(plan.key_bindings) if binding.truth]
        values: list[Any] = []
        if not truths:
            condition = self._in_list(columns, chunk, values)
        else:
            others = [i for i in range(len(chunk)) if i not in truths]
            alternatives = []
            for asked in itertools.product((True, False), repeat=len(truths)):
                held = None
                for i, value in zip(truths, asked, strict=True):
                    same = chunk[i] if value else pc.invert(chunk[i])
                    held = same if held is None else pc.and_(held, same)
                if not pc.any(held).as_py():
                    continue
                parts = [f"{columns[i]} {'<>' if value else '='} 0"
                         for i, value in zip(truths, asked, strict=True)]
                if others:
                    parts.append(self._in_list([columns[i] for i in others],
                                               [chunk[i].filter(held) for i in others], values))
                alternatives.append(" AND ".join(parts))
            condition = "(" + " OR ".join(f"({a})" for a in alternatives) + ")"
        filters, filter_values = plan.filter_sql(flavor.placeholder, len(values))
        sql = (f"SELECT {plan.select_sql()} FROM {plan.table_sql} AS {self.quote('_lt')} "
               f"WHERE {' AND '.join([condition, *filters])}")
        params = flavor.params(values + [self.bindable(v) for v in filter_values])
        return LookupStatement(self.finish(sql, flavor), params, by_value=True)

    def _in_list(self, columns: list[str], arrays: list[pa.Array], values: list[Any]) -> str:
        """``column IN (...)`` of one column's keys, or the row constructor's of several;
        the values it binds are appended to ``values``."""
        if len(arrays) == 1 and (pa.types.is_integer(arrays[0].type)
                                 or pa.types.is_floating(arrays[0].type)):
            return f"{columns[0]} IN ({_joined(_literals(arrays[0]))})"
        if len(arrays) == 1:
            values.extend(self.bindable(v) for v in arrays[0].to_pylist())
            return f"{columns[0]} IN ({', '.join(['%s'] * len(arrays[0]))})"
        # Literals where a column has them, so every driver sends a float alike.
        per_column = [_literals(a).to_pylist() if _literal(a.type) else
                      [self.bindable(v) for v in a.to_pylist()] for a in arrays]
        slots = [None if _literal(a.type) else "%s" for a in arrays]
        rows = []
        for key in zip(*per_column, strict=True):
            row = []
            for slot, value in zip(slots, key, strict=True):
                if slot is None:
                    row.append(value)
                else:
                    row.append(slot)
                    values.append(value)
            rows.append("(" + ", ".join(row) + ")")
        return f"({', '.join(columns)}) IN ({', '.join(rows)})"

    def offset_sql(self, rows: int) -> str:
        # MySQL takes no OFFSET without a LIMIT: the largest one means none.
        return f" LIMIT 18446744073709551615 OFFSET {int(rows)}"

    def row_estimate(self, connection: ConnectionLike, table_sql: str) -> int | None:
        parts = [part.strip("`") for part in table_sql.split(".")]
        rows = connection.rows(
            "SELECT TABLE_ROWS FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s",
            connection.flavor.params([parts[0] if len(parts) == 2 else None, parts[-1]]),
            "planning chunks",
        )
        if rows and rows[0][0] is not None and int(rows[0][0]) > 0:
            return int(rows[0][0])
        return None

    # --- the connection

    def prepare(self, connection: ConnectionLike) -> None:
        """Pin the connection's time zone to UTC: TIMESTAMP values are read (and keys
        compared) as UTC whatever the server's zone."""
        with connection.failing("setting the connection time zone"):
            cursor = connection.raw.cursor()
            try:
                cursor.execute("SET time_zone = '+00:00'")
            finally:
                cursor.close()

    def bound_statements(self, connection: ConnectionLike, timeout: float) -> bool:
        """MariaDB's ``max_statement_time`` (seconds) or MySQL's
        ``max_execution_time`` (milliseconds, SELECTs), set for the connection; the
        driver's read timeout is the user's connection setting. A statement past it
        fails with error 1969 (MariaDB) or 3024 (MySQL): transient."""
        with connection.failing("setting the statement timeout"):
            cursor = connection.raw.cursor()
            try:
                cursor.execute("SELECT VERSION()")
                version = _text(cursor.fetchall()[0][0])
                if "mariadb" in version.lower():
                    cursor.execute(f"SET SESSION max_statement_time = {float(timeout)!r}")
                else:
                    cursor.execute(
                        f"SET SESSION max_execution_time = {max(1, int(timeout * 1000))}")
            finally:
                cursor.close()
        return True

    def arrow_batches(self, connection: ConnectionLike, sql: str, batch_rows: int
                      ) -> Iterator[pa.RecordBatch] | None:
        """A large parameter-free read through connectorx (Rust, Arrow-native: about 10x
        the DB-API drivers, benchmarks/mysql.py), streamed in record batches, on a
        connection of its own made from the connection's parameters (the time zone pinned
        as on every connection). None, so the driver reads, when connectorx is not
        installed or the connection's parameters cannot be told (a socket, TLS)."""
        url = _connectorx_url(connection.raw)
        if url is None:
            return None
        try:
            import connectorx
        except ImportError:
            return None
        try:
            reader = connectorx.read_sql(
                url, sql, return_type="arrow_stream", batch_size=batch_rows,
                pre_execution_query=["SET time_zone = '+00:00'"],
            )
        except BaseException as exc:
            if not _connectorx_failure(exc):
                raise
            error = connectorx_error(exc, "starting connectorx")
        else:
            return _translated(iter(reader))
        # Raised outside the handler: a panic is no Exception, and is not kept as context.
        raise error


def _connectorx_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is connectorx's failure: an Exception, or the panic of its Rust
    code (pyo3's ``PanicException``, a BaseException: a lost connection mid-result)."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


# What connectorx (its Rust MySQL client and pool) says of failures that pass: a lost,
# reset or refused connection, a stream cut short, a timeout (its pool's own wait, 30 s,
# for a connection the server refuses).
_CONNECTORX_TRANSIENT = re.compile(
    r"IO error|bytes remaining|lost connection|connection (refused|reset|aborted|closed)|"
    r"broken pipe|timed out|server has gone away|unexpected eof", re.IGNORECASE)
_CONNECTORX_ERRNO = re.compile(r"ERROR (\d{4})")


def connectorx_error(exc: BaseException, purpose: str) -> ConnectorError:
    """A connectorx failure as ours, classified by what it says: a MySQL error number by
    the drivers' rule (1045 access denied permanent, 2013 lost transient...), a lost or
    refused connection or a timeout transient, anything else permanent."""
    text = str(exc).strip().split("\n")[0][:300]
    message = f"{purpose}: {type(exc).__name__}: {text}"
    errno = _CONNECTORX_ERRNO.search(text)
    if errno is not None:
        transient = int(errno.group(1)) in MYSQL_TRANSIENT
    else:
        transient = bool(_CONNECTORX_TRANSIENT.search(text))
    return (TransientConnectorError if transient else ConnectorError)(message)


def _translated(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` with connectorx's failures (a panic among them) raised as ours."""
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except BaseException as exc:
            if not _connectorx_failure(exc):
                raise
            error = connectorx_error(exc, "reading with connectorx")
            break
        yield batch
    raise error


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def _literal(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_integer(data_type) or pa.types.is_floating(data_type))


def _literals(array: pa.Array) -> pa.Array:
    """Integers as their digits; floats as the double literal of their exact value
    (Arrow's shortest text of the double, which reads back as it, with an exponent so
    MySQL reads a double, not a decimal). Finite only (`MysqlDialect.sendable`)."""
    if pa.types.is_integer(array.type):
        return pc.cast(array, pa.string())
    text = pc.cast(pc.cast(array, pa.float64()), pa.string())  # a FLOAT's own text is shorter
    return pc.if_else(pc.match_substring(text, "e"), text,
                      pc.binary_join_element_wise(text, "e0", ""))


def _holds_exactly(column: ColumnInfo, bits: int) -> bool:
    """Whether every value of ``column`` is a float of ``bits`` significant bits (24:
    FLOAT, 53: DOUBLE), so reading it as one never rounds."""
    kind = column.type_name
    if kind == "float" or (kind in ("double", "real") and bits == 53):
        return True
    if kind in _INTEGERS:
        return _INTEGER_BITS[kind] <= bits
    if kind == "year":
        return True
    if kind == "bit":
        return _bits(column) <= bits
    if kind in ("decimal", "numeric"):
        match = _DECIMAL.match(column.db_type)
        if match is None:
            return False
        # 10**7 < 2**24 and 10**15 < 2**53: that many digits, no fraction.
        return int(match.group(2)) == 0 and int(match.group(1)) <= (7 if bits == 24 else 15)
    return False


def _own_type(dialect: MysqlDialect, column: ColumnInfo) -> str:
    natural = dialect.natural_type(column)
    return natural.simpleString().upper() if natural is not None else "STRING"


def _joined(texts: pa.Array) -> str:
    list_array = pa.ListArray.from_arrays(pa.array([0, len(texts)], pa.int32()), texts)
    return str(pc.binary_join(list_array, ", ")[0].as_py())


def _connectorx_url(raw: Any) -> str | None:
    """``mysql://user:password@host:port/database`` of a pymysql or mysql-connector
    connection over plain TCP; None for anything else."""
    module = type(raw).__module__.split(".")[0]
    if module == "pymysql":
        # pymysql makes an unverified TLS context of its own when none is asked for;
        # one that verifies the server is the user's: connectorx would not honour it.
        context = getattr(raw, "ctx", None)
        if raw.unix_socket or (context is not None and context.verify_mode != ssl.CERT_NONE):
            return None
        host, port, user = raw.host, raw.port, raw.user
        password, database = raw.password, raw.db
    elif module == "mysql":
        if getattr(raw, "_unix_socket", None) or getattr(raw, "_ssl", None):
            return None
        host, port, user = raw.server_host, raw.server_port, raw.user
        password, database = getattr(raw, "_password", None), getattr(raw, "_database", None)
    else:
        return None
    if not host or not database or password is None:
        return None
    credentials = url_quote(_text(user), safe="")
    if password:
        credentials += ":" + url_quote(_text(password), safe="")
    return f"mysql://{credentials}@{host}:{int(port)}/{url_quote(_text(database), safe='')}"
