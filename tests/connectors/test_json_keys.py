"""Key values as JSON carries them, read back as values of the key columns' types."""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from connectors.json_keys import decode_json_keys
from connectors.keys import KeyCodec


def decoded(payload: str, types: list[T.DataType]) -> list[tuple[object, ...]]:
    keys = [tuple(key) for key in json.loads(payload, parse_float=Decimal)]
    return decode_json_keys(keys, types, [f"c{i}" for i in range(len(types))])


def test_numbers_text_and_booleans_pass_as_they_are() -> None:
    types: list[T.DataType] = [T.LongType(), T.StringType(), T.BooleanType(), T.DecimalType(38, 2)]
    assert decoded('[[9223372036854775807, "a\\u00e9", true, 1.50]]', types) == [
        (2**63 - 1, "aé", True, Decimal("1.50"))]


def test_floats_dates_timestamps_and_bytes_are_read_from_their_json_text() -> None:
    types: list[T.DataType] = [T.DoubleType(), T.DateType(), T.TimestampType(),
                               T.TimestampNTZType(), T.BinaryType()]
    [(number, day, instant, wall, data)] = decoded(
        '[["-Infinity", "2024-02-29", "2024-01-01T15:30:00.25+05:30", '
        '"2024-01-01T10:00:00", "\\\\x00ff"]]', types)
    assert number == -math.inf
    assert day == date(2024, 2, 29)
    assert instant == datetime(2024, 1, 1, 10, 0, 0, 250000, tzinfo=timezone.utc)
    assert instant.utcoffset() == timedelta(hours=5, minutes=30)
    assert wall == datetime(2024, 1, 1, 10)
    assert data == b"\x00\xff"


def test_the_codec_reads_them_exactly() -> None:
    types: list[T.DataType] = [T.LongType(), T.DoubleType()]
    keys = decoded("[[9007199254740993, 0.1], [1.0, 2]]", types)
    encoded = KeyCodec(["a", "b"], types, "table 't'").encode(keys)
    assert encoded.arrays[0].to_pylist() == [9007199254740993, 1]
    assert encoded.arrays[1].to_pylist() == [0.1, 2.0]


def test_a_value_that_is_no_value_of_its_column_names_the_column() -> None:
    with pytest.raises(ValueError, match="key column 'c0'"):
        decoded('[["tomorrow"]]', [T.DateType()])
    with pytest.raises(ValueError, match="'c1'.*hex"):
        decoded('[[1, "0a"]]', [T.LongType(), T.BinaryType()])
    with pytest.raises(ValueError, match="no floating-point value"):
        decoded('[["big"]]', [T.FloatType()])


def test_nulls_stay_null() -> None:
    assert decoded("[[null]]", [T.DateType()]) == [(None,)]
