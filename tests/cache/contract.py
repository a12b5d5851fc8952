"""The LookupCache contract, shared by the test file of every implementation.

A test class mixes in :class:`LookupCacheContract` and provides a ``make_cache`` fixture
returning an opened cache that keeps missing keys: ``make_cache(metrics=None,
bind=None)``, where ``bind`` is the ``(schema, key_columns)`` the cache is bound to
before it opens (as the lookup runtime binds it), for the Arrow methods of joins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cache import CacheMetrics, LookupCache
from cache.answers import Answers

MakeCache = Callable[..., LookupCache]
Binding = tuple[pa.Schema, list[str]]
"""What ``make_cache(bind=...)`` binds a cache to: its row schema and key columns."""

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
BY_ID: Binding = (SCHEMA, ["id"])


def per_key(answers: Answers) -> list[list[tuple[Any, ...]] | None]:
    """Each key's rows in ``get_arrow``'s answer (None: a miss), read through the names
    of its parts."""
    table = answers.rows.to_pylist()
    out: list[list[tuple[Any, ...]] | None] = []
    for hit, group in zip(answers.hit.tolist(), answers.groups.tolist(), strict=True):
        if not hit:
            out.append(None)
        elif group < 0:
            out.append([])
        else:
            span = table[answers.offsets[group]: answers.offsets[group + 1]]
            out.append([tuple(row.values()) for row in span])
    return out


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

    # --- the Arrow methods: the hot path of joins

    def test_get_arrow_answers_what_was_put_in_the_probe_form(
        self, make_cache: MakeCache
    ) -> None:
        cache = make_cache(bind=BY_ID)
        cache.put_all({(1,): [(1, "a")], (2,): [], (3,): [(3, "c"), (3, "C")]})
        answers = cache.get_arrow([pa.array([1, 2, 3, 4], pa.int64())])
        assert isinstance(answers, Answers)
        assert answers.hit.tolist() == [True, True, True, False]
        assert answers.groups[1] == -1  # a cached empty answer: a hit without rows
        assert answers.groups[3] == -1  # a miss
        assert answers.rows.schema.equals(SCHEMA)
        assert per_key(answers) == [[(1, "a")], [], [(3, "c"), (3, "C")], None]
        hit, groups, offsets, rows = answers  # still the 4-tuple it was
        assert (hit is answers.hit, groups is answers.groups, offsets is answers.offsets,
                rows is answers.rows) == (True, True, True, True)

    def test_put_arrow_is_read_back_by_both_paths(self, make_cache: MakeCache) -> None:
        cache = make_cache(bind=BY_ID)
        rows = pa.table({"id": [5, 5, 7], "name": ["e", "E", "g"]}, schema=SCHEMA)
        # Rows 0 and 1 belong to key 0 (5), row 2 to key 2 (7); key 1 (6) has none.
        cache.put_arrow([pa.array([5, 6, 7], pa.int64())], pa.array([0, 0, 2], pa.int64()),
                        rows)
        answers = cache.get_arrow([pa.array([7, 6, 5, 8], pa.int64())])
        assert per_key(answers) == [[(7, "g")], [], [(5, "e"), (5, "E")], None]
        assert list(cache.get_if_present((5,)) or []) == [(5, "e"), (5, "E")]
        assert cache.get_if_present((6,)) == ()
        assert cache.get_if_present((8,)) is None

    def test_put_arrow_takes_a_record_batch(self, make_cache: MakeCache) -> None:
        cache = make_cache(bind=BY_ID)
        batch = pa.record_batch({"id": [1], "name": ["a"]}, schema=SCHEMA)
        cache.put_arrow([pa.array([1], pa.int64())], pa.array([0], pa.int64()), batch)
        assert per_key(cache.get_arrow([pa.array([1], pa.int64())])) == [[(1, "a")]]

    def test_get_arrow_counts_hits_and_misses(self, make_cache: MakeCache) -> None:
        metrics = CacheMetrics()
        cache = make_cache(metrics=metrics, bind=BY_ID)
        cache.put_all({(1,): [(1, "a")], (2,): []})
        answers = cache.get_arrow([pa.array([1, 2, 3], pa.int64())])
        assert int(np.count_nonzero(answers.hit)) == 2
        assert (metrics.hit_count, metrics.miss_count) == (2, 1)

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
