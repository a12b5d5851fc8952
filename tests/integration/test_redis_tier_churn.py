"""Partial caches and worker churn: with ``TieredLookupCache(DefaultLookupCache,
RedisLookupCache)``, a fresh process (a replaced Spark Python worker) finds the keys an
earlier process loaded in Redis, and loads nothing from the source.

Loads are counted at the lookup function itself, in a file, whichever process runs it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from cache import DefaultLookupCache, RedisLookupCache, TieredLookupCache
from lookup import PartialCachingLookupProvider
from tests.integration.processes import CountingLookup, count_lines, partial_lookups_in_new_process


def tiered(redis_url: str, namespace: str) -> TieredLookupCache:
    near = (DefaultLookupCache.new_builder().maximum_size(10_000)
            .expire_after_write(timedelta(minutes=1)).build())
    return TieredLookupCache(near, RedisLookupCache(redis_url, namespace, ttl=600))


@pytest.mark.redis
def test_a_new_process_finds_the_keys_in_redis_without_loading(
        tmp_path: Path, redis_url: str, redis_prefix: str) -> None:
    counter = tmp_path / "loads"
    provider = PartialCachingLookupProvider.of(
        CountingLookup(counter), tiered(redis_url, redis_prefix + "customers"))
    ids = [*range(50), 5000]  # 5000 does not exist: cached as a missing key

    first, first_metrics = partial_lookups_in_new_process(provider, ids)
    assert first[(7,)] == ((7, "n7"),)
    assert first[(5000,)] == ()
    assert count_lines(counter) == 51  # every key loaded once, by the first process
    assert first_metrics["load_count"] == 1  # in one batched load

    second, second_metrics = partial_lookups_in_new_process(provider, ids)
    assert second == first
    assert count_lines(counter) == 51  # the second process loaded nothing
    assert second_metrics["load_count"] == 0
    assert second_metrics["hit_count"] == 51  # all from Redis (its own near tier is new)


def test_without_the_redis_tier_each_new_process_loads_again(tmp_path: Path) -> None:
    counter = tmp_path / "loads"
    near = DefaultLookupCache.new_builder().maximum_size(10_000).build()
    provider = PartialCachingLookupProvider.of(CountingLookup(counter), near)
    partial_lookups_in_new_process(provider, list(range(50)))
    partial_lookups_in_new_process(provider, list(range(50)))
    assert count_lines(counter) == 100  # what the Redis tier saves under worker churn
