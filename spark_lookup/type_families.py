"""Families of Spark types: the one place that says which types count as integers,
floats, strings, dates and times.

Each family is a tuple of classes, ready for ``isinstance``.
"""

from __future__ import annotations

from pyspark.sql import types as T

__all__ = [
    "DATETIME_TYPES",
    "EQUALITY_FAMILIES",
    "FLOAT_TYPES",
    "INTEGER_TYPES",
    "NUMBER_TYPES",
    "STRING_TYPES",
    "TIMESTAMP_TYPES",
]

INTEGER_TYPES: tuple[type[T.DataType], ...] = (
    T.ByteType, T.ShortType, T.IntegerType, T.LongType,
)
"""Exact integers of 8, 16, 32 and 64 bits."""

FLOAT_TYPES: tuple[type[T.DataType], ...] = (T.FloatType, T.DoubleType)
"""IEEE floating point of 32 and 64 bits."""

NUMBER_TYPES: tuple[type[T.DataType], ...] = (*INTEGER_TYPES, *FLOAT_TYPES, T.DecimalType)
"""Every numeric type."""

STRING_TYPES: tuple[type[T.DataType], ...] = (T.StringType, T.VarcharType, T.CharType)
"""Character strings, of any length rule."""

TIMESTAMP_TYPES: tuple[type[T.DataType], ...] = (T.TimestampType, T.TimestampNTZType)
"""Instants (``TIMESTAMP``) and wall-clock times (``TIMESTAMP_NTZ``)."""

DATETIME_TYPES: tuple[type[T.DataType], ...] = (T.DateType, *TIMESTAMP_TYPES)
"""Dates and both kinds of timestamp."""

EQUALITY_FAMILIES: tuple[tuple[type[T.DataType], ...], ...] = (
    INTEGER_TYPES,
    FLOAT_TYPES,
    STRING_TYPES,
    (T.DecimalType,),
    (T.BooleanType,),
    (T.BinaryType,),
    (T.DateType,),
    (T.TimestampType,),
    (T.TimestampNTZType,),
)
"""Types whose values a lookup key can compare equal across: within a family only."""
