"""Change feeds without a database: ``InProcessChanges`` (a real feed, LISTEN/NOTIFY
within one process, tests/lookup/changes/in_process_changes.py) drives partial caches (exact
invalidation, the race with loads in flight, flushes after a lost connection) and full
caches (debounced reloads, one load per change for a host's shared store)."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from cache import DefaultLookupCache, LookupCache
from cache.base import Key, Rows
from cache.full.store import SnapshotStore
from cache.metrics import CacheMetrics
from lookup import (
    ChangeFeed,
    FullCachingLookupProvider,
    LookupFunction,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
    open_lookup,
)
from lookup.changes.feed import Change
from lookup.changes.host_listeners import HostListeners
from lookup.changes.listener import listener_thread
from lookup.changes.reload import SETTLE_SECONDS, ChangeReloads
from lookup.runtime.full import FullCachingRuntime
from spark_lookup.errors import ConfigError
from spark_lookup.schema import to_arrow_schema
from tests.integration.processes import CountingSqlSource, ManualTrigger, count_lines, make_db
from tests.lookup.changes.in_process_changes import InProcessChanges
from tests.lookup.functions import AsyncDictLookup
from tests.polling import wait_until

TIMEOUT = 10.0


class Table(LookupFunction):
    """A dimension table in a dict (answers in Python tuples); records the keys of every
    load, and can hold a load after it read its rows until ``release`` is set."""

    schema = "id BIGINT, name STRING"
    key_columns = ["id"]

    def __init__(self, rows: Mapping[Any, str], schema: str | None = None) -> None:
        if schema is not None:
            self.schema = schema
        self.rows = dict(rows)
        self.loads: list[list[Key]] = []
        self.hold: threading.Event | None = None
        self.reading = threading.Event()

    def lookup(self, key: Key) -> list[tuple[Any, ...]]:
        return [(key[0], self.rows[key[0]])] if key[0] in self.rows else []

    def _read(self, keys: Sequence[Key]) -> dict[Key, list[tuple[Any, ...]]]:
        self.loads.append(list(keys))
        found = {key: self.lookup(key) for key in keys}
        if self.hold is not None:
            self.reading.set()
            assert self.hold.wait(TIMEOUT)
        return found

    def lookup_batch(self, keys: Sequence[Key]) -> Mapping[Key, Sequence[tuple[Any, ...]]]:
        return self._read(keys)

    def __getstate__(self) -> dict[str, Any]:
        return {"rows": self.rows, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["rows"], state["schema"])  # type: ignore[misc]


class ArrowTable(Table):
    """The same table answering batches in Arrow (``lookup_arrow``), as connectors do."""

    def lookup_arrow(self, keys: Sequence[Any]) -> tuple[pa.Int64Array, pa.Table]:
        asked = list(zip(*[array.to_pylist() for array in keys], strict=True))
        found = self._read(asked)
        index = [i for i, key in enumerate(asked) for _ in found[key]]
        rows = [row for key in asked for row in found[key]]
        schema = to_arrow_schema(self.schema)
        table = pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows],
                                     schema=schema)
        return pc.cast(pa.array(index, pa.int64()), pa.int64()), table


def cache() -> DefaultLookupCache:
    return DefaultLookupCache.new_builder().expire_after_write(timedelta(hours=1)).build()


@pytest.fixture(params=["arrow", "python"])
def table(request: pytest.FixtureRequest) -> Table:
    rows = {1: "a", 2: "b", 3: "c"}
    return ArrowTable(rows) if request.param == "arrow" else Table(rows)


def partial(table: Table, feed: ChangeFeed) -> PartialCachingLookupProvider:
    return PartialCachingLookupProvider.of(table, cache(), changes=feed)


# --- partial caches


def test_a_change_drops_exactly_the_changed_keys(table: Table) -> None:
    feed = InProcessChanges(["id"])
    with open_lookup(partial(table, feed)) as handle:
        assert feed.connections == 1  # connected before open_lookup returned
        assert handle.lookup_batch([(1,), (2,), (3,)]) == {
            (1,): ((1, "a"),), (2,): ((2, "b"),), (3,): ((3, "c"),)}
        table.rows[2] = "B"
        table.rows[3] = "C"
        loads = len(table.loads)
        feed.publish([(2,)])
        wait_until(lambda: handle.metrics.num_keys_invalidated == 1, "the invalidation")
        assert handle.lookup_batch([(1,), (2,), (3,)]) == {
            (1,): ((1, "a"),), (2,): ((2, "B"),), (3,): ((3, "c"),)}  # 3 was not notified
        assert table.loads[loads:] == [[(2,)]]
        # Counted once the keys are dropped, and read here maybe just before.
        wait_until(lambda: handle.metrics.num_notifications == 1, "the notification's count")
        metrics = handle.metrics
        assert (metrics.num_notifications, metrics.num_keys_invalidated,
                metrics.num_reconnect_flushes) == (1, 1, 0)


def test_a_key_never_cached_costs_nothing(table: Table) -> None:
    feed = InProcessChanges(["id"])
    with open_lookup(partial(table, feed)) as handle:
        handle.lookup((1,))
        loads = len(table.loads)
        feed.publish([(7,), (8,)])
        feed.publish([(1,)])
        wait_until(lambda: handle.metrics.num_notifications == 2, "the notifications")
        assert handle.metrics.num_keys_invalidated == 1
        assert len(table.loads) == loads  # nothing loaded for a notification


def test_a_load_that_raced_a_change_is_not_cached(table: Table) -> None:
    feed = InProcessChanges(["id"])
    with open_lookup(partial(table, feed)) as handle:
        table.hold = threading.Event()
        answers: list[Any] = []
        racing = threading.Thread(target=lambda: answers.append(handle.lookup((1,))),
                                  daemon=True)
        racing.start()
        try:
            assert table.reading.wait(TIMEOUT)  # the load read "a" and waits
            table.rows[1] = "A"
            feed.publish([(1,)])  # the change arrives while the old row is in flight
            wait_until(lambda: handle.metrics.num_notifications == 1, "the notification")
        finally:
            table.hold.set()
            racing.join(TIMEOUT)
        assert answers == [((1, "a"),)]  # what that lookup read, as it read it
        table.hold = None
        assert handle.lookup((1,)) == ((1, "A"),)  # the old row was not left cached


def test_a_racing_load_keeps_the_keys_that_did_not_change(table: Table) -> None:
    feed = InProcessChanges(["id"])
    with open_lookup(partial(table, feed)) as handle:
        table.hold = threading.Event()
        racing = threading.Thread(target=lambda: handle.lookup_batch([(1,), (2,)]), daemon=True)
        racing.start()
        try:
            assert table.reading.wait(TIMEOUT)
            table.rows[1] = "A"
            feed.publish([(1,)])
            wait_until(lambda: handle.metrics.num_notifications == 1, "the notification")
        finally:
            table.hold.set()
            racing.join(TIMEOUT)
        table.hold = None
        loads = len(table.loads)
        assert handle.lookup_batch([(1,), (2,)]) == {(1,): ((1, "A"),), (2,): ((2, "b"),)}
        assert table.loads[loads:] == [[(1,)]]  # 2 was cached, 1 was not


def test_everything_flushes_the_cache(table: Table) -> None:
    feed = InProcessChanges(["id"])
    with open_lookup(partial(table, feed)) as handle:
        handle.lookup_batch([(1,), (2,)])
        table.rows[1] = "A"
        feed.publish_everything("TRUNCATE")
        wait_until(lambda: handle.metrics.num_notifications == 1, "the notification")
        assert handle.lookup((1,)) == ((1, "A"),)
        assert handle.metrics.num_reconnect_flushes == 0  # a notification, not a lost link


def test_a_change_missed_while_disconnected_is_flushed_after_reconnecting(table: Table) -> None:
    feed = InProcessChanges(["id"])
    with open_lookup(partial(table, feed)) as handle:
        assert handle.lookup((1,)) == ((1, "a"),)
        feed.drop_connections(refuse=True)
        table.rows[1] = "A"
        assert feed.publish([(1,)]) == 0  # nobody listens: lost
        assert handle.lookup((1,)) == ((1, "a"),)  # the cache cannot know yet
        feed.accept_connections()
        wait_until(lambda: handle.metrics.num_reconnect_flushes == 1, "the flush")
        assert feed.connects == 2
        assert handle.lookup((1,)) == ((1, "A"),)


def test_a_load_that_raced_a_lost_connection_is_not_cached(table: Table) -> None:
    feed = InProcessChanges(["id"])
    with open_lookup(partial(table, feed)) as handle:
        table.hold = threading.Event()
        racing = threading.Thread(target=lambda: handle.lookup((1,)), daemon=True)
        racing.start()
        try:
            assert table.reading.wait(TIMEOUT)
            table.rows[1] = "A"
            feed.drop_connections()  # reconnects at once, then flushes
            wait_until(lambda: handle.metrics.num_reconnect_flushes == 1, "the flush")
        finally:
            table.hold.set()
            racing.join(TIMEOUT)
        table.hold = None
        assert handle.lookup((1,)) == ((1, "A"),)


def test_an_async_function_is_invalidated_too() -> None:
    feed = InProcessChanges(["id"])
    function = AsyncDictLookup([(1, "a")])
    provider = PartialCachingAsyncLookupProvider.of(function, cache(), changes=feed)
    with open_lookup(provider) as handle:
        handle.lookup((1,))
        feed.publish([(1,)])
        wait_until(lambda: handle.metrics.num_keys_invalidated == 1, "the invalidation")
        handle.lookup((1,))
        assert function.calls == [(1,), (1,)]


def test_keys_travel_as_json_and_are_read_as_the_key_types() -> None:
    schema = ("big BIGINT, d DATE, ts TIMESTAMP, x DOUBLE, m DECIMAL(10,2), b BINARY, "
              "name STRING")
    big = 2**53 + 1
    key = (big, date(2024, 2, 29), datetime(2024, 1, 1, 10, tzinfo=timezone.utc), 0.1,
           Decimal("1.50"), b"\x01\xff")

    class Wide(Table):
        key_columns = ["big", "d", "ts", "x", "m", "b"]

        def lookup(self, key: Key) -> list[tuple[Any, ...]]:
            return [(*key, self.rows.get(key[0], "?"))]

    feed = InProcessChanges(["big", "d", "ts", "x", "m", "b"])
    table = Wide({big: "v1"}, schema=schema)
    with open_lookup(PartialCachingLookupProvider.of(table, cache(), changes=feed)) as handle:
        handle.lookup(key)
        # One beside it (2**53: the same float), and one spelled as JSON spells it.
        feed.publish([(2**53, "2024-02-29", "2024-01-01T10:00:00+00:00", Decimal("0.1"),
                       Decimal("1.5"), "\\x01ff")])
        wait_until(lambda: handle.metrics.num_notifications == 1, "the notification")
        assert handle.metrics.num_keys_invalidated == 0
        feed.publish([(big, "2024-02-29", "2024-01-01T11:00:00+01:00", Decimal("0.1"),
                       Decimal("1.5"), "\\x01ff")])
        wait_until(lambda: handle.metrics.num_keys_invalidated == 1, "the invalidation")


def test_a_feed_may_order_the_key_columns_otherwise() -> None:
    class Pairs(Table):
        schema = "a BIGINT, b STRING, name STRING"
        key_columns = ["a", "b"]

        def lookup(self, key: Key) -> list[tuple[Any, ...]]:
            return [(*key, self.rows.get(key, "?"))]

    feed = InProcessChanges(["b", "a"])
    table = Pairs({(1, "x"): "v1"}, schema=Pairs.schema)
    with open_lookup(PartialCachingLookupProvider.of(table, cache(), changes=feed)) as handle:
        handle.lookup((1, "x"))
        feed.publish([("x", 1)])
        wait_until(lambda: handle.metrics.num_keys_invalidated == 1, "the invalidation")


def test_a_key_the_provider_cannot_read_flushes(caplog: pytest.LogCaptureFixture,
                                                 table: Table) -> None:
    feed = InProcessChanges(["id"])
    with open_lookup(partial(table, feed)) as handle:
        handle.lookup((1,))
        table.rows[1] = "A"
        feed.publish([("one",)])  # text is no BIGINT: which entry it means is unknown
        wait_until(lambda: handle.metrics.num_notifications == 1, "the notification")
        assert handle.lookup((1,)) == ((1, "A"),)
    assert "flushing the cache" in caplog.text


# --- the listener


def test_one_listener_per_feed_and_process_stopped_by_the_last_close() -> None:
    feed = InProcessChanges(["id"])
    first = open_lookup(partial(Table({1: "a"}), feed))
    second = open_lookup(partial(Table({1: "a"}), pickle.loads(pickle.dumps(feed))))
    try:
        assert feed.connects == 1
        assert feed.connections == 1
        thread = listener_thread(feed)
        assert thread is not None
        assert thread.daemon
        first.close()
        assert listener_thread(feed) is thread
    finally:
        first.close()
        second.close()
    thread.join(TIMEOUT)
    assert not thread.is_alive()
    assert feed.connections == 0


def test_a_runtime_opens_anyway_when_the_feed_cannot_connect() -> None:
    feed = InProcessChanges(["id"], connect_timeout=0.05)
    feed.drop_connections(refuse=True)
    table = Table({1: "a"})
    with open_lookup(partial(table, feed)) as handle:
        assert handle.lookup((1,)) == ((1, "a"),)
        table.rows[1] = "A"
        feed.accept_connections()
        wait_until(lambda: feed.connections == 1, "the connection")
        # Connected for the first time: what was cached before is flushed.
        wait_until(lambda: handle.lookup((1,)) == ((1, "A"),), "the flush")
        assert handle.metrics.num_reconnect_flushes == 0


def test_a_feed_and_its_provider_pickle_as_configuration() -> None:
    feed = InProcessChanges(["id"], min_interval=2.5)
    provider = partial(Table({1: "a"}), feed)
    copy = pickle.loads(pickle.dumps(provider))
    assert copy.changes.feed_id == feed.feed_id
    assert copy.changes.min_interval == timedelta(seconds=2.5)


# --- checks where the provider is built


def test_a_feed_of_other_key_columns_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"carries the key columns \['name'\].*\['id'\]"):
        partial(Table({}), InProcessChanges(["name"]))


def test_changes_must_be_a_feed() -> None:
    with pytest.raises(ConfigError, match="changes"):
        PartialCachingLookupProvider.of(Table({}), cache(), changes="customers")  # type: ignore[arg-type]


def test_a_cache_that_cannot_be_flushed_is_refused() -> None:
    class Plain(LookupCache):
        def get_if_present(self, key: Key) -> Rows | None:
            return None

        def put(self, key: Key, rows: Rows) -> None:
            pass

        def invalidate(self, key: Key) -> None:
            pass

        def size(self) -> int:
            return 0

    with pytest.raises(ConfigError, match="invalidate_all"):
        PartialCachingLookupProvider.of(Table({}), Plain(), changes=InProcessChanges(["id"]))


def test_feed_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="at least one"):
        InProcessChanges([])
    with pytest.raises(ConfigError, match="min_interval"):
        InProcessChanges(["id"], min_interval=-1)
    with pytest.raises(ConfigError, match="twice"):
        InProcessChanges(["id", "id"])


# --- full caches: the debounce, on a fake clock and scheduler


class FakeScheduler:
    """``call_later`` that runs nothing until told: the test fires what is due."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.jobs: list[tuple[float, Callable[[], object]]] = []

    def __call__(self, delay: float, action: Callable[[], object], name: str) -> Any:
        job = (self.clock[0] + delay, action)
        self.jobs.append(job)
        scheduler = self

        class Handle:
            def cancel(self) -> None:
                if job in scheduler.jobs:
                    scheduler.jobs.remove(job)

        return Handle()

    def run_due(self) -> int:
        due = [job for job in self.jobs if job[0] <= self.clock[0]]
        for job in due:
            self.jobs.remove(job)
            job[1]()
        return len(due)


