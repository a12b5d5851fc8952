"""Point-in-time lookups through every kind of runtime, without Spark: a SQLite table
of versions, joined by `join_batch` as a worker joins, and asked per key through a
`LookupHandle`; compared with a reference computed here in plain Python (issue 45)."""

from __future__ import annotations

import datetime as dt
import functools
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from cache import DefaultLookupCache
from connectors.sql.lookup_function import SqlLookupFunction
from connectors.sql.source import SqlTableSource
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    LookupProvider,
    PartialCachingLookupProvider,
    Validity,
    open_lookup,
)
from lookup.spark.assemble import join_batch
from lookup.spark.join_plan import plan_join
from spark_lookup.errors import BadValueError, ConfigError
from tests.fixtures.rates import (
    EVENTS,
    SCHEMA,
    UTC,
    VALIDITY,
    at,
    expected,
    provider,
    rates_table,
)
from triggers import PeriodicCacheReloadTrigger


@pytest.fixture
def connect(tmp_path: Path) -> Callable[[], sqlite3.Connection]:
    return rates_table(tmp_path / "rates.sqlite")


KINDS = ["none", "partial", "full", "full-shared"]
STREAM = T.StructType([T.StructField("order", T.LongType()), T.StructField("cur", T.StringType()),
                       T.StructField("region", T.IntegerType()),
                       T.StructField("order_time", T.TimestampType())])


def _batch() -> pa.RecordBatch:
    columns = list(zip(*EVENTS, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[0], pa.int64()), pa.array(columns[1], pa.string()),
         pa.array(columns[2], pa.int32()), pa.array(columns[3], pa.timestamp("us", tz="UTC"))],
        names=STREAM.fieldNames())


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    handles: list[Any] = []
    yield handles
    for handle in handles:
        handle.close()


@pytest.mark.parametrize("how", ["left", "inner"])
@pytest.mark.parametrize("kind", KINDS)
def test_join_batch_picks_the_version_at_each_rows_time(
        kind: str, how: str, connect: Callable[[], Any], tmp_path: Path,
        opened: list[Any]) -> None:
    chosen = provider(kind, connect, tmp_path)
    handle = open_lookup(chosen)
    opened.append(handle)
    plan = plan_join(STREAM, chosen, ["cur", "region"], how, ["rate"], as_of="order_time")
    for _ in range(2):  # the second from the partial cache
        out = join_batch(_batch(), plan.shape, handle.runtime)
        assert list(zip(out.column("order").to_pylist(), out.column("rate").to_pylist(),
                        strict=True)) == expected(how)


@pytest.mark.parametrize("kind", KINDS)
def test_without_as_of_the_version_valid_now(kind: str, connect: Callable[[], Any],
                                             tmp_path: Path, opened: list[Any]) -> None:
    chosen = provider(kind, connect, tmp_path)
    handle = open_lookup(chosen)
    opened.append(handle)
    plan = plan_join(STREAM, chosen, ["cur", "region"], "left", ["rate"])
    now = at(7).timestamp()
    out = join_batch(_batch().slice(0, 1), plan.shape, handle.runtime, clock=lambda: now)
    assert out.column("rate").to_pylist() == [1.20]
    handle.clock = lambda: now
    assert handle.lookup(("EUR", 2))[0][3] == 2.20
    assert handle.lookup_batch([("EUR", 1), ("USD", 1), ("GBP", 1)]) == {
        ("EUR", 1): handle.lookup(("EUR", 1), at(7)),
        ("USD", 1): handle.lookup(("USD", 1), at(7)), ("GBP", 1): ()}


@pytest.mark.parametrize("kind", KINDS)
def test_per_key_lookups_at_times(kind: str, connect: Callable[[], Any], tmp_path: Path,
                                  opened: list[Any]) -> None:
    handle = open_lookup(provider(kind, connect, tmp_path))
    opened.append(handle)
    keys = [(cur, region) for _, cur, region, _ in EVENTS]
    times = [when for *_, when in EVENTS]
    found = handle.lookup_batch(keys, as_of=times)
    rates = [rows[0][3] if rows else None for rows in found]
    assert rates == [rate for _, rate in expected("left")]
    assert handle.lookup(("EUR", 1), as_of=at(5)) == handle.lookup_batch(
        [("EUR", 1)], as_of=[at(5)])[0]
    with pytest.raises(ConfigError, match="aware datetime"):
        handle.lookup(("EUR", 1), as_of=dt.datetime(2024, 1, 5))


