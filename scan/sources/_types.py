"""Spark types of values: inferred from Python values, Arrow types, and conversions of
stored text into a column's Python type."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

from spark_lookup.errors import ConfigError

Converter = Callable[[Any], Any]


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
    """The Spark type of an Arrow type (the inverse of the mapping Spark uses).

    Raises
    ------
    ConfigError
        For an Arrow type with no Spark counterpart here (it names ``where``).
    """
    import pyarrow as pa
    import pyarrow.types as pat

    simple: list[tuple[Callable[[Any], bool], T.DataType]] = [
        (pat.is_boolean, T.BooleanType()),
        (pat.is_int8, T.ByteType()),
        (pat.is_int16, T.ShortType()),
        (pat.is_int32, T.IntegerType()),
        (pat.is_int64, T.LongType()),
        (pat.is_float32, T.FloatType()),
        (pat.is_float64, T.DoubleType()),
        (pat.is_string, T.StringType()),
        (pat.is_large_string, T.StringType()),
        (pat.is_binary, T.BinaryType()),
        (pat.is_large_binary, T.BinaryType()),
        (pat.is_date32, T.DateType()),
    ]
    for check, spark_type in simple:
        if check(arrow_type):
            return spark_type
    if pat.is_timestamp(arrow_type):
        return T.TimestampType() if arrow_type.tz is not None else T.TimestampNTZType()
    if pat.is_decimal(arrow_type) and arrow_type.precision <= 38:
        return T.DecimalType(arrow_type.precision, arrow_type.scale)
    if pat.is_list(arrow_type) or pat.is_large_list(arrow_type):
        return T.ArrayType(arrow_to_spark(arrow_type.value_type, where))
    if pat.is_map(arrow_type):
        return T.MapType(
            arrow_to_spark(arrow_type.key_type, where), arrow_to_spark(arrow_type.item_type, where)
        )
    if pat.is_struct(arrow_type):
        return T.StructType(
            [T.StructField(f.name, arrow_to_spark(f.type, where), f.nullable) for f in arrow_type]
        )
    if arrow_type == pa.null():
        raise ConfigError(f"{where} holds only nulls, so its type is unknown; pass schema")
    raise ConfigError(f"{where} has Arrow type {arrow_type} with no Spark type here; pass schema")


_TRUE = frozenset({"1", "true", "t", "yes", "y"})
_FALSE = frozenset({"0", "false", "f", "no", "n"})


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)


def _bool_from_text(value: Any) -> bool:
    text = _text(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"not a boolean: {text!r:.40}")


def text_converter(data_type: T.DataType) -> Converter:
    """A function turning stored text (``bytes`` or ``str``, as Redis returns it) into a
    value of ``data_type``; complex types are read as JSON."""
    if isinstance(data_type, (T.StringType, T.VarcharType, T.CharType)):
        return _text
    if isinstance(data_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return lambda v: int(_text(v))
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        return lambda v: float(_text(v))
    if isinstance(data_type, T.BooleanType):
        return _bool_from_text
    if isinstance(data_type, T.DecimalType):
        return lambda v: Decimal(_text(v))
    if isinstance(data_type, T.BinaryType):
        return lambda v: bytes(v) if isinstance(v, (bytes, bytearray)) else str(v).encode()
    if isinstance(data_type, T.TimestampType):
        return lambda v: _aware(dt.datetime.fromisoformat(_text(v)))
    if isinstance(data_type, T.TimestampNTZType):
        return lambda v: dt.datetime.fromisoformat(_text(v))
    if isinstance(data_type, T.DateType):
        return lambda v: dt.date.fromisoformat(_text(v))
    json_value = json_converter(data_type)
    return lambda v: json_value(json.loads(_text(v)))


def _aware(value: dt.datetime) -> dt.datetime:
    # A timestamp without an offset is taken as UTC, as Arrow takes naive values.
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)


def json_converter(data_type: T.DataType) -> Converter:
    """A function turning a decoded JSON value into a value of ``data_type`` (dates and
    timestamps from ISO strings, decimals from strings or numbers, binary from base64)."""
    if isinstance(data_type, (T.StringType, T.VarcharType, T.CharType)):
        return lambda v: v if isinstance(v, str) else json.dumps(v)
    if isinstance(data_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return _json_int
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        return lambda v: float(v)
    if isinstance(data_type, T.BooleanType):
        return lambda v: v if isinstance(v, bool) else _bool_from_text(v)
    if isinstance(data_type, T.DecimalType):
        return lambda v: Decimal(str(v))
    if isinstance(data_type, T.BinaryType):
        return lambda v: base64.b64decode(v, validate=True)
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType, T.DateType)):
        return text_converter(data_type)
    if isinstance(data_type, T.ArrayType):
        element = json_converter(data_type.elementType)
        return lambda v: [None if x is None else element(x) for x in v]
    if isinstance(data_type, T.MapType):
        key = text_converter(data_type.keyType)
        value = json_converter(data_type.valueType)
        return lambda v: {key(k): None if x is None else value(x) for k, x in v.items()}
    if isinstance(data_type, T.StructType):
        fields = [(f.name, json_converter(f.dataType)) for f in data_type.fields]
        return lambda v: {
            name: None if v.get(name) is None else conv(v[name]) for name, conv in fields
        }
    raise ConfigError(f"no conversion to {data_type.simpleString()} from stored values")


def _json_int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"not an integer: {value!r:.40}")
    return int(value)
