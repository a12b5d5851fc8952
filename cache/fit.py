"""Whether cached rows read from a shared tier are values of the bound schema, exactly.

A shared tier (Redis) serves what anyone with write access stored: another writer, an
older schema, a hand-made entry. Such an entry must not be converted into the schema's
types (``1.5`` truncated to a BIGINT ``1``, ``True`` taken for ``1``, ``55`` printed as
the STRING ``"55"``, an integer beyond BIGINT raising in Arrow); it is refused, and the
cache treats it as a miss, so it is loaded again and overwritten. A value fits its
column when it is what the per-key API gives for that column (``connectors.rows``):
an ``int`` in range for integers (never a ``bool``), a ``float`` for FLOAT/DOUBLE
(a FLOAT one that ``float32`` holds exactly), a ``str`` for STRING, a ``Decimal`` with
no more digits than the DECIMAL's precision and scale, a ``date`` (not a ``datetime``)
for DATE, an aware ``datetime`` for TIMESTAMP and a naive one for TIMESTAMP_NTZ, and
containers of fitting values (maps as a ``dict`` or a list of pairs, structs as a
``dict`` of exactly the struct's fields).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from spark_lookup.shown import shown

__all__ = ["misfit_check"]


Check = Callable[[Any], bool]


def misfit_check(schema: pa.Schema) -> Callable[[Sequence[Any]], str | None]:
    """A function of rows: why they are not rows of ``schema`` (the first value found),
    or None if each is a tuple of the schema's width whose values fit their columns.
    Made once per schema (at ``bind``); a call costs a type check per value."""
    width = len(schema)
    fields = list(schema)
    checks = [_field_check(field) for field in fields]

    def misfit(rows: Sequence[Any]) -> str | None:
        for row in rows:
            if type(row) is not tuple or len(row) != width:
                return f"{shown(row, 60)} is not a row of {width} column(s)"
            for value, check, field in zip(row, checks, fields, strict=True):
                if not check(value):
                    return f"column {field.name!r} ({field.type}) holds {shown(value, 60)}"
        return None

    return misfit


def _field_check(field: pa.Field) -> Check:
    """The check of a field's values, None included where the field is nullable."""
    check = _check(field.type)
    if field.nullable:
        return lambda value: value is None or check(value)
    return lambda value: value is not None and check(value)


def _check(kind: pa.DataType) -> Check:
    """The check of non-null values of ``kind``."""
    if pa.types.is_integer(kind):
        bits = kind.bit_width
        low, high = ((-(1 << (bits - 1)), 1 << (bits - 1)) if pa.types.is_signed_integer(kind)
                     else (0, 1 << bits))
        return lambda value: type(value) is int and low <= value < high
    if pa.types.is_floating(kind):
        if kind.bit_width == 32:
            return lambda value: type(value) is float and _float32(value)
        return lambda value: type(value) is float
    if pa.types.is_boolean(kind):
        return lambda value: type(value) is bool
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return lambda value: type(value) is str and _utf8(value)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return lambda value: type(value) is bytes
    if pa.types.is_fixed_size_binary(kind):
        return lambda value: type(value) is bytes and len(value) == kind.byte_width
    if pa.types.is_decimal(kind):
        precision, scale = kind.precision, kind.scale
        return lambda value: type(value) is Decimal and _decimal(value, precision, scale)
    if pa.types.is_date(kind):
        return lambda value: type(value) is date
    if pa.types.is_timestamp(kind):
        aware = kind.tz is not None
        return lambda value: type(value) is datetime and (value.tzinfo is not None) == aware
    if pa.types.is_time(kind):
        return lambda value: type(value) is time and value.tzinfo is None
    if pa.types.is_duration(kind):
        return lambda value: type(value) is timedelta
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        item = _field_check(kind.value_field)
        return lambda value: type(value) is list and all(map(item, value))
    if pa.types.is_map(kind):
        key, item = _check(kind.key_type), _field_check(kind.item_field)

        def pair(entry: Any) -> bool:
            return (type(entry) is tuple and len(entry) == 2 and entry[0] is not None
                    and key(entry[0]) and item(entry[1]))

        # The per-key API gives maps as dicts, Arrow's to_pylist as lists of pairs.
        return lambda value: (all(map(pair, value.items())) if type(value) is dict
                              else type(value) is list and all(map(pair, value)))
    if pa.types.is_struct(kind):
        fields = [kind.field(i) for i in range(kind.num_fields)]
        names = [f.name for f in fields]
        checks = [_field_check(f) for f in fields]
        return lambda value: (type(value) is dict and list(value) == names
                              and all(c(value[n]) for c, n in zip(checks, names, strict=True)))
    return lambda value: _arrow_takes(value, kind)


def _arrow_takes(value: Any, kind: pa.DataType) -> bool:
    """For a type the Spark schemas of this library do not make: Arrow decides."""
    try:
        pa.array([value], kind)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return False
    return True


def _float32(value: float) -> bool:
    """Whether float32 holds ``value`` exactly (NaN and infinities included)."""
    if not math.isfinite(value):
        return True
    try:
        return bool(struct.unpack("f", struct.pack("f", value))[0] == value)
    except OverflowError:  # beyond float32's range
        return False


def _utf8(text: str) -> bool:
    """Whether Arrow can hold ``text`` (a lone surrogate is a Python str, no UTF-8)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decimal(value: Decimal, precision: int, scale: int) -> bool:
    """Whether ``value`` is exactly a DECIMAL(precision, scale): finite, no digit below
    the scale, and at most ``precision - scale`` digits before the point."""
    if not value.is_finite():
        return False
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    cut = -scale - exponent  # digits below the scale: they must all be zero
    if cut > 0:
        if any(digits[-cut:]):
            return False
        digits, exponent = digits[:-cut], -scale
    significant = len(digits) - next((i for i, d in enumerate(digits) if d), len(digits))
    return not significant or significant + exponent + scale <= precision