def test_as_of_needs_validity_and_a_comparable_column(
        connect: Callable[[], Any], tmp_path: Path) -> None:
    plain = provider("none", connect, tmp_path).__class__.of(
        SqlLookupFunction(connect, "rates", ["cur", "region"], schema=SCHEMA))
    with pytest.raises(ConfigError, match="has no validity"):
        plan_join(STREAM, plain, ["cur", "region"], as_of="order_time")
    versioned = provider("none", connect, tmp_path)
    with pytest.raises(ConfigError, match="'when' is not a column"):
        plan_join(STREAM, versioned, ["cur", "region"], as_of="when")
    wall = T.StructType([*STREAM.fields[:3], T.StructField("order_time", T.TimestampNTZType())])
    with pytest.raises(ConfigError, match="only through a time zone"):
        plan_join(wall, versioned, ["cur", "region"], as_of="order_time")


OVERLAPPING = [("EUR", 1, 1.0, at(1), at(10)), ("EUR", 1, 2.0, at(3), at(5))]


@pytest.mark.parametrize("kind", KINDS)
def test_bad_history_follows_the_sources_policy(kind: str, tmp_path: Path,
                                                opened: list[Any]) -> None:
    connect = rates_table(tmp_path / "bad.sqlite", OVERLAPPING)
    times = [at(2), at(4), at(6)]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2, 3], pa.int64()), pa.array(["EUR"] * 3), pa.array([1] * 3, pa.int32()),
         pa.array(times, pa.timestamp("us", tz="UTC"))], names=STREAM.fieldNames())
    answers = {"PERMISSIVE": [1.0, 2.0, 1.0], "DROPMALFORMED": [None, None, None]}
    for mode, rates in answers.items():
        chosen = provider(kind, connect, tmp_path / mode, mode)
        handle = open_lookup(chosen)
        opened.append(handle)
        plan = plan_join(STREAM, chosen, ["cur", "region"], "left", ["rate"], as_of="order_time")
        assert join_batch(batch, plan.shape, handle.runtime).column("rate").to_pylist() == rates
        assert handle.metrics.num_bad_values == 2
    chosen = provider(kind, connect, tmp_path / "FAILFAST", "FAILFAST")
    plan = plan_join(STREAM, chosen, ["cur", "region"], "left", ["rate"], as_of="order_time")
    handle = open_lookup(chosen)
    opened.append(handle)
    with pytest.raises(BadValueError, match=r"table 'rates', key \('EUR', 1\): versions overl"):
        join_batch(batch, plan.shape, handle.runtime)


DAYS = ("id BIGINT, cur STRING, region INT, rate DOUBLE, valid_from DATE, valid_to DATE")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("as_of_type", [T.DateType(), T.TimestampNTZType()])
def test_date_versions(kind: str, as_of_type: T.DataType, tmp_path: Path,
                       opened: list[Any]) -> None:
    path = tmp_path / "days.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE rates (id INTEGER PRIMARY KEY, cur TEXT, region INTEGER, "
                   "rate REAL, valid_from DATE, valid_to DATE)")
        db.executemany(
            "INSERT INTO rates (cur, region, rate, valid_from, valid_to) VALUES (?,?,?,?,?)",
            [("EUR", 1, 1.0, "2024-01-01", "2024-01-05"), ("EUR", 1, 2.0, "2024-01-05", None)])
    connect = functools.partial(sqlite3.connect, path)
    keys = ["cur", "region"]
    if kind.startswith("full"):
        chosen: LookupProvider = FullCachingLookupProvider.of(
            SqlTableSource(connect, "rates", schema=DAYS),
            PeriodicCacheReloadTrigger(dt.timedelta(hours=1)), keys, validity=VALIDITY,
            share_across_workers=kind == "full-shared",
            snapshot_dir=str(tmp_path / "store") if kind == "full-shared" else None)
    else:
        function = SqlLookupFunction(connect, "rates", keys, schema=DAYS)
        chosen = (LookupFunctionProvider.of(function, validity=VALIDITY) if kind == "none"
                  else PartialCachingLookupProvider.of(
                      function, DefaultLookupCache.new_builder().maximum_size(9).build(),
                      validity=VALIDITY))
    handle = open_lookup(chosen)
    opened.append(handle)
    stream = T.StructType([*STREAM.fields[:3], T.StructField("order_time", as_of_type)])
    if isinstance(as_of_type, T.DateType):
        times: list[Any] = [dt.date(2023, 12, 31), dt.date(2024, 1, 4), dt.date(2024, 1, 5)]
        arrow: pa.DataType = pa.date32()
    else:
        times = [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 4, 23, 59),
                 dt.datetime(2024, 1, 5)]
        arrow = pa.timestamp("us")
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2, 3], pa.int64()), pa.array(["EUR"] * 3), pa.array([1] * 3, pa.int32()),
         pa.array(times, arrow)], names=stream.fieldNames())
    plan = plan_join(stream, chosen, keys, "left", ["rate"], as_of="order_time")
    rates = join_batch(batch, plan.shape, handle.runtime).column("rate").to_pylist()
    first = None if isinstance(as_of_type, T.DateType) else 1.0
    assert rates == [first, 1.0, 2.0]
    found = handle.lookup_batch([("EUR", 1)] * 3, as_of=times)
    assert [rows[0][3] if rows else None for rows in found] == rates


