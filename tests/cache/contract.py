"""The LookupCache contract, shared by the test file of every implementation.

A test class mixes in :class:`LookupCacheContract` and provides a ``make_cache`` fixture
returning an opened cache that keeps missing keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from cache import CacheMetrics, LookupCache

MakeCache = Callable[..., LookupCache]


class LookupCacheContract:
    """Behaviour every LookupCache must have."""

    def test_absent_key_is_none(self, make_cache: MakeCache) -> None:
        assert make_cache().get_if_present((1,)) is None

    def test_put_then_get_returns_the_rows(self, make_cache: MakeCache) -> None:
        cache = make_cache()
        cache.put((1,), [(1, "one")])
        cache.put((2,), [(2, "two"), (2, "deux")])
        assert list(cache.get_if_present((1,)) or []) == [(1, "one")]
        assert list(cache.get_if_present((2,)) or []) == [(2, "two"), (2, "deux")]
        assert cache.get_if_present((3,)) is None

    def test_composite_keys(self, make_cache: MakeCache) -> None:
        cache = make_cache()
        cache.put((1, "a"), [(1, "a", 10)])
        assert list(cache.get_if_present((1, "a")) or []) == [(1, "a", 10)]
        assert cache.get_if_present((1, "b")) is None
        assert cache.get_if_present(("a", 1)) is None

    def test_put_overwrites(self, make_cache: MakeCache) -> None:
        cache = make_cache()
        cache.put((1,), [(1, "old")])
        cache.put((1,), [(1, "new")])
        assert list(cache.get_if_present((1,)) or []) == [(1, "new")]
        assert cache.size() == 1

    def test_empty_result_is_a_cached_miss(self, make_cache: MakeCache) -> None:
        cache = make_cache()
        cache.put((9,), [])
        rows = cache.get_if_present((9,))
        assert rows is not None
        assert len(rows) == 0

    def test_invalidate(self, make_cache: MakeCache) -> None:
        cache = make_cache()
        cache.put((1,), [(1, "one")])
        cache.invalidate((1,))
        cache.invalidate((2,))  # absent: no error
        assert cache.get_if_present((1,)) is None
        assert cache.size() == 0

    def test_invalidate_arrow_removes_the_keys_given(self, make_cache: MakeCache) -> None:
        cache = make_cache()
        cache.put_all({(1,): [(1, "a")], (2,): [(2, "b")], (3,): []})
        removed = cache.invalidate_arrow([pa.array([1, 3, 7], pa.int64())])
        assert removed in (2, 3)  # a cache that cannot tell counts the keys given
        assert cache.get_if_present((1,)) is None
        assert cache.get_if_present((3,)) is None
        assert list(cache.get_if_present((2,)) or []) == [(2, "b")]

    def test_invalidate_all(self, make_cache: MakeCache) -> None:
        cache = make_cache()
        cache.put_all({(1,): [(1, "a")], (2,): []})
        cache.invalidate_all()
        assert cache.get_all([(1,), (2,)]) == {}
        assert cache.size() == 0
        cache.put((1,), [(1, "again")])
        assert list(cache.get_if_present((1,)) or []) == [(1, "again")]

    def test_get_all_and_put_all(self, make_cache: MakeCache) -> None:
        cache = make_cache()
        cache.put_all({(1,): [(1, "a")], (2,): [], (3,): [(3, "c"), (3, "C")]})
        found = cache.get_all([(1,), (2,), (3,), (4,)])
        assert {k: list(v) for k, v in found.items()} == {
            (1,): [(1, "a")],
            (2,): [],
            (3,): [(3, "c"), (3, "C")],
        }

    def test_metrics_count_hits_and_misses(self, make_cache: MakeCache) -> None:
        metrics = CacheMetrics()
        cache = make_cache(metrics=metrics)
        cache.put((1,), [(1, "a")])
        cache.get_if_present((1,))
        cache.get_if_present((2,))
        cache.get_all([(1,), (2,), (3,)])
        assert (metrics.hit_count, metrics.miss_count) == (2, 3)
        assert metrics.num_cached_records == 1
        assert metrics.num_cached_bytes > 0

    @pytest.mark.parametrize("key", [None, 1, "1", [1]])
    def test_non_tuple_key_is_refused(self, make_cache: MakeCache, key: Any) -> None:
        cache = make_cache()
        with pytest.raises(TypeError, match="tuple"):
            cache.put(key, [(1,)])
        with pytest.raises(TypeError, match="tuple"):
            cache.get_if_present(key)

    @pytest.mark.parametrize("rows", [None, "abc", [[1, "a"]], 5])
    def test_bad_rows_are_refused(self, make_cache: MakeCache, rows: Any) -> None:
        cache = make_cache()
        with pytest.raises(TypeError):
            cache.put((1,), rows)
        assert cache.get_if_present((1,)) is None
