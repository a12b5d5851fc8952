"""Key values as JSON carries them (the payloads of change feeds), read back as values
of the key columns' Spark types, exactly.

JSON has numbers, text, booleans and null. A sender writes integers and decimals as
numbers (read with ``parse_float=Decimal``, so a BIGINT beyond 2**53 or a DECIMAL keeps
every digit), floating values as numbers or ``"NaN"``/``"Infinity"``/``"-Infinity"``,
dates and timestamps as ISO 8601 text (an instant with its offset), and binary values
as ``\\x``-prefixed hex text (PostgreSQL's ``to_json`` writes exactly these). What this
module returns goes on through [`connectors.keys.KeyCodec`][], which checks every
value against its column as it does a lookup's keys: ``true`` is no key of an INT
column, ``1.5`` none of a BIGINT one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

from spark_lookup.type_families import FLOAT_TYPES, TIMESTAMP_TYPES

__all__ = ["decode_json_keys"]

Key = tuple[Any, ...]

_FLOAT_WORDS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _floating(value: Any) -> Any:
    if isinstance(value, str):
        if value not in _FLOAT_WORDS:
            raise ValueError(f"{value!r} is no floating-point value")
        return _FLOAT_WORDS[value]
    return value  # a number (Decimal or int): KeyCodec rounds it to the column's float


def _decimal(value: Any) -> Any:
    return Decimal(value) if isinstance(value, str) else value  # "NaN": never matches


def _binary(value: Any) -> Any:
    if isinstance(value, str):
        if not value.startswith("\\x"):
            raise ValueError(f"{value[:40]!r} is not \\x-prefixed hex")
        return bytes.fromhex(value[2:])
    return value


def _date(value: Any) -> Any:
    return date.fromisoformat(value) if isinstance(value, str) else value


def _datetime(value: Any) -> Any:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


_READERS: tuple[tuple[type | tuple[type, ...], Callable[[Any], Any]], ...] = (
    (FLOAT_TYPES, _floating),
    (T.DecimalType, _decimal),
    (T.BinaryType, _binary),
    (T.DateType, _date),
    (TIMESTAMP_TYPES, _datetime),
)


def _reader(data_type: T.DataType) -> Callable[[Any], Any] | None:
    """How a JSON value of a column of ``data_type`` is read (None: as it is)."""
    return next((read for kinds, read in _READERS if isinstance(data_type, kinds)), None)


def decode_json_keys(keys: Sequence[Key], spark_types: Sequence[T.DataType],
                     names: Sequence[str]) -> list[Key]:
    """``keys`` (tuples of JSON values, one per key column) as tuples of values of the
    columns' ``spark_types``; columns whose JSON values are their values already
    (integers, decimals, text, booleans) are passed through untouched.

    Raises
    ------
    ValueError
        For a value that is no value of its column (naming the column, one of ``names``).
    """
    readers = [_reader(data_type) for data_type in spark_types]
    if not any(readers) or not keys:
        return list(keys)
    columns = list(zip(*keys, strict=True))
    for position, read in enumerate(readers):
        if read is None:
            continue
        try:
            columns[position] = tuple(None if value is None else read(value)
                                      for value in columns[position])
        except (ValueError, TypeError) as exc:
            raise ValueError(f"key column {names[position]!r}: {exc}") from exc
    return list(zip(*columns, strict=True))