@pytest.mark.parametrize("kind", ["full", "full-shared"])
def test_a_snapshot_orders_each_keys_versions_by_valid_from(
        kind: str, connect: Callable[[], Any], tmp_path: Path, opened: list[Any]) -> None:
    handle = open_lookup(provider(kind, connect, tmp_path))
    opened.append(handle)
    table = handle.runtime.cache.snapshot().table
    rows = list(zip(table.column("cur").to_pylist(), table.column("region").to_pylist(),
                    table.column("valid_from").to_pylist(), strict=True))
    assert rows == sorted(rows)  # inserted newest first


@pytest.mark.parametrize("kind", KINDS)
def test_per_key_times_older_than_the_retention_get_none_and_are_counted(
        kind: str, tmp_path: Path, opened: list[Any]) -> None:
    now = dt.datetime.now(UTC).replace(microsecond=0)

    def ago(days: int) -> dt.datetime:
        return now - dt.timedelta(days=days)

    # The first version ended before now minus 30 days (a load may drop it), the second
    # within the retention, the third is still valid.
    versions = [(1.0, ago(400), ago(100)), (2.0, ago(100), ago(10)), (3.0, ago(10), None)]
    connect = rates_table(tmp_path / "retained.sqlite",
                          [("EUR", 1, rate, start, end) for rate, start, end in versions])
    handle = open_lookup(provider(
        kind, connect, tmp_path,
        validity=Validity("valid_from", "valid_to", retention=dt.timedelta(days=30))))
    opened.append(handle)
    key = ("EUR", 1)
    times = [ago(200), ago(50), ago(20), ago(1), None]
    found = handle.lookup_batch([key] * len(times), as_of=times)
    # 2 would be 1.0 without a retention (and 1 too where no load dropped it): none.
    assert [rows[0][3] if rows else None for rows in found] == [None, None, 2.0, 3.0, None]
    assert handle.metrics.num_out_of_retention == 2  # a NULL time is not counted
    assert handle.lookup(key, as_of=ago(50)) == ()
    assert handle.lookup(key, as_of=ago(20))[0][3] == 2.0
    assert handle.metrics.num_out_of_retention == 3
    assert handle.lookup(key)[0][3] == 3.0  # now is never out of retention
    # The cutoff moves with the handle's clock.
    handle.clock = lambda: ago(60).timestamp()
    assert handle.lookup(key, as_of=ago(80))[0][3] == 2.0
    assert handle.metrics.num_out_of_retention == 3


@pytest.mark.parametrize("path", ["join", "per-key"])
def test_a_partial_caches_size_bound_counts_versions(path: str, tmp_path: Path,
                                                     opened: list[Any]) -> None:
    # Ten keys of ten versions each, through a cache of maximum_size 25: at most 25
    # versions held (two keys), however the keys are loaded; every answer still right.
    connect = rates_table(
        tmp_path / "many.sqlite",
        [(f"C{k}", 1, k + v / 100, at(v + 1), at(v + 2) if v < 9 else None)
         for k in range(10) for v in range(10)])
    cache = DefaultLookupCache.new_builder().maximum_size(25).build()
    function = SqlLookupFunction(connect, "rates",
                                 ["cur", "region"], schema=SCHEMA)
    chosen = PartialCachingLookupProvider.of(function, cache, validity=VALIDITY)
    handle = open_lookup(chosen)
    opened.append(handle)
    keys = [(f"C{k}", 1) for k in range(10)]
    times = [at(k % 10 + 1, 12) for k in range(10)]
    want = [k + (k % 10) / 100 for k in range(10)]
    if path == "join":
        batch = pa.RecordBatch.from_arrays(
            [pa.array(range(10), pa.int64()), pa.array([c for c, _ in keys]),
             pa.array([1] * 10, pa.int32()), pa.array(times, pa.timestamp("us", tz="UTC"))],
            names=STREAM.fieldNames())
        plan = plan_join(STREAM, chosen, ["cur", "region"], "left", ["rate"],
                         as_of="order_time")
        got = join_batch(batch, plan.shape, handle.runtime).column("rate").to_pylist()
    else:
        got = [rows[0][3] if rows else None for rows in handle.lookup_batch(keys, as_of=times)]
    assert got == want
    held = [cache.get_if_present(key) for key in keys]
    assert sum(len(rows) for rows in held if rows is not None) <= 25
    assert cache.size() == 2
    assert all(len(rows) == 10 for rows in held if rows is not None)
