"""The dense table of integer keys: found by subtraction, moved to a hash table when the
keys spread and back when they fill a range, and always the same answers as a model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from cache import DefaultLookupCache
from cache.dense_table import SPREAD, DenseTable
from cache.hash_table import HashTable

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
INT64 = pa.int64()


def hashes(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64).view(np.uint64)


def cache_of(arrow_type: pa.DataType = INT64, size: int = 100_000) -> DefaultLookupCache:
    cache = DefaultLookupCache.new_builder().maximum_size(size).build()
    cache.bind(pa.schema([("id", arrow_type), ("name", pa.string())]), ["id"])
    cache.open()
    return cache


def put(cache: DefaultLookupCache, keys: list[int], arrow_type: pa.DataType = INT64
        ) -> None:
    rows = pa.table({"id": pa.array(keys, arrow_type),
                     "name": pa.array([f"n{k}" for k in keys])})
    cache.put_arrow([pa.array(keys, arrow_type)], pa.array(np.arange(len(keys))), rows)


def names(cache: DefaultLookupCache, keys: list[int], arrow_type: pa.DataType = INT64
          ) -> list[Any]:
    """Each key's name, or None for a miss (keys distinct)."""
    hit, groups, offsets, rows = cache.get_arrow([pa.array(keys, arrow_type)])
    column = rows.column("name").to_pylist()
    return [column[offsets[g]] if h and g >= 0 else None
            for h, g in zip(hit.tolist(), groups.tolist(), strict=True)]


def table_of(cache: DefaultLookupCache) -> HashTable | DenseTable:
    return cache._entries.table


def test_keys_are_found_by_their_offset_from_the_range_start() -> None:
    table = DenseTable()
    table.insert(hashes([10, 12, 11]), np.array([0, 1, 2]), hashes([10, 12, 11]))
    slots, buckets = table.find(hashes([11, 12, 9, 13, 10]), np.zeros(0, np.uint64))
    assert slots.tolist() == [2, 1, -1, -1, 0]
    assert buckets[[0, 1, 4]].tolist() == [1, 2, 0]
    assert buckets[2] == -1
    assert table.find_one(12, np.zeros(0, np.uint64)) == 1
    assert table.slots_of(9, np.zeros(0, np.uint64)) == []
    table.repoint(buckets[[0]], np.array([7]))
    assert table.find_one(11, np.zeros(0, np.uint64)) == 7


def test_keys_at_both_ends_of_int64_never_overflow_an_offset() -> None:
    table = DenseTable()
    low = [I64_MIN, I64_MIN + 1]
    table.insert(hashes(low), np.array([0, 1]), hashes(low))
    slots, _ = table.find(hashes([I64_MIN, I64_MIN + 1, I64_MAX, 0, I64_MIN + 2]),
                          np.zeros(0, np.uint64))
    assert slots.tolist() == [0, 1, -1, -1, -1]
    high = DenseTable()
    high.insert(hashes([I64_MAX]), np.array([0]), hashes([I64_MAX]))
    assert high.find(hashes([I64_MAX, I64_MIN, -1]), np.zeros(0, np.uint64))[0].tolist() == [
        0, -1, -1]
    assert high.span[1] == I64_MAX
    for value in (I64_MAX, I64_MIN, 0):
        expected = 0 if value == I64_MAX else -1
        assert high.find_one(value & (2**64 - 1), np.zeros(0, np.uint64)) == expected


def test_rising_keys_widen_the_range_with_room_to_spare() -> None:
    table = DenseTable()
    widened = 0
    for start in range(0, 100_000, 1000):
        keys = list(range(start, start + 1000))
        before = len(table.buckets)
        table.insert(hashes(keys), np.arange(start, start + 1000), hashes(keys))
        widened += len(table.buckets) != before
    assert widened < 25  # a quarter more each time: logarithmic, not once a batch
    assert table.find(hashes([0, 99_999, 100_000]), np.zeros(0, np.uint64))[0].tolist() == [
        0, 99_999, -1]


