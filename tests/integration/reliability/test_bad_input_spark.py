"""Bad input through lookup_join on a local Spark: null and NaN keys, wrong key types,
empty DataFrames, 1 MB and unicode strings, tampered values in
a Redis cache and in a Redis source.

(Micro-batches without rows are in test_source_outage.) Each job returns exactly the
expected rows, or fails with one of our errors (its
message, carried by Spark's exception, names the key and the cause); nothing stored in
Redis ever runs in an executor.
"""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cache import DefaultLookupCache, RedisLookupCache
from lookup import (
    FullCachingLookupProvider,
    PartialCachingLookupProvider,
    RedisLookupFunction,
    SqlLookupFunction,
    lookup_join,
    lookup_metrics,
)
from scan import SqlTableSource
from spark_lookup.errors import ConfigError
from tests.connectors.conftest import PgFactory
from tests.integration.reliability import dimensions as dims
from tests.integration.reliability.helpers import json_bomb
from tests.integration.reliability.test_bad_input import tamper
from triggers import PeriodicCacheReloadTrigger

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

ENGINES = ["arrow", "pandas"]


def small_cache() -> DefaultLookupCache:
    return DefaultLookupCache.new_builder().maximum_size(1000).build()


@pytest.fixture
def tables(pg: PgFactory) -> PgFactory:
    dims.create_tables(pg)
    return pg


def nan_safe(rows: Any) -> list[tuple[Any, ...]]:
    """Rows with NaN as the string "NaN" (NaN equals nothing, not even in a test)."""
    return sorted(
        (tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)
         for row in rows), key=repr)


# --- null and NaN keys ------------------------------------------------------------------


FLOATS = [1.5, math.nan, None, -0.0, math.inf, -math.inf, 2.0, 0.0, math.nan]


@pytest.mark.parametrize(("kind", "engine"), [
    ("partial", "arrow"), ("full", "arrow"), ("partial", "pandas")])
def test_null_and_nan_keys_never_match(spark: Any, tables: PgFactory, kind: str,
                                       engine: str) -> None:
    if kind == "partial":
        fn = SqlLookupFunction(tables, "measures", "x", schema="x DOUBLE, label STRING")
        provider: Any = PartialCachingLookupProvider.of(fn, small_cache(), max_retries=0)
    else:
        source = SqlTableSource(tables, "measures", schema="x DOUBLE, label STRING", chunk_size=2)
        provider = FullCachingLookupProvider.of(
            source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["x"],
            initial_load_timeout=60)
    df = spark.createDataFrame(list(enumerate(FLOATS)), "n INT, x DOUBLE")
    expected = [(n, x, label) for n, x in enumerate(FLOATS)
                for label in ([lb for _, lb in dims.measure_rows(x)] or [None])]
    # Both engines keep the stream's own NaN and null apart (the pandas one sends the
    # column's nulls as a mask of their own); neither matches.
    left = lookup_join(df, provider, on="x", engine=engine).collect()
    assert nan_safe(left) == nan_safe(expected)
    negative_zero = [r.x for r in left if r.n == 3]
    assert math.copysign(1, negative_zero[0]) == -1  # the stream's own -0.0 is kept
    if kind == "partial" and engine == "arrow":
        inner = lookup_join(df, provider, on="x", how="inner", engine=engine)
        assert nan_safe(inner.collect()) == nan_safe(e for e in expected if e[2] is not None)


# --- wrong key types, caught on the driver ------------------------------------------------


@pytest.mark.parametrize(("stream_type", "dim_type"), [
    ("STRING", "id BIGINT"), ("DOUBLE", "id BIGINT"), ("DECIMAL(10,0)", "id BIGINT"),
    ("BOOLEAN", "id BIGINT"), ("BINARY", "id STRING"), ("DATE", "id TIMESTAMP"),
    ("TIMESTAMP", "id DATE"), ("BIGINT", "id STRING"),
])
def test_key_types_that_cannot_match_fail_on_the_driver(
    spark: Any, tables: PgFactory, stream_type: str, dim_type: str
) -> None:
    fn = SqlLookupFunction(tables, "customers", "id", schema=f"{dim_type}, name STRING")
    provider = PartialCachingLookupProvider.of(fn, small_cache())
    df = spark.range(3).selectExpr(f"CAST(NULL AS {stream_type}) AS k")
    with pytest.raises(ConfigError, match=(
        r"on: stream column 'k' is .* but dimension key 'id' is .*; cast one side "
        r"\(e.g. F.col\('k'\).cast\(")):
        lookup_join(df, provider, on={"k": "id"})


# --- empty input ------------------------------------------------------------------------


