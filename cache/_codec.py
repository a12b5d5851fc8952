"""Safe, type-preserving encodings of lookup keys and cached rows (for remote caches).

Design notes: DESIGN.md, cache/ ``cache/_codec.py``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import numbers
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from spark_lookup.shown import shown

__all__ = ["FORMAT_PREFIX", "CodecError", "decode_rows", "encode_key", "encode_rows"]

FORMAT_PREFIX = b"sl1:"
"""Leads every encoded value; a future format changes it, and old values become misses."""

_MAX_DEPTH = 32  # nested arrays/maps/structs; deeper input is refused, not recursed into


class CodecError(ValueError):
    """A value has no safe encoding, or stored bytes are not a valid encoding."""


_NATIVE = (str, int, type(None), bool)  # exact types JSON round-trips unchanged
_FLOAT_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _tag(value: Any, depth: int) -> Any:
    """``value`` as a JSON-ready structure (see the module table)."""
    kind = type(value)
    if kind in _NATIVE:
        return value
    if kind is float or isinstance(value, float):
        number = float(value)
        if math.isfinite(number):
            return number
        return {"f": "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")}
    if depth > _MAX_DEPTH:
        raise CodecError(f"values nested deeper than {_MAX_DEPTH} levels are not cached")
    if kind is tuple:
        return {"tu": [_tag(v, depth + 1) for v in value]}
    if kind is list:
        return [_tag(v, depth + 1) for v in value]
    if kind is dict:
        return {"m": [[_tag(k, depth + 1), _tag(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Decimal):
        return {"n": str(value)}
    if isinstance(value, datetime):
        # Subclasses (pandas.Timestamp) may print nanoseconds; a plain datetime does not.
        plain = datetime(value.year, value.month, value.day, value.hour, value.minute, value.second,
                         value.microsecond, value.tzinfo, fold=value.fold)
        return {"dt": plain.isoformat()}
    if isinstance(value, date):
        return {"d": date(value.year, value.month, value.day).isoformat()}
    if isinstance(value, time):
        return {"t": value.isoformat()}
    if isinstance(value, timedelta):
        return {"td": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, numbers.Integral):  # numpy integers, IntEnum
        return int(value)
    if isinstance(value, str):  # numpy.str_ and other str subclasses
        return str(value)
    if isinstance(value, tuple):  # named tuples are structs
        return {"tu": [_tag(v, depth + 1) for v in value]}
    raise CodecError(f"values of type {kind.__qualname__} have no safe encoding")


def _dumps(structure: Any, ascii_only: bool) -> str:
    try:
        return json.dumps(
            structure, ensure_ascii=ascii_only, allow_nan=False, separators=(",", ":")
        )
    except ValueError as exc:  # an int beyond Python's int/str conversion limit
        raise CodecError(str(exc)) from exc


def _is_plain(row: tuple[Any, ...]) -> bool:
    for value in row:
        kind = type(value)
        if kind is float:
            if not math.isfinite(value):
                return False
        elif kind not in _NATIVE:
            return False
    return True


def encode_key(key: tuple[Any, ...]) -> str:
    """The canonical text of a lookup key: equal texts iff same types and values.

    Raises
    ------
    CodecError
        If an element has no encoding (see the module table).
    """
    return _dumps([_tag(v, 0) for v in key], ascii_only=True)


def encode_rows(rows: Sequence[tuple[Any, ...]]) -> bytes:
    """``rows`` (tuples) as bytes: `FORMAT_PREFIX` then compact UTF-8 JSON.

    Raises
    ------
    CodecError
        If a value has no encoding.
    """
    # A plain row, the common case, needs no tags: json writes the tuple as an array.
    structure = [row if _is_plain(row) else tuple(_tag(v, 0) for v in row) for row in rows]
    # surrogatepass: a str with lone surrogates is still a str Python can hold.
    return FORMAT_PREFIX + _dumps(structure, ascii_only=False).encode("utf-8", "surrogatepass")


def _untag(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind in _NATIVE or kind is float:
        return value
    if depth > _MAX_DEPTH:
        raise CodecError("stored value is nested too deeply")
    if kind is list:
        return [_untag(v, depth + 1) for v in value]
    if kind is not dict or len(value) != 1:
        raise CodecError(f"unexpected JSON value {shown(value, 60)}")
    ((tag, body),) = value.items()
    if tag == "f" and body in _FLOAT_SPECIAL:
        return _FLOAT_SPECIAL[body]
    if tag == "tu" and type(body) is list:
        return tuple(_untag(v, depth + 1) for v in body)
    if tag == "m" and type(body) is list:
        pairs = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise CodecError("malformed map entry")
            pairs[_untag(pair[0], depth + 1)] = _untag(pair[1], depth + 1)
        return pairs
    if type(body) is str:
        if tag == "b":
            return base64.b64decode(body.encode("ascii"), validate=True)
        if tag == "n":
            return Decimal(body)
        if tag == "d":
            return date.fromisoformat(body)
        if tag == "dt":
            return datetime.fromisoformat(body)
        if tag == "t":
            return time.fromisoformat(body)
    if tag == "td" and type(body) is list and len(body) == 3:
        days, seconds, micros = body
        if all(type(part) is int for part in body):
            return timedelta(days=days, seconds=seconds, microseconds=micros)
    raise CodecError(f"unknown or malformed tag {shown(tag, 20)}")


def decode_rows(data: bytes) -> tuple[tuple[Any, ...], ...]:
    """The rows `encode_rows` wrote.

    Anything else (another format, truncated or altered bytes, a pickle) raises
    `CodecError`; nothing in ``data`` is ever executed.
    """
    if not isinstance(data, bytes) or not data.startswith(FORMAT_PREFIX):
        raise CodecError("not a spark-lookup cache value (unknown format prefix)")
    try:
        structure = json.loads(data[len(FORMAT_PREFIX) :].decode("utf-8", "surrogatepass"),
                               parse_constant=_refuse_constant)
        if type(structure) is not list:
            raise CodecError("stored value is not a list of rows")
        if any(type(row) is not list for row in structure):
            raise CodecError("stored row is not a list")
        return tuple(tuple(_untag(v, 0) for v in row) for row in structure)
    except CodecError:
        raise
    # Malformed input surfaces as any of these (bad UTF-8, JSON, base64, ISO text,
    # decimal text, huge nesting); all mean the same: not a value we wrote.
    except (ValueError, TypeError, ArithmeticError, RecursionError, binascii.Error) as exc:
        raise CodecError(f"undecodable cache value: {exc}") from exc


def _refuse_constant(name: str) -> Any:
    raise CodecError(f"JSON constant {name} is not part of the encoding")
