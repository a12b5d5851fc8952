"""DefaultLookupCache's columnar store: the Arrow batch API and the per-key API on one
store, exact keys of every Spark key type, batch eviction bounds and exact bytes."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache import DefaultLookupCache
from spark_lookup.errors import ConfigError
from tests.clock import FakeTimer

INT64 = pa.int64()
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])


def bound(schema: pa.Schema = SCHEMA, keys: tuple[str, ...] = ("id",), timer: Any = None,
          **limits: Any) -> DefaultLookupCache:
    builder = DefaultLookupCache.new_builder()
    for name, value in (limits or {"maximum_size": 1000}).items():
        getattr(builder, name)(value)
    if timer is not None:
        builder.timer(timer)
    cache = builder.build()
    cache.bind(schema, list(keys))
    cache.open()
    return cache


def rows_for(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "name": pa.array([f"n{i}" for i in ids]),
                     "score": pa.array([i / 2 for i in ids], pa.float64())}, schema=SCHEMA)


def answers(cache: DefaultLookupCache, keys: list[Any], arrow_type: pa.DataType = INT64
            ) -> dict[Any, list[tuple[Any, ...]] | None]:
    """get_arrow's answer per key, as Python (None: a miss)."""
    hit, groups, offsets, rows = cache.get_arrow([pa.array(keys, arrow_type)])
    table = rows.to_pylist()
    out: dict[Any, list[tuple[Any, ...]] | None] = {}
    for i, key in enumerate(keys):
        if not hit[i]:
            out[key] = None
        elif groups[i] < 0:
            out[key] = []
        else:
            span = table[offsets[groups[i]]: offsets[groups[i] + 1]]
            out[key] = [tuple(r.values()) for r in span]
    return out


def put(cache: DefaultLookupCache, keys: list[Any], owners: list[int], table: pa.Table,
        arrow_type: pa.DataType = INT64) -> None:
    cache.put_arrow([pa.array(keys, arrow_type)], pa.array(owners, pa.int64()), table)


def test_arrow_put_and_get_with_several_rows_and_cached_misses() -> None:
    cache = bound()
    table = pa.concat_tables([rows_for([1]), rows_for([3]), rows_for([3])])
    put(cache, [1, 2, 3], [0, 2, 2], table)
    got = answers(cache, [3, 2, 1, 4])
    assert got == {3: [(3, "n3", 1.5)] * 2, 2: [], 1: [(1, "n1", 0.5)], 4: None}
    assert (cache.metrics.hit_count, cache.metrics.miss_count) == (3, 1)
    assert cache.size() == 3


def test_per_key_and_arrow_apis_read_one_store() -> None:
    cache = bound()
    cache.put_all({(1,): [(1, "a", 1.0)], (2,): []})
    put(cache, [3], [0], rows_for([3]))
    assert answers(cache, [1, 2, 3]) == {1: [(1, "a", 1.0)], 2: [], 3: [(3, "n3", 1.5)]}
    assert cache.get_all([(1,), (2,), (3,), (4,)]) == {
        (1,): ((1, "a", 1.0),), (2,): (), (3,): ((3, "n3", 1.5),)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 40), max_size=30)),
                min_size=1, max_size=12))
def test_batch_and_per_key_answers_agree(batches: list[tuple[bool, list[int]]]) -> None:
    """Puts through either API in any order, then both read the same answers."""
    cache = bound(maximum_size=25)
    model: dict[int, list[tuple[Any, ...]]] = {}
    for version, (arrow, ids) in enumerate(batches):
        distinct = list(dict.fromkeys(ids))
        entries = {k: [(k, f"v{version}", float(k))] * (k % 3) for k in distinct}
        if arrow:
            owners = [i for i, k in enumerate(distinct) for _ in entries[k]]
            flat = [r for k in distinct for r in entries[k]]
            table = pa.table({n: [r[j] for r in flat] for j, n in enumerate(SCHEMA.names)},
                             schema=SCHEMA)
            put(cache, distinct, owners, table)
        else:
            cache.put_all({(k,): rows for k, rows in entries.items()})
        model.update(entries)
        assert cache.size() <= 25
    keys = sorted(model)
    per_key = cache.get_all([(k,) for k in keys])
    batch = answers(cache, keys)
    for k in keys:
        assert batch[k] == (list(per_key[(k,)]) if (k,) in per_key else None)
        if batch[k] is not None:
            assert batch[k] == model[k]  # never another key's rows, never stale


