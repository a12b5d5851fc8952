"""Full caching end to end without Spark: a real SQLite table loaded through the scan
layer, reloaded on demand, with failures, staleness, metrics and concurrent readers.
Flink's LookupFullCacheTest cases, ported."""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import scan.connector.fetcher as fetcher_module
from lookup import FullCachingLookupProvider, LookupOptions, RetryPolicy, open_lookup
from lookup.runtime.full import FullCachingRuntime
from lookup.runtime.registry import REGISTRY
from scan import CollectionSource, SqlTableSource
from spark_lookup.errors import SnapshotUnavailableError
from triggers import PeriodicCacheReloadTrigger

HOUR = PeriodicCacheReloadTrigger(timedelta(hours=1))  # loads at open, then not in a test


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "dim.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, tier TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                         [(1, "Ada", "gold"), (2, "Grace", "silver"), (3, "Alan", "gold")])
    return path


def execute(path: Path, sql: str, *params: Any) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql, params)


def provider(path: Path, connect: Callable[[], sqlite3.Connection] | None = None,
             **kw: Any) -> FullCachingLookupProvider:
    source = SqlTableSource(connect or functools.partial(sqlite3.connect, str(path)),
                            "customers", schema="id BIGINT, name STRING, tier STRING",
                            chunk_size=2)
    kw.setdefault("retry_policy", RetryPolicy(max_retries=1, initial_backoff=0.01))
    return FullCachingLookupProvider.of(source, HOUR, ["id"], parallelism=2, **kw)


_GATES: dict[int, GatedConnect] = {}


def _gate(key: int) -> GatedConnect:
    return _GATES[key]