class Reloads:
    """The runtime's side of ChangeReloads: what is served, and the reloads asked."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.served: float | None = 0.0
        self.asked: list[float] = []
        self.futures: list[Future[None]] = []

    def reload(self, since: float) -> Future[None]:
        self.asked.append(since)
        future: Future[None] = Future()
        self.futures.append(future)
        return future

    def finish(self, loaded_at: float | None = None, error: Exception | None = None) -> None:
        future = self.futures.pop(0)
        if error is not None:
            future.set_exception(error)
            return
        self.served = self.clock[0] if loaded_at is None else loaded_at
        future.set_result(None)


def debounced(min_interval: float = 1.0) -> tuple[ChangeReloads, Reloads, FakeScheduler,
                                                   list[float], CacheMetrics]:
    clock = [100.0]
    runtime = Reloads(clock)
    scheduler = FakeScheduler(clock)
    metrics = CacheMetrics()
    reloads = ChangeReloads(served_since=lambda: runtime.served, reload=runtime.reload,
                            min_interval=min_interval, metrics=metrics,
                            clock=lambda: clock[0], call_later=scheduler, describe="t")
    return reloads, runtime, scheduler, clock, metrics


def test_a_burst_of_changes_makes_one_reload_after_the_settle_time() -> None:
    reloads, runtime, scheduler, clock, metrics = debounced()
    reloads.changes([Change(((1,),))])
    clock[0] += 0.01
    reloads.changes([Change(((2,),)), Change(((3,),))])
    assert scheduler.run_due() == 0
    clock[0] = 100.0 + SETTLE_SECONDS
    assert scheduler.run_due() == 1
    assert runtime.asked == [100.01]  # a load must start after the latest change
    assert metrics.num_notifications == 3


def test_reloads_for_changes_are_min_interval_apart() -> None:
    reloads, runtime, scheduler, clock, _ = debounced(min_interval=5.0)
    reloads.changes([Change(((1,),))])
    clock[0] += SETTLE_SECONDS
    scheduler.run_due()
    runtime.finish()
    clock[0] += 1.0
    reloads.changes([Change(((1,),))])
    [(when, _)] = scheduler.jobs
    assert when == pytest.approx(100.0 + SETTLE_SECONDS + 5.0)
    clock[0] = when
    scheduler.run_due()
    assert len(runtime.asked) == 2


def test_a_load_by_another_worker_of_the_host_moves_the_next_round() -> None:
    reloads, runtime, scheduler, clock, _ = debounced(min_interval=5.0)
    runtime.served = 99.0  # the host's store published a version loaded at 99
    reloads.changes([Change(((1,),))])
    [(when, _)] = scheduler.jobs
    assert when == pytest.approx(104.0)
    runtime.served = 99.5  # another worker's load, published meanwhile, began before it
    clock[0] = 104.0
    scheduler.run_due()
    assert runtime.asked == []  # deferred to that load's round, not a second load now
    [(when, _)] = scheduler.jobs
    assert when == pytest.approx(104.5)
    clock[0] = when
    scheduler.run_due()
    assert runtime.asked == [100.0]


def test_no_reload_when_the_snapshot_was_loaded_after_the_change() -> None:
    reloads, runtime, scheduler, clock, _ = debounced()
    reloads.changes([Change(((1,),))])
    runtime.served = clock[0] + 0.001  # a scheduled load started just after it
    clock[0] += SETTLE_SECONDS
    scheduler.run_due()
    assert runtime.asked == []


def test_a_joined_load_that_started_before_the_change_is_followed_by_another() -> None:
    reloads, runtime, scheduler, clock, _ = debounced(min_interval=0.0)
    reloads.changes([Change(((1,),))])
    clock[0] += SETTLE_SECONDS
    scheduler.run_due()
    runtime.finish(loaded_at=99.0)  # the load joined had started before the change
    clock[0] += SETTLE_SECONDS
    assert scheduler.run_due() == 1
    assert runtime.asked == [100.0, 100.0]
    runtime.finish()
    assert scheduler.jobs == []


def test_a_failed_reload_is_left_to_the_schedule() -> None:
    reloads, runtime, scheduler, clock, _ = debounced(min_interval=0.0)
    reloads.changes([Change(((1,),))])
    clock[0] += SETTLE_SECONDS
    scheduler.run_due()
    runtime.finish(error=ConnectionError("down"))
    assert scheduler.jobs == []


def test_a_reconnection_reloads_and_is_counted() -> None:
    reloads, runtime, scheduler, clock, metrics = debounced()
    reloads.connected(reconnected=True)
    clock[0] += SETTLE_SECONDS
    scheduler.run_due()
    assert runtime.asked == [100.0]
    assert metrics.num_reconnect_flushes == 1
    reloads.close()
    reloads.changes([Change(((1,),))])
    assert scheduler.jobs == []


# --- full caches: end to end


class ScanOnlySource(CountingSqlSource):
    """The table without a keyed lookup (as files, Delta, Iceberg): changes reload it."""

    def keyed_table(self, key_columns: Sequence[str]) -> None:
        return None


def full(db: Path, counter: Path, feed: ChangeFeed, *, keyed: bool = False,
         **kw: Any) -> FullCachingLookupProvider:
    """A full cache of the table; ``keyed``: changes go to its overlay, else reload."""
    kw.setdefault("share_across_workers", False)
    source = (CountingSqlSource if keyed else ScanOnlySource)(db, counter)
    return FullCachingLookupProvider.of(source, ManualTrigger(), ["id"], parallelism=2,
                                        changes=feed, **kw)


def set_name(db: Path, key: int, name: str) -> None:
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE customers SET name = ? WHERE id = ?", (name, key))
    conn.close()


def test_a_full_cache_reloads_soon_after_a_change(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    with open_lookup(full(db, counter, feed)) as handle:
        assert handle.lookup((3,))[0][1] == "n3"
        assert count_lines(counter) == 1  # listening before the first load: no second
        set_name(db, 3, "changed")
        feed.publish([(3,)])
        wait_until(lambda: handle.lookup((3,))[0][1] == "changed", "the reload")
        assert count_lines(counter) == 2
        assert handle.metrics.num_notifications == 1


def test_a_full_cache_reloads_after_reconnecting(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    with open_lookup(full(db, counter, feed)) as handle:
        handle.lookup((3,))
        feed.drop_connections(refuse=True)
        set_name(db, 3, "changed")
        feed.publish([(3,)])  # lost
        feed.accept_connections()
        wait_until(lambda: handle.lookup((3,))[0][1] == "changed", "the reload")
        assert handle.metrics.num_reconnect_flushes == 1


def test_a_shared_store_loads_once_per_change_for_the_host(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    provider = full(db, counter, feed, share_across_workers=True)
    runtimes = [FullCachingRuntime(provider, store=SnapshotStore(
        tmp_path / "store", fingerprint=provider.snapshot_fingerprint())) for _ in range(3)]
    try:
        for runtime in runtimes:
            runtime.open()
            runtime.trigger_reload().result(TIMEOUT)
        assert count_lines(counter) == 1  # one load, served by all three
        set_name(db, 3, "changed")
        feed.publish([(3,)])
        for runtime in runtimes:
            wait_until(lambda r=runtime: r.lookup((3,))[0][1] == "changed", "the reload")
        assert count_lines(counter) == 2
    finally:
        for runtime in runtimes:
            runtime.close()


def settle(runtime: FullCachingRuntime) -> None:
    """Wait until no reload for changes is waiting, starting or running."""
    reloads = runtime._change_reloads
    assert reloads is not None
    wait_until(reloads.idle, "the reloads for changes")


def test_a_worker_that_starts_listening_reloads_only_what_nobody_covered(
        tmp_path: Path) -> None:
    """Two workers of a host, each with its own listener (two feeds here, as two
    processes each LISTEN on their own connection): a listener that connects reloads
    only when no other has listened since before the snapshot served was loaded."""
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feeds = [InProcessChanges(["id"], min_interval=0) for _ in range(2)]
    runtimes = []
    try:
        for feed in feeds:
            provider = full(db, counter, feed, share_across_workers=True)
            runtime = FullCachingRuntime(provider, store=SnapshotStore(
                tmp_path / "store", fingerprint=provider.snapshot_fingerprint()))
            runtime.open()
            settle(runtime)
            runtimes.append(runtime)
        first, second = runtimes
        assert count_lines(counter) == 1  # the first listened since before its load

        feeds[1].drop_connections(refuse=True)
        set_name(db, 3, "heard by the first only")
        assert feeds[0].publish([(3,)]) == 1
        feeds[1].accept_connections()
        wait_until(lambda: second.metrics.num_reconnect_flushes == 1, "the reconnection")
        for runtime in runtimes:
            wait_until(lambda r=runtime: r.lookup((3,))[0][1] == "heard by the first only",
                       "the reload")
        assert count_lines(counter) == 2  # the first's, for the host

        feeds[0].drop_connections(refuse=True)
        set_name(db, 4, "heard by the second only")
        assert feeds[1].publish([(4,)]) == 1
        wait_until(lambda: second.lookup((4,))[0][1] == "heard by the second only", "the reload")
        feeds[0].accept_connections()
        wait_until(lambda: first.metrics.num_reconnect_flushes == 1, "the reconnection")
        settle(first)
        assert count_lines(counter) == 3  # the second covered the first's outage
    finally:
        for runtime in runtimes:
            runtime.close()


def test_listening_marks(tmp_path: Path) -> None:
    mine, other = HostListeners(tmp_path), HostListeners(tmp_path)
    assert not mine.covered(100.0)
    other.listening(10.0)
    assert mine.covered(20.0)
    assert not mine.covered(5.0)  # it started listening after that load
    other.leave_pending(30.0)  # a change it heard was not reloaded for yet
    assert not mine.covered(20.0)
    assert mine.covered(31.0)
    other.stopped()
    assert not mine.covered(31.0)
    dead = tmp_path / ".listening-1-dead"
    dead.write_text("1.0")  # no lock held: its process is gone
    assert not mine.covered(31.0)
    assert not dead.exists()