def test_a_cache_of_surrogate_keys_uses_a_dense_table_smaller_than_a_hash_table() -> None:
    cache = cache_of()
    put(cache, list(range(1, 50_001)))
    assert isinstance(table_of(cache), DenseTable)
    assert table_of(cache).nbytes <= SPREAD * 4 * 50_000
    hashed = HashTable()
    hashed.rebuild(hashes(list(range(1, 50_001))))
    assert table_of(cache).nbytes < hashed.nbytes
    assert names(cache, [1, 50_000, 50_001, 0]) == ["n1", "n50000", None, None]


def test_keys_that_spread_move_to_a_hash_table_and_back_once_they_fill_a_range() -> None:
    cache = cache_of()
    put(cache, list(range(100)))
    assert isinstance(table_of(cache), DenseTable)
    put(cache, [10**12])  # far away: a dense range would be a terabyte
    assert isinstance(table_of(cache), HashTable)
    assert names(cache, [5, 10**12, 100]) == ["n5", f"n{10**12}", None]
    cache.invalidate((10**12,))
    # The keys have doubled since the move, and fill a range: dense again.
    put(cache, list(range(100, 5000)))
    assert isinstance(table_of(cache), DenseTable)
    assert names(cache, [0, 4999, 10**12, 5000]) == ["n0", "n4999", None, None]


def test_compaction_chooses_the_table_for_the_keys_left() -> None:
    cache = cache_of()
    put(cache, [10**12, *range(3000)])
    assert isinstance(table_of(cache), HashTable)
    cache.invalidate((10**12,))
    entries = cache._entries
    entries.kill(np.arange(1, 2000))  # as expiry does: dead entries until compaction
    entries.compact()
    assert isinstance(table_of(cache), DenseTable)
    assert names(cache, [10**12, 0, 2500]) == [None, None, "n2500"]


def test_floating_keys_keep_a_hash_table() -> None:
    cache = DefaultLookupCache.new_builder().maximum_size(100).build()
    cache.bind(pa.schema([("id", pa.float64()), ("name", pa.string())]), ["id"])
    cache.open()
    keys = [0.5, 1.5, 2.5]
    rows = pa.table({"id": pa.array(keys), "name": ["a", "b", "c"]})
    cache.put_arrow([pa.array(keys)], pa.array([0, 1, 2]), rows)
    assert isinstance(table_of(cache), HashTable)


@settings(max_examples=60, deadline=None)
@given(st.lists(
    st.tuples(
        st.sampled_from(["put", "invalidate", "compact"]),
        st.lists(st.one_of(st.integers(-50, 400), st.integers(I64_MIN, I64_MAX),
                           st.sampled_from([I64_MIN, I64_MAX, 0, -1])),
                 min_size=1, max_size=60, unique=True)),
    min_size=1, max_size=12))
def test_answers_match_a_model_whichever_table_holds_the_keys(
        steps: list[tuple[str, list[int]]]) -> None:
    cache = cache_of()
    model: dict[int, str] = {}
    for generation, (action, keys) in enumerate(steps):
        if action == "put":
            rows = pa.table({"id": pa.array(keys, pa.int64()),
                             "name": pa.array([f"{generation}:{k}" for k in keys])})
            cache.put_arrow([pa.array(keys, pa.int64())], pa.array(np.arange(len(keys))), rows)
            model.update({k: f"{generation}:{k}" for k in keys})
        elif action == "invalidate":
            cache.invalidate_arrow([pa.array(keys, pa.int64())])
            for k in keys:
                model.pop(k, None)
        else:
            cache._entries.compact()
        asked = sorted(set(keys) | set(model))
        assert names(cache, asked) == [model.get(k) for k in asked]


def test_uint64_keys_past_two_to_the_63_stay_exact() -> None:
    cache = cache_of(pa.uint64())
    keys = [2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1]
    put(cache, keys, pa.uint64())
    assert names(cache, [*keys, 0, 2**63 + 2], pa.uint64()) == [
        *(f"n{k}" for k in keys), None, None]