class GatedConnect:
    """Connects to a SQLite file; once ``armed``, a connection first signals ``entered``
    and waits for ``opened``: a load provably in flight, for as long as a test wants."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.armed = False
        self.entered = threading.Event()
        self.opened = threading.Event()
        _GATES[id(self)] = self

    def __reduce__(self) -> tuple[Any, ...]:
        # A connection factory must pickle: as a reference to this very gate.
        return (_gate, (id(self),))

    def __call__(self) -> sqlite3.Connection:
        if self.armed:
            self.entered.set()
            self.opened.wait(timeout=30)
        return sqlite3.connect(self.path)


def close_during_load(handle: Any, connect: GatedConnect) -> float:
    """Close ``handle`` while its load waits in ``connect``, then let the load end; the
    seconds close() took."""
    runtime = handle.runtime
    assert connect.entered.wait(timeout=30)
    started = time.monotonic()
    handle.close()
    elapsed = time.monotonic() - started
    connect.opened.set()
    assert runtime._executor is not None
    runtime._executor.shutdown(wait=True)  # the discarded load has ended
    return elapsed


def reload(handle: Any) -> None:
    runtime = handle.runtime
    assert isinstance(runtime, FullCachingRuntime)
    runtime.trigger_reload().result(timeout=30)


def test_reload_sees_added_updated_and_removed_rows(db: Path) -> None:
    with open_lookup(provider(db)) as handle:
        assert handle.lookup_batch([(1,), (2,), (4,)]) == {
            (1,): ((1, "Ada", "gold"),), (2,): ((2, "Grace", "silver"),), (4,): ()}
        execute(db, "INSERT INTO customers VALUES (4, 'Edsger', 'bronze')")
        execute(db, "UPDATE customers SET tier = 'platinum' WHERE id = 1")
        execute(db, "DELETE FROM customers WHERE id = 2")
        assert handle.lookup((4,)) == ()  # not before a reload
        reload(handle)
        assert handle.lookup_batch([(1,), (2,), (4,)]) == {
            (1,): ((1, "Ada", "platinum"),), (2,): (), (4,): ((4, "Edsger", "bronze"),)}
        assert handle.runtime.cache.current().version == 2  # type: ignore[attr-defined]


def test_failed_reloads_keep_serving_the_last_good_snapshot(db: Path) -> None:
    with open_lookup(provider(db)) as handle:
        assert handle.lookup((1,)) == ((1, "Ada", "gold"),)
        execute(db, "ALTER TABLE customers RENAME TO gone")
        for _ in range(3):  # several consecutive firings fail
            with pytest.raises(Exception, match="customers"):
                reload(handle)
            assert handle.lookup((1,)) == ((1, "Ada", "gold"),)
        metrics = handle.metrics
        assert metrics.num_load_failures == 3
        assert metrics.num_retries == 0  # a missing table is permanent: never retried
        assert metrics.load_count == 1
        execute(db, "ALTER TABLE gone RENAME TO customers")
        execute(db, "UPDATE customers SET name = 'Ada L.' WHERE id = 1")
        reload(handle)  # recovery picks up the new data
        assert handle.lookup((1,)) == ((1, "Ada L.", "gold"),)
        assert handle.metrics.load_count == 2


def test_max_staleness_fails_lookups_once_reloads_fail_too_long(db: Path) -> None:
    with open_lookup(provider(db, max_staleness=timedelta(seconds=30))) as handle:
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        assert handle.lookup((1,))
        now = runtime.cache.clock()
        runtime.cache.clock = lambda: now + 31  # time passes, no reload succeeded
        with pytest.raises(SnapshotUnavailableError, match="max_staleness"):
            handle.lookup((1,))


def test_first_lookup_waits_then_fails_when_the_first_load_never_succeeds(tmp_path: Path) -> None:
    missing = tmp_path / "empty.db"
    sqlite3.connect(missing).close()
    with open_lookup(provider(missing, initial_load_timeout=timedelta(seconds=2))) as handle, \
            pytest.raises(SnapshotUnavailableError, match="first load.*customers"):
        handle.lookup((1,))


def test_metrics_of_a_full_cache(db: Path) -> None:
    with open_lookup(provider(db)) as handle:
        handle.lookup_batch([(1,), (2,), (9,), (None,)])
        m = handle.metrics
        assert (m.hit_count, m.miss_count) == (2, 1)  # misses are counted (Flink: 0)
        assert m.load_count == 1
        assert m.latest_load_time >= 0
        assert m.num_cached_records == 3
        assert m.num_cached_bytes > 0


def test_one_load_per_process_for_shared_handles(db: Path) -> None:
    p = provider(db)
    with open_lookup(p) as first, open_lookup(p) as second:
        first.lookup((1,))
        second.lookup((1,))
        assert first.metrics.load_count == 1
        assert REGISTRY.references(p.provider_id) == 2


def test_concurrent_lookups_during_reloads_see_whole_versions(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM customers")
        conn.executemany("INSERT INTO customers VALUES (?, ?, 'v0')",
                         [(i, f"n{i}") for i in range(300)])
    errors: list[str] = []
    stop = threading.Event()
    with open_lookup(provider(db)) as handle:
        handle.lookup((0,))

        def read() -> None:
            keys = [(i,) for i in range(300)]
            while not stop.is_set():
                tiers = {rows[0][2] for rows in handle.lookup_batch(keys).values() if rows}
                if len(tiers) != 1:
                    errors.append(f"mixed versions {sorted(tiers)}")

        readers = [threading.Thread(target=read) for _ in range(3)]
        for reader in readers:
            reader.start()
        try:
            for version in range(1, 6):
                execute(db, "UPDATE customers SET tier = ?", f"v{version}")
                reload(handle)
        finally:
            stop.set()
            for reader in readers:
                reader.join()
        assert errors == []
        assert handle.lookup((7,)) == ((7, "n7", "v5"),)


def test_concurrent_firings_share_one_load(db: Path) -> None:
    with open_lookup(provider(db)) as handle:
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        handle.lookup((1,))
        futures = [runtime.trigger_reload() for _ in range(5)]
        for future in futures:
            future.result(timeout=30)
        assert handle.metrics.load_count <= 3  # coalesced, never 6


def test_lookup_options_build_a_full_provider(db: Path) -> None:
    options = LookupOptions.from_dict({
        "lookup.cache": "FULL",
        "lookup.full-cache.reload-strategy": "PERIODIC",
        "lookup.full-cache.periodic-reload.interval": "1 h",
        "lookup.full-cache.max-staleness": "2 h",
        "lookup.max-retries": "1",
    })
    source = SqlTableSource(functools.partial(sqlite3.connect, str(db)), "customers",
                            schema="id BIGINT, name STRING, tier STRING")
    p = options.provider(source, key_columns=["id"])
    assert isinstance(p, FullCachingLookupProvider)
    assert p.max_staleness == timedelta(hours=2)
    assert p.retry_policy.max_retries == 1
    with open_lookup(p) as handle:
        assert handle.lookup((3,)) == ((3, "Alan", "gold"),)


def test_lookup_options_errors_name_the_key() -> None:
    with pytest.raises(ValueError, match="'lookup.partial-cache.max-rows' does not apply"):
        LookupOptions.from_dict({"lookup.cache": "FULL",
                                 "lookup.partial-cache.max-rows": "1"})
    with pytest.raises(ValueError, match="lookup.full-cache.periodic-reload.interval"):
        LookupOptions.from_dict({"lookup.cache": "FULL"})
    with pytest.raises(ValueError, match="did you mean 'lookup.max-retries'"):
        LookupOptions.from_dict({"lookup.max-retry": "3"})


def test_outside_spark_a_full_cache_stays_in_process(db: Path) -> None:
    p = provider(db)
    with open_lookup(p) as handle:
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        assert not runtime.shared
        assert handle.lookup((1,)) == ((1, "Ada", "gold"),)
    assert not p.snapshot_directory().exists()


def test_shared_across_processes_a_firing_reloads_only_when_the_schedule_is_due(
        db: Path, tmp_path: Path) -> None:
    p = provider(db, snapshot_dir=tmp_path / "snapshots")
    with open_lookup(p) as handle:
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        assert runtime.shared
        assert handle.lookup((1,)) == ((1, "Ada", "gold"),)
        execute(db, "UPDATE customers SET tier = 'platinum' WHERE id = 1")
        reload(handle)  # loaded less than the interval ago: this firing keeps it
        assert handle.lookup((1,)) == ((1, "Ada", "gold"),)
        assert handle.metrics.load_count == 1
        now = runtime.cache.clock()
        runtime.cache.clock = lambda: now + 2 * 3600  # the hourly reload is due
        reload(handle)
        assert handle.lookup((1,)) == ((1, "Ada", "platinum"),)
        assert handle.metrics.load_count == 2
        assert runtime.cache.current().version == 2  # type: ignore[union-attr]
    files = sorted(f.name for f in (tmp_path / "snapshots" / p.provider_id).glob("v*.arrow"))
    assert len(files) == 1
    assert files[0].startswith("v0000000002-")


@pytest.mark.parametrize("shared", [False, True], ids=["in-process", "shared"])
def test_a_load_releases_what_its_readers_free_as_it_goes(
        db: Path, tmp_path: Path, shared: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[str] = []
    monkeypatch.setattr(fetcher_module, "_release_thread_memory",
                        lambda: released.append(threading.current_thread().name))
    options: dict[str, Any] = {"snapshot_dir": tmp_path / "snapshots"} if shared else {}
    p = provider(db, share_across_workers=shared, **options)
    with open_lookup(p) as handle:
        assert handle.lookup((3,)) == ((3, "Alan", "gold"),)
    assert released  # by every fetch of the load's readers, on their threads
    assert all(name.startswith("scan-fetcher") for name in released)
    if shared:
        files = list((tmp_path / "snapshots" / p.provider_id).iterdir())
        assert [f for f in files if f.suffix == ".arrow"]
        assert not [f for f in files if f.name.startswith((".spool-", ".tmp-"))]


@pytest.mark.parametrize("shared", [False, True], ids=["in-process", "shared"])
def test_close_during_reload_discards_the_load(db: Path, tmp_path: Path, shared: bool) -> None:
    """Flink's InputFormatCacheLoaderTest#testCloseDuringReload: the load in flight at
    close() is neither swapped in, nor published, nor counted, and its future ends."""
    connect = GatedConnect(db)
    options: dict[str, Any] = {"snapshot_dir": tmp_path / "snapshots"} if shared else {}
    p = provider(db, connect, share_across_workers=shared, **options)
    handle = open_lookup(p)
    runtime = handle.runtime
    assert isinstance(runtime, FullCachingRuntime)
    assert handle.lookup((1,)) == ((1, "Ada", "gold"),)
    runtime.trigger_reload().result(timeout=30)  # no load of open() still running
    loads = runtime.metrics.load_count
    if shared:
        now = runtime.cache.clock()
        runtime.cache.clock = lambda: now + 2 * 3600  # due: the next firing scans
    execute(db, "UPDATE customers SET tier = 'platinum' WHERE id = 1")
    connect.armed = True
    future = runtime.trigger_reload()
    assert close_during_load(handle, connect) < 5  # not the trigger's close timeout
    assert future.cancelled()
    assert runtime.cache.current() is None
    assert runtime.metrics.load_count == loads
    assert runtime.metrics.num_load_failures == 0
    if shared:
        published = (tmp_path / "snapshots" / p.provider_id).glob("v*.arrow")
        assert [f.name[:12] for f in published] == [f"v{loads:010d}-"]


def test_close_during_the_first_load_returns_without_waiting_for_it(db: Path) -> None:
    connect = GatedConnect(db)
    connect.armed = True
    handle = open_lookup(provider(db, connect))  # the trigger fires the first load
    runtime = handle.runtime
    assert close_during_load(handle, connect) < 5
    assert runtime.cache.current() is None
    assert (runtime.metrics.load_count, runtime.metrics.num_load_failures) == (0, 0)


@pytest.mark.parametrize("repeat", [False, True])
def test_the_sql_function_answers_the_first_row_from_a_full_snapshot(repeat: bool) -> None:
    # One row a key: the snapshot keeps no row offsets, a group is its row.
    from lookup.spark.sql_functions import _StructLookup

    rows = [(3, "c"), (1, "a"), (2, "b")] + ([(1, "0")] if repeat else [])
    p = FullCachingLookupProvider.of(CollectionSource(rows, schema="id BIGINT, v STRING"),
                                     PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"])
    with open_lookup(p) as handle:
        out = _StructLookup("f", p).lookup_batch([pa.array([2, 5, None, 3, 1], pa.int64())],
                                                 handle.runtime)
    first_of_1 = {"id": 1, "v": "0" if repeat else "a"}  # a key's rows by their values
    assert out.to_pylist() == [{"id": 2, "v": "b"}, None, None, {"id": 3, "v": "c"}, first_of_1]
