"""LookupFullCache and FullSnapshot: indexing, vectorized matching, atomic swaps,
staleness, unsupported operations, concurrent reads during swaps."""

from __future__ import annotations

import datetime as dt
import pickle
import threading
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cache import CacheMetrics
from cache.full.snapshot import FullSnapshot, LookupFullCache
from spark_lookup.errors import ConfigError, SnapshotUnavailableError
from tests.clock import FakeTimer

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def table(rows: list[tuple[Any, ...]], schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows],
                                schema=schema)


def snapshot(rows: list[tuple[Any, ...]], keys: tuple[str, ...] = ("id",), version: int = 1,
             loaded_at: float = 1000.0, schema: pa.Schema = SCHEMA) -> FullSnapshot:
    return FullSnapshot.build(table(rows, schema), keys, loaded_at=loaded_at, version=version)


def opened(clock: FakeTimer | None = None, **kw: Any) -> LookupFullCache:
    cache = LookupFullCache(["id"], clock=clock or FakeTimer(1000.0), **kw)
    cache.open(CacheMetrics())
    return cache


def test_snapshot_groups_rows_by_key_and_drops_null_keys() -> None:
    snap = snapshot([(3, "c"), (1, "a"), (2, "b1"), (None, "n"), (2, "b2")])
    assert snap.num_rows == 4
    assert snap.num_keys == 3
    assert not snap.unique
    positions, rows = snap.locate([(2,), (9,), (1,), (2,)])
    assert positions.tolist() == [0, 0, 2, 3, 3]
    assert snap.rows(rows) == [(2, "b1"), (2, "b2"), (1, "a"), (2, "b1"), (2, "b2")]


