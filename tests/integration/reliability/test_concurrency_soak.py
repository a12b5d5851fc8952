"""Concurrency soak (issue 8): 8 threads for ``SOAK_SECONDS`` (default 4; a longer soak:
``SOAK_SECONDS=60``) against each cache type, through open_lookup and the cache API:
DefaultLookupCache, a full cache reloaded meanwhile, RedisLookupCache and
TieredLookupCache.

No thread may see an error or a wrong row for its key; size bounds hold at every
sample; the hit and miss counters add up exactly to the keys asked (counters updated
from 8 threads lose nothing); a full cache's batches each come from one whole version,
never older than the one before.
"""

from __future__ import annotations

import functools
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cache import DefaultLookupCache, LookupCache, RedisLookupCache, TieredLookupCache
from lookup import (
    FullCachingLookupProvider,
    LookupFunction,
    PartialCachingLookupProvider,
    open_lookup,
)
from lookup.runtime.full import FullCachingRuntime
from scan import SqlTableSource
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.slow

SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "4"))
THREADS = 8
MAX_OVERRUN = 6
KEY_SPACE = 1000
MAX_SIZE = 100
# Timeouts far above any latency of a loaded machine: this soak is about concurrency;
# a timeout would be served as a miss and counted as a cache error (by design).
PATIENT = {"socket_timeout": 10.0, "connect_timeout": 10.0}


def rows_of(k: int) -> tuple[tuple[int, str], ...]:
    """The dimension: no rows for multiples of 7, two for multiples of 5, else one."""
    if k % 7 == 0:
        return ()
    if k % 5 == 0:
        return ((k, f"v{k}"), (k, f"v{k}-2"))
    return ((k, f"v{k}"),)


class Computed(LookupFunction):
    """The dimension above, computed (a source that never fails or lags)."""

    schema = "id BIGINT, name STRING"
    key_columns = ["id"]

    def lookup(self, key: tuple[Any, ...]) -> Sequence[tuple[Any, ...]]:
        return rows_of(key[0])

    def lookup_batch(self, keys: Sequence[tuple[Any, ...]]) -> Mapping[tuple[Any, ...], Any]:
        return {key: rows_of(key[0]) for key in keys}


