"""CacheMetrics: counters, gauges, snapshots, merging across workers."""

from __future__ import annotations

import pickle
import threading

import pytest

from cache import CacheMetrics
from cache.metrics import FIELDS


def test_fresh_metrics() -> None:
    m = CacheMetrics()
    assert m.as_dict() == {
        "hit_count": 0, "miss_count": 0, "load_count": 0, "num_load_failures": 0,
        "num_retries": 0, "num_cache_errors": 0, "num_bad_values": 0, "reloads_skipped": 0,
        "num_notifications": 0, "num_keys_invalidated": 0, "num_reconnect_flushes": 0,
        "num_change_reads": 0, "num_connection_waits": 0, "connection_wait_ms": 0,
        "num_host_hits": 0, "num_host_waits": 0,
        "num_concurrency_decreases": 0, "num_concurrency_increases": 0,
        "num_out_of_retention": 0, "latest_load_time": -1, "source_concurrency_limit": -1,
        "num_cached_records": 0, "num_cached_bytes": 0,
    }


def test_connection_waits_count_and_add_up() -> None:
    m = CacheMetrics()
    m.record_connection_wait(0.25)
    m.record_connection_wait(0.0104)
    assert (m.num_connection_waits, m.connection_wait_ms) == (2, 260)
    total = m + CacheMetrics.from_dict(m.as_dict())
    assert (total.num_connection_waits, total.connection_wait_ms) == (4, 520)


def test_concurrency_changes_count_and_the_lowest_known_limit_wins() -> None:
    m = CacheMetrics()
    m.record_concurrency(4)
    m.record_concurrency(3, -1)
    m.record_concurrency(2, -1)
    m.record_concurrency(3, +1)
    assert (m.num_concurrency_decreases, m.num_concurrency_increases) == (2, 1)
    assert m.source_concurrency_limit == 3
    other = CacheMetrics()
    other.record_concurrency(1, -1)
    total = CacheMetrics.sum([m, other.as_dict(), CacheMetrics()])  # -1: not known there
    assert (total.num_concurrency_decreases, total.source_concurrency_limit) == (3, 1)
    assert (CacheMetrics() + CacheMetrics()).source_concurrency_limit == -1
    assert CacheMetrics.from_dict(m.as_dict()) == m


def test_counters_and_gauges() -> None:
    m = CacheMetrics()
    m.inc_hits(3)
    m.inc_misses()
    m.inc_loads()
    m.inc_load_failures()
    m.inc_retries(2)
    m.inc_cache_errors()
    m.record_load_time(12.6)
    m.register_gauges(lambda: (5, 500))
    assert (m.hit_count, m.miss_count, m.load_count, m.num_load_failures) == (3, 1, 1, 1)
    assert (m.num_retries, m.num_cache_errors, m.latest_load_time) == (2, 1, 13)
    assert (m.num_cached_records, m.num_cached_bytes) == (5, 500)


def test_change_feed_counters() -> None:
    m = CacheMetrics()
    m.inc_notifications(3)
    m.inc_keys_invalidated(5)
    m.inc_reconnect_flushes()
    assert (m.num_notifications, m.num_keys_invalidated, m.num_reconnect_flushes) == (3, 5, 1)
    assert (m + m).num_keys_invalidated == 10


def test_out_of_retention_rows_count_and_travel() -> None:
    m = CacheMetrics()
    m.inc_out_of_retention(4)
    m.inc_out_of_retention()
    assert m.num_out_of_retention == 5
    assert CacheMetrics.from_dict(m.as_dict()) == m
    assert CacheMetrics.sum([m, m.as_dict()]).num_out_of_retention == 10


def test_sum_adds_counters_and_gauges_and_keeps_the_max_load_time() -> None:
    a, b = CacheMetrics(), CacheMetrics()
    a.inc_hits(2)
    a.record_load_time(5)
    a.register_gauges(lambda: (10, 100))
    b.inc_hits(3)
    b.inc_misses(1)
    b.record_load_time(7)
    total = CacheMetrics.sum([a, b.as_dict()])
    assert total.hit_count == 5
    assert total.miss_count == 1
    assert total.latest_load_time == 7
    assert total.num_cached_records == 10
    assert total.num_cached_bytes == 100
    assert (a + b) == total


def test_snapshot_round_trip_and_pickle() -> None:
    m = CacheMetrics()
    m.inc_loads(4)
    m.register_gauges(lambda: (1, 2))
    assert CacheMetrics.from_dict(m.as_dict()) == m
    assert CacheMetrics.from_snapshot(m.snapshot()) == m  # the former names
    assert pickle.loads(pickle.dumps(m)).as_dict() == m.as_dict()
    with pytest.raises(ValueError, match="unknown metric"):
        CacheMetrics.from_dict({"bogus": 1})
    assert set(m.as_dict()) == set(FIELDS)


def test_counting_is_thread_safe() -> None:
    m = CacheMetrics()

    def bump() -> None:
        for _ in range(10_000):
            m.inc_hits()

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.hit_count == 80_000
