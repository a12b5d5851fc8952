"""Spark types of values a source is given: inferred from Python values, or from Arrow
types by PySpark's own mapping."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

from spark_lookup.errors import ConfigError


def infer_python_type(value: Any, where: str) -> T.DataType:
    """The Spark type of a Python scalar (as Spark infers it; naive datetimes are
    TIMESTAMP_NTZ, aware ones TIMESTAMP).

    Raises
    ------
    ConfigError
        For a value of another type (it names ``where``): pass a schema.
    """
    if isinstance(value, bool):
        return T.BooleanType()
    if isinstance(value, int):
        return T.LongType()
    if isinstance(value, float):
        return T.DoubleType()
    if isinstance(value, str):
        return T.StringType()
    if isinstance(value, (bytes, bytearray)):
        return T.BinaryType()
    if isinstance(value, Decimal):
        return T.DecimalType(38, 18)
    if isinstance(value, dt.datetime):
        return T.TimestampNTZType() if value.tzinfo is None else T.TimestampType()
    if isinstance(value, dt.date):
        return T.DateType()
    raise ConfigError(
        f"cannot infer a Spark type for {where} from a {type(value).__name__} value; pass schema"
    )


def arrow_to_spark(arrow_type: Any, where: str) -> T.DataType:
    """The Spark type of an Arrow type, by PySpark's own mapping (timestamps without a
    zone are TIMESTAMP_NTZ).

    Raises
    ------
    ConfigError
        For an Arrow type with no Spark counterpart (it names ``where``).
    """
    import pyarrow as pa
    from pyspark.errors import PySparkException

    from spark_lookup.compat import arrow_to_spark_type

    if arrow_type == pa.null():
        raise ConfigError(f"{where} holds only nulls, so its type is unknown; pass schema")
    try:
        return arrow_to_spark_type(arrow_type, prefer_timestamp_ntz=True)
    except (PySparkException, TypeError) as exc:
        raise ConfigError(
            f"{where} has Arrow type {arrow_type} with no Spark type here; pass schema"
        ) from exc


def table_columns(arrow_schema: Any, schema: Any, columns: Any, what: str
                  ) -> tuple[T.StructType, list[str]]:
    """The Spark schema a table source reads and its column names: ``schema`` declared
    (its columns picked by name), else ``columns`` (or all) with the table's own types.
    ``what`` names the table in messages (``"Delta table 'x'"``).

    Raises
    ------
    ConfigError
        For a declared or chosen column the table lacks.
    """
    from spark_lookup.schema import parse_schema

    names = arrow_schema.names
    struct = parse_schema(schema, f"{what.split()[0]}Source schema") if schema is not None else None
    wanted = list(struct.names) if struct is not None else (
        list(columns) if columns is not None else list(names))
    missing = [c for c in wanted if c not in names]
    if missing:
        raise ConfigError(f"{what} has no column(s) {missing}; it has {names}")
    if struct is None:
        struct = T.StructType([
            T.StructField(name, arrow_to_spark(arrow_schema.field(name).type,
                                               f"column {name!r} of {what}"))
            for name in wanted])
    return struct, wanted
