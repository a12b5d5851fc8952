"""The caching lookup runtime: Flink's CachingLookupFunctionTest cases ported, plus
batched loads, retries, miss retries, null keys, sharing, async, and key fuzzing."""

from __future__ import annotations

import math
import pickle
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache import DefaultLookupCache
from lookup import (
    AsyncLookupFunctionProvider,
    LookupFunctionProvider,
    MissRetry,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
    RetryPolicy,
    open_lookup,
)
from lookup.runtime import worker as _worker
from lookup.runtime.registry import REGISTRY
from lookup.spark.report import metrics_report
from spark_lookup.errors import ConfigError, KeyKindError, LookupLoadError
from tests.clock import FakeTimer
from tests.lookup.functions import AsyncDictLookup, DictLookup, RecordingSleep

ROWS = [(1, "Julian"), (2, "Jark"), (3, "Leonard"), (3, "Leo")]


def partial(fn: Any, **kw: Any) -> PartialCachingLookupProvider:
    cache = DefaultLookupCache.new_builder().maximum_size(100).build()
    return PartialCachingLookupProvider.of(fn, cache, **kw)


def test_caching_three_misses_then_three_hits_load_three_times() -> None:
    fn = DictLookup(ROWS)
    with open_lookup(partial(fn)) as handle:
        for _ in range(2):
            assert handle.lookup((1,)) == ((1, "Julian"),)
            assert handle.lookup((2,)) == ((2, "Jark"),)
            assert handle.lookup((3,)) == ((3, "Leonard"), (3, "Leo"))
        m = handle.metrics
        assert (m.hit_count, m.miss_count, m.load_count) == (3, 3, 3)
        assert m.num_cached_records == 3
        assert m.latest_load_time >= 0
    assert fn.keys_asked == [(1,), (2,), (3,)]


def test_absent_key_is_cached_as_empty() -> None:
    fn = DictLookup(ROWS)
    with open_lookup(partial(fn)) as handle:
        assert handle.lookup((42,)) == ()
        assert handle.lookup((42,)) == ()
        assert fn.keys_asked == [(42,)]
        assert handle.metrics.hit_count == 1


def test_absent_key_is_not_cached_without_cache_missing_key() -> None:
    fn = DictLookup(ROWS)
    cache = DefaultLookupCache.new_builder().maximum_size(10).cache_missing_key(False).build()
    with open_lookup(PartialCachingLookupProvider.of(fn, cache)) as handle:
        handle.lookup((42,))
        handle.lookup((42,))
    assert fn.keys_asked == [(42,), (42,)]


def test_a_late_row_is_found_once_its_keys_miss_expires() -> None:
    # expire_missing_after: the miss is believed for 30 s, the rows for an hour.
    timer = FakeTimer()
    fn = DictLookup(ROWS)
    cache = (DefaultLookupCache.new_builder().expire_after_write(timedelta(hours=1))
             .expire_missing_after(timedelta(seconds=30)).timer(timer).build())
    with open_lookup(PartialCachingLookupProvider.of(fn, cache)) as handle:
        assert handle.lookup_batch([(1,), (42,)]) == {(1,): ((1, "Julian"),), (42,): ()}
        fn.rows.append((42, "Late"))  # the dimension row arrives after its first lookup
        timer.tick(29)
        assert handle.lookup((42,)) == ()  # still the cached miss
        timer.tick(1)
        assert handle.lookup_batch([(1,), (42,)]) == {(1,): ((1, "Julian"),),
                                                      (42,): ((42, "Late"),)}
        timer.tick(3599)
        assert handle.lookup((42,)) == ((42, "Late"),)  # a row's life, from its load
    assert fn.keys_asked == [(1,), (42,), (42,)]


def test_batch_dedupes_and_loads_all_misses_in_one_call() -> None:
    fn = DictLookup([(i, f"n{i}") for i in range(100)])
    with open_lookup(partial(fn)) as handle:
        handle.lookup_batch([(i,) for i in range(10)])  # warm 10 keys
        fn.batch_calls.clear()
        keys = [(i % 50,) for i in range(200)]  # 50 distinct, 10 of them cached
        result = handle.lookup_batch(keys)
        assert len(fn.batch_calls) == 1
        assert sorted(fn.batch_calls[0]) == [(i,) for i in range(10, 50)]
        assert result == {(i,): ((i, f"n{i}"),) for i in range(50)}
        assert handle.metrics.hit_count == 10
        assert handle.metrics.miss_count == 50