def test_bigint_keys_beyond_2_53_stay_apart() -> None:
    cache = bound()
    big = 2**53
    put(cache, [big, big + 1], [0, 1], rows_for([big, big + 1]))
    got = answers(cache, [big + 1, big])
    assert got[big + 1] == [(big + 1, f"n{big + 1}", (big + 1) / 2)]
    assert got[big] == [(big, f"n{big}", big / 2)]
    assert cache.get_if_present((big + 1,)) == ((big + 1, f"n{big + 1}", (big + 1) / 2),)
    assert cache.get_if_present((float(big + 1),)) == ((big, f"n{big}", big / 2),)


@pytest.mark.parametrize(
    ("arrow_type", "values"),
    [
        (pa.string(), ["1", "true", "", "é", "1 ", "customer-10", "customer-1"]),
        (pa.binary(), [b"\x00", b"", b"\x00\x00", b"a"]),
        (pa.decimal128(10, 2), [Decimal("1.50"), Decimal("-1.50"), Decimal("0.01")]),
        (pa.float64(), [0.5, -1.0, 2.0**60, 1e-300]),
        (pa.bool_(), [True, False]),
        (pa.date32(), [date(2024, 1, 1), date(1970, 1, 1)]),
        (pa.timestamp("us", tz="UTC"), [datetime(2024, 1, 1, tzinfo=timezone.utc),
                                        datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc)]),
    ],
)
def test_every_key_type_is_exact(arrow_type: pa.DataType, values: list[Any]) -> None:
    schema = pa.schema([("k", arrow_type), ("v", pa.int64())])
    cache = bound(schema, ("k",))
    table = pa.table({"k": pa.array(values, arrow_type),
                      "v": pa.array(range(len(values)), pa.int64())}, schema=schema)
    put(cache, values, list(range(len(values))), table, arrow_type)
    got = answers(cache, list(reversed(values)), arrow_type)
    for i, value in enumerate(values):
        assert got[value] == [(value, i)]


def test_minus_zero_is_zero_and_decimals_compare_by_value() -> None:
    schema = pa.schema([("k", pa.float64()), ("v", pa.int64())])
    cache = bound(schema, ("k",))
    put(cache, [0.0], [0], pa.table({"k": [0.0], "v": [7]}, schema=schema), pa.float64())
    assert answers(cache, [-0.0], pa.float64())[-0.0] == [(0.0, 7)]
    dec = pa.schema([("k", pa.decimal128(10, 2)), ("v", pa.int64())])
    cache = bound(dec, ("k",))
    cache.put((Decimal("1.5"),), [(Decimal("1.50"), 1)])
    assert cache.get_if_present((Decimal("1.50"),)) == ((Decimal("1.50"), 1),)
    assert cache.get_if_present((Decimal("1.505"),)) is None  # no DECIMAL(10,2) is it


def test_composite_keys_compare_every_part() -> None:
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("v", pa.int64())])
    cache = bound(schema, ("a", "b"))
    keys = [(i % 7, f"s{i % 5}") for i in range(35)]
    cache.put_all({k: [(k[0], k[1], n)] for n, k in enumerate(keys)})
    hit, groups, offsets, rows = cache.get_arrow(
        [pa.array([k[0] for k in keys]), pa.array([k[1] for k in keys])])
    assert hit.all()
    values = rows.column("v").to_pylist()
    assert [values[offsets[g]] for g in groups] == list(range(35))
    assert cache.get_if_present((7, "s0")) is None
    assert cache.get_if_present((1, "s5")) is None