def test_a_keys_rows_come_in_the_same_order_whatever_order_they_were_loaded_in() -> None:
    """Parallel splits arrive in any order; a key's rows (and the SQL function's first
    match) must not change from one load of the same data to the next."""
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("tags", pa.list_(pa.int8())),
                        ("score", pa.float64())])
    rows = [(k % 3, f"n{k}", [k], float(-k)) for k in range(12)] + [(1, None, None, None)]
    def load(order: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        snap = snapshot(order, schema=schema)
        return snap.rows(snap.locate([(0,), (1,), (2,)])[1])

    first = load(rows)
    assert load(rows[::-1]) == first
    assert load(rows[5:] + rows[:5]) == first
    assert [row[1] for row in first if row[0] == 1] == ["n1", "n10", "n4", "n7", None]


def test_unique_keys_take_the_fast_path() -> None:
    snap = snapshot([(i, f"n{i}") for i in range(1000)])
    assert snap.unique
    positions, rows = snap.locate([(999,), (5,), (1000,)])
    assert positions.tolist() == [0, 1]
    assert snap.rows(rows) == [(999, "n999"), (5, "n5")]


def test_composite_keys_and_nan() -> None:
    schema = pa.schema([("a", pa.int64()), ("b", pa.float64()), ("v", pa.string())])
    snap = snapshot([(1, 0.5, "x"), (1, float("nan"), "nan"), (2, 0.5, "y")], ("a", "b"),
                    schema=schema)
    assert snap.num_rows == 2  # a NaN key never matches
    positions, rows = snap.locate([(1, 0.5), (2, 0.5), (1, float("nan")), (0.5, 1)])
    assert positions.tolist() == [0, 1]
    assert snap.rows(rows) == [(1, 0.5, "x"), (2, 0.5, "y")]


def test_probe_values_of_another_type_never_match() -> None:
    snap = snapshot([(1, "a")])
    positions, _ = snap.locate([(True,), ("1",), (1.0,), (Decimal(1),), (np.int64(1),)])
    # Numbers among numbers (1.0 is the BIGINT 1, as in the partial cache and the
    # connectors); other kinds never.
    assert positions.tolist() == [2, 3, 4]
    strings = pa.schema([("id", pa.string()), ("name", pa.string())])
    snap = snapshot([("1", "a")], schema=strings)
    assert snap.locate([(1,), ("1",)])[0].tolist() == [1]


def test_a_key_that_is_no_value_of_the_key_type_matches_nothing() -> None:
    snap = snapshot([(1, "a"), (2, "b")])
    probes = [(1.5,), (1.9,), (Decimal("1.5"),), (2**64,), (2.0,), (np.float64(1.0),)]
    assert snap.locate(probes)[0].tolist() == [4, 5]
    schema = pa.schema([("d", pa.date32()), ("v", pa.string())])
    dates = snapshot([(dt.date(2024, 1, 1), "x")], ("d",), schema=schema)
    assert dates.locate([(dt.datetime(2024, 1, 1, 23, 59),)])[0].tolist() == []
    stamps = pa.schema([("t", pa.timestamp("us")), ("v", pa.string())])
    wall = snapshot([(dt.datetime(2024, 1, 1), "x")], ("t",), schema=stamps)
    nanos = pd.Timestamp("2024-01-01 00:00:00.000000001")
    assert wall.locate([(nanos,), (pd.Timestamp("2024-01-01"),)])[0].tolist() == [1]


def test_full_cache_counts_every_key_asked() -> None:
    cache = opened()
    cache.swap(snapshot([(1, "a")]))
    assert cache.get_all([(1,), (1,), (1.5,), (2,)]) == {(1,): ((1, "a"),), (1.5,): (),
                                                       (2,): ()}
    assert (cache.metrics.hit_count, cache.metrics.miss_count) == (2, 2)


def test_dates_and_timestamps_as_keys() -> None:
    schema = pa.schema([("d", pa.date32()), ("v", pa.string())])
    day = dt.date(2026, 3, 29)
    snap = snapshot([(day, "x")], ("d",), schema=schema)
    assert snap.locate([(day,), (dt.datetime(2026, 3, 29),)])[0].tolist() == [0]


def test_empty_table() -> None:
    snap = snapshot([])
    assert (snap.num_rows, snap.num_keys) == (0, 0)
    assert snap.locate([(1,)])[0].tolist() == []


def test_missing_key_column_is_an_error() -> None:
    with pytest.raises(ConfigError, match="'nope'"):
        FullSnapshot.build(table([(1, "a")]), ["nope"], loaded_at=0)


def test_lookups_answer_from_the_current_snapshot_and_count_misses() -> None:
    cache = opened()
    cache.swap(snapshot([(1, "a"), (2, "b")]))
    assert cache.get_if_present((1,)) == ((1, "a"),)
    assert cache.get_all([(1,), (2,), (3,)]) == {(1,): ((1, "a"),), (2,): ((2, "b"),), (3,): ()}
    m = cache.metrics
    assert (m.hit_count, m.miss_count) == (3, 1)  # Flink reports 0 misses; we count them
    assert (m.num_cached_records, cache.size()) == (2, 2)
    assert m.num_cached_bytes > 0


def test_reload_adds_updates_and_removes() -> None:
    cache = opened()
    cache.swap(snapshot([(1, "a"), (2, "b")], version=1))
    cache.swap(snapshot([(2, "B"), (3, "c")], version=2))
    assert cache.get_all([(1,), (2,), (3,)]) == {(1,): (), (2,): ((2, "B"),), (3,): ((3, "c"),)}
    assert cache.current() is not None
    assert cache.current().version == 2  # type: ignore[union-attr]


def test_first_lookup_waits_for_the_first_load() -> None:
    cache = opened(initial_load_timeout=dt.timedelta(seconds=5))
    threading.Timer(0.05, cache.swap, args=(snapshot([(1, "a")]),)).start()
    assert cache.get_if_present((1,)) == ((1, "a"),)


def test_first_lookup_times_out_naming_the_last_error() -> None:
    cache = opened(initial_load_timeout=dt.timedelta(milliseconds=20))
    cache.record_failure(ConnectionError("db down"))
    with pytest.raises(SnapshotUnavailableError, match="first load.*db down"):
        cache.get_if_present((1,))


def test_max_staleness_turns_an_old_snapshot_into_an_error() -> None:
    clock = FakeTimer(1000.0)
    cache = opened(clock, max_staleness=dt.timedelta(minutes=10))
    cache.swap(snapshot([(1, "a")], loaded_at=1000.0))
    clock.tick(600)
    assert cache.get_if_present((1,)) == ((1, "a"),)
    clock.tick(1)
    cache.record_failure(ConnectionError("db down"))
    with pytest.raises(SnapshotUnavailableError, match="max_staleness.*db down"):
        cache.get_if_present((1,))
    cache.swap(snapshot([(1, "a2")], loaded_at=clock.now))  # a reload recovers
    assert cache.get_if_present((1,)) == ((1, "a2"),)


def test_unsupported_operations() -> None:
    cache = opened()
    with pytest.raises(NotImplementedError):
        cache.put((1,), [(1, "a")])
    with pytest.raises(NotImplementedError):
        cache.put_all({(1,): [(1, "a")]})
    with pytest.raises(NotImplementedError):
        cache.invalidate((1,))


def test_swap_refuses_a_snapshot_keyed_differently() -> None:
    cache = opened()
    with pytest.raises(ConfigError, match="keyed by"):
        cache.swap(snapshot([(1, "a")], keys=("name",)))


def test_pickles_as_configuration() -> None:
    cache = opened(max_staleness=dt.timedelta(hours=1))
    cache.swap(snapshot([(1, "a")]))
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.current() is None
    assert copy.max_staleness == dt.timedelta(hours=1)
    assert copy.key_columns == ("id",)


def test_concurrent_lookups_never_see_a_half_loaded_table() -> None:
    """Every version maps all 500 keys to rows of that version: a reader must always see
    all of one version."""
    cache = opened()
    cache.swap(snapshot([(i, "v0") for i in range(500)], version=0))
    errors: list[str] = []
    stop = threading.Event()

    def read() -> None:
        keys = [(i,) for i in range(500)]
        while not stop.is_set():
            got = cache.get_all(keys)
            versions = {rows[0][1] for rows in got.values() if rows}
            if len(versions) != 1 or any(not rows for rows in got.values()):
                errors.append(f"mixed or missing: {sorted(versions)[:3]}")

    readers = [threading.Thread(target=read, daemon=True) for _ in range(4)]
    try:
        for reader in readers:
            reader.start()
        # Built while four readers spin: builds are loads, and readers take turns while
        # one runs (spark_lookup.load_priority), so this no longer starves.
        for version in range(1, 40):
            cache.swap(snapshot([(i, f"v{version}") for i in range(500)], version=version))
    finally:
        stop.set()
        for reader in readers:
            reader.join(timeout=30)
    assert not any(reader.is_alive() for reader in readers)
    assert errors == []


def test_first_lookups_from_many_threads_at_once() -> None:
    """pandas builds an index's hash table on first use; threads racing to build it saw
    a 'non-unique' index. Every thread gets its rows."""
    import threading

    import pyarrow as pa

    from cache.full.snapshot import FullSnapshot

    for _ in range(5):
        table = pa.table({"id": pa.array(range(20_000), pa.int64()),
                          "v": pa.array([f"v{i}" for i in range(20_000)])})
        snapshot = FullSnapshot.build(table, ["id"], loaded_at=0.0)
        errors: list[BaseException] = []
        start = threading.Barrier(8)

        def read(snapshot: FullSnapshot = snapshot, errors: list[BaseException] = errors,
                 start: threading.Barrier = start) -> None:
            try:
                start.wait()
                _, rows = snapshot.locate([(i,) for i in range(0, 20_000, 7)])
                assert len(rows) == len(range(0, 20_000, 7))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