def test_empty_dataframes(spark: Any, tables: PgFactory) -> None:
    """No rows at all, and partitions emptied by a filter (micro-batches without rows are
    in test_source_outage): empty results with the joined schema, for both engines."""
    fn = SqlLookupFunction(tables, "customers", "id", schema="id BIGINT, name STRING")
    provider = PartialCachingLookupProvider.of(fn, small_cache())
    empty = spark.createDataFrame([], "id BIGINT, n STRING")
    filtered = spark.range(0, 100, numPartitions=2).selectExpr("id", "'x' AS n").where("id < 0")
    for df, how, engine in ((empty, "left", "arrow"), (filtered, "inner", "arrow"),
                            (filtered, "left", "pandas")):
        out = lookup_join(df, provider, on="id", how=how, engine=engine)
        assert out.columns == ["id", "n", "name"]
        assert out.collect() == []


# --- huge strings and unicode ---------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_huge_and_unicode_strings(spark: Any, tables: PgFactory, engine: str) -> None:
    fn = SqlLookupFunction(tables, "words", "w", schema="w STRING, meaning STRING")
    provider = PartialCachingLookupProvider.of(fn, small_cache(), max_retries=0)
    words = [w for w, _ in dims.WORDS] + [*dims.UNMATCHED_WORDS, None]
    df = spark.createDataFrame(list(enumerate(words)), "n INT, w STRING").repartition(2)
    out = lookup_join(df, provider, on="w", engine=engine)
    got = sorted((tuple(r) for r in out.collect()), key=lambda r: r[0])
    assert got == [(n, w, (dims.word_rows(w) or ((None, None),))[0][1])
                   for n, w in enumerate(words)]
    assert len(got[words.index("big value")][2]) == 1_000_000


# --- tampered values in Redis ----------------------------------------------------------------


@pytest.mark.redis
def test_tampered_cache_values_give_correct_rows_and_never_run(
    spark: Any, tables: PgFactory, redis_url: str, redis_prefix: str, redis_client: Any,
    tmp_path: Path,
) -> None:
    namespace = redis_prefix.rstrip(":")
    marker = tmp_path / "unpickled"
    tamper(redis_client, namespace, marker)
    fn = SqlLookupFunction(tables, "customers", "id", schema="id BIGINT, name STRING")
    provider = PartialCachingLookupProvider.of(
        fn, RedisLookupCache(redis_url, namespace, ttl=60), max_retries=0)
    df = spark.createDataFrame([(i, i) for i in range(1, 13)], "order_id INT, id BIGINT")
    # One task: one worker reads them.
    out = lookup_join(df.coalesce(1), provider, on="id", metrics=True)
    assert sorted(tuple(r) for r in out.collect()) == [
        (i, i, f"c{i}" if i <= 20 else None) for i in range(1, 13)]
    assert not marker.exists()  # no executor unpickled anything
    assert lookup_metrics(provider).num_cache_errors == 6


@pytest.mark.redis
def test_a_tampered_redis_source_fails_the_job_with_our_error(
    spark: Any, redis_url: str, redis_prefix: str, redis_client: Any,
) -> None:
    redis_client.set(f"{redis_prefix}u:1", b'{"name": "Ada"}')
    redis_client.set(f"{redis_prefix}u:2", json_bomb(200_000))
    fn = RedisLookupFunction(redis_url, redis_prefix + "u:{id}", "id BIGINT, name STRING",
                             ["id"], value_type="json", mode="FAILFAST")
    provider = PartialCachingLookupProvider.of(fn, small_cache(), max_retries=1,
                                               batch_size=1)
    df = spark.createDataFrame([(1,), (2,)], "id BIGINT").coalesce(1)
    with pytest.raises(Exception, match=(  # Spark wraps the worker's error; not retried
        rf"spark_lookup.errors.LookupLoadError: PartialCachingLookupProvider\(key_columns="
        rf"\['id'\]\): lookup of 1 key\(s\) \[\(2,\)\] failed after 1 attempt\(s\): "
        rf"BadValueError: table '{redis_prefix}u:{{id}}', key '{redis_prefix}u:2', column "
        rf"'\(document\)': cannot read .* not JSON \(JSON nested too deep\)")):
        lookup_join(df, provider, on="id").collect()
    # PERMISSIVE (the default): the document reads as nulls, and the job goes on.
    lenient = RedisLookupFunction(redis_url, redis_prefix + "u:{id}", "id BIGINT, name STRING",
                                  ["id"], value_type="json")
    rows = lookup_join(df, PartialCachingLookupProvider.of(lenient, small_cache()), on="id",
                       prefix="d_").orderBy("id").collect()
    assert [tuple(r) for r in rows] == [(1, "Ada"), (2, None)]