def test_python_equality_never_merges_keys() -> None:
    cache = DefaultLookupCache.new_builder().maximum_size(10).build()
    cache.open()
    cache.put(("1",), [("1", "text")])
    assert cache.get_if_present((1,)) is None
    assert cache.get_if_present((True,)) is None
    ints = DefaultLookupCache.new_builder().maximum_size(10).build()
    ints.open()
    ints.put((1,), [(1, "one")])
    assert ints.get_if_present((True,)) is None  # True == 1 in Python, not in Spark
    assert ints.get_if_present((1.0,)) == ((1, "one"),)  # numbers among numbers
    assert ints.get_if_present(("1",)) is None
    with pytest.raises(TypeError, match="does not convert"):
        ints.put(("x",), [(2, "two")])


def test_null_and_nan_keys_are_never_cached() -> None:
    cache = DefaultLookupCache.new_builder().maximum_size(10).build()
    cache.open()
    cache.put_all({(None,): [(None, "n")], (float("nan"),): [], (1.5,): [(1.5, "x")]})
    assert cache.size() == 1
    assert cache.get_if_present((None,)) is None
    assert cache.get_if_present((float("nan"),)) is None


def test_size_bound_holds_after_every_batch_and_evicts_least_recent_batches() -> None:
    cache = bound(maximum_size=640)
    for start in range(0, 6400, 320):
        ids = list(range(start, start + 320))
        put(cache, ids, list(range(320)), rows_for(ids))
        assert cache.size() <= 640
        if start >= 320:
            # The batch before, read now, outlives the one before it.
            answers(cache, list(range(start - 320, start)))
    # Evicted first: the oldest batches, then 1/64 of the bound beyond what must go.
    assert cache.size() >= 640 - 640 // 64 - 320
    latest = answers(cache, list(range(6080, 6400)))
    assert all(v is not None for v in latest.values())
    assert all(v is None for v in answers(cache, list(range(5440))).values())


def test_byte_bound_holds_and_bytes_are_exact() -> None:
    limit = 200_000
    cache = bound(maximum_bytes=limit)
    rng = random.Random(3)
    for _ in range(60):
        ids = rng.sample(range(100_000), 500)
        put(cache, ids, list(range(500)), rows_for(ids))
        held = cache.metrics.num_cached_bytes
        assert 0 < held <= limit
    rows = rows_for(list(range(cache.size())))
    assert held >= rows.get_total_buffer_size()  # at least the rows' own buffers
    cache.close()
    assert cache.metrics.num_cached_bytes == 0