def test_batches_above_batch_size_are_chunked() -> None:
    fn = DictLookup([(i, "x") for i in range(25)])
    with open_lookup(partial(fn, batch_size=10)) as handle:
        handle.lookup_batch([(i,) for i in range(25)])
    assert [len(call) for call in fn.batch_calls] == [10, 10, 5]


def test_null_keys_never_reach_the_source_and_never_match() -> None:
    fn = DictLookup([(1, "a")], key_index=(0, 1), schema="id BIGINT, name STRING",
                    key_columns=["id", "name"])
    with open_lookup(partial(fn)) as handle:
        result = handle.lookup_batch(
            [(None, "a"), (1, None), (float("nan"), "a"), (1, "a"), (None, None)]
        )
        assert result[(1, "a")] == ((1, "a"),)
        assert [v for k, v in result.items() if k != (1, "a")] == [(), (), (), ()]
    assert fn.keys_asked == [(1, "a")]


def test_retries_with_exponential_backoff_then_succeeds() -> None:
    fn = DictLookup(ROWS)
    fn.fail_next = 2
    sleep = RecordingSleep()
    policy = RetryPolicy(max_retries=3, initial_backoff=0.1, multiplier=2, sleep=sleep)
    with open_lookup(partial(fn, retry_policy=policy)) as handle:
        assert handle.lookup((1,)) == ((1, "Julian"),)
        assert sleep.waits == [0.1, 0.2]
        assert handle.metrics.num_retries == 2
        assert handle.metrics.num_load_failures == 0
        assert handle.metrics.load_count == 1


def test_exhausted_retries_raise_naming_keys_and_cause_and_cache_nothing() -> None:
    fn = DictLookup(ROWS)
    fn.fail_next = 3
    sleep = RecordingSleep()
    policy = RetryPolicy(max_retries=2, initial_backoff=0.5, max_backoff=0.75, sleep=sleep)
    with open_lookup(partial(fn, retry_policy=policy)) as handle:
        with pytest.raises(LookupLoadError, match=r"\[\(1,\)\].*3 attempt.*database is down"):
            handle.lookup((1,))
        assert sleep.waits == [0.5, 0.75]
        assert handle.metrics.num_load_failures == 1
        assert handle.lookup((1,)) == ((1, "Julian"),)  # the failure was not cached
        assert handle.metrics.load_count == 1


def test_zero_retries() -> None:
    fn = DictLookup(ROWS)
    fn.fail_next = 1
    with open_lookup(partial(fn, max_retries=0)) as handle, pytest.raises(LookupLoadError):
        handle.lookup((1,))
    assert len(fn.batch_calls) == 1


def test_retry_on_miss_finds_late_rows() -> None:
    class LateRows(DictLookup):
        def lookup_batch(self, keys: Any) -> Any:
            result = super().lookup_batch(keys)
            if len(self.batch_calls) == 2:  # the row arrives before the second attempt
                self.rows.append((7, "late"))
            return result

    fn = LateRows(ROWS)
    sleep = RecordingSleep()
    provider = partial(fn, retry_on_miss=MissRetry(delay=timedelta(milliseconds=50),
                                                    max_attempts=3),
                       retry_policy=RetryPolicy(sleep=sleep))
    with open_lookup(provider) as handle:
        assert handle.lookup_batch([(1,), (7,)]) == {(1,): ((1, "Julian"),), (7,): ((7, "late"),)}
    assert fn.batch_calls == [[(1,), (7,)], [(7,)], [(7,)]]
    assert sleep.waits == [0.05, 0.05]


def test_retry_on_miss_gives_up_after_max_attempts() -> None:
    fn = DictLookup(ROWS)
    provider = partial(fn, retry_on_miss=MissRetry(delay=0, max_attempts=2))
    with open_lookup(provider) as handle:
        assert handle.lookup((9,)) == ()
    assert fn.batch_calls == [[(9,)], [(9,)]]


def test_uncached_provider_loads_every_time() -> None:
    fn = DictLookup(ROWS)
    with open_lookup(LookupFunctionProvider.of(fn)) as handle:
        handle.lookup((1,))
        handle.lookup((1,))
        assert handle.metrics.miss_count == 2
        assert handle.metrics.hit_count == 0
    assert len(fn.batch_calls) == 2


