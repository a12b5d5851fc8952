"""A PostgreSQL change feed in Spark's Python workers, on classic and Spark Connect
sessions: the listener starts in the workers with the provider's runtime, a committed
UPDATE reaches their caches, and the feed's metrics reach the driver."""

from __future__ import annotations

import functools
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from cache import DefaultLookupCache
from lookup import (
    PartialCachingLookupProvider,
    PostgresChanges,
    SqlLookupFunction,
    lookup_join,
    lookup_metrics,
)

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.whole_suite_only]

TIMEOUT = 60.0


def test_a_committed_update_reaches_the_workers_caches(spark: Any, postgres_dsn: str,
                                                       pg_schema: str) -> None:
    connect = functools.partial(psycopg.connect, postgres_dsn,
                                options=f"-c search_path={pg_schema}")
    with connect() as conn:
        conn.execute("CREATE TABLE dim (id bigint PRIMARY KEY, name text NOT NULL)")
        conn.execute("INSERT INTO dim SELECT g, 'v0' FROM generate_series(1, 20) AS g")
        conn.commit()
    feed = PostgresChanges(connect, f"{pg_schema}.dim")
    feed.install()
    provider = PartialCachingLookupProvider.of(
        SqlLookupFunction(connect, "dim", "id"),
        DefaultLookupCache.new_builder().expire_after_write(timedelta(hours=1)).build(),
        changes=feed)
    stream = spark.range(1, 21).repartition(2)

    def names() -> set[str]:
        rows = lookup_join(stream, provider, on="id", metrics=True).collect()
        return {row["name"] for row in rows}

    assert names() == {"v0"}  # the workers' caches hold every key, their feeds listen
    with connect() as conn:
        conn.execute("UPDATE dim SET name = 'v1'")
        conn.commit()
    deadline = time.monotonic() + TIMEOUT
    while (seen := names()) != {"v1"}:  # a TTL of an hour: only the feed can do this
        assert time.monotonic() < deadline, f"still {seen}"
    metrics = lookup_metrics(provider)
    assert metrics.num_notifications >= 1
    assert metrics.num_keys_invalidated >= 1
    assert metrics.num_reconnect_flushes == 0
