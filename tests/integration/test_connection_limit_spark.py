"""A partial cache over a PostgreSQL role with CONNECTION LIMIT 2 (issue 44: every task
failed with "too many connections for role"), joined by more concurrent tasks than the
role has connections left: the job completes with the right rows and no failed load,
its waits counted. Classic and Spark Connect sessions."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cache import DefaultLookupCache
from lookup import PartialCachingLookupProvider, SqlLookupFunction, lookup_join, lookup_metrics
from tests.pg_roles import role_reading_dim

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.whole_suite_only]

KEYS = 2_000
EVENTS = 20_000


@pytest.fixture
def limited_role(postgres_dsn: str, pg_schema: str) -> Iterator[str]:
    """A login role with CONNECTION LIMIT 2 reading ``dim`` (KEYS rows) of the test's
    schema, one of its two connections held by the test throughout: the workers have
    one left, fewer than the session's concurrent tasks. Dropped afterwards."""
    with role_reading_dim(postgres_dsn, pg_schema, connection_limit=2, ids="g",
                          count=KEYS, first=0) as role, psycopg.connect(postgres_dsn, user=role):
        yield role


@pytest.fixture
def small_batches(spark: Any) -> Iterator[None]:
    """Arrow batches of 500 rows: each task loads many times, so the tasks overlap."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "500")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def _join(spark: Any, provider: PartialCachingLookupProvider) -> None:
    stream = spark.range(0, EVENTS).selectExpr(f"id % {KEYS} AS id", "id AS event") \
        .repartition(4)
    rows = lookup_join(stream, provider, on="id", metrics=True).collect()
    assert len(rows) == EVENTS
    assert all(row["name"] == f"n{row['id']}" for row in rows)


class _SignallingConnect:
    """psycopg.connect for the role, which first creates ``signal`` (on the workers):
    the test sees when the first load tries to connect."""

    def __init__(self, dsn: str, role: str, schema: str, signal: Path) -> None:
        self.connect = functools.partial(psycopg.connect, dsn, user=role,
                                         options=f"-c search_path={schema}",
                                         connect_timeout=10)
        self.signal = signal

    def __call__(self) -> Any:
        self.signal.touch()
        return self.connect()


def _provider(postgres_dsn: str, pg_schema: str, role: str, signal: Path, **options: Any
              ) -> PartialCachingLookupProvider:
    connect = _SignallingConnect(postgres_dsn, role, pg_schema, signal)
    # A small cache: keys keep being loaded, so every task keeps needing connections.
    cache = DefaultLookupCache.new_builder().maximum_size(200).build()
    return PartialCachingLookupProvider.of(
        SqlLookupFunction(connect, "dim", "id", schema="id BIGINT, name STRING"), cache,
        load_timeout=120, **options)


def _release_after_first_connect(held: Any, signal: Path) -> threading.Thread:
    """Close ``held`` (the role's last free connection) a second after a worker first
    tried to connect (or after a minute): that try was refused, and waited for."""
    def release() -> None:
        deadline = time.monotonic() + 60
        while not signal.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.0)
        held.close()

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    return thread


def test_a_source_over_its_connection_limit_is_waited_for(
        spark: Any, postgres_dsn: str, pg_schema: str, limited_role: str,
        small_batches: None, tmp_path: Path) -> None:
    # The default budget (4 a host) allows more than the role: the role refuses, and the
    # refused loads wait (their queue tickets make the others' idle connections close).
    # The test holds the role's last connection until a worker has tried to connect, so
    # that the first load is refused whatever the tasks' timing.
    # Each worker caches alone, so that loads overlap: a host tier's single loads would
    # mostly keep them under the role's limit.
    # Adaptive concurrency off too: it lowers the host's limit under the role's once the
    # role refuses, which is its job, and then nothing more is refused to wait for.
    signal = tmp_path / "connecting"
    provider = _provider(postgres_dsn, pg_schema, limited_role, signal,
                         share_across_workers=False, adaptive_concurrency=False)
    held = psycopg.connect(postgres_dsn, user=limited_role)
    releaser = _release_after_first_connect(held, signal)
    try:
        _join(spark, provider)
    finally:
        releaser.join(timeout=70)
        held.close()
    metrics = lookup_metrics(provider)
    assert metrics.num_load_failures == 0
    assert metrics.num_connection_waits >= 1
    assert metrics.load_count >= 4


def test_the_host_budget_keeps_below_the_role_limit(
        spark: Any, postgres_dsn: str, pg_schema: str, limited_role: str,
        small_batches: None, tmp_path: Path) -> None:
    # One connection a host: the workers queue for it, and the role never refuses one.
    provider = _provider(postgres_dsn, pg_schema, limited_role, tmp_path / "connecting",
                         max_source_connections=1, max_retries=0)
    _join(spark, provider)
    metrics = lookup_metrics(provider)
    assert metrics.num_load_failures == 0
    assert metrics.num_retries == 0
