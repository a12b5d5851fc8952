"""lookup_metrics on classic and Spark Connect sessions: exact counts of a known job
(the same figures on both kinds), full-cache gauges, streaming progress and a restart
from a checkpoint, failures, and misuse."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cache import DefaultLookupCache
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingLookupProvider,
    RetryPolicy,
    lookup_join,
    lookup_metrics,
)
from lookup.spark.metrics import METRICS_ENABLED, REPORT_COLUMN, worker_reports
from scan import CollectionSource
from spark_lookup.errors import ConfigError, MetricsUnavailableError
from tests.integration.processes import make_db
from tests.integration.processes import provider as counting_provider
from tests.lookup.functions import DictLookup
from triggers import PeriodicCacheReloadTrigger

pytestmark = [pytest.mark.spark, pytest.mark.connect_on_every_line,
              pytest.mark.needs("CONNECT_OBSERVED_METRICS")]

HOUR = timedelta(hours=1)
TABLE = [(i, f"n{i}") for i in range(20)]


def full(rows: list[tuple[Any, ...]] = TABLE, schema: str = "id BIGINT, name STRING",
         **options: Any) -> FullCachingLookupProvider:
    return FullCachingLookupProvider.of(CollectionSource(rows, num_splits=2, schema=schema),
                                        PeriodicCacheReloadTrigger(HOUR), ["id"], **options)


def partial(rows: list[tuple[Any, ...]] = TABLE) -> PartialCachingLookupProvider:
    return PartialCachingLookupProvider.of(
        DictLookup(rows), DefaultLookupCache.new_builder().maximum_size(1000).build())


@pytest.fixture(autouse=True)
def metrics_on(spark: Any) -> Iterator[None]:
    """These tests read metrics: on for every join built in them, through the session
    setting (so the setting is exercised on both kinds of session)."""
    spark.conf.set(METRICS_ENABLED, "true")
    try:
        yield
    finally:
        spark.conf.unset(METRICS_ENABLED)


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll ``condition`` (streaming progress reaches the driver asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except MetricsUnavailableError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.2)


# --- batch: exact figures, the same on both kinds -------------------------------------


@pytest.mark.parametrize("engine", ["arrow", "pandas"])
def test_a_known_batch_job_reports_exact_counts(spark: Any, engine: str) -> None:
    # One partition, one Arrow batch: 30 distinct keys, of which 20 are in the table.
    df = spark.range(0, 90, numPartitions=1).selectExpr("id % 30 AS id")
    expected = {"hit_count": 20, "miss_count": 10, "load_count": 1, "num_load_failures": 0,
                "num_retries": 0, "num_cache_errors": 0, "num_bad_values": 0,
                "num_cached_records": 20}

    provider = full()
    assert lookup_join(df, provider, on="id", engine=engine).count() == 90
    got = lookup_metrics(provider).as_dict()
    # A full cache's index is probed once per stream row: 60 rows hit, 30 miss.
    assert {k: got[k] for k in expected} == {**expected, "hit_count": 60, "miss_count": 30}
    assert got["num_cached_bytes"] > 0
    assert got["latest_load_time"] >= 0

    provider = partial()
    assert lookup_join(df, provider, on="id", engine=engine, how="inner").count() == 60
    got = lookup_metrics(provider).as_dict()
    # A partial cache: 30 misses loaded in one batched load; the 10 absent keys are
    # cached as empty (cache-missing-key defaults to on), so 30 records.
    assert {k: got[k] for k in expected} == {**expected, "hit_count": 0, "miss_count": 30,
                                             "num_cached_records": 30}


def test_counts_add_up_over_actions_and_workers(spark: Any) -> None:
    # Each worker caching alone: what one worker loaded is no host hit for the next.
    provider = dataclasses.replace(partial(), share_across_workers=False)
    df = spark.range(0, 1000, numPartitions=4).selectExpr("id % 25 AS id")
    # 4 tasks of 25 distinct keys each: each worker misses a key once, then hits it.
    lookup_join(df, provider, on="id").collect()
    first = lookup_metrics(provider)
    workers = len(worker_reports(provider))
    assert (first.hit_count + first.miss_count, first.miss_count) == (100, 25 * workers)
    lookup_join(df, provider, on="id").count()  # a second job, maybe in other workers too
    second = lookup_metrics(provider)
    reports = worker_reports(provider)
    assert (second.hit_count + second.miss_count, second.miss_count) == (200, 25 * len(reports))
    assert second.load_count == len(reports)  # one batched load of 25 keys per worker
    assert sum(r.values["hit_count"] + r.values["miss_count"] for r in reports) == 200
    assert second.num_cached_records == 25 * len(reports)  # one partial cache per worker


def test_full_cache_gauges_are_the_snapshot_not_a_sum_over_workers(
    spark: Any, tmp_path: Path
) -> None:
    db = make_db(tmp_path / "dim.db", rows=20)
    # The scan holds its load 0.5 s open: both tasks start together, in two workers.
    provider = counting_provider(db, tmp_path / "scans", delay=0.5,
                                 trigger=PeriodicCacheReloadTrigger(HOUR),
                                 share_across_workers=None, snapshot_dir=tmp_path / "snapshots")
    stream = spark.range(0, 400, numPartitions=2).selectExpr("id % 30 AS id")
    assert lookup_join(stream, provider, on="id", columns=["tier"]).count() == 400
    assert len(worker_reports(provider)) == 2
    metrics = lookup_metrics(provider)
    assert metrics.num_cached_records == 20  # not 40: one table, served by both
    assert metrics.num_cached_bytes == max(r.values["num_cached_bytes"]
                                           for r in worker_reports(provider))
    assert metrics.hit_count == 270  # rows whose key (id % 30) is one of the 20 held
    assert metrics.load_count == 1  # one worker scanned, the other mapped its snapshot


def test_an_inner_join_without_matches_still_reports(spark: Any) -> None:
    schema = ("id BIGINT NOT NULL, name STRING NOT NULL, day DATE NOT NULL, "
              "amount DECIMAL(12,2) NOT NULL, tags ARRAY<STRING> NOT NULL, "
              "attrs MAP<STRING, INT> NOT NULL, flag BOOLEAN NOT NULL")
    provider = full([(1, "a", dt.date(2024, 1, 1), Decimal("1.50"), ["x"], {"k": 1}, True)],
                    schema=schema)
    df = spark.createDataFrame([(5, "p"), (6, "q")], "id BIGINT NOT NULL, label STRING NOT NULL")
    out = lookup_join(df, provider, on="id", how="inner")
    # The task's output is its report row alone, which must hold valid values of these
    # non-nullable columns until the plan drops it.
    assert out.collect() == []
    assert REPORT_COLUMN not in out.columns
    assert [f.nullable for f in out.schema.fields] == [False] * 8
    metrics = lookup_metrics(provider)
    assert (metrics.hit_count, metrics.miss_count) == (0, 2)


def test_a_left_join_needs_no_filter_for_its_reports(spark: Any, capsys: Any) -> None:
    provider = full()
    df = spark.range(0, 95, numPartitions=2).selectExpr("id % 30 AS id")
    left = lookup_join(df, provider, on="id")
    left.explain()
    plan = capsys.readouterr().out
    assert "CollectMetrics" in plan
    assert "Filter" not in plan  # the report rides on each task's last joined row
    rows = left.collect()
    assert sorted((r.id, r.name) for r in rows) == sorted(
        (i % 30, f"n{i % 30}" if i % 30 < 20 else None) for i in range(95))
    assert lookup_metrics(provider).hit_count > 0
    lookup_join(df, provider, on="id", how="inner").explain()
    assert "Filter" in capsys.readouterr().out  # an inner join drops its report rows


def test_metrics_false_leaves_a_bare_map(spark: Any) -> None:
    provider = full()
    df = spark.range(0, 10, numPartitions=1)
    plain = lookup_join(df, provider, on="id", metrics=False)
    observed = lookup_join(df, provider, on="id")
    # The observed run first: a worker's report carries its cache's counts so far, and
    # a Python worker that served the plain run before (PySpark 4.0's Connect server
    # reuses it) would report those hits too.
    seen = sorted(observed.collect())
    assert sorted(plain.collect()) == seen
    assert plain.schema == observed.schema
    assert lookup_metrics(provider).hit_count == 10  # the observed run's task only


def test_metrics_are_off_unless_asked(spark: Any) -> None:
    """Off by default: a bare map, and lookup_metrics says how to turn them on."""
    spark.conf.unset(METRICS_ENABLED)
    provider = full()
    df = spark.range(0, 10, numPartitions=1)
    plain = lookup_join(df, provider, on="id")
    assert "CollectMetrics" not in plan_text(plain)
    assert len(plain.collect()) == 10
    with pytest.raises(MetricsUnavailableError,
                       match=r"are off.*metrics=True.*spark.lookup.metrics.enabled.*cost"):
        lookup_metrics(provider)
    asked = lookup_join(df, provider, on="id", metrics=True)  # one join, the setting off
    assert "CollectMetrics" in plan_text(asked)
    assert len(asked.collect()) == 10
    assert lookup_metrics(provider).hit_count >= 10


def test_the_session_setting_is_read_when_the_join_is_built(spark: Any) -> None:
    provider = full()
    df = spark.range(0, 10, numPartitions=1)
    spark.conf.set(METRICS_ENABLED, "false")
    off = lookup_join(df, provider, on="id")
    spark.conf.set(METRICS_ENABLED, "TRUE")
    on = lookup_join(df, provider, on="id")
    forced_off = lookup_join(df, provider, on="id", metrics=False)
    assert "CollectMetrics" not in plan_text(off)
    assert "CollectMetrics" in plan_text(on)
    assert "CollectMetrics" not in plan_text(forced_off)
    spark.conf.set(METRICS_ENABLED, "yes")
    with pytest.raises(ConfigError, match=r"spark.lookup.metrics.enabled must be true or false"):
        lookup_join(df, provider, on="id")


def test_metrics_survive_a_limited_action_first(spark: Any) -> None:
    """``show`` reads a few rows of a task and stops: the report rides on the first row
    of each batch, so even that action reports (a classic Observation keeps the first
    action's metrics only)."""
    provider = partial()
    df = spark.range(0, 1000, numPartitions=2).selectExpr("id % 30 AS id")
    enriched = lookup_join(df, provider, on="id")
    enriched.show(5)
    assert len(enriched.collect()) == 1000
    assert lookup_metrics(provider).hit_count + lookup_metrics(provider).miss_count > 0


def plan_text(df: Any) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(True)
    return out.getvalue()


# --- what cannot be reported, and misuse ----------------------------------------------


def test_lookup_metrics_refuses_what_it_cannot_answer(spark: Any) -> None:
    with pytest.raises(ConfigError, match="takes the lookup provider.*got function"):
        lookup_metrics(lookup_join)  # type: ignore[arg-type]
    never_used = full()
    with pytest.raises(MetricsUnavailableError,
                       match=r"metrics of FullCachingLookupProvider.*are off"):
        lookup_metrics(never_used)
    never_run = full()
    lookup_join(spark.range(3), never_run, on="id")  # built, never run
    with pytest.raises(MetricsUnavailableError, match="no metrics of .* have reached"):
        lookup_metrics(never_run)


def test_a_failed_batch_action_reports_nothing_but_its_error_carries_the_report(
    spark: Any
) -> None:
    function = DictLookup(TABLE)
    function.fail_next = 100
    provider = LookupFunctionProvider.of(function, max_retries=0)
    df = spark.range(1, 2, numPartitions=1)  # one task, and it fails
    with pytest.raises(Exception, match="LookupLoadError") as failure:
        lookup_join(df, provider, on="id").collect()
    # Spark drops a failed task's rows and observed metrics; the failure shows in the
    # worker's report that the error carries.
    report = next(line for line in str(failure.value).splitlines()
                  if line.startswith("spark-lookup metrics report: "))
    assert json.loads(report.split(": ", 1)[1])["m"]["num_load_failures"] == 1
    with pytest.raises(MetricsUnavailableError, match="failed batch action reports nothing"):
        lookup_metrics(provider)


# --- streaming ---------------------------------------------------------------------------


def write_orders(inbox: Path, part: int, keys: list[int]) -> None:
    staged = inbox.parent / f"part-{part}.json"
    staged.write_text("\n".join(json.dumps({"order_id": part * 100 + i, "id": k})
                                for i, k in enumerate(keys)))
    staged.rename(inbox / staged.name)


def test_streaming_metrics_arrive_with_progress_and_survive_a_restart(
    spark: Any, tmp_path: Path
) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "chk")
    provider = full()

    def run() -> Any:
        stream = (spark.readStream.schema("order_id BIGINT, id BIGINT")
                  .option("maxFilesPerTrigger", 1).json(str(inbox)))
        query = (lookup_join(stream, provider, on="id").writeStream.format("parquet")
                 .option("path", out).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        return query

    def sink() -> list[tuple[Any, ...]]:
        return sorted((tuple(r) for r in spark.read.parquet(out).collect()), key=repr)

    write_orders(inbox, 0, [1, 2, 99])
    write_orders(inbox, 1, [3, 98])
    first = run()
    assert sink() == sorted([(0, 1, "n1"), (1, 2, "n2"), (2, 99, None), (100, 3, "n3"),
                             (101, 98, None)], key=repr)
    assert any(name.startswith("spark_lookup_metrics_")
               for p in first.recentProgress for name in p["observedMetrics"])
    # Every micro-batch's keys: 3 + 2, of which 2 + 1 are in the table.
    before = wait_for(lambda: lookup_metrics(provider).hit_count == 3 and lookup_metrics(
        provider), "the first run's progress")
    assert before.miss_count == 2

    # Restarted from its checkpoint, the query reads only the new file.
    write_orders(inbox, 2, [4, 5, 97])
    run()
    assert len(sink()) == 8
    assert {(200, 4, "n4"), (201, 5, "n5"), (202, 97, None)} <= set(sink())
    after = wait_for(lambda: lookup_metrics(provider).hit_count == 5 and lookup_metrics(
        provider), "the restarted run's progress")
    assert after.miss_count == 3
    assert after.num_cached_records == 20


def test_a_failed_streaming_query_counts_its_load_failures(spark: Any, tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    function = DictLookup(TABLE)
    function.fail_next = 100
    provider = LookupFunctionProvider.of(
        function, retry_policy=RetryPolicy(max_retries=1,
                                           initial_backoff=timedelta(milliseconds=10)))
    write_orders(inbox, 0, [1, 2])
    stream = spark.readStream.schema("order_id BIGINT, id BIGINT").json(str(inbox))
    query = (lookup_join(stream, provider, on="id").writeStream.format("memory")
             .queryName("metrics_failing").option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="LookupLoadError"):
        query.awaitTermination(120)
    # The failed task's report reaches the driver on the query's termination event.
    metrics = wait_for(lambda: lookup_metrics(provider), "the termination event")
    assert (metrics.num_load_failures, metrics.num_retries, metrics.load_count) == (1, 1, 0)


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_a_failed_first_load_of_a_full_cache(spark: Any, tmp_path: Path,
                                             streaming: bool) -> None:
    import functools
    import sqlite3

    from scan import SqlTableSource

    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()  # no table: every load fails
    source = SqlTableSource(functools.partial(sqlite3.connect, str(db)), "customers",
                            schema="id BIGINT, name STRING")
    # The lookups wait for the first load up to initial_load_timeout, then fail.
    provider = FullCachingLookupProvider.of(source, PeriodicCacheReloadTrigger(HOUR), ["id"],
                                            max_retries=0, initial_load_timeout=timedelta(
                                                seconds=2))
    if not streaming:
        with pytest.raises(Exception, match="customers") as failure:
            lookup_join(spark.range(1, 3, numPartitions=1), provider, on="id").collect()
        assert "spark-lookup metrics report: " in str(failure.value)
        with pytest.raises(MetricsUnavailableError):  # what a failed batch action leaves
            lookup_metrics(provider)
        return
    inbox = tmp_path / "in"
    inbox.mkdir()
    write_orders(inbox, 0, [1, 2])
    stream = spark.readStream.schema("order_id BIGINT, id BIGINT").json(str(inbox))
    query = (lookup_join(stream, provider, on="id").writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="customers"):
        query.awaitTermination(120)
    metrics = wait_for(lambda: lookup_metrics(provider), "the termination event")
    assert (metrics.num_load_failures, metrics.load_count) == (1, 0)


def test_metrics_after_a_second_action_are_its_or_say_they_are_not(
        spark: Any, spark_kind: str) -> None:
    """Issue 42, item 4: a notebook user runs an action on the same DataFrame twice. On
    Spark Connect every action is observed: the metrics after the second include it. A
    classic session observes the first only: the metrics say so (``as_of``), and asking
    again for the same numbers warns."""
    from lookup.spark.metrics import StaleMetricsWarning

    provider = partial()
    df = spark.range(0, 100, numPartitions=1).selectExpr("id % 10 AS id")
    joined = lookup_join(df, provider, on="id")
    joined.collect()  # one batch of 10 distinct keys: 10 looked up per action
    first = lookup_metrics(provider)
    assert first.hit_count + first.miss_count == 10
    assert first.as_of is not None
    assert first.as_of.kind == "action"
    assert first.as_of.at <= dt.datetime.now(dt.timezone.utc)
    joined.collect()  # the same DataFrame again
    if spark_kind == "connect":
        second = lookup_metrics(provider)
        assert second.hit_count + second.miss_count == 20
        assert not second.as_of.first_action_only
        assert second.as_of.at >= first.as_of.at
        return
    assert first.as_of.first_action_only
    with pytest.warns(StaleMetricsWarning, match="first action on its lookup_join DataFrame"):
        second = lookup_metrics(provider)
    assert second.hit_count + second.miss_count == 10  # the first action's, as it says
    assert second.as_of == first.as_of
    lookup_join(df, provider, on="id").collect()  # a new DataFrame: its first action
    third = lookup_metrics(provider)
    # Workers' reports are cumulative: the missed action counts where its worker reports.
    assert third.hit_count + third.miss_count >= 20
    assert third.as_of.name != first.as_of.name