def test_wrong_rows_from_a_function_are_reported() -> None:
    fn = DictLookup([(1, "a", "extra")])
    with open_lookup(LookupFunctionProvider.of(fn)) as handle, pytest.raises(
        LookupLoadError, match="tuples of 2 values"
    ):
        handle.lookup((1,))


@pytest.mark.parametrize("key", [1, [1], (1, 2), ()])
def test_malformed_keys_are_type_errors(key: Any) -> None:
    with open_lookup(partial(DictLookup(ROWS))) as handle, pytest.raises(
        TypeError, match=r"tuple of 1 value\(s\) \(id\)"
    ):
        handle.lookup(key)


def test_unhashable_key_values_are_type_errors() -> None:
    with open_lookup(partial(DictLookup(ROWS))) as handle, pytest.raises(
        TypeError, match="hashable"
    ):
        handle.lookup_batch([([1],)])


def test_sharing_and_release() -> None:
    fn = DictLookup(ROWS)
    provider = partial(fn)
    first = open_lookup(provider)
    second = open_lookup(pickle.loads(pickle.dumps(provider)))  # a copy, as on an executor
    assert first.runtime is second.runtime
    assert REGISTRY.references(provider.provider_id) == 2
    first.lookup((1,))
    second.lookup((1,))
    assert first.metrics.hit_count == 1  # the second handle hit the first one's entry
    assert fn.opened == 1
    first.close()
    first.close()  # idempotent
    assert REGISTRY.references(provider.provider_id) == 1
    assert fn.closed == 0
    second.close()
    assert REGISTRY.references(provider.provider_id) == 0
    assert fn.closed == 1
    with pytest.raises(RuntimeError, match="closed"):
        second.lookup((1,))
    with open_lookup(provider) as third:  # reopening starts a fresh cache
        third.lookup((1,))
        assert third.metrics.miss_count == 1
    assert fn.opened == 2


def test_a_failing_open_registers_nothing() -> None:
    class Broken(DictLookup):
        def open(self) -> None:
            raise ConnectionError("no route to host")

    provider = partial(Broken(ROWS))
    with pytest.raises(ConnectionError):
        open_lookup(provider)
    assert REGISTRY.references(provider.provider_id) == 0


def test_the_worker_pins_the_runtime_open_lookup_shares() -> None:
    """Joins and SQL functions of a Spark worker use the registry's runtime, pinned once
    (one reference, kept until exit); metrics reports read any open runtime."""
    fn = DictLookup(ROWS)
    provider = partial(fn)
    assert metrics_report(provider) is None
    try:
        with open_lookup(provider) as handle:
            assert metrics_report(provider) is not None
            runtime = _worker.worker_runtime(provider)
            assert _worker.worker_runtime(provider) is runtime is handle.runtime
            assert REGISTRY.references(provider.provider_id) == 2
            handle.lookup((1,))
        assert REGISTRY.references(provider.provider_id) == 1
        assert runtime.lookup((1,)) == ((1, "Julian"),)
        assert runtime.metrics.hit_count == 1  # still warm
        assert fn.closed == 0
    finally:
        _worker._reset_for_tests()  # as at exit
    assert REGISTRY.references(provider.provider_id) == 0
    assert fn.closed == 1
    assert metrics_report(provider) is None


def test_releasing_the_pin_leaves_open_handles_open() -> None:
    fn = DictLookup(ROWS)
    provider = partial(fn)
    with open_lookup(provider) as handle:
        _worker.worker_runtime(provider)
        _worker._reset_for_tests()
        _worker._reset_for_tests()  # a pin is released once
        assert REGISTRY.references(provider.provider_id) == 1
        assert handle.lookup((2,)) == ((2, "Jark"),)
        assert fn.closed == 0
    assert fn.closed == 1


# --- providers


def test_provider_validation() -> None:
    cache = DefaultLookupCache.new_builder().maximum_size(1).build()
    with pytest.raises(ConfigError, match="expected a LookupFunction"):
        PartialCachingLookupProvider.of(object(), cache)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Async provider"):
        PartialCachingLookupProvider.of(AsyncDictLookup(), cache)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cache must be"):
        PartialCachingLookupProvider.of(DictLookup(), {})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not a column"):
        LookupFunctionProvider.of(DictLookup(key_columns=["nope"]))
    with pytest.raises(ConfigError, match="max_retries"):
        LookupFunctionProvider.of(DictLookup(), max_retries=-1)
    with pytest.raises(ConfigError, match="not both"):
        LookupFunctionProvider.of(DictLookup(), max_retries=1,
                                  retry_policy=RetryPolicy(max_retries=2))
    with pytest.raises(ConfigError, match="batch_size"):
        LookupFunctionProvider.of(DictLookup(), batch_size=0)
    with pytest.raises(ConfigError, match="capacity"):
        AsyncLookupFunctionProvider.of(AsyncDictLookup(), capacity=0)
    with pytest.raises(ConfigError, match="timeout"):
        AsyncLookupFunctionProvider.of(AsyncDictLookup(), timeout=-1)
    with pytest.raises(ConfigError, match="max_attempts"):
        MissRetry(max_attempts=0)