class Counter:
    """A thread-safe tally of the keys the threads asked (what the metrics must say)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.value += n


def soak(workers: list[Callable[[random.Random], None]], check: Callable[[], None],
         seconds: float = SOAK_SECONDS, rounds: int = 1) -> list[int]:
    """Run each worker in a loop in its own thread for ``seconds``, and on past them
    (for at most ``MAX_OVERRUN`` times as long) until every worker has done ``rounds``
    iterations, calling ``check`` from this thread meanwhile; returns the iterations
    of each worker. Any exception of a worker or of ``check`` fails the test."""
    stop = threading.Event()
    start = threading.Barrier(len(workers) + 1)
    errors: list[BaseException] = []
    counts = [0] * len(workers)

    def run(index: int, work: Callable[[random.Random], None]) -> None:
        rng = random.Random(index)
        start.wait()
        try:
            while not stop.is_set():
                work(rng)
                counts[index] += 1
        except BaseException as exc:  # reported below
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(i, w), name=f"soak-{i}")
               for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.monotonic()
    # A busy machine can starve a slow worker for the whole soak: go on until it has
    # done its rounds, so what the test asserts afterwards does not depend on load.
    try:
        while not stop.is_set():
            elapsed = time.monotonic() - began
            if elapsed >= seconds and (min(counts) >= rounds
                                       or elapsed >= seconds * MAX_OVERRUN):
                break
            check()
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a soak thread hung"
    if errors:
        raise errors[0]
    assert min(counts) >= rounds, f"a thread made too little progress: {counts}"
    return counts


def random_keys(rng: random.Random) -> list[tuple[int]]:
    return [(rng.randrange(KEY_SPACE),) for _ in range(rng.randint(1, 50))]


def lookup_worker(handle: Any, asked: Counter) -> Callable[[random.Random], None]:
    def work(rng: random.Random) -> None:
        keys = random_keys(rng)
        result = handle.lookup_batch(keys)
        asked.add(len(set(keys)))
        for key in keys:
            assert result[key] == rows_of(key[0]), key
    return work


def cache_api_worker(cache: LookupCache, asked: Counter) -> Callable[[random.Random], None]:
    """get_if_present, put and invalidate straight on the cache, next to the runtime."""
    def work(rng: random.Random) -> None:
        key = (rng.randrange(KEY_SPACE),)
        action = rng.random()
        if action < 0.6:
            rows = cache.get_if_present(key)
            asked.add(1)
            assert rows is None or tuple(rows) == rows_of(key[0]), (key, rows)
        elif action < 0.85:
            cache.put(key, rows_of(key[0]))
        else:
            cache.invalidate(key)
    return work


def soak_partial(cache: LookupCache, bound: Callable[[], None]) -> Any:
    """6 threads of lookup_batch through open_lookup and 2 on the cache API."""
    provider = PartialCachingLookupProvider.of(Computed(), cache)
    asked = Counter()
    with open_lookup(provider) as handle:
        workers = [lookup_worker(handle, asked) for _ in range(THREADS - 2)]
        workers += [cache_api_worker(cache, asked) for _ in range(2)]
        soak(workers, bound)
        bound()
        metrics = handle.metrics
        assert metrics.hit_count + metrics.miss_count == asked.value
        assert metrics.num_load_failures == 0
        assert metrics.num_cache_errors == 0
        assert metrics.hit_count > 0
        return metrics


def test_default_cache(tmp_path: Path) -> None:
    cache = (DefaultLookupCache.new_builder().maximum_size(MAX_SIZE)
             .expire_after_write(timedelta(milliseconds=50)).build())

    def bound() -> None:
        assert cache.size() <= MAX_SIZE
        assert cache.metrics.num_cached_records <= MAX_SIZE

    soak_partial(cache, bound)


@pytest.mark.redis
def test_redis_cache(redis_url: str, redis_prefix: str, redis_client: Any) -> None:
    ttl_ms = 2000
    cache = RedisLookupCache(redis_url, redis_prefix.rstrip(":"), ttl=ttl_ms / 1000, **PATIENT)

    def bound() -> None:
        names = list(redis_client.scan_iter(match=redis_prefix + "*", count=1000))
        assert len(names) <= KEY_SPACE
        for name in names[:20]:  # every entry has a TTL, no longer than the cache's
            ttl = redis_client.pttl(name)
            assert ttl == -2 or 0 <= ttl <= ttl_ms, ttl  # -2: expired since the scan

    soak_partial(cache, bound)


@pytest.mark.redis
def test_tiered_cache(redis_url: str, redis_prefix: str) -> None:
    near = DefaultLookupCache.new_builder().maximum_size(MAX_SIZE).build()
    cache = TieredLookupCache(
        near, RedisLookupCache(redis_url, redis_prefix.rstrip(":"), ttl=5, **PATIENT))

    def bound() -> None:
        assert near.size() <= MAX_SIZE
        assert cache.size() <= MAX_SIZE

    metrics = soak_partial(cache, bound)
    assert cache.l2_metrics.hit_count > 0  # L1 misses were answered by Redis
    assert metrics.hit_count == cache.l1_metrics.hit_count + cache.l2_metrics.hit_count


def test_full_cache_reloaded_meanwhile(tmp_path: Path) -> None:
    """8 lookup threads while a ninth rewrites the table and reloads, again and again."""
    path = tmp_path / "dim.db"
    present = [k for k in range(KEY_SPACE) if k % 7]
    with sqlite3.connect(path) as connection:
        connection.execute(
            "CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT NOT NULL, gen INTEGER)")
        connection.executemany("INSERT INTO dim VALUES (?, ?, 1)",
                               [(k, f"v{k}") for k in present])
    connection.close()
    source = SqlTableSource(functools.partial(sqlite3.connect, str(path)), "dim",
                            schema="id BIGINT, name STRING, gen INT", chunk_size=250)
    provider = FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"], parallelism=2,
        share_across_workers=False, initial_load_timeout=60)
    generation = [1]
    asked = Counter()

    with open_lookup(provider) as handle:
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        handle.lookup((1,))  # the first load

        def reload(rng: random.Random) -> None:
            with sqlite3.connect(path) as writer:
                writer.execute("UPDATE dim SET gen = ?", (generation[0] + 1,))
            writer.close()
            runtime.trigger_reload().result(timeout=60)
            generation[0] += 1

        def lookup(seen: list[int]) -> Callable[[random.Random], None]:
            def work(rng: random.Random) -> None:
                keys = random_keys(rng)
                result = handle.lookup_batch(keys)
                asked.add(len(set(keys)))
                gens = {row[2] for key in keys for row in result[key]}
                assert len(gens) <= 1, f"one batch saw versions {gens}"  # whole versions
                for key in keys:
                    assert [row[:2] for row in result[key]] == (
                        [(key[0], f"v{key[0]}")] if key[0] % 7 else []), key
                if gens:
                    (gen,) = gens
                    assert gen >= seen[0], "a lookup went back to an older version"
                    seen[0] = gen
            return work

        def bound() -> None:
            assert runtime.cache.size() == len(present)
            assert handle.metrics.num_cached_records == len(present)

        soak([lookup([0]) for _ in range(THREADS)] + [reload], bound, rounds=2)
        metrics = handle.metrics
        assert metrics.hit_count + metrics.miss_count == asked.value + 1  # + the first
        assert metrics.num_load_failures == 0
        assert metrics.load_count == generation[0] >= 3  # reloads happened meanwhile
        assert runtime.cache.current().version == generation[0]  # type: ignore[union-attr]
