"""A partial cache with a change feed shares its host tier: a changed key is dropped
there for every worker, a load that raced a change is not shared, a reconnection
flushes the tier, and a worker whose feed does not listen keeps its loads to itself.
Workers are runtimes of one provider (what the tier sees of two processes: separate
in-process caches over one directory); the feed is ``InProcessChanges``."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from lookup import PartialCachingLookupProvider
from lookup.runtime.partial import LoadingRuntime
from tests.lookup.changes.in_process_changes import InProcessChanges
from tests.lookup.changes.test_feed import TIMEOUT, ArrowTable, cache
from tests.polling import wait_until


def provider(table: ArrowTable, feed: InProcessChanges) -> PartialCachingLookupProvider:
    return PartialCachingLookupProvider.of(table, cache(), changes=feed,
                                           share_across_workers=True)


@contextmanager
def worker(p: PartialCachingLookupProvider) -> Iterator[LoadingRuntime]:
    """A worker of ``p``: its own in-process cache, the provider's host tier."""
    runtime = LoadingRuntime(dataclasses.replace(p, cache=cache()))
    runtime.open()
    try:
        yield runtime
    finally:
        runtime.close()


def names(runtime: LoadingRuntime, keys: list[int]) -> list[Any]:
    answers = runtime.probe([pa.array(keys, pa.int64())])
    column = answers.rows.column("name").to_pylist()
    return [column[r] if r >= 0 else None for r in answers.first_rows().tolist()]


def notified(*runtimes: LoadingRuntime, count: int = 1) -> None:
    wait_until(lambda: all(r.metrics.num_notifications >= count for r in runtimes),
               "every worker's notification")


def test_a_change_drops_the_key_from_the_host_tier_for_every_worker() -> None:
    table, feed = ArrowTable({1: "a", 2: "b"}), InProcessChanges(["id"])
    p = provider(table, feed)
    with worker(p) as a, worker(p) as b:
        assert names(a, [1, 2]) == ["a", "b"]
        assert names(b, [1, 2]) == ["a", "b"]
        assert (b.metrics.num_host_hits, len(table.loads)) == (2, 1)
        table.rows[1] = "A"
        feed.publish([(1,)])
        notified(a, b)
        with worker(p) as c:  # a worker with nothing in-process
            assert names(c, [1, 2]) == ["A", "b"]
            assert c.metrics.num_host_hits == 1  # 2 only
        assert names(b, [1]) == ["A"]
        assert table.loads[1:] == [[(1,)]]  # loaded once more, by c, then shared


def test_a_load_that_raced_a_change_is_not_shared() -> None:
    table, feed = ArrowTable({1: "a"}), InProcessChanges(["id"])
    p = provider(table, feed)
    with worker(p) as a, worker(p) as b:
        table.hold = threading.Event()
        racing = threading.Thread(target=lambda: names(a, [1]), daemon=True)
        racing.start()
        try:
            assert table.reading.wait(TIMEOUT)  # a's load read "a" and waits
            table.rows[1] = "A"
            feed.publish([(1,)])
            notified(a, b)
        finally:
            table.hold.set()
            racing.join(TIMEOUT)
        table.hold = None
        assert names(b, [1]) == ["A"]
        assert b.metrics.num_host_hits == 0
        assert names(a, [1]) == ["A"]


def test_a_reconnection_flushes_the_host_tier() -> None:
    table, feed = ArrowTable({1: "a", 2: "b"}), InProcessChanges(["id"])
    p = provider(table, feed)
    with worker(p) as a, worker(p) as b:
        assert names(a, [1, 2]) == ["a", "b"]
        feed.drop_connections(refuse=True)
        table.rows[1] = "A"
        assert feed.publish([(1,)]) == 0  # lost: nobody listens
        feed.accept_connections()
        wait_until(lambda: a.metrics.num_reconnect_flushes == 1
                   and b.metrics.num_reconnect_flushes == 1, "the flushes")
        loads = len(table.loads)
        with worker(p) as c:
            assert names(c, [1, 2]) == ["A", "b"]
            assert c.metrics.num_host_hits == 0  # the tier was flushed
        assert names(b, [1]) == ["A"]
        assert len(table.loads) == loads + 1  # b's miss was c's load, shared


def test_a_worker_whose_feed_does_not_listen_keeps_its_loads() -> None:
    table = ArrowTable({1: "a", 2: "b"})
    feed = InProcessChanges(["id"], connect_timeout=0)
    feed.drop_connections(refuse=True)
    p = provider(table, feed)
    try:
        with worker(p) as a, worker(p) as b:
            assert names(a, [1]) == ["a"]
            assert names(b, [1]) == ["a"]
            assert b.metrics.num_host_hits == 0
            assert len(table.loads) == 2  # a change now would reach no one: not shared
            feed.accept_connections()
            assert feed.wait_for_connects(1, TIMEOUT)
            wait_until(lambda: _shares(a) and _shares(b), "the feed to listen")
            assert names(a, [2]) == ["b"]
            assert names(b, [2]) == ["b"]
            assert b.metrics.num_host_hits == 1
    finally:
        feed.accept_connections()


def _shares(runtime: LoadingRuntime) -> bool:
    """Whether the worker's feed listens, so that its loads from now on are shared (set
    on the listener's thread once connected)."""
    guard, host = runtime._guard, runtime._host
    return guard is not None and host is not None and guard.listened_since(host.now_ms())
