"""The Redis tier of a TieredLookupCache goes down (issue 8): a private redis-server
behind DefaultLookupCache, in front of a PostgreSQL lookup, is killed. Lookups go on
through L1 and the source with correct rows and no exception, every failed (or, while
the circuit breaker is open, skipped) Redis round trip is counted, and once the server
is back and the cool-down has passed the tier is used again, by this executor and by
another one."""

from __future__ import annotations

import pytest

from cache import DefaultLookupCache, RedisLookupCache, TieredLookupCache
from lookup import PartialCachingLookupProvider, SqlLookupFunction, open_lookup
from tests.clock import FakeTimer
from tests.connectors.conftest import PgFactory, RedisServer, pg_exec

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def rows(keys: range | list[int]) -> dict[tuple[int], tuple[tuple[int, str], ...]]:
    """Customers 1..200 exist; others have no rows."""
    return {(k,): ((k, f"c{k}"),) if 1 <= k <= 200 else () for k in keys}


def keys(*ranges: range | list[int]) -> list[tuple[int]]:
    return [(k,) for r in ranges for k in r]


def entries(server: RedisServer) -> int:
    client = server.client()
    try:
        return int(client.dbsize())
    finally:
        client.close()


@pytest.fixture
def customers(pg: PgFactory) -> PgFactory:
    pg_exec(pg.dsn, pg.schema, "CREATE TABLE customers (id bigint PRIMARY KEY, name text); "
            "INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 200) AS i")
    return pg


def test_lookups_continue_through_l1_and_the_source_and_the_tier_comes_back(
    customers: PgFactory, redis_server: RedisServer
) -> None:
    timer = FakeTimer()

    def executor() -> PartialCachingLookupProvider:
        fn = SqlLookupFunction(customers, "customers", "id", schema="id BIGINT, name STRING")
        tier = TieredLookupCache(
            DefaultLookupCache.new_builder().maximum_size(500).build(),
            RedisLookupCache(redis_server.url, "customers", ttl=600, cool_down=5, timer=timer))
        return PartialCachingLookupProvider.of(fn, tier, max_retries=0)

    def statements() -> int:
        return len(customers.lookups())

    this, other = executor(), executor()  # two executors: their own L1, one Redis
    with open_lookup(this) as handle, open_lookup(other) as peer:
        metrics = handle.metrics
        assert handle.lookup_batch(keys(range(1, 21))) == rows(range(1, 21))
        assert statements() == 1
        assert peer.lookup_batch(keys(range(1, 21))) == rows(range(1, 21))
        assert statements() == 1  # the other executor was served by Redis
        assert entries(redis_server) == 20

        redis_server.kill()
        # L1 hits: Redis is not even asked.
        assert handle.lookup_batch(keys(range(1, 21))) == rows(range(1, 21))
        assert metrics.num_cache_errors == 0
        # Misses: the Redis read fails (and opens the breaker), the source answers, the
        # Redis write is skipped; both counted, nothing raised.
        assert handle.lookup_batch(keys(range(1, 6), range(21, 41), [999])) == rows(
            [*range(1, 6), *range(21, 41), 999])
        assert statements() == 2
        assert metrics.num_cache_errors == 2
        # L1 now answers those too.
        assert handle.lookup_batch(keys(range(21, 41), [999])) == rows([*range(21, 41), 999])
        assert (statements(), metrics.num_cache_errors) == (2, 2)
        for start in range(41, 101, 20):  # the outage goes on: every miss batch costs 2
            assert handle.lookup_batch(keys(range(start, start + 20))) == rows(
                range(start, start + 20))
        assert statements() == 5
        assert metrics.num_cache_errors == 8
        assert metrics.num_load_failures == 0
        timer.tick(6)  # past the cool-down, Redis is tried again: still down
        assert handle.lookup_batch(keys(range(101, 111))) == rows(range(101, 111))
        assert metrics.num_cache_errors == 10
        assert peer.lookup_batch(keys(range(21, 31))) == rows(range(21, 31))
        assert peer.metrics.num_cache_errors == 2  # the other executor degrades alike

        redis_server.start()  # empty: a cache server restarts without its entries
        assert handle.lookup_batch(keys(range(111, 121))) == rows(range(111, 121))
        assert metrics.num_cache_errors == 12  # still cooling down: not asked yet
        timer.tick(6)
        loaded = statements()
        assert handle.lookup_batch(keys(range(121, 141))) == rows(range(121, 141))
        assert statements() == loaded + 1
        assert metrics.num_cache_errors == 12  # the tier works again ...
        assert entries(redis_server) == 20
        assert peer.lookup_batch(keys(range(121, 141))) == rows(range(121, 141))
        assert statements() == loaded + 1  # ... and serves the other executor
        assert other.cache.l2_metrics.hit_count >= 20  # type: ignore[attr-defined]
        assert peer.metrics.num_cache_errors == 2
