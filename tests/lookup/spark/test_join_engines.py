"""Both engines of lookup_join give the same, exact rows: integers beyond 2**53 next to
nulls, the stream's own columns unchanged (NaN and TIMESTAMP included), string keys
compared as strings.

The integer streams hold only numeric columns on purpose: that is when PySpark's (4.3)
Arrow to pandas conversion turns an integer column holding a null into float64 (a string
column sends the whole batch down a path that keeps Python ints)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import Row

from cache import DefaultLookupCache
from lookup import FullCachingLookupProvider, PartialCachingLookupProvider, lookup_join
from scan import CollectionSource
from tests.lookup.functions import DictLookup
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.spark

ENGINES = ["arrow", "pandas"]
BIG = 2**53  # the first integer whose neighbours float64 cannot hold


def partial(rows: list[tuple[Any, ...]], schema: str, key: str) -> Any:
    fn = DictLookup(rows, schema=schema, key_columns=[key])
    return PartialCachingLookupProvider.of(
        fn, DefaultLookupCache.new_builder().maximum_size(100).build())


def full(rows: list[tuple[Any, ...]], schema: str, key: str) -> Any:
    source = CollectionSource(rows, num_splits=1, schema=schema)
    return FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(hours=1)), [key])


CACHES = pytest.mark.parametrize("make", [partial, full], ids=["partial", "full"])
BOTH = pytest.mark.parametrize("engine", ENGINES)


def collected(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


@pytest.mark.every_line
@CACHES
@BOTH
def test_a_bigint_key_beyond_2_53_next_to_a_null_matches_its_own_row(
        spark: Any, make: Any, engine: str) -> None:
    provider = make([(BIG, "even"), (BIG + 1, "odd"), (BIG + 2, "next")],
                    "k BIGINT, name STRING", "k")
    stream = spark.createDataFrame([(1, None), (2, BIG + 1), (3, BIG), (4, -BIG - 1)],
                                   "n INT, k BIGINT")
    out = lookup_join(stream, provider, on="k", engine=engine)
    assert collected(out) == [(1, None, None), (2, BIG + 1, "odd"), (3, BIG, "even"),
                              (4, -BIG - 1, None)]
    inner = collected(lookup_join(stream, provider, on="k", how="inner", engine=engine))
    assert inner == [(2, BIG + 1, "odd"), (3, BIG, "even")]


@pytest.mark.every_line
@CACHES
@BOTH
def test_the_stream_columns_come_out_exactly_as_they_went_in(
        spark: Any, make: Any, engine: str) -> None:
    provider = make([(1, "a"), (2, "b")], "k BIGINT, name STRING", "k")
    schema = "k BIGINT, v BIGINT, i INT, s SMALLINT, t TINYINT, d DOUBLE, f FLOAT"
    rows = [
        (1, BIG + 1, 2**31 - 1, -(2**15), 127, math.inf, 1.5),
        (2, None, None, None, None, None, None),
        (3, -(2**63), -(2**31), 2**15 - 1, -128, -0.0, -2.5),
        (None, 2**63 - 1, 7, 0, 1, 0.1, None),
    ]
    stream = spark.createDataFrame(rows, schema)
    out = lookup_join(stream, provider, on="k", engine=engine)
    assert out.schema.fields[:7] == stream.schema.fields
    got = collected(out)
    names = {1: "a", 2: "b"}
    assert got == sorted([(*row, names.get(row[0])) for row in rows], key=repr)
    # No float in an integer column, however the values compare.
    assert all(type(v) is int for row in got for v in row[1:5] if v is not None)


@CACHES
@BOTH
def test_nested_and_object_columns_come_out_as_they_went_in(
        spark: Any, make: Any, engine: str) -> None:
    provider = make([(1, "a")], "k BIGINT, name STRING", "k")
    schema = ("n INT, k BIGINT, m MAP<STRING, BIGINT>, a ARRAY<BIGINT>, "
              "s STRUCT<x: BIGINT, y: STRING>, d DECIMAL(38, 10), b BINARY, o BOOLEAN")
    rows = [
        (1, 1, {"a": BIG + 1}, [BIG + 1, None], (BIG + 1, "x"), Decimal("-1E-10"), b"\0",
         True),
        (2, 1, {}, [], (None, None), None, b"", None),
        (3, 2, {"b": None}, None, None, Decimal("1234567890123456789012345678.0123456789"),
         None, False),
    ]
    stream = spark.createDataFrame(rows, schema)
    out = lookup_join(stream, provider, on="k", engine=engine)
    assert out.schema.fields[:8] == stream.schema.fields
    got = [(*(tuple(v) if isinstance(v, Row) else v for v in r),)
           for r in out.orderBy("n").collect()]
    assert got == [(*row, "a" if row[1] == 1 else None) for row in rows]


@CACHES
@BOTH
def test_a_nan_in_a_stream_double_column_stays_a_nan(spark: Any, make: Any,
                                                     engine: str) -> None:
    provider = make([(1, "a")], "k BIGINT, name STRING", "k")
    stream = spark.createDataFrame([(1, float("nan")), (2, None)], "k BIGINT, d DOUBLE")
    got = collected(lookup_join(stream, provider, on="k", engine=engine))
    assert [(k, name) for k, _, name in got] == [(1, "a"), (2, None)]
    assert math.isnan(got[0][1])
    assert got[1][1] is None


@CACHES
@BOTH
def test_a_string_key_is_compared_as_a_string(spark: Any, make: Any, engine: str) -> None:
    provider = make([("1", "one"), ("true", "yes"), ("1.0", "one point oh")],
                    "k STRING, name STRING", "k")
    stream = spark.createDataFrame([(1, "true"), (2, None), (3, "1"), (4, "True")],
                                   "n INT, k STRING")
    out = lookup_join(stream, provider, on="k", engine=engine)
    assert collected(out) == [(1, "true", "yes"), (2, None, None), (3, "1", "one"),
                              (4, "True", None)]


UTC = timezone.utc


def micros(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def join_in_new_york(spark: Any, provider: Any, stream_rows: list[tuple[Any, ...]],
                     engine: str) -> list[tuple[Any, ...]]:
    """(n, microseconds of t, name) of a join on a TIMESTAMP key in a session whose zone
    is not UTC (collected as microseconds: Python datetimes would be wall-clock times)."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        stream = spark.createDataFrame(stream_rows, "n INT, t TIMESTAMP")
        out = lookup_join(stream, provider, on="t", engine=engine)
        assert out.schema.fields[:2] == stream.schema.fields
        return collected(out.selectExpr("n", "unix_micros(t)", "name"))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


