"""TieredLookupCache: an in-process DefaultLookupCache in front of a RedisLookupCache."""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any

import pytest

from cache import CacheMetrics, DefaultLookupCache, RedisLookupCache, TieredLookupCache
from spark_lookup.errors import ConfigError
from tests.cache.contract import Binding, LookupCacheContract
from tests.clock import FakeTimer
from tests.connectors.conftest import RedisServer

pytestmark = pytest.mark.redis


def near(timer: FakeTimer | None = None, **options: Any) -> DefaultLookupCache:
    builder = DefaultLookupCache.new_builder().maximum_size(options.pop("maximum_size", 100))
    if timer is not None:
        builder.timer(timer).expire_after_write(timedelta(seconds=10))
    return builder.build()


@pytest.fixture
def make(redis_url: str, redis_prefix: str) -> Any:
    def build(metrics: CacheMetrics | None = None, l1: DefaultLookupCache | None = None,
              bind: Binding | None = None, **options: Any) -> TieredLookupCache:
        far = RedisLookupCache(redis_url, redis_prefix.rstrip(":"), ttl=60, **options)
        cache = TieredLookupCache(l1 if l1 is not None else near(), far)
        if bind is not None:
            cache.bind(*bind)
        cache.open(metrics)
        return cache

    return build


@pytest.fixture
def other_executor(redis_url: str, redis_prefix: str) -> RedisLookupCache:
    """The shared tier as another executor sees it."""
    cache = RedisLookupCache(redis_url, redis_prefix.rstrip(":"), ttl=60)
    cache.open()
    return cache


class TestContract(LookupCacheContract):
    @pytest.fixture
    def make_cache(self, make: Any) -> Any:
        return make


def test_put_writes_both_tiers_and_invalidate_clears_both(
    make: Any, other_executor: RedisLookupCache
) -> None:
    cache = make()
    cache.put((1,), [(1, "a")])
    cache.put_all({(2,): [(2, "b")]})
    assert cache.l1.get_all([(1,), (2,)]) == {(1,): ((1, "a"),), (2,): ((2, "b"),)}
    assert other_executor.get_all([(1,), (2,)]) == {(1,): ((1, "a"),), (2,): ((2, "b"),)}
    cache.invalidate((1,))
    assert cache.l1.get_if_present((1,)) is None
    assert other_executor.get_if_present((1,)) is None


def test_l2_hits_are_promoted_into_l1(make: Any, other_executor: RedisLookupCache) -> None:
    cache = make()
    other_executor.put_all({(1,): [(1, "from another executor")], (2,): []})
    assert cache.size() == 0
    assert cache.get_if_present((1,)) == ((1, "from another executor"),)
    assert cache.get_all([(2,), (3,)]) == {(2,): ()}
    assert cache.size() == 2  # both promoted; the miss is not
    other_executor.invalidate((1,))
    assert cache.get_if_present((1,)) == ((1, "from another executor"),)  # from l1 now


def test_metrics_count_each_key_once_and_relate_to_the_tiers(
    make: Any, other_executor: RedisLookupCache
) -> None:
    metrics = CacheMetrics()
    cache = make(metrics)
    cache.put((1,), [(1,)])
    other_executor.put((2,), [(2,)])
    cache.get_if_present((1,))  # l1 hit
    cache.get_if_present((2,))  # l1 miss, l2 hit (promoted)
    cache.get_if_present((3,))  # missed by both
    cache.get_all([(1,), (2,), (3,), (4,), (4,)])  # 2 l1 hits, 2 missed by both
    assert (metrics.hit_count, metrics.miss_count) == (4, 3)
    l1, l2 = cache.l1_metrics, cache.l2_metrics
    assert metrics.hit_count == l1.hit_count + l2.hit_count
    assert metrics.miss_count == l2.miss_count
    assert l1.miss_count == l2.hit_count + l2.miss_count
    assert (l1.hit_count, l2.hit_count, l2.miss_count) == (3, 1, 3)
    assert metrics.num_cached_records == cache.l1.size() == 2
    assert metrics.num_cached_bytes > 0


def test_an_l2_outage_leaves_l1_serving(tmp_path: Any, redis_server: RedisServer) -> None:
    metrics = CacheMetrics()
    far = RedisLookupCache(redis_server.url, "tier", ttl=60, cool_down=0)
    cache = TieredLookupCache(near(), far)
    cache.open(metrics)
    cache.put((1,), [(1,)])
    redis_server.kill()
    assert cache.get_if_present((1,)) == ((1,),)
    assert cache.get_if_present((2,)) is None
    cache.put((3,), [(3,)])  # l1 keeps it, l2 fails quietly
    assert cache.get_all([(1,), (3,), (4,)]) == {(1,): ((1,),), (3,): ((3,),)}
    assert metrics.num_cache_errors == cache.l2_metrics.num_cache_errors == 3
    assert (metrics.hit_count, metrics.miss_count) == (3, 2)
    cache.close()


def test_promotions_restart_the_l1_lifetime(make: Any, other_executor: RedisLookupCache) -> None:
    timer = FakeTimer()
    cache = make(l1=near(timer))
    other_executor.put((1,), [(1,)])
    assert cache.get_if_present((1,)) == ((1,),)
    timer.tick(9)
    other_executor.invalidate((1,))
    assert cache.get_if_present((1,)) == ((1,),)  # still in l1
    timer.tick(2)
    assert cache.get_if_present((1,)) is None  # l1 expired, l2 emptied


def test_both_tiers_give_a_miss_its_own_life(make: Any, redis_client: Any) -> None:
    timer = FakeTimer()
    l1 = (DefaultLookupCache.new_builder().maximum_size(100).timer(timer)
          .expire_after_write(timedelta(minutes=10)).expire_missing_after(5).build())
    cache = make(l1=l1, expire_missing_after=timedelta(seconds=5))
    cache.put_all({(1,): [(1,)], (2,): []})
    far = cache.l2
    assert 4_000 < redis_client.pttl(far._redis_key((2,))) <= 5_000  # l2: its own Redis TTL
    assert redis_client.pttl(far._redis_key((1,))) > 59_000
    timer.tick(5)  # l1's miss expired; l2 still holds it (Redis's clock has not moved)
    assert l1.get_if_present((2,)) is None
    assert cache.get_if_present((2,)) == ()  # promoted: a fresh l1 life of 5 s
    redis_client.delete(far._redis_key((2,)))  # as Redis does once its 5 s pass
    timer.tick(5)
    assert cache.get_if_present((2,)) is None  # both lives over: the key is loaded again
    assert cache.get_if_present((1,)) == ((1,),)  # rows keep their lives


def test_pickles_as_configuration(make: Any) -> None:
    cache = make()
    cache.put((1,), [(1,)])
    copy = pickle.loads(pickle.dumps(cache))
    copy.open()
    assert copy.l1.size() == 0  # the in-process tier starts empty ...
    assert copy.get_if_present((1,)) == ((1,),)  # ... the shared one does not
    assert copy.l1.size() == 1
    assert "TieredLookupCache(l1=DefaultLookupCache(" in repr(copy)


def test_construction_errors() -> None:
    l1 = near()
    with pytest.raises(ConfigError, match="l2 must be a LookupCache"):
        TieredLookupCache(l1, object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="different"):
        TieredLookupCache(l1, l1)