def test_max_bytes_option_and_builder() -> None:
    cache = DefaultLookupCache.from_options(
        {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-bytes": "64 mb"})
    assert "maximum_bytes=67108864" in repr(cache)
    with pytest.raises(ConfigError, match="lookup.partial-cache.max-bytes"):
        DefaultLookupCache.from_options(
            {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-bytes": "64 parsecs"})
    with pytest.raises(ConfigError, match="maximum_bytes"):
        DefaultLookupCache.new_builder().maximum_bytes(0)


def test_ttl_is_checked_in_bulk_on_the_arrow_path() -> None:
    timer = FakeTimer()
    cache = bound(timer=timer, expire_after_write=10, expire_after_access=4)
    put(cache, [1, 2], [0, 1], rows_for([1, 2]))
    timer.tick(3)
    assert answers(cache, [1])[1] is not None  # read at 3 s: 1 lives until 7 s
    timer.tick(3)
    got = answers(cache, [1, 2])
    assert got[1] is not None
    assert got[2] is None  # 2 was idle for 6 s
    for _ in range(3):
        timer.tick(3)
        answers(cache, [1])
    assert answers(cache, [1])[1] is None  # 12 s after its write
    assert cache.size() == 0
    assert cache.metrics.num_cached_bytes == 0


def test_a_missing_keys_own_life_is_checked_in_bulk_on_the_arrow_path() -> None:
    timer = FakeTimer()
    cache = bound(timer=timer, expire_after_write=600, expire_missing_after=30)
    # One put_arrow of 1,000 keys: the even ones have rows, the odd ones none.
    keys = list(range(1000))
    evens = keys[::2]
    put(cache, keys, evens, rows_for(evens))  # key k is at position k
    entries = cache._entries  # the deadlines, set for the batch at once
    assert entries.deadline is not None
    deadlines, starts = entries.deadline[: entries.count], entries.starts[: entries.count + 1]
    missing = starts[1:] == starts[:-1]
    assert missing.sum() == 500
    assert (deadlines[missing] == 1030).all()
    assert (deadlines[~missing] == 1600).all()
    timer.tick(29)
    got = answers(cache, keys)
    assert all(got[k] == [] for k in keys[1::2])
    timer.tick(1)
    got = answers(cache, keys)
    assert all(got[k] is None for k in keys[1::2])  # looked up again by the runtime
    assert all(got[k] == [(k, f"n{k}", k / 2)] for k in evens)
    assert cache.size() == 500
    put(cache, [1], [0], rows_for([1]))  # a late row, found
    assert answers(cache, [1]) == {1: [(1, "n1", 0.5)]}


def test_compaction_keeps_every_live_answer() -> None:
    cache = bound(maximum_size=3000)
    model: dict[int, int] = {}
    rng = np.random.default_rng(5)
    for version in range(40):
        ids = list(dict.fromkeys(rng.integers(0, 6000, 400).tolist()))
        table = rows_for(ids).set_column(1, "name", pa.array([f"v{version}"] * len(ids)))
        put(cache, ids, list(range(len(ids))), table)
        model.update(dict.fromkeys(ids, version))
    got = answers(cache, sorted(model))
    live = {k: v for k, v in got.items() if v is not None}
    assert 2900 <= len(live) <= 3000
    for key, rows in live.items():
        assert rows == [(key, f"v{model[key]}", key / 2)]


UTC = timezone.utc
PLUS_ONE = timezone(timedelta(hours=1))
NS_PAST = pd.Timestamp("2024-01-01 00:00:00.000000001")


@pytest.mark.parametrize(
    ("arrow_type", "stored", "same", "others"),
    [
        (pa.int64(), 1, [1.0, Decimal("1"), Decimal("1.00"), np.int64(1), np.int32(1),
                         np.float64(1.0)],
         [1.5, 1.9, 0.999, Decimal("1.5"), np.float64(1.5), True, "1", 2**63, -(2**63) - 1]),
        (pa.int8(), 1, [1.0, np.int8(1)], [257, 1.5, np.float32(1.25), True]),
        (pa.uint8(), 1, [1.0, np.uint8(1)], [257, 1.5, -255, True]),
        (pa.uint64(), 2**64 - 1, [Decimal(2**64 - 1)], [-1, 2**64 - 1.5, 2**64]),
        # A FLOAT key is its value as a float (0.1 is the FLOAT 0.1), as every key is
        # converted to its column's type; beyond the FLOAT range it is none.
        (pa.float32(), 0.1, [np.float32(0.1), Decimal("0.1")], [1e300, True, "0.1"]),
        (pa.float64(), 0.5, [Decimal("0.5"), np.float32(0.5), np.float64(0.5)],
         [True, "0.5", 10**400]),
        (pa.decimal128(10, 2), Decimal("1.50"), [Decimal("1.5"), 1.5, Decimal("1.500")],
         [Decimal("1.505"), 1.505, Decimal("1E+8"), True, "1.50"]),
        (pa.date32(), date(2024, 1, 1), [pd.Timestamp("2024-01-01").date()],
         [datetime(2024, 1, 1, 23, 59), datetime(2024, 1, 1), pd.Timestamp("2024-01-01"),
          "2024-01-01"]),
        (pa.timestamp("us", tz="UTC"), datetime(2024, 1, 1, tzinfo=UTC),
         [datetime(2024, 1, 1, 1, tzinfo=PLUS_ONE), pd.Timestamp("2024-01-01", tz="UTC"),
          datetime(2024, 1, 1)],  # naive: read as UTC, as Arrow reads it
         [NS_PAST.tz_localize("UTC"), date(2024, 1, 1), 1704067200000000]),
        (pa.timestamp("us"), datetime(2024, 1, 1), [pd.Timestamp("2024-01-01")],
         [NS_PAST, datetime(2024, 1, 1, tzinfo=UTC), date(2024, 1, 1)]),
        (pa.timestamp("s"), datetime(2024, 1, 1, 0, 0, 1), [pd.Timestamp("2024-01-01 00:00:01")],
         [datetime(2024, 1, 1, 0, 0, 1, 500), datetime(2024, 1, 1, 0, 0, 1, 999_999)]),
        (pa.string(), "a", [np.str_("a")], [b"a", 1, True]),
        (pa.binary(), b"a", [np.bytes_(b"a")], ["a", 97]),
        (pa.bool_(), True, [np.bool_(True)], [1, np.int64(1), 1.0, "true"]),
    ],
)
def test_a_key_converts_to_its_columns_type_exactly_or_matches_nothing(
        arrow_type: pa.DataType, stored: Any, same: list[Any], others: list[Any]) -> None:
    """Issue 26: 1.5 read the rows of the BIGINT 1, a datetime those of its DATE."""
    schema = pa.schema([("k", arrow_type), ("v", pa.int64())])
    cache = bound(schema, ("k",))
    cache.put((stored,), [(stored, 7)])
    answer = cache.get_if_present((stored,))
    assert answer is not None
    assert answer[0][1] == 7
    for value in same:
        assert cache.get_if_present((value,)) == answer, value
    before = cache.metrics.miss_count
    for value in others:
        assert cache.get_if_present((value,)) is None, value
        assert cache.get_all([(value,)]) == {}, value
        with pytest.raises(TypeError, match="does not convert to the cache's key types"):
            cache.put((value,), [(stored, 8)])
    assert cache.metrics.miss_count - before == 2 * len(others)
    assert cache.size() == 1
    assert cache.get_if_present((stored,)) == answer  # no refused put overwrote it


def test_an_inexact_key_is_refused_on_put_and_files_nothing() -> None:
    cache = bound()
    cache.put((1,), [(1, "one", 0.5)])
    with pytest.raises(TypeError, match=r"\(2\.5,\)"):
        cache.put((2.5,), [(2, "two", 1.0)])
    assert cache.get_if_present((2,)) is None
    assert cache.get_all([(1.9,), (1,)]) == {(1,): ((1, "one", 0.5),)}
    # An unbound cache reads its key types from the first put, and is as exact.
    unbound = DefaultLookupCache.new_builder().maximum_size(10).build()
    unbound.open()
    unbound.put((1,), [(1, "one")])
    assert unbound.get_if_present((1.5,)) is None
    with pytest.raises(TypeError, match="does not convert"):
        unbound.put((2.5,), [(2, "two")])
    assert unbound.get_if_present((2,)) is None
    dates = DefaultLookupCache.new_builder().maximum_size(10).build()
    dates.open()
    dates.put((date(2024, 1, 1),), [("new year",)])
    assert dates.get_if_present((datetime(2024, 1, 1, 23, 59),)) is None


def test_a_key_asked_twice_in_a_batch_counts_twice() -> None:
    cache = bound()
    cache.put_all({(1,): [(1, "one", 0.5)], (2,): []})
    found = cache.get_all([(1,), (1,), (2,), (3,), (1.5,)])
    assert found == {(1,): ((1, "one", 0.5),), (2,): ()}
    assert (cache.metrics.hit_count, cache.metrics.miss_count) == (3, 2)
    answers(cache, [1, 1, 3])
    assert (cache.metrics.hit_count, cache.metrics.miss_count) == (5, 3)


def test_one_key_given_twice_to_put_all_keeps_the_last_rows() -> None:
    schema = pa.schema([("k", pa.float64()), ("v", pa.string())])
    cache = bound(schema, ("k",))
    cache.put_all({(Decimal("0.5"),): [(0.5, "first")], (0.5,): [(0.5, "second")]})
    assert cache.get_if_present((0.5,)) == ((0.5, "second"),)
    assert cache.size() == 1


NARROW = pa.schema([("id", pa.int64())] + [(f"b{j}", pa.bool_()) for j in range(24)])


def narrow_rows(ids: list[int], nulls: bool) -> pa.Table:
    flags = {f"b{j}": pa.array([None if nulls and i % 5 == 0 else bool(i & 1) for i in ids])
             for j in range(24)}
    return pa.table({"id": pa.array(ids, pa.int64()), **flags}, schema=NARROW)


def test_byte_bound_holds_after_reads_that_merge_segments() -> None:
    """Issue 26: merging segments whose rows have no nulls with one that has some adds
    a validity bitmap to every column of them, and reads went past the bound."""
    def filled(**limits: Any) -> DefaultLookupCache:
        cache = bound(NARROW, **limits)
        start = 0
        for count, nulls in ((16_000, False), (4_000, False), (1_000, True)):
            ids = list(range(start, start + count))
            put(cache, ids, list(range(count)), narrow_rows(ids, nulls))
            start += count
        return cache

    limit = filled(maximum_size=10**6).metrics.num_cached_bytes  # exactly full
    cache = filled(maximum_bytes=limit)
    assert cache.size() == 21_000
    rng = np.random.default_rng(7)
    for _ in range(12):
        answers(cache, rng.integers(0, 21_000, 2_000).tolist())
        assert cache.metrics.num_cached_bytes <= limit
    assert cache.size() > 0


def test_key_rows_name_each_keys_row_where_no_key_has_two() -> None:
    cache = bound()
    cache.put_arrow([pa.array([1, 2, 3], INT64)], pa.array([0, 1]), rows_for([1, 2]))
    for _ in range(5):  # merged into one segment once reads come in a row
        answered = cache.get_arrow([pa.array([3, 2, 9, 1], INT64)])
    assert answered.key_rows is not None
    names = answered.rows.column("name").to_pylist()
    assert [names[r] if r >= 0 else None for r in answered.key_rows.tolist()] == [
        None, "n2", None, "n1"]  # 3: no rows; 9: a miss
    cache.put_arrow([pa.array([4], INT64)], pa.array([0, 0]), rows_for([4, 4]))
    for _ in range(5):
        answered = cache.get_arrow([pa.array([4, 1], INT64)])
    assert answered.key_rows is None  # 4 has two rows: groups and offsets only


def test_a_warm_large_cache_gathers_short_strings_through_views() -> None:
    ids = list(range(70_000))
    cache = bound(maximum_size=100_000)
    cache.put_arrow([pa.array(ids, INT64)], pa.array(ids), rows_for(ids))
    cold = cache._gauges()[1]
    asked = [69_999, 5, 123]
    for _ in range(5):  # warm: merged, then viewed
        answered = cache.get_arrow([pa.array(asked, INT64)])
    assert answered.views is not None
    assert answered.key_rows is not None
    gathered = answered.views.take("name", answered.rows.column("name"), answered.key_rows,
                                   None)
    assert gathered is not None
    assert gathered.to_pylist() == ["n69999", "n5", "n123"]
    assert cache._gauges()[1] == cold + answered.views.nbytes  # counted in the bytes
    cache.put_arrow([pa.array([70_000], INT64)], pa.array([0]), rows_for([70_000]))
    assert cache.get_arrow([pa.array(asked, INT64)]).views is None  # the rows changed


def test_views_count_within_a_byte_bound() -> None:
    ids = list(range(70_000))
    probe = bound(maximum_size=100_000)
    probe.put_arrow([pa.array(ids, INT64)], pa.array(ids), rows_for(ids))
    limit = probe._gauges()[1] + 100_000  # room for the rows, not for their views
    cache = bound(maximum_bytes=limit)
    cache.put_arrow([pa.array(ids, INT64)], pa.array(ids), rows_for(ids))
    for _ in range(12):
        cache.get_arrow([pa.array([1, 2, 3], INT64)])
        assert cache._gauges()[1] <= limit
    assert cache.size() < len(ids)  # the views' bytes were made room for
