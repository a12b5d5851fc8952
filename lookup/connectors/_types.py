"""Key values and stored values, checked and converted by the dimension schema's types.

Two directions:

- Keys going out. A key value is normalized to the Python type of its column's Spark
  type before it reaches a database or a Redis key: ``1.0`` for a BIGINT column becomes
  ``1`` (pandas turns integer columns with nulls into floats), numpy scalars become
  builtins. A value that can never equal a value of the column (NaN, a non-integral
  float for an integer column, an integer beyond the column's range, a string with
  characters the store cannot hold) never matches: the key is not sent. A value of the
  wrong kind (a ``str`` for an integer column) is a :class:`KeyTypeError`.
- Values coming back. Redis hash fields and string values are bytes, JSON documents
  hold JSON types, and sqlite returns whatever it stored; each is converted to the
  Python type Spark expects for the column, with a :class:`ValueConversionError` naming
  what could not be read.
"""

from __future__ import annotations

import base64
import binascii
import math
import numbers
import re
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from pyspark.sql import types as T

from spark_lookup.errors import ConfigError

__all__ = [
    "NO_MATCH",
    "KeyTypeError",
    "UnsupportedTypeError",
    "ValueConversionError",
    "from_json",
    "from_text",
    "key_coercer",
    "normalize_key",
    "spark_type_name",
]


class _NoMatch:
    def __repr__(self) -> str:
        return "NO_MATCH"


NO_MATCH: Any = _NoMatch()
"""Returned by a key coercer for a value that can never match: the key is not sent."""


class KeyTypeError(TypeError):
    """A key value's type can never be compared with its column's type."""


class UnsupportedTypeError(TypeError):
    """A column type this conversion does not handle (raised when building it)."""


class ValueConversionError(ValueError):
    """A stored value cannot be read as its column's type."""


_INT_BITS: dict[type[T.DataType], int] = {
    T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32, T.LongType: 64,
}
_STRING_TYPES = (T.StringType, T.VarcharType, T.CharType)


def spark_type_name(data_type: T.DataType) -> str:
    """The DDL name of ``data_type`` (``bigint``, ``decimal(10,2)``...)."""
    return str(data_type.simpleString())


def _int_range(data_type: T.DataType) -> tuple[int, int]:
    bits = _INT_BITS[type(data_type)]
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _is_bool(value: object) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy.bool_


def _plain_datetime(value: datetime) -> datetime:
    # pandas.Timestamp and other subclasses bind differently (or not at all).
    if type(value) is datetime:
        return value
    return datetime(
        value.year, value.month, value.day, value.hour, value.minute, value.second,
        value.microsecond, value.tzinfo, fold=value.fold,
    )


def key_coercer(
    data_type: T.DataType, *, nul_in_text: bool = True
) -> Callable[[Any], Any]:
    """A function normalizing one key value for a column of ``data_type``.

    It returns the value to send, :data:`NO_MATCH`, or raises :class:`KeyTypeError`.
    ``nul_in_text=False`` for stores whose text cannot hold ``"\\x00"`` (PostgreSQL).

    Raises
    ------
    UnsupportedTypeError
        (when building) for a key column of a type no key can have (arrays, maps,
        structs).
    """
    if type(data_type) in _INT_BITS:
        low, high = _int_range(data_type)

        def integral(value: Any) -> Any:
            if _is_bool(value):
                raise _wrong_kind(value, data_type)
            if isinstance(value, numbers.Integral):
                number = int(value)
            elif isinstance(value, Decimal):
                if not value.is_finite() or value != value.to_integral_value():
                    return NO_MATCH
                number = int(value)
            elif isinstance(value, numbers.Real):
                real = float(value)
                if not real.is_integer():  # also NaN and infinities
                    return NO_MATCH
                number = int(real)
            else:
                raise _wrong_kind(value, data_type)
            return number if low <= number <= high else NO_MATCH

        return integral
    if isinstance(data_type, (T.FloatType, T.DoubleType)):

        def floating(value: Any) -> Any:
            if _is_bool(value) or not isinstance(value, (numbers.Real, Decimal)):
                raise _wrong_kind(value, data_type)
            try:
                number = float(value)
            except (OverflowError, ValueError):  # a huge int; a signaling NaN
                return NO_MATCH
            return NO_MATCH if math.isnan(number) else number

        return floating
    if isinstance(data_type, T.DecimalType):

        def decimal(value: Any) -> Any:
            if isinstance(value, Decimal):
                number = value
            elif isinstance(value, numbers.Integral) and not _is_bool(value):
                number = Decimal(int(value))
            elif isinstance(value, numbers.Real) and not _is_bool(value):
                if not math.isfinite(value):
                    return NO_MATCH
                number = Decimal(repr(float(value)))
            else:
                raise _wrong_kind(value, data_type)
            return number if number.is_finite() else NO_MATCH

        return decimal
    if isinstance(data_type, T.BooleanType):

        def boolean(value: Any) -> Any:
            if not _is_bool(value):
                raise _wrong_kind(value, data_type)
            return bool(value)

        return boolean
    if isinstance(data_type, _STRING_TYPES):

        def text(value: Any) -> Any:
            if not isinstance(value, str):
                raise _wrong_kind(value, data_type)
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: no store holds them
                return NO_MATCH
            if not nul_in_text and "\x00" in value:
                return NO_MATCH
            return str(value)

        return text
    if isinstance(data_type, T.BinaryType):

        def binary(value: Any) -> Any:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise _wrong_kind(value, data_type)
            return bytes(value)

        return binary
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):

        def timestamp(value: Any) -> Any:
            if not isinstance(value, datetime):
                raise _wrong_kind(value, data_type)
            if value != value:  # pandas.NaT
                return NO_MATCH
            return _plain_datetime(value)

        return timestamp
    if isinstance(data_type, T.DateType):

        def day(value: Any) -> Any:
            if not isinstance(value, date) or isinstance(value, datetime):
                raise _wrong_kind(value, data_type)
            return date(value.year, value.month, value.day)

        return day
    raise UnsupportedTypeError(
        f"a {spark_type_name(data_type)} column cannot be a lookup key column"
    )


