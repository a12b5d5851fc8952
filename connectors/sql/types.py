"""The SQL type table: each database type's Spark type, and how a column is read as
the Spark type it is declared (or inferred) to have.

A column is read in a *wire* form chosen so that every driver of the database returns
the same thing: PostgreSQL prints what has no Arrow counterpart as text (``::text``:
json as the database prints it, uuid, enums, intervals, numeric's ``NaN``); SQLite,
which types values, not columns, reads each value only if its storage class suits the
column (``typeof``) and flags the others as bad values. The wire form then becomes the
Spark type through :mod:`connectors.convert`, identically for every driver. The README
table "Types" is this module in prose; ``tests/contract`` checks them against each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import types as T

from connectors.convert import castable
from connectors.sql.catalog import ColumnInfo
from connectors.sql.session import POSTGRES, SQLITE
from spark_lookup.errors import ConfigError
from spark_lookup.schema import to_arrow_type

__all__ = ["ColumnRead", "natural_type", "read_column"]

_STRING_TYPES = (T.StringType, T.VarcharType, T.CharType)
_INTEGER_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


@dataclass(frozen=True)
class ColumnRead:
    """How one column is read: its SELECT expression, its wire type, and (SQLite) the
    expression that is non-null exactly when the stored value is bad."""

    expression: str
    wire: pa.DataType
    flag: str | None = None


# --- PostgreSQL ---------------------------------------------------------------------

_PG_TEXTUAL = frozenset({"text", "varchar", "bpchar", "name", "citext", "char"})
_PG_DIRECT: dict[str, T.DataType] = {
    "bool": T.BooleanType(),
    "int2": T.ShortType(),
    "int4": T.IntegerType(),
    "int8": T.LongType(),
    "float4": T.FloatType(),
    "float8": T.DoubleType(),
    "bytea": T.BinaryType(),
    "date": T.DateType(),
    "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(),
}
_NUMERIC = re.compile(r"^numeric\((\d+),(\d+)\)")


def _pg_numeric(formatted: str) -> T.DataType:
    match = _NUMERIC.match(formatted.replace(" ", ""))
    if match is None:
        return T.DecimalType(38, 18)  # unconstrained numeric, as Spark's JDBC reader maps it
    precision, scale = int(match.group(1)), int(match.group(2))
    if precision <= 38:
        return T.DecimalType(precision, scale)
    return T.StringType()  # more digits than Spark holds: the exact text


def _pg_scalar(type_name: str, formatted: str) -> T.DataType:
    if type_name in _PG_DIRECT:
        return _PG_DIRECT[type_name]
    if type_name == "numeric":
        return _pg_numeric(formatted)
    return T.StringType()  # text types, and everything read as text (json, uuid, enums...)


def _pg_natural(column: ColumnInfo) -> T.DataType:
    if column.category == "A" and column.element:
        element_formatted = column.db_type[:-2] if column.db_type.endswith("[]") else ""
        return T.ArrayType(_pg_scalar(column.element, element_formatted))
    return _pg_scalar(column.type_name, column.db_type)


def _pg_read(column: ColumnInfo, quoted: str, target: T.DataType) -> ColumnRead:
    if isinstance(target, (*_STRING_TYPES, T.DecimalType)):
        # A decimal as its exact digits: it never goes through a double.
        textual = isinstance(target, _STRING_TYPES) and column.type_name in _PG_TEXTUAL
        return ColumnRead(quoted if textual else f"{quoted}::text", pa.string())
    if column.category == "A" and column.element:
        # An element type the driver does not give as Spark's value is read as text.
        element = _PG_DIRECT.get(column.element)
        if element is None or (isinstance(target, T.ArrayType) and isinstance(
                target.elementType, (*_STRING_TYPES, T.DecimalType))):
            return ColumnRead(f"{quoted}::text[]", pa.list_(pa.string()))
        return ColumnRead(quoted, pa.list_(to_arrow_type(element)))
    if column.type_name == "numeric" and isinstance(target, (T.FloatType, T.DoubleType)):
        return ColumnRead(f"{quoted}::float8", pa.float64())
    direct = _PG_DIRECT.get(column.type_name)
    if direct is None:
        return ColumnRead(f"{quoted}::text", pa.string())
    return ColumnRead(quoted, to_arrow_type(direct))


# --- SQLite ---------------------------------------------------------------------------

_SQLITE_DECIMAL = re.compile(r"^\s*(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def _sqlite_natural(declared: str) -> T.DataType | None:
    """SQLite's type affinity rules, refined for the names people give dates, booleans,
    decimals and time zones; None for a column with no declared type (it may hold
    anything: declare a schema)."""
    upper = declared.upper().strip()
    if not upper:
        return None
    if "BOOL" in upper:
        return T.BooleanType()
    if "INT" in upper:
        return T.LongType()  # SQLite integers are 64-bit whatever the declared width
    if upper.startswith(("DATETIME", "TIMESTAMP")):
        if "TZ" in upper or "WITH TIME ZONE" in upper:
            return T.TimestampType()
        return T.TimestampNTZType()
    if upper.startswith("DATE"):
        return T.DateType()
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT", "JSON", "UUID")):
        return T.StringType()
    if "BLOB" in upper:
        return T.BinaryType()
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return T.DoubleType()
    match = _SQLITE_DECIMAL.match(upper)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2) or 0)
        if 1 <= precision <= 38 and scale <= precision:
            return T.DecimalType(precision, scale)
    if upper.startswith(("DECIMAL", "NUMERIC")):
        return T.DoubleType()  # SQLite keeps NUMERIC values as 64-bit integers or reals
    return None


def _sqlite_read(column: ColumnInfo, quoted: str, target: T.DataType, rowid: bool) -> ColumnRead:
    """Read only the storage classes that suit ``target``; others are flagged."""
    classes: tuple[str, ...]
    if isinstance(target, _INTEGER_TYPES):
        classes, expression, wire = ("integer",), quoted, pa.int64()
    elif isinstance(target, (T.FloatType, T.DoubleType)):
        classes, expression, wire = ("integer", "real"), f"CAST({quoted} AS REAL)", pa.float64()
    elif isinstance(target, T.DecimalType):
        classes, expression, wire = (
            ("integer", "real", "text"), f"CAST({quoted} AS TEXT)", pa.string())
    elif isinstance(target, T.BooleanType):
        # Non-zero integers are true, as Spark casts them (and PostgreSQL's int columns).
        classes, expression, wire = ("integer", "text"), (
            f"CASE typeof({quoted}) WHEN 'integer' THEN CASE WHEN {quoted} <> 0 THEN 'true' "
            f"ELSE 'false' END ELSE {quoted} END"
        ), pa.string()
    elif isinstance(target, _STRING_TYPES):
        classes, expression, wire = (
            ("text", "integer", "real"), f"CAST({quoted} AS TEXT)", pa.string())
    elif isinstance(target, T.BinaryType):
        classes, expression, wire = ("blob", "text"), f"CAST({quoted} AS BLOB)", pa.binary()
    elif isinstance(target, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        classes, expression, wire = ("text",), quoted, pa.string()
    else:
        raise ConfigError(
            f"column {column.name!r}: SQLite has no {target.simpleString()} values; declare "
            "STRING (JSON text) or a scalar type"
        )
    if rowid:
        return ColumnRead(quoted, pa.int64()) if wire == pa.int64() else ColumnRead(
            expression, wire)
    listed = ", ".join(f"'{c}'" for c in classes)
    return ColumnRead(
        f"CASE WHEN typeof({quoted}) IN ({listed}) THEN {expression} END",
        wire,
        f"CASE WHEN typeof({quoted}) NOT IN ({listed}, 'null') "
        f"THEN quote({quoted}) || ' (a ' || typeof({quoted}) || ' value)' END",
    )


# --- both -----------------------------------------------------------------------------


def natural_type(backend: str, column: ColumnInfo) -> T.DataType | None:
    """The Spark type a column of this database type is inferred to have (None: it
    cannot be inferred; declare a schema)."""
    if backend == POSTGRES:
        return _pg_natural(column)
    if backend == SQLITE:
        return _sqlite_natural(column.type_name)
    return None


def read_column(
    backend: str,
    table: str,
    column: ColumnInfo | None,
    quoted: str,
    target: T.DataType,
    *,
    rowid: bool = False,
) -> ColumnRead:
    """How to read ``column`` (quoted as ``quoted``) as ``target``.

    Raises
    ------
    ConfigError
        If the stored type can never be read as ``target`` (naming table, column and
        both types).
    """
    target_arrow = to_arrow_type(target)
    if column is None:  # no catalog: the driver's values are taken as the target's
        return ColumnRead(quoted, target_arrow)
    if backend == POSTGRES:
        read = _pg_read(column, quoted, target)
    elif backend == SQLITE:
        read = _sqlite_read(column, quoted, target, rowid)
    else:
        return ColumnRead(quoted, target_arrow)
    if not castable(read.wire, target_arrow):
        raise ConfigError(
            f"column {column.name!r} of {table!r} is {column.db_type or 'untyped'}, which "
            f"cannot be read as {target.simpleString()}: declare a type it converts to "
            "(STRING reads every type)"
        )
    return read
