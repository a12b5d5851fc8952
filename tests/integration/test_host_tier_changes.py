"""Worker processes sharing a partial cache's host tier, kept fresh by a PostgreSQL
change feed, while rows are updated under their lookups: once the updates stop, every
worker answers every key with its committed row (a TTL of an hour: only the feed and
the tier's notes can get there), whichever worker loaded it or heard of it first."""

from __future__ import annotations

import functools
import multiprocessing
import random
import time
from datetime import timedelta
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from cache import DefaultLookupCache
from lookup import PartialCachingLookupProvider, PostgresChanges, SqlLookupFunction
from lookup.runtime.partial import LoadingRuntime

pytestmark = [pytest.mark.postgres, pytest.mark.whole_suite_only]

KEYS = 200
WORKERS = 3
SETTLE_SECONDS = 30.0


def _names(runtime: LoadingRuntime, keys: list[int]) -> list[Any]:
    answers = runtime.probe([pa.array(keys, pa.int64())])
    column = answers.rows.column("name").to_pylist()
    return [column[r] if r >= 0 else None for r in answers.first_rows().tolist()]


def _worker(provider: PartialCachingLookupProvider, seed: int, ready: Any, updating: Any,
            expected: Any, out: Any) -> None:
    runtime = LoadingRuntime(provider)
    runtime.open()  # the feed listens once it returns
    try:
        rng = random.Random(seed)
        _names(runtime, rng.sample(range(KEYS), 40))
        ready.put(seed)
        while updating.is_set():  # lookups racing the updates: loads, hits, host hits
            _names(runtime, rng.sample(range(KEYS), 40))
        want = expected.get(timeout=60)
        deadline = time.monotonic() + SETTLE_SECONDS
        while (got := _names(runtime, list(range(KEYS)))) != want:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        stale = {k: (g, w) for k, (g, w) in enumerate(zip(got, want, strict=True)) if g != w}
        out.put((stale, runtime.metrics.num_host_hits, runtime.metrics.num_notifications))
    finally:
        runtime.close()


def test_workers_sharing_a_tier_converge_on_the_committed_rows(postgres_dsn: str,
                                                               pg_schema: str) -> None:
    connect = functools.partial(psycopg.connect, postgres_dsn,
                                options=f"-c search_path={pg_schema}")
    with connect() as conn:
        conn.execute("CREATE TABLE dim (id bigint PRIMARY KEY, name text NOT NULL)")
        conn.execute(f"INSERT INTO dim SELECT g, 'v0' FROM generate_series(0, {KEYS - 1}) g")
        conn.commit()
    feed = PostgresChanges(connect, f"{pg_schema}.dim")
    feed.install()
    provider = PartialCachingLookupProvider.of(
        SqlLookupFunction(connect, "dim", "id"),
        DefaultLookupCache.new_builder().expire_after_write(timedelta(hours=1)).build(),
        changes=feed, share_across_workers=True)
    context = multiprocessing.get_context("spawn")
    ready, updating, out = context.Queue(), context.Event(), context.Queue()
    updating.set()
    expected = [context.Queue() for _ in range(WORKERS)]
    workers = [context.Process(target=_worker,
                               args=(provider, seed, ready, updating, queue, out), daemon=True)
               for seed, queue in enumerate(expected)]
    for process in workers:
        process.start()
    try:
        for _ in workers:  # each listens and looks up
            ready.get(timeout=120)
        rng = random.Random(99)
        with connect(autocommit=True) as conn:
            for version in range(1, 301):
                hot = rng.sample(range(KEYS), 3)
                conn.execute("UPDATE dim SET name = %s WHERE id = ANY(%s)",
                             (f"v{version}", hot))
                time.sleep(0.005)  # about 2 s of updates under the lookups
            rows = dict(conn.execute("SELECT id, name FROM dim").fetchall())
        updating.clear()
        want = [rows[k] for k in range(KEYS)]
        for queue in expected:
            queue.put(want)
        results = [out.get(timeout=120) for _ in workers]
    finally:
        updating.clear()
        for process in workers:
            process.join(30)
            if process.is_alive():
                process.kill()
    assert [stale for stale, _, _ in results] == [{}] * WORKERS
    assert sum(hits for _, hits, _ in results) > 0  # the tier was shared
    assert all(notifications > 0 for _, _, notifications in results)