def normalize_key(
    key: tuple[Any, ...],
    columns: Sequence[str],
    coercers: Sequence[Callable[[Any], Any]],
    where: str,
) -> tuple[Any, ...] | None:
    """``key`` with each value normalized by its column's coercer, or None when the key
    can never match. Every value is checked, so a wrong kind is reported whatever the
    other values are.

    Raises
    ------
    ConfigError
        For a value of the wrong kind, naming the key, ``where`` and the column.
    """
    values = []
    matchable = True
    for column, coerce, value in zip(columns, coercers, key, strict=True):
        try:
            normalized = coerce(value)
        except KeyTypeError as exc:
            raise ConfigError(f"key {key!r:.80} {where}, column {column!r}: {exc}") from exc
        if normalized is NO_MATCH:
            matchable = False
        values.append(normalized)
    return tuple(values) if matchable else None


def _wrong_kind(value: Any, data_type: T.DataType) -> KeyTypeError:
    return KeyTypeError(
        f"a {type(value).__name__} value ({value!r:.60}) can never equal a value of a "
        f"{spark_type_name(data_type)} column"
    )


# --- values coming back ------------------------------------------------------------

_INTEGER_TEXT = re.compile(r"^\s*[-+]?[0-9]+\s*$")
_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False, "t": True, "f": False}


def _fail(value: Any, data_type: T.DataType, reason: str = "") -> ValueConversionError:
    detail = f": {reason}" if reason else ""
    return ValueConversionError(
        f"cannot read {value!r:.60} as {spark_type_name(data_type)}{detail}"
    )


def _check_decimal(number: Decimal, data_type: T.DecimalType, raw: Any) -> Decimal:
    if not number.is_finite():
        raise _fail(raw, data_type, "not a finite number")
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)
    if -exponent > data_type.scale:  # '1.500' fits DECIMAL(p, 2); '1.505' does not
        try:
            scaled = number.quantize(Decimal(1).scaleb(-data_type.scale))
        except InvalidOperation:
            scaled = None
        if scaled is None or scaled != number:
            raise _fail(raw, data_type, "more fractional digits than the scale")
        number = scaled
    if number and number.adjusted() + 1 > data_type.precision - data_type.scale:
        raise _fail(raw, data_type, "too many digits for the precision")
    return number


def _parse_datetime(text: str) -> datetime:
    if text.endswith(("Z", "z")):  # fromisoformat reads 'Z' only from Python 3.11
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text)


def from_text(data_type: T.DataType) -> Callable[[bytes | str], Any]:
    """A converter of a text (or bytes) value, as Redis stores it, to ``data_type``.

    Integers in decimal; booleans ``true``/``false``/``1``/``0``/``t``/``f`` (any case);
    floats as Python reads them (``nan``, ``inf`` too); decimals that fit the
    precision and scale; dates and timestamps in ISO 8601; binary as the raw bytes.

    Raises
    ------
    UnsupportedTypeError
        (when building) for arrays, maps and structs, which have no text form here.
    """
    if isinstance(data_type, T.BinaryType):
        return lambda raw: raw if isinstance(raw, bytes) else raw.encode("utf-8")

    def decoded(raw: bytes | str) -> str:
        if isinstance(raw, str):
            return raw
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(raw, data_type, "not UTF-8") from exc

    if isinstance(data_type, _STRING_TYPES):
        return decoded
    if type(data_type) in _INT_BITS:
        low, high = _int_range(data_type)

        def integral(raw: bytes | str) -> int:
            text = decoded(raw)
            if not _INTEGER_TEXT.match(text):
                raise _fail(raw, data_type)
            number = int(text)
            if not low <= number <= high:
                raise _fail(raw, data_type, "out of range")
            return number

        return integral
    if isinstance(data_type, (T.FloatType, T.DoubleType)):

        def floating(raw: bytes | str) -> float:
            try:
                return float(decoded(raw))
            except ValueError as exc:
                raise _fail(raw, data_type) from exc

        return floating
    if isinstance(data_type, T.DecimalType):
        decimal_type = data_type

        def decimal(raw: bytes | str) -> Decimal:
            try:
                number = Decimal(decoded(raw).strip())
            except InvalidOperation as exc:
                raise _fail(raw, decimal_type) from exc
            return _check_decimal(number, decimal_type, raw)

        return decimal
    if isinstance(data_type, T.BooleanType):

        def boolean(raw: bytes | str) -> bool:
            flag = _BOOL_TEXT.get(decoded(raw).strip().lower())
            if flag is None:
                raise _fail(raw, data_type)
            return flag

        return boolean
    if isinstance(data_type, T.DateType):

        def day(raw: bytes | str) -> date:
            try:
                return date.fromisoformat(decoded(raw).strip())
            except ValueError as exc:
                raise _fail(raw, data_type) from exc

        return day
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):

        def timestamp(raw: bytes | str) -> datetime:
            try:
                return _parse_datetime(decoded(raw).strip())
            except ValueError as exc:
                raise _fail(raw, data_type) from exc

        return timestamp
    raise UnsupportedTypeError(f"{spark_type_name(data_type)} values cannot be read from text")