@CACHES
@BOTH
def test_timestamp_keys_match_in_any_session_zone(spark: Any, make: Any, engine: str) -> None:
    """Including years pandas' nanoseconds cannot hold."""
    summer = datetime(2024, 7, 1, 12, 0, 0, 1, tzinfo=UTC)
    early = datetime(1, 1, 2, tzinfo=UTC)
    late = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
    provider = make([(summer, "summer"), (early, "early"), (late, "late")],
                    "t TIMESTAMP, name STRING", "t")
    got = join_in_new_york(spark, provider, [(1, summer), (2, None), (3, early), (4, late)],
                           engine)
    assert got == [(1, micros(summer), "summer"), (2, None, None),
                   (3, micros(early), "early"), (4, micros(late), "late")]


@CACHES
@BOTH
def test_timestamp_keys_in_the_hour_clocks_repeat(spark: Any, make: Any, engine: str) -> None:
    """01:30 happens twice in New York on 2024-11-03: each instant keeps its own row."""
    first = datetime(2024, 11, 3, 5, 30, tzinfo=UTC)  # 01:30 EDT
    second = datetime(2024, 11, 3, 6, 30, tzinfo=UTC)  # 01:30 EST
    provider = make([(first, "EDT"), (second, "EST")], "t TIMESTAMP, name STRING", "t")
    got = join_in_new_york(spark, provider, [(1, first), (2, second)], engine)
    assert got == [(1, micros(first), "EDT"), (2, micros(second), "EST")]