def test_providers_pickle_with_their_identity() -> None:
    provider = partial(DictLookup(ROWS), max_retries=5)
    copy = pickle.loads(pickle.dumps(provider))
    assert copy.provider_id == provider.provider_id
    assert copy.retry_policy.max_retries == 5
    assert copy.kind == "PARTIAL"


# --- async


def test_async_lookups_respect_capacity_and_cache() -> None:
    fn = AsyncDictLookup([(i, f"n{i}") for i in range(50)], delay=0.01)
    cache = DefaultLookupCache.new_builder().maximum_size(100).build()
    provider = PartialCachingAsyncLookupProvider.of(fn, cache, capacity=4, timeout=5)
    with open_lookup(provider) as handle:
        result = handle.lookup_batch([(i,) for i in range(40)])
        assert result[(7,)] == ((7, "n7"),)
        assert fn.max_in_flight == 4
        handle.lookup_batch([(i,) for i in range(40)])
        assert len(fn.calls) == 40
        assert handle.metrics.hit_count == 40


def test_async_partial_failure_retries_only_the_failed_keys() -> None:
    fn = AsyncDictLookup(ROWS)
    fn.fail_keys = {(2,): 1}
    sleep = RecordingSleep()
    provider = AsyncLookupFunctionProvider.of(fn, retry_policy=RetryPolicy(sleep=sleep))
    with open_lookup(provider) as handle:
        assert handle.lookup_batch([(1,), (2,)]) == {(1,): ((1, "Julian"),), (2,): ((2, "Jark"),)}
        assert handle.metrics.num_retries == 1
    assert sorted(fn.calls) == [(1,), (2,), (2,)]


def test_async_timeout_is_retried_then_reported() -> None:
    fn = AsyncDictLookup(ROWS, delay=0.5)
    provider = AsyncLookupFunctionProvider.of(
        fn, timeout=0.05, retry_policy=RetryPolicy(max_retries=1, sleep=RecordingSleep())
    )
    with open_lookup(provider) as handle, pytest.raises(LookupLoadError, match="timed out"):
        handle.lookup((1,))


def test_async_batch_override_is_one_call() -> None:
    class Batched(AsyncDictLookup):
        async def async_lookup_batch(self, keys: Any) -> Any:
            self.calls.append(tuple(keys))
            return {k: [r for r in self.rows if (r[0],) == k] for k in keys}

    fn = Batched(ROWS)
    with open_lookup(AsyncLookupFunctionProvider.of(fn)) as handle:
        handle.lookup_batch([(1,), (2,), (3,)])
    assert fn.calls == [((1,), (2,), (3,))]


# --- fuzzing: any key gives a clear error or a correct answer

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
    st.text(max_size=5000), st.binary(max_size=100), st.sampled_from(["", "é", "日本", "\x00"]),
)


@settings(max_examples=200, deadline=None)
@given(key=st.one_of(st.tuples(SCALARS), st.tuples(SCALARS, SCALARS), SCALARS,
                     st.lists(SCALARS, max_size=2)))
def test_fuzzed_keys_give_clear_errors_or_correct_results(key: Any) -> None:
    rows = [("日本", 1), ("", 2), ("x" * 5000, 3)]
    fn = DictLookup(rows, schema="code STRING, n BIGINT", key_columns=["code"])
    with open_lookup(partial(fn)) as handle:
        try:
            result = handle.lookup(key)
        except KeyKindError as exc:  # not a 1-tuple, or of another kind than STRING
            message = str(exc)
            if "can never equal a value of a string column" in message:
                assert not isinstance(key[0], str)
            else:
                assert "tuple of 1 value" in message or "hashable" in message
            return
        expected = tuple(r for r in rows if (r[0],) == key)
        null = key[0] is None or (isinstance(key[0], float) and math.isnan(key[0]))
        assert result == (() if null else expected)