def from_json(data_type: T.DataType) -> Callable[[Any], Any]:
    """A converter of a JSON-decoded value (numbers as ``int`` or ``Decimal``) to
    ``data_type``; ``null`` is None for every type.

    Strings, numbers and booleans map directly (an integral JSON number suits an integer
    column, any number a float or decimal column); dates and timestamps are ISO 8601
    strings; binary is a base64 string; arrays are JSON arrays; maps are JSON objects
    (keys read as text); structs are JSON objects, read into tuples in field order.
    """
    convert = _json_converter(data_type)

    def nullable(value: Any) -> Any:
        return None if value is None else convert(value)

    return nullable


def _json_converter(data_type: T.DataType) -> Callable[[Any], Any]:
    if isinstance(data_type, _STRING_TYPES):

        def text(value: Any) -> str:
            if not isinstance(value, str):
                raise _fail(value, data_type, "expected a JSON string")
            return value

        return text
    if type(data_type) in _INT_BITS:
        low, high = _int_range(data_type)

        def integral(value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
                raise _fail(value, data_type, "expected a JSON integer")
            if isinstance(value, Decimal) and (not value.is_finite() or value != int(value)):
                raise _fail(value, data_type, "expected a JSON integer")
            number = int(value)
            if not low <= number <= high:
                raise _fail(value, data_type, "out of range")
            return number

        return integral
    if isinstance(data_type, (T.FloatType, T.DoubleType)):

        def floating(value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
                raise _fail(value, data_type, "expected a JSON number")
            return float(value)

        return floating
    if isinstance(data_type, T.DecimalType):
        decimal_type = data_type

        def decimal(value: Any) -> Decimal:
            if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
                raise _fail(value, decimal_type, "expected a JSON number")
            number = value if isinstance(value, Decimal) else Decimal(repr(value))
            return _check_decimal(number, decimal_type, value)

        return decimal
    if isinstance(data_type, T.BooleanType):

        def boolean(value: Any) -> bool:
            if not isinstance(value, bool):
                raise _fail(value, data_type, "expected true or false")
            return value

        return boolean
    if isinstance(data_type, T.BinaryType):

        def binary(value: Any) -> bytes:
            if not isinstance(value, str):
                raise _fail(value, data_type, "expected a base64 string")
            try:
                return base64.b64decode(value.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError) as exc:
                raise _fail(value, data_type, "not base64") from exc

        return binary
    if isinstance(data_type, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        parse = from_text(data_type)

        def iso(value: Any) -> Any:
            if not isinstance(value, str):
                raise _fail(value, data_type, "expected an ISO 8601 string")
            return parse(value)

        return iso
    if isinstance(data_type, T.ArrayType):
        element = from_json(data_type.elementType)

        def array(value: Any) -> list[Any]:
            if not isinstance(value, list):
                raise _fail(value, data_type, "expected a JSON array")
            return [element(v) for v in value]

        return array
    if isinstance(data_type, T.MapType):
        map_key = from_text(data_type.keyType)
        map_value = from_json(data_type.valueType)

        def mapping(value: Any) -> dict[Any, Any]:
            if not isinstance(value, dict):
                raise _fail(value, data_type, "expected a JSON object")
            return {map_key(k): map_value(v) for k, v in value.items()}

        return mapping
    if isinstance(data_type, T.StructType):
        fields = [(f.name, from_json(f.dataType)) for f in data_type.fields]

        def struct(value: Any) -> tuple[Any, ...]:
            if not isinstance(value, dict):
                raise _fail(value, data_type, "expected a JSON object")
            return tuple(convert(value.get(name)) for name, convert in fields)

        return struct
    raise UnsupportedTypeError(f"{spark_type_name(data_type)} values cannot be read from JSON")
