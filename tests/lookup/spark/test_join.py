"""lookup_join on a real local Spark: batch and Structured Streaming, partial and full
caches, driver-side validation, metrics on the driver."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cache import DefaultLookupCache
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingLookupProvider,
    lookup_join,
    lookup_metrics,
)
from lookup.spark.metrics import worker_reports
from scan import CollectionSource
from spark_lookup.errors import ConfigError
from tests.lookup.functions import DictLookup
from triggers import PeriodicCacheReloadTrigger

pytestmark = [pytest.mark.spark, pytest.mark.connect_on_every_line]

CUSTOMERS = [(1, "Ada"), (2, "Grace"), (2, "Grace2"), (3, "Edsger")]


def partial(rows: list[tuple[Any, ...]] = CUSTOMERS, **kw: Any) -> PartialCachingLookupProvider:
    fn = DictLookup(rows, **kw)
    return PartialCachingLookupProvider.of(
        fn, DefaultLookupCache.new_builder().maximum_size(1000).build()
    )


def full(rows: list[tuple[Any, ...]] = CUSTOMERS,
         schema: str = "id BIGINT, name STRING", keys: tuple[str, ...] = ("id",)
         ) -> FullCachingLookupProvider:
    source = CollectionSource(rows, num_splits=2, schema=schema)
    return FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(hours=1)), list(keys)
    )


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def input_rows(progress: Any) -> int:
    """Rows a micro-batch read. (Summed over the sources: on Connect, PySpark 4.3 leaves
    the progress's own ``numInputRows`` None.)"""
    return sum(int(source["numInputRows"]) for source in progress["sources"])


@pytest.fixture
def orders(spark: Any) -> Any:
    return spark.createDataFrame(
        [(10, 1), (11, 2), (12, 4), (13, None), (14, 1)], "order_id INT, customer_id BIGINT"
    )


@pytest.mark.parametrize("make", [partial, full], ids=["partial", "full"])
def test_left_join_keeps_unmatched_and_multiplies_one_to_many(orders: Any, make: Any) -> None:
    provider = make()
    out = lookup_join(orders, provider, on={"customer_id": "id"})
    assert out.columns == ["order_id", "customer_id", "name"]
    assert rows_of(out) == sorted(
        [(10, 1, "Ada"), (11, 2, "Grace"), (11, 2, "Grace2"), (12, 4, None),
         (13, None, None), (14, 1, "Ada")], key=repr)


@pytest.mark.parametrize("make", [partial, full], ids=["partial", "full"])
def test_inner_join_drops_unmatched(orders: Any, make: Any) -> None:
    out = lookup_join(orders, make(), on={"customer_id": "id"}, how="inner")
    assert rows_of(out) == sorted(
        [(10, 1, "Ada"), (11, 2, "Grace"), (11, 2, "Grace2"), (14, 1, "Ada")], key=repr)
    assert out.schema["name"].nullable  # the dimension declared it nullable


def test_pandas_engine_gives_the_same_rows_with_exact_big_integers(spark: Any) -> None:
    big = 2**62 + 1
    provider = full([(1, big), (2, None)], schema="id BIGINT, amount BIGINT")
    df = spark.createDataFrame([(1,), (2,), (3,)], "id BIGINT")
    arrow = rows_of(lookup_join(df, provider, on="id"))
    pandas = rows_of(lookup_join(df, provider, on="id", engine="pandas"))
    assert arrow == pandas == sorted([(1, big), (2, None), (3, None)], key=repr)


def test_composite_keys_columns_and_prefix(spark: Any) -> None:
    provider = full(
        [("fr", 2024, "France", 68.0), ("fr", 2025, "France", 68.5), ("de", 2025, "Germany", 84.0)],
        schema="code STRING, year INT, name STRING, population DOUBLE", keys=("code", "year"))
    df = spark.createDataFrame([("fr", 2025, "x"), ("de", 2024, "y"), (None, 2025, "z")],
                               "country STRING, yr INT, name STRING")
    out = lookup_join(df, provider, on={"yr": "year", "country": "code"},
                      columns=["population", "name"], prefix="c_")
    assert out.columns == ["country", "yr", "name", "c_name", "c_population"]
    assert rows_of(out) == sorted(
        [("fr", 2025, "x", "France", 68.5), ("de", 2024, "y", None, None),
         (None, 2025, "z", None, None)], key=repr)


def test_driver_side_errors_before_any_task(orders: Any) -> None:
    provider = partial()
    with pytest.raises(ConfigError, match="'nope' is not a column of the stream"):
        lookup_join(orders, provider, on={"nope": "id"})
    with pytest.raises(ConfigError, match="keyed by"):
        lookup_join(orders, provider, on="customer_id")
    with pytest.raises(ConfigError, match="is int but dimension key 'id' is bigint|"
                                          "is string but"):
        lookup_join(orders.selectExpr("cast(customer_id as string) c"), provider, on={"c": "id"})
    with pytest.raises(ConfigError, match="how must be"):
        lookup_join(orders, provider, on={"customer_id": "id"}, how="right")
    with pytest.raises(ConfigError, match="not a column of the dimension"):
        lookup_join(orders, provider, on={"customer_id": "id"}, columns=["age"])
    with pytest.raises(ConfigError, match="is a key column"):
        lookup_join(orders, provider, on={"customer_id": "id"}, columns=["id"])
    clash = orders.withColumnRenamed("order_id", "name")
    with pytest.raises(ValueError, match=r"\['name'\] exist in the stream.*prefix"):
        lookup_join(clash, provider, on={"customer_id": "id"})
    assert lookup_join(clash, provider, on={"customer_id": "id"}, prefix="d_").columns[-1] == (
        "d_name")


def test_integer_widths_are_compatible(spark: Any) -> None:
    df = spark.createDataFrame([(1,), (3,)], "id SMALLINT")
    assert rows_of(lookup_join(df, full(), on="id")) == [(1, "Ada"), (3, "Edsger")]


@pytest.mark.needs("CONNECT_OBSERVED_METRICS")
def test_metrics_are_summed_on_the_driver(spark: Any) -> None:
    provider = partial([(i, f"n{i}") for i in range(100)])
    df = spark.range(0, 1000, numPartitions=2).selectExpr("id % 120 AS id")
    assert lookup_join(df, provider, on="id", metrics=True).count() == 1000
    metrics = lookup_metrics(provider)
    # Each worker looks up each distinct key once per batch; 120 distinct keys per batch.
    assert metrics.hit_count + metrics.miss_count >= 120
    assert metrics.miss_count >= 120  # every key is new the first time, in each worker
    assert metrics.load_count >= 1
    assert metrics.num_cached_records >= 120  # missing keys are cached as empty
    assert metrics.num_cached_bytes > 0
    before = {r.worker: r for r in worker_reports(provider)}
    lookup_join(df, provider, on="id", metrics=True).count()
    after = {r.worker: r for r in worker_reports(provider)}
    # Spark hands a task to any idle Python worker of its pool, and earlier tests may
    # have left more than two: a worker that ran both jobs found the keys cached; one
    # new to the second job missed each of its keys once.
    reused = [w for w in after if w in before and after[w].sequence > before[w].sequence]
    fresh = [w for w in after if w not in before]
    assert reused or fresh
    for worker in reused:
        assert after[worker].values["hit_count"] > before[worker].values["hit_count"]
        assert after[worker].values["load_count"] == before[worker].values["load_count"]
    for worker in fresh:
        assert after[worker].values["miss_count"] >= 1


def test_a_load_failure_fails_the_job_with_our_message(spark: Any) -> None:
    fn = DictLookup(CUSTOMERS)
    fn.fail_next = 100
    provider = LookupFunctionProvider.of(fn, max_retries=0)
    df = spark.createDataFrame([(1,)], "id BIGINT")
    with pytest.raises(Exception, match="LookupLoadError.*database is down"):
        lookup_join(df, provider, on="id").collect()


def test_streaming_file_source_available_now(spark: Any, tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    for batch in range(3):
        lines = [json.dumps({"order_id": batch * 10 + i, "customer_id": i % 5}) for i in range(5)]
        (inbox / f"part-{batch}.json").write_text("\n".join(lines))
    stream = (spark.readStream.schema("order_id INT, customer_id BIGINT")
              .option("maxFilesPerTrigger", 1).json(str(inbox)))
    provider = full()
    query = (lookup_join(stream, provider, on={"customer_id": "id"}, how="inner")
             .writeStream.format("memory").queryName("enriched_files")
             .option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    got = rows_of(spark.sql("SELECT * FROM enriched_files"))
    expected = sorted(
        [(b * 10 + i, i, name) for b in range(3) for i in range(5) for (k, name) in CUSTOMERS
         if k == i], key=repr)
    assert got == expected
    assert len(query.recentProgress) >= 3  # one file per micro-batch


@pytest.mark.needs("CONNECT_OBSERVED_METRICS")
def test_streaming_rate_source_processing_time(spark: Any, tmp_path: Path) -> None:
    stream = (spark.readStream.format("rate").option("rowsPerSecond", 50)
              .option("numPartitions", 2).load()
              .selectExpr("value", "value % 5 AS customer_id"))
    provider = partial()
    query = (lookup_join(stream, provider, on={"customer_id": "id"}, metrics=True)
             .writeStream.format("memory").queryName("enriched_rate")
             .option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # Several batches with rows: the first one can hold all 50 values (when
            # starting took a while), and only later batches hit the workers' caches.
            batches = sum(1 for p in query.recentProgress if input_rows(p) > 0)
            if (batches >= 3 and spark.sql(
                    "SELECT count(DISTINCT value) FROM enriched_rate").first()[0] >= 50):
                break
            time.sleep(0.5)
    finally:
        query.stop()
    rows = spark.sql("SELECT value, customer_id, name FROM enriched_rate").collect()
    names = {1: {"Ada"}, 2: {"Grace", "Grace2"}, 3: {"Edsger"}}
    by_value: dict[int, set[Any]] = {}
    for value, customer, name in rows:
        by_value.setdefault(value, set()).add(name)
        assert name in names.get(customer, {None})
    assert len(by_value) >= 50
    for value, found in by_value.items():
        assert found == names.get(value % 5, {None})  # nothing lost, nothing extra
    assert lookup_metrics(provider).hit_count > 0
