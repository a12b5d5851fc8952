"""Full-cache reloads that fail for many consecutive firings (issue 8): the table is
renamed away in PostgreSQL while a periodic trigger fires every 200 ms. Lookups keep
answering from the last good snapshot, the metrics count every failed firing, and
the first reload after the table is back picks up the new data, whole."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import pytest

from lookup import FullCachingLookupProvider, RetryPolicy, open_lookup
from lookup.runtime.full import FullCachingRuntime
from scan import SqlTableSource
from tests.connectors.conftest import pg_exec
from tests.polling import wait_until
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.postgres

KEYS = [(i,) for i in range(60)]  # 0 and 50..59 are absent


def expected(generation: int) -> dict[tuple[int], tuple[tuple[Any, ...], ...]]:
    return {(i,): ((i, f"n{i}", generation),) if 1 <= i < 50 else () for (i,) in KEYS}


@pytest.fixture
def table(postgres_dsn: str, pg_schema: str) -> Any:
    def run(sql: str, *params: Any) -> None:
        pg_exec(postgres_dsn, pg_schema, sql, *params)

    run("CREATE TABLE dim (id bigint PRIMARY KEY, name text NOT NULL, gen int NOT NULL)")
    run("INSERT INTO dim SELECT i, 'n' || i, 1 FROM generate_series(1, 49) AS i")
    return run


def provider(postgres_dsn: str, pg_schema: str, trigger: Any) -> FullCachingLookupProvider:
    import psycopg

    connect = functools.partial(psycopg.connect, postgres_dsn,
                                options=f"-c search_path={pg_schema}")
    source = SqlTableSource(connect, "dim", schema="id BIGINT, name STRING, gen INT",
                            chunk_size=20)
    return FullCachingLookupProvider.of(
        source, trigger, ["id"], parallelism=2, share_across_workers=False,
        retry_policy=RetryPolicy(max_retries=1, initial_backoff=0.01),
        initial_load_timeout=60)


@pytest.mark.slow
def test_periodic_reloads_failing_for_many_firings_keep_the_last_snapshot(
    postgres_dsn: str, pg_schema: str, table: Any
) -> None:
    trigger = PeriodicCacheReloadTrigger(timedelta(milliseconds=200))
    with open_lookup(provider(postgres_dsn, pg_schema, trigger)) as handle:
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        assert handle.lookup_batch(KEYS) == expected(1)
        wait_until(lambda: handle.metrics.load_count >= 2, "a periodic reload", timeout=30)

        table("ALTER TABLE dim RENAME TO dim_away")
        wait_until(lambda: handle.metrics.num_load_failures >= 1, "a failed reload", timeout=30)
        # From now on every firing fails; none is in flight that could still succeed.
        loads = handle.metrics.load_count
        version = runtime.cache.current().version
        failures = handle.metrics.num_load_failures

        def five_more_failed() -> bool:
            assert handle.lookup_batch(KEYS) == expected(1)  # the last good snapshot
            return handle.metrics.num_load_failures >= failures + 5

        wait_until(five_more_failed, "five more failed firings", timeout=60)
        metrics = handle.metrics
        assert metrics.load_count == loads
        assert runtime.cache.current().version == version
        assert "dim" in repr(runtime.cache.last_error)
        assert metrics.num_retries == 0  # a missing table is permanent: never retried

        # Back with new data in one transaction: no reload can see the old rows again.
        table("ALTER TABLE dim_away RENAME TO dim; UPDATE dim SET gen = 2; "
              "INSERT INTO dim VALUES (50, 'n50', 2)")
        now = expected(2)
        now[(50,)] = ((50, "n50", 2),)

        def recovered() -> bool:
            got = handle.lookup_batch(KEYS)
            assert got in (expected(1), now)  # one whole version or the other
            return got == now

        wait_until(recovered, "a reload with the new data", timeout=60)
        metrics = handle.metrics
        assert metrics.load_count > loads
        assert runtime.cache.current().version > version
        assert runtime.cache.last_error is None
        failed = metrics.num_load_failures
        assert failed >= failures + 5
        assert metrics.num_retries == 0


def test_explicit_reloads_fail_with_the_source_error_and_count(
    postgres_dsn: str, pg_schema: str, table: Any
) -> None:
    trigger = PeriodicCacheReloadTrigger(timedelta(hours=1))  # loads at open only
    with open_lookup(provider(postgres_dsn, pg_schema, trigger)) as handle:
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        assert handle.lookup_batch(KEYS) == expected(1)
        table("ALTER TABLE dim RENAME TO dim_away")
        for firing in range(1, 6):
            with pytest.raises(Exception, match=r"table 'dim'.*does not exist"):
                runtime.trigger_reload().result(timeout=60)
            assert handle.lookup_batch(KEYS) == expected(1)
            metrics = handle.metrics
            # A missing table is permanent: each firing fails at once, no retry.
            assert (metrics.num_load_failures, metrics.num_retries) == (firing, 0)
            assert metrics.load_count == 1
            assert metrics.num_cached_records == 49  # the snapshot still serves
        table("ALTER TABLE dim_away RENAME TO dim")
        table("UPDATE dim SET gen = 2")
        runtime.trigger_reload().result(timeout=60)
        assert handle.lookup_batch(KEYS) == expected(2)
        assert (handle.metrics.load_count, handle.metrics.num_load_failures) == (2, 5)
