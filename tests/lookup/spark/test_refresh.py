"""ScheduledTableRefresh on a real local Spark and SQLite: reloads swap the view, failures
keep it, replaced cached versions are unpersisted, staleness, close, validation."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lookup import RetryPolicy, ScheduledTableRefresh
from scan import CollectionSource
from spark_lookup.errors import ConfigError, LookupLoadError, SnapshotUnavailableError
from tests.lookup.spark.refresh_support import countries, execute, names
from tests.polling import wait_until
from triggers import PeriodicCacheReloadTrigger

pytestmark = [pytest.mark.spark, pytest.mark.needs("PYTHON_DATA_SOURCE", "SESSION_TAGS")]

HOUR = timedelta(hours=1)  # a trigger that only loads on open: reloads are driven explicitly
FAST_RETRY = RetryPolicy(max_retries=1, initial_backoff=timedelta(milliseconds=10))
LOAD_TIMEOUT = 120


@pytest.fixture
def short_close_waits(monkeypatch: pytest.MonkeyPatch) -> PeriodicCacheReloadTrigger:
    """A trigger like ``HOUR``'s, with the waits of ``close()`` for a held load cut from
    10 s to 1 s each (the tests that hold a load open would spend them all)."""
    monkeypatch.setattr("lookup.spark.refresh._LOAD_STOP_WAIT", 1.0)
    return PeriodicCacheReloadTrigger(HOUR, close_timeout=1.0)


def refresh_of(spark: Any, db: Path, view: str, **options: Any) -> ScheduledTableRefresh:
    options.setdefault("retry_policy", FAST_RETRY)
    return ScheduledTableRefresh(spark, countries(db), PeriodicCacheReloadTrigger(HOUR), view,
                                 **options)


def is_cached(df: Any) -> bool:
    level = df.storageLevel
    return bool(level.useMemory or level.useDisk)


def physical_plan(spark: Any, df: Any) -> str:
    """The physical plan of ``df``, as ``EXPLAIN`` prints it (on either kind of session)."""
    return str(spark.sql("EXPLAIN SELECT * FROM {df}", df=df).first()[0])


def served(refresh: ScheduledTableRefresh) -> Any:
    """The DataFrame of the version ``refresh`` serves now. (``spark.table(view)`` pins
    the version only on a classic session: a Connect DataFrame is resolved anew by
    every action.)"""
    current = refresh._versions.current
    assert current is not None
    return current.df


@pytest.mark.every_line
def test_sql_on_the_view_sees_the_rows_of_each_reload(
    spark: Any, spark_kind: str, db: Path
) -> None:
    with refresh_of(spark, db, "rv_countries") as refresh:
        status = refresh.status()
        assert (status.version, status.rows, status.materialization) == (1, 3, "LOCAL")
        assert status.bytes
        assert status.bytes > 0
        assert status.last_load_time
        assert status.last_load_time > 0
        assert status.last_success_at is not None
        assert status.num_loads == 1
        sql = "SELECT name FROM rv_countries"
        assert names(spark.sql(sql)) == ["France", "Germany", "Netherlands"]
        # Classic: resolved now, keeps version 1. Connect: a plan sent to the server and
        # resolved by each action, so it reads the version served then.
        before = spark.table("rv_countries")

        execute(db, "INSERT INTO countries VALUES (4, 'be', 'Belgium')")
        execute(db, "UPDATE countries SET name = 'Nederland' WHERE id = 1")
        status = refresh.trigger_reload().result(LOAD_TIMEOUT)

        assert (status.version, status.rows, status.num_loads) == (2, 4, 2)
        assert status == refresh.status()
        assert names(spark.sql(sql)) == ["Belgium", "France", "Germany", "Nederland"]
        assert names(before) == (["France", "Germany", "Netherlands"] if spark_kind == "classic"
                                 else ["Belgium", "France", "Germany", "Nederland"])
        # A small local version is broadcast in joins, as any small relation.
        joined = spark.range(5).join(spark.table("rv_countries"), "id")
        assert "BroadcastHashJoin" in physical_plan(spark, joined)
    assert not spark.catalog.tableExists("rv_countries")  # close() dropped it


def test_a_failed_reload_keeps_the_previous_version_and_is_reported(
    spark: Any, db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with refresh_of(spark, db, "rv_failing") as refresh:
        execute(db, "ALTER TABLE countries RENAME TO countries_gone")
        with caplog.at_level(logging.ERROR, logger="lookup"), pytest.raises(
            LookupLoadError, match="'rv_failing' failed after 1 attempt"  # permanent
        ):
            refresh.trigger_reload().result(LOAD_TIMEOUT)

        status = refresh.status()
        # A missing table is permanent: reported at once, not retried.
        assert (status.version, status.num_load_failures, status.num_retries) == (1, 1, 0)
        assert status.last_error
        assert "ConnectorError: SQLite has no table or view 'countries'" in status.last_error
        assert status.last_failure_at is not None
        assert not status.stale
        assert any("still serving version 1" in r.getMessage() for r in caplog.records)
        assert spark.sql("SELECT count(*) FROM rv_failing").first()[0] == 3

        execute(db, "ALTER TABLE countries_gone RENAME TO countries")
        execute(db, "DELETE FROM countries WHERE id = 3")
        status = refresh.trigger_reload().result(LOAD_TIMEOUT)
        assert (status.version, status.rows, status.num_load_failures) == (2, 2, 1)
        assert names(spark.table("rv_failing")) == ["France", "Netherlands"]


def test_cached_versions_are_unpersisted_after_the_swap(spark: Any, db: Path) -> None:
    with refresh_of(spark, db, "rv_cached", materialization="CACHE",
                    unpersist_delay=0) as refresh:
        assert refresh.status().materialization == "CACHE"
        versions = [served(refresh)]
        assert is_cached(versions[0])
        assert is_cached(spark.table("rv_cached"))
        for _ in range(2):
            execute(db, "INSERT INTO countries (code, name) VALUES ('xx', 'Somewhere')")
            refresh.trigger_reload().result(LOAD_TIMEOUT)
            versions.append(served(refresh))
        assert refresh.status().rows == 5
        assert not is_cached(versions[0])
        assert is_cached(versions[2])
        wait_until(lambda: [is_cached(v) for v in versions] == [False, False, True],
                   "old versions unpersisted", timeout=30)
        assert spark.table("rv_cached").count() == 5
    wait_until(lambda: not any(is_cached(v) for v in versions), "close() to unpersist", timeout=30)


def test_a_replaced_cached_version_stays_persisted_for_unpersist_delay(
    spark: Any, db: Path
) -> None:
    with refresh_of(spark, db, "rv_delayed", materialization="CACHE",
                    unpersist_delay=1.5) as refresh:
        first = served(refresh)
        execute(db, "INSERT INTO countries VALUES (4, 'be', 'Belgium')")
        refresh.trigger_reload().result(LOAD_TIMEOUT)
        # Queries that resolved version 1 before the swap still read it from the cache
        # (not from the source, which has a row more now).
        assert is_cached(first)
        assert first.count() == 3
        wait_until(lambda: not is_cached(first), "the delayed unpersist", timeout=30)
        assert is_cached(spark.table("rv_delayed"))


def test_auto_caches_a_version_above_local_max_bytes(spark: Any, db: Path) -> None:
    with refresh_of(spark, db, "rv_auto", local_max_bytes=0) as refresh:
        assert refresh.status().materialization == "CACHE"
        assert is_cached(spark.table("rv_auto"))
    with refresh_of(spark, db, "rv_local", materialization="local") as refresh:
        assert refresh.status().materialization == "LOCAL"
        assert not is_cached(spark.table("rv_local"))
        execute(db, "DELETE FROM countries")
        assert refresh.trigger_reload().result(LOAD_TIMEOUT).rows == 0
        assert spark.table("rv_local").count() == 0
        assert spark.table("rv_local").schema.simpleString() == (
            "struct<id:bigint,code:string,name:string>")


def test_reloads_never_overlap_and_asks_during_one_queue_one_more(
    spark: Any, db: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    refresh = ScheduledTableRefresh(spark, countries(db, gate), PeriodicCacheReloadTrigger(HOUR),
                                    "rv_queue")
    with refresh:
        gate.unlink()  # the next load waits in the source until the gate is back
        running = refresh.trigger_reload()
        wait_until(running.running, "the reload to start", timeout=60)
        queued = refresh.trigger_reload()
        assert queued is not running
        assert refresh.trigger_reload() is queued  # joins the load that has not started
        assert not queued.running()
        gate.touch()
        first, second = running.result(LOAD_TIMEOUT), queued.result(LOAD_TIMEOUT)
        assert (first.version, second.version) == (2, 3)
        assert second.num_loads == 3


def test_queries_during_reloads_see_one_whole_version(spark: Any, db: Path) -> None:
    counts: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def query() -> None:
        while not stop.is_set():
            try:
                counts.append(spark.sql("SELECT count(*) FROM rv_busy").first()[0])
            except BaseException as exc:
                errors.append(exc)
                return

    with refresh_of(spark, db, "rv_busy", materialization="CACHE", unpersist_delay=0) as refresh:
        reader = threading.Thread(target=query)
        reader.start()
        try:
            for i in range(3):
                execute(db, "INSERT INTO countries (code, name) VALUES (?, ?)", f"c{i}", f"C{i}")
                refresh.trigger_reload().result(LOAD_TIMEOUT)
            wait_until(lambda: len(counts) >= 3, "queries during reloads", timeout=60)
        finally:
            stop.set()
            reader.join(60)
    assert not errors
    assert set(counts) <= {3, 4, 5, 6}


def test_the_view_raises_once_older_than_max_staleness(spark: Any, db: Path) -> None:
    with refresh_of(spark, db, "rv_stale", max_staleness=1.0) as refresh:
        execute(db, "ALTER TABLE countries RENAME TO countries_gone")
        with pytest.raises(LookupLoadError):
            refresh.trigger_reload().result(LOAD_TIMEOUT)
        wait_until(lambda: refresh.status().stale, "the view to go stale", timeout=30)
        with pytest.raises(Exception, match=r"'rv_stale' is stale.*last reload error"):
            spark.sql("SELECT count(*) FROM rv_stale").collect()
        with pytest.raises(Exception, match="is stale"):
            spark.sql("SELECT name FROM rv_stale WHERE id = 1").collect()

        execute(db, "ALTER TABLE countries_gone RENAME TO countries")
        status = refresh.trigger_reload().result(LOAD_TIMEOUT)
        assert not status.stale
        assert status.version == 2
        assert spark.sql("SELECT count(*) FROM rv_stale").first()[0] == 3


def test_close_stops_the_schedule(spark: Any, db: Path) -> None:
    trigger = PeriodicCacheReloadTrigger(timedelta(milliseconds=500))
    refresh = ScheduledTableRefresh(spark, countries(db), trigger, "rv_periodic")
    with refresh:
        assert trigger.is_open
        execute(db, "INSERT INTO countries VALUES (4, 'be', 'Belgium')")
        # The schedule alone picks the new row up.
        wait_until(lambda: refresh.status().rows == 4, "a scheduled reload", timeout=60)
        assert "Belgium" in names(spark.table("rv_periodic"))
    assert not trigger.is_open
    assert not refresh.is_open
    loads = refresh.status().num_loads
    assert loads >= 2
    with pytest.raises(RuntimeError, match="not open"):
        refresh.trigger_reload().result(5)
    threading.Event().wait(1.5)  # three intervals: no firing may load any more
    assert refresh.status().num_loads == loads
    assert not spark.catalog.tableExists("rv_periodic")
    refresh.close()  # idempotent


def test_a_load_in_progress_at_close_never_swaps(
    spark: Any, db: Path, tmp_path: Path, short_close_waits: PeriodicCacheReloadTrigger
) -> None:
    gate = tmp_path / "gate"
    gate.touch()
    # LOCAL: a CACHE or AUTO load holds its cache's lock in Spark's CacheManager while the
    # source plans its splits, and dropTempView would wait for the held planning.
    refresh = ScheduledTableRefresh(spark, countries(db, gate), short_close_waits,
                                    "rv_closing", materialization="LOCAL").open()
    gate.unlink()
    running = refresh.trigger_reload()
    wait_until(running.running, "the reload to start", timeout=60)
    started = time.monotonic()
    refresh.close()  # waits a bounded time for the held load, then goes on
    assert time.monotonic() - started < 60
    assert not spark.catalog.tableExists("rv_closing")
    gate.touch()
    with pytest.raises(RuntimeError, match="closed during a reload"):
        running.result(LOAD_TIMEOUT)
    assert not spark.catalog.tableExists("rv_closing")
    assert refresh.status().version == 1


def test_close_can_keep_the_last_version(spark: Any, db: Path) -> None:
    refresh = refresh_of(spark, db, "rv_kept", materialization="CACHE").open()
    refresh.close(keep_view=True)
    try:
        assert spark.table("rv_kept").count() == 3
        assert is_cached(spark.table("rv_kept"))
    finally:
        spark.catalog.dropTempView("rv_kept")


def test_a_failing_first_load_fails_open(spark: Any, db: Path) -> None:
    execute(db, "DROP TABLE countries")
    trigger = PeriodicCacheReloadTrigger(HOUR)
    refresh = ScheduledTableRefresh(spark, countries(db), trigger, "rv_never",
                                    retry_policy=RetryPolicy(max_retries=0))
    with pytest.raises(LookupLoadError, match="'rv_never'"):
        refresh.open()
    assert not trigger.is_open
    assert not refresh.is_open
    assert not spark.catalog.tableExists("rv_never")
    with pytest.raises(RuntimeError, match="already opened"):
        refresh.open()


def test_a_first_load_slower_than_initial_load_timeout_fails_open(
    spark: Any, db: Path, tmp_path: Path, short_close_waits: PeriodicCacheReloadTrigger
) -> None:
    gate = tmp_path / "gate"  # absent: the first load waits in the source
    trigger = short_close_waits
    refresh = ScheduledTableRefresh(spark, countries(db, gate), trigger, "rv_slow",
                                    materialization="LOCAL", initial_load_timeout=1.0)
    try:
        with pytest.raises(SnapshotUnavailableError, match="'rv_slow' did not finish within"):
            refresh.open()
    finally:
        gate.touch()  # let the held planning end
    assert not trigger.is_open
    assert not refresh.is_open
    assert not spark.catalog.tableExists("rv_slow")


def test_a_query_before_the_first_load_says_why_it_has_no_rows(
    spark: Any, db: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"  # absent: the first load waits in the source
    refresh = ScheduledTableRefresh(spark, countries(db, gate), PeriodicCacheReloadTrigger(HOUR),
                                    "rv_early", materialization="LOCAL").open(wait=False)
    try:
        with pytest.raises(Exception, match="'rv_early' has no data yet: its first load is "
                                            "still running"):
            spark.table("rv_early").count()
        with pytest.raises(SnapshotUnavailableError, match="'rv_early' has no version yet"):
            refresh.table()
        gate.touch()
        wait_until(lambda: refresh.status().version == 1, "the first load", timeout=LOAD_TIMEOUT)
        assert spark.table("rv_early").count() == 3
        assert refresh.table().count() == 3
    finally:
        gate.touch()
        refresh.close()
    assert not spark.catalog.tableExists("rv_early")


def test_a_failed_first_load_without_waiting_says_so_on_the_view(spark: Any, db: Path) -> None:
    execute(db, "DROP TABLE countries")
    refresh = ScheduledTableRefresh(spark, countries(db), PeriodicCacheReloadTrigger(HOUR),
                                    "rv_failed", retry_policy=RetryPolicy(max_retries=0))
    refresh.open(wait=False)
    try:
        # The first load's future settles after the view says why.
        wait_until(refresh._first.done, "the first load to fail", timeout=LOAD_TIMEOUT)
        with pytest.raises(Exception, match="'rv_failed' has no data: its first load failed"):
            spark.table("rv_failed").count()
    finally:
        refresh.close(keep_view=True)  # no version to keep: the view goes
    assert not spark.catalog.tableExists("rv_failed")


def test_one_refresh_per_view_and_per_trigger(spark: Any, db: Path) -> None:
    trigger = PeriodicCacheReloadTrigger(HOUR)
    with ScheduledTableRefresh(spark, countries(db), trigger, "rv_owned"):
        with pytest.raises(ConfigError, match="already served"):
            refresh_of(spark, db, "RV_OWNED").open()
        with pytest.raises(RuntimeError, match="already open"):
            ScheduledTableRefresh(spark, countries(db), trigger, "rv_other").open()
        assert trigger.is_open  # the failed opens left the first refresh alone
        assert spark.table("rv_owned").count() == 3
        assert not spark.catalog.tableExists("rv_other")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"spark": object()}, "spark must be a SparkSession"),
        ({"source": [(1,)]}, "source must be a scan.Source"),
        ({"trigger": timedelta(seconds=1)}, "trigger must be a triggers.CacheReloadTrigger"),
        ({"view_name": "db.view"}, "view_name must be an identifier"),
        ({"view_name": "1st"}, "view_name must be an identifier"),
        ({"view_name": "x; DROP"}, "view_name must be an identifier"),
        ({"materialization": "MEMORY"}, "materialization must be one of AUTO, LOCAL, CACHE"),
        ({"local_max_bytes": -1}, "local_max_bytes must be an int >= 0"),
        ({"storage_level": "MEMORY_ONLY"}, "storage_level must be a pyspark.StorageLevel"),
        ({"retry_policy": 3}, "retry_policy must be a RetryPolicy"),
        ({"max_staleness": 0}, "max_staleness must be positive"),
        ({"unpersist_delay": -1}, "unpersist_delay must be non-negative"),
        ({"initial_load_timeout": "5 min"}, "initial_load_timeout must be a datetime.timedelta"),
    ],
)
def test_invalid_arguments(spark: Any, db: Path, change: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {
        "spark": spark, "source": countries(db), "trigger": PeriodicCacheReloadTrigger(HOUR),
        "view_name": "rv_invalid", **change,
    }
    with pytest.raises(ConfigError, match=message):
        ScheduledTableRefresh(**arguments)


def test_an_unbounded_or_schemaless_source_is_refused(spark: Any) -> None:
    class Unbounded(CollectionSource):
        @property
        def boundedness(self) -> Any:
            from scan import Boundedness

            return Boundedness.CONTINUOUS_UNBOUNDED

    class Schemaless(CollectionSource):
        @property
        def schema(self) -> Any:
            return None

    trigger = PeriodicCacheReloadTrigger(HOUR)
    with pytest.raises(ConfigError, match="unbounded"):
        ScheduledTableRefresh(spark, Unbounded([(1,)], schema="id INT"), trigger, "rv_x")
    with pytest.raises(ConfigError, match="declares no schema"):
        ScheduledTableRefresh(spark, Schemaless([(1,)], schema="id INT"), trigger, "rv_x")


def test_docstring_examples_run(spark: Any) -> None:
    import doctest

    import lookup.spark.refresh

    result = doctest.testmod(lookup.spark.refresh, extraglobs={"spark": spark})
    assert result.attempted > 0
    assert result.failed == 0
