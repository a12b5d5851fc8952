"""The shared full caching runtime in one process: the schedule runs from the stored
snapshot's load time, staleness too, a loader's failure fails the firing of those
waiting for it (without a second scan), lookups switch versions at most every
``check_interval``, and the provider's sharing options.

Two runtimes on one store directory each open their own lock files, so toward each
other they behave as two processes do (``flock`` locks belong to open files).
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from datetime import time as wall_time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cache.full.shared import SharedFullCache
from cache.full.snapshot import FullSnapshot
from cache.full.spool import ColumnSpool, SpoolError
from cache.full.store import SnapshotStore
from lookup import FullCachingLookupProvider
from lookup.runtime.full import FullCachingRuntime
from scan import CollectionSource, read_arrow
from spark_lookup.errors import ConfigError, LookupLoadError, SnapshotUnavailableError
from tests.integration.processes import (
    ManualTrigger,
    count_lines,
    make_db,
    provider,
    store_for,
)
from triggers import CacheReloadTrigger, PeriodicCacheReloadTrigger, TimedCacheReloadTrigger

HOUR = 3600.0


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return make_db(tmp_path / "dim.db")


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        pause.wait(0.01)


def publish(store: SnapshotStore, version: int, loaded_at: float, tier: str = "old",
            rows: int = 200) -> None:
    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "name": [f"n{i}" for i in range(rows)], "tier": [tier] * rows})
    with store.try_lock() as locked:
        assert locked
        store.publish(table, version=version, loaded_at=loaded_at, unique=True)


@pytest.fixture
def opened() -> Iterator[Callable[..., FullCachingRuntime]]:
    runtimes: list[FullCachingRuntime] = []

    def open_runtime(p: FullCachingLookupProvider, store: SnapshotStore) -> FullCachingRuntime:
        runtime = FullCachingRuntime(p, store=store)
        runtime.open()
        runtimes.append(runtime)
        return runtime

    yield open_runtime
    for runtime in runtimes:
        runtime.close()


def test_the_schedule_runs_from_the_snapshots_load_time_not_the_workers_start(
        tmp_path: Path, db: Path, opened: Callable[..., FullCachingRuntime]) -> None:
    p = provider(db, tmp_path / "scans", trigger=ManualTrigger(interval=HOUR))
    store = store_for(p, tmp_path / "store")
    publish(store, 1, loaded_at=time.time() - HOUR + 0.3)  # due in 0.3 s
    runtime = opened(p, store_for(p, tmp_path / "store"))
    assert runtime.lookup((5,)) == ((5, "n5", "old"),)  # served at once, no scan
    assert count_lines(tmp_path / "scans") == 0
    # Its trigger never fires on its own; the version coming due makes it reload.
    wait_for(lambda: runtime.cache.current().version == 2)  # type: ignore[union-attr]
    assert runtime.lookup((5,)) == ((5, "n5", "v1"),)
    assert count_lines(tmp_path / "scans") == 1


def test_an_opening_worker_reloads_a_due_snapshot_in_the_background(
        tmp_path: Path, db: Path, opened: Callable[..., FullCachingRuntime]) -> None:
    p = provider(db, tmp_path / "scans",
                 trigger=PeriodicCacheReloadTrigger(timedelta(hours=1)))
    publish(store_for(p, tmp_path / "store"), 1, loaded_at=time.time() - 2 * HOUR)
    runtime = opened(p, store_for(p, tmp_path / "store"))
    wait_for(lambda: runtime.cache.current() is not None
             and runtime.cache.current().version == 2)  # type: ignore[union-attr]
    assert runtime.lookup((5,)) == ((5, "n5", "v1"),)
    assert count_lines(tmp_path / "scans") == 1  # the open-time firing and the due timer
    assert runtime.metrics.load_count == 1       # shared one load


def test_staleness_is_measured_from_the_stored_load_time(
        tmp_path: Path, db: Path, opened: Callable[..., FullCachingRuntime]) -> None:
    p = provider(db, tmp_path / "scans", max_staleness=timedelta(hours=1))
    publish(store_for(p, tmp_path / "store"), 1, loaded_at=time.time() - 2 * HOUR)
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE customers RENAME TO gone")  # reloads fail
    runtime = opened(p, store_for(p, tmp_path / "store"))
    with pytest.raises(SnapshotUnavailableError, match="2:00:00 old, more than max_staleness"):
        runtime.lookup((5,))  # this process just started, but the data is two hours old
    wait_for(lambda: runtime.metrics.num_load_failures >= 1)  # the due reload failed
    with pytest.raises(SnapshotUnavailableError, match="last error.*customers"):
        runtime.lookup((5,))


def test_a_failed_load_fails_the_firings_waiting_for_it_without_a_second_scan(
        tmp_path: Path, db: Path, opened: Callable[..., FullCachingRuntime]) -> None:
    gate = tmp_path / "gate"
    p = provider(db, tmp_path / "scans", gate=gate)
    gate.touch()
    loader = opened(p, store_for(p, tmp_path / "store"))
    waiter = opened(p, store_for(p, tmp_path / "store"))
    loader.trigger_reload().result(30)
    waiter.trigger_reload().result(30)
    assert count_lines(tmp_path / "scans") == 1
    # Now make both due again, and hold the next scan at its start.
    gate.unlink()
    clock: Callable[[], float] = lambda: time.time() + 2 * HOUR  # noqa: E731
    loader.cache.clock = waiter.cache.clock = clock
    first = loader.trigger_reload()
    wait_for(lambda: count_lines(tmp_path / "scans") == 2)  # the loader holds the lock
    second = waiter.trigger_reload()
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE customers RENAME TO gone")
    gate.touch()
    with pytest.raises(Exception, match="customers"):
        first.result(30)
    with pytest.raises(LookupLoadError, match="another process of this host"):
        second.result(30)
    assert count_lines(tmp_path / "scans") == 2
    assert waiter.lookup((5,)) == ((5, "n5", "v1"),)  # still the last good version
    assert (loader.metrics.num_load_failures, waiter.metrics.num_load_failures) == (1, 0)


def test_lookups_look_for_a_new_version_at_most_every_check_interval(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store", fingerprint="fp")
    publish(store, 1, loaded_at=100.0)
    now = [0.0]
    cache = SharedFullCache(["id"], SnapshotStore(tmp_path / "store", fingerprint="fp"),
                            check_interval=timedelta(seconds=1), timer=lambda: now[0])
    swaps: list[int] = []
    cache._on_swap = lambda snapshot: swaps.append(snapshot.version)
    cache.open()
    try:
        assert cache.get_all([(1,)])[(1,)] == ((1, "n1", "old"),)
        publish(store, 2, loaded_at=200.0, tier="new")
        now[0] = 0.5
        assert cache.snapshot().version == 1  # not looked for yet
        now[0] = 1.0
        assert cache.snapshot().version == 2
        assert cache.get_all([(1,)])[(1,)] == ((1, "n1", "new"),)
        now[0] = 5.0
        assert not cache.poll()  # pointer unchanged: nothing read
        assert swaps == [1, 2]
    finally:
        cache.close()


def test_a_published_snapshot_keeps_its_index_and_maps_the_file(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store")
    cache = SharedFullCache(["k"], store)
    cache.open()
    try:
        built = FullSnapshot.build(pa.table({"k": [2, 1, 1], "v": ["b", "a", "c"]}), ["k"],
                                   loaded_at=5.0, version=3)
        with store.try_lock():
            mapped = cache.publish(built)
        # The index is published with the table and served mapped; the built snapshot is
        # handed over to the mapped copy (the loader keeps no table of its own).
        assert mapped.offsets.tolist() == [0, 2, 3]  # keys 1, 1, 2
        assert not mapped.offsets.flags.writeable  # a view of the mapped index file
        assert built.table is mapped.table
        assert built.key_index is mapped.key_index
        assert cache.get_all([(1,)])[(1,)] == ((1, "a"), (1, "c"))
        assert store.latest().version == 3  # type: ignore[union-attr]
    finally:
        cache.close()
    with pytest.raises(TypeError, match="ship the provider"):
        pickle.dumps(cache)


def test_a_worker_maps_the_published_index_and_builds_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path / "store")
    writer = SharedFullCache(["k"], store)
    writer.open()
    keys = [f"key-{i}" for i in range(1000)]
    try:
        built = FullSnapshot.build(pa.table({"k": keys, "v": range(1000)}), ["k"],
                                   loaded_at=5.0, version=1)
        with store.try_lock():
            writer.publish(built)
    finally:
        writer.close()
    import cache.full.index as key_index

    def no_building(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a reader of a published index built one")

    monkeypatch.setattr(key_index.KeyIndex, "build", classmethod(no_building))
    monkeypatch.setattr(key_index.KeyIndex, "of_unique", classmethod(no_building))
    reader = SharedFullCache(["k"], store)
    reader.open()
    try:
        assert reader.get_all([("key-7",), ("nope",)]) == {("key-7",): (("key-7", 7),),
                                                           ("nope",): ()}
    finally:
        reader.close()


@pytest.mark.parametrize("old", ["format 2, no index", "another hash version"])
def test_a_version_without_a_usable_index_is_served_indexed_here(
        tmp_path: Path, old: str) -> None:
    store = SnapshotStore(tmp_path / "store")
    store.attach()
    table = FullSnapshot.build(pa.table({"k": [3, 1, 2], "v": ["c", "a", "b"]}), ["k"],
                               loaded_at=5.0).table
    with store.try_lock():
        if old == "format 2, no index":
            record = store.publish(table, version=1, loaded_at=5.0, unique=True)
            raw = json.loads((store.directory / "CURRENT").read_bytes())
            raw = {k: v for k, v in raw.items() if not k.startswith("index")}
            (store.directory / "CURRENT").write_text(json.dumps({**raw, "format": 2}))
        else:
            snapshot = FullSnapshot.build(table, ["k"], loaded_at=5.0)
            header, arrays = snapshot.key_index.payload()
            record = store.publish(table, version=1, loaded_at=5.0, unique=True,
                                   index=({**header, "hash": 99}, arrays))
    store.detach()
    assert record.file
    cache = SharedFullCache(["k"], store)
    cache.open()
    try:
        assert cache.get_all([(2,)]) == {(2,): ((2, "b"),)}
    finally:
        cache.close()


# --- provider options


def source() -> CollectionSource:
    return CollectionSource([(1, "a")], schema="id BIGINT, name STRING")


def full(**kw: Any) -> FullCachingLookupProvider:
    return FullCachingLookupProvider.of(source(), ManualTrigger(), ["id"], **kw)


def test_sharing_is_on_in_spark_tasks_only_unless_told() -> None:
    assert not full().shares_snapshots()  # no TaskContext here
    assert full(share_across_workers=True).shares_snapshots()
    assert not full(share_across_workers=False).shares_snapshots()
    assert full(snapshot_name="countries").shares_snapshots()
    assert not FullCachingRuntime(full()).shared


def test_where_the_store_goes(tmp_path: Path) -> None:
    p = full()
    root = Path(tempfile.gettempdir()) / "spark-lookup-snapshots"
    assert p.snapshot_directory() == root / p.provider_id
    named = full(snapshot_dir=tmp_path, snapshot_name="countries.v2")
    assert named.snapshot_directory() == tmp_path / "countries.v2"
    assert named.share_across_workers is True
    other_keys = FullCachingLookupProvider.of(source(), ManualTrigger(), ["name"])
    assert other_keys.snapshot_fingerprint() != p.snapshot_fingerprint()
    assert full().snapshot_fingerprint() == p.snapshot_fingerprint()


def test_sharing_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="absolute"):
        full(snapshot_dir="relative/dir")
    with pytest.raises(ConfigError, match="contradict share_across_workers=False"):
        full(snapshot_dir=tmp_path, share_across_workers=False)
    with pytest.raises(ConfigError, match="snapshot_name"):
        full(snapshot_name="../etc")
    with pytest.raises(ConfigError, match="share_across_workers"):
        full(share_across_workers="yes")


# --- the trigger hook


def test_triggers_say_when_loaded_data_is_due() -> None:
    loaded = datetime(2024, 6, 3, 10, 0, tzinfo=timezone.utc)
    periodic = PeriodicCacheReloadTrigger(timedelta(minutes=10), "FIXED_RATE")
    assert periodic.next_reload_after(loaded) == loaded + timedelta(minutes=10)
    with pytest.raises(ConfigError, match="aware"):
        periodic.next_reload_after(datetime(2024, 6, 3))
    timed = TimedCacheReloadTrigger(wall_time(3, 0), 3, tz="UTC")
    assert timed.next_reload_after(loaded) == datetime(2024, 6, 6, 3, 0, tzinfo=timezone.utc)

    class Foreign(CacheReloadTrigger):
        def open(self, context: Any) -> None:
            pass

        def close(self) -> None:
            pass

    assert Foreign().next_reload_after(loaded) is None  # unknown: every firing reloads


def test_with_a_trigger_that_cannot_tell_every_firing_loads_once_per_host(
        tmp_path: Path, db: Path, opened: Callable[..., FullCachingRuntime]) -> None:
    class Foreign(CacheReloadTrigger):
        def open(self, context: Any) -> None:
            pass

        def close(self) -> None:
            pass

    p = provider(db, tmp_path / "scans", trigger=Foreign())
    a = opened(p, store_for(p, tmp_path / "store"))
    b = opened(p, store_for(p, tmp_path / "store"))
    a.trigger_reload().result(30)
    b.trigger_reload().result(30)
    assert count_lines(tmp_path / "scans") == 2  # b's firing came after a's load started
    assert os.path.exists(tmp_path / "store" / "CURRENT")


def test_an_unreadable_published_version_is_loaded_again(
        tmp_path: Path, db: Path, opened: Callable[..., FullCachingRuntime]) -> None:
    p = provider(db, tmp_path / "scans")
    store = store_for(p, tmp_path / "store")
    publish(store, 1, loaded_at=time.time())  # fresh: not due
    record = store.latest()
    assert record is not None
    (tmp_path / "store" / record.file).write_bytes(b"not arrow")  # a damaged disk, say
    runtime = opened(p, store_for(p, tmp_path / "store"))
    runtime.trigger_reload().result(30)
    assert runtime.lookup((5,)) == ((5, "n5", "v1"),)
    assert count_lines(tmp_path / "scans") == 1
    assert store.latest().version == 2  # type: ignore[union-attr]


class FullDisk(SnapshotStore):
    def publish(self, table: Any, **kw: Any) -> Any:
        raise OSError(28, "No space left on device")


def test_a_store_that_cannot_take_a_version_still_serves_it_in_process(
        tmp_path: Path, db: Path, opened: Callable[..., FullCachingRuntime]) -> None:
    p = provider(db, tmp_path / "scans")
    runtime = opened(p, FullDisk(tmp_path / "store", fingerprint=p.snapshot_fingerprint()))
    runtime.trigger_reload().result(30)
    assert runtime.lookup((5,)) == ((5, "n5", "v1"),)  # served from its spooled files
    assert not os.path.exists(tmp_path / "store" / "CURRENT")
    assert not list((tmp_path / "store").glob(".spool-*"))  # deleted, still mapped
    assert count_lines(tmp_path / "scans") == 1


class NoRoomToSpool(FullDisk):
    def spool(self, schema: pa.Schema) -> ColumnSpool:
        spool = super().spool(schema)

        def full(batch: pa.RecordBatch) -> None:
            raise SpoolError(errno.ENOSPC, "No space left on device")

        spool.append = full  # type: ignore[method-assign]
        return spool


def test_a_store_that_cannot_take_the_load_loads_in_memory_for_this_process(
        tmp_path: Path, db: Path, opened: Callable[..., FullCachingRuntime],
        caplog: pytest.LogCaptureFixture) -> None:
    p = provider(db, tmp_path / "scans")
    runtime = opened(p, NoRoomToSpool(tmp_path / "store", fingerprint=p.snapshot_fingerprint()))
    runtime.trigger_reload().result(30)
    assert runtime.lookup((5,)) == ((5, "n5", "v1"),)
    assert count_lines(tmp_path / "scans") == 2  # the streamed read stopped, read again
    assert "loading it in memory" in caplog.text
    assert not list((tmp_path / "store").glob(".spool-*"))
    assert runtime.metrics.load_count == 1
    assert runtime.metrics.num_load_failures == 0


def staged_source() -> CollectionSource:
    return CollectionSource([(i, f"n{i}") for i in range(100)], num_splits=3,
                            schema="k BIGINT, v STRING")


def test_a_staged_snapshot_never_published_is_deleted(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store")
    cache = SharedFullCache(["k"], store)
    cache.open()
    source = staged_source()
    schema = read_arrow(source).schema
    with store.try_lock():
        staged = cache.stage(read_arrow(source, 2).to_batches(max_chunksize=16), schema,
                             loaded_at=5.0, version=1)
        assert list(store.directory.glob(".spool-*"))
    cache.close()
    assert not list(store.directory.glob(".spool-*"))
    assert staged.rows(staged.locate([(7,)])[1]) == [(7, "n7")]  # mapped: still readable
    # Closed while it loaded: nobody will publish it, its files go at once.
    with store.try_lock():
        late = cache.stage(read_arrow(source).to_batches(), schema, loaded_at=6.0, version=2)
    assert not list(store.directory.glob(".spool-*"))
    assert late.num_rows == 100


def test_a_due_timer_that_fires_early_waits_for_the_rest(
        tmp_path: Path, db: Path, opened: Callable[..., FullCachingRuntime]) -> None:
    p = provider(db, tmp_path / "scans")
    runtime = opened(p, store_for(p, tmp_path / "store"))
    runtime.trigger_reload().result(30)
    now = time.time()
    runtime.cache.clock = lambda: now
    runtime._due._fire_at(now + 0.2)  # the monotonic clock says due, the wall clock does not
    timer = runtime._due._timer
    assert timer is not None  # armed again for the rest
    assert timer.when > datetime.now(timezone.utc)
    assert count_lines(tmp_path / "scans") == 1  # nothing fired early
