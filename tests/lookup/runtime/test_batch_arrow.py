"""The per-key batch API on the Arrow path (issue 27, item 3): ``lookup_batch`` checks and
encodes the keys as Arrow arrays, answers them through the function's ``lookup_arrow``
and the cache's Arrow methods, and turns only the answer into Python rows, keyed by the
caller's tuples. Behaviour only: the same answers and errors as the tuple path, one
round trip per batch of misses."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cache import DefaultLookupCache
from lookup import LookupFunctionProvider, PartialCachingLookupProvider, open_lookup
from lookup.providers import LookupProvider
from spark_lookup.errors import ConfigError
from tests.lookup.functions import ArrowDictLookup, DictLookup

ROWS = [(3, "c"), (1, "a"), (2, "b"), (2, "b2"), (5, "e")]  # table order, not key order
KINDS = ["none", "partial"]


def provider(fn: Any, kind: str, **options: Any) -> LookupProvider:
    if kind == "none":
        return LookupFunctionProvider.of(fn, max_retries=0, **options)
    cache = DefaultLookupCache.new_builder().maximum_size(1000) \
        .expire_after_write(timedelta(hours=1)).build()
    return PartialCachingLookupProvider.of(fn, cache, max_retries=0, **options)


@pytest.mark.parametrize("kind", KINDS)
def test_answers_are_python_rows_under_every_given_key(kind: str) -> None:
    fn = ArrowDictLookup(ROWS)
    with open_lookup(provider(fn, kind)) as handle:
        for _ in range(2):  # loaded, then (partial) cached
            found = handle.lookup_batch([(2,), (1,), (4,), (2,), (5,)])
            assert found == {(2,): ((2, "b"), (2, "b2")), (1,): ((1, "a"),), (4,): (),
                             (5,): ((5, "e"),)}
            assert list(found) == [(2,), (1,), (4,), (5,)]  # the caller's order
            assert all(type(rows) is tuple and all(type(r) is tuple for r in rows)
                       for rows in found.values())
    assert fn.arrow_calls[0] == [(2,), (1,), (4,), (5,)]  # each distinct key once


@pytest.mark.parametrize("kind", KINDS)
def test_the_arrow_path_answers_as_the_tuple_path_does(kind: str) -> None:
    rows = [(i, f"n{i}") for i in range(0, 300, 3)]
    keys = [(i,) for i in np.random.default_rng(5).integers(0, 300, 500).tolist()]
    keys += [(None,), (math.nan,), (7.0,), (7.5,), (np.int64(9),), (Decimal("12"),)]
    answers = []
    for fn in (ArrowDictLookup(rows), DictLookup(rows)):
        with open_lookup(provider(fn, kind)) as handle:
            answers.append(handle.lookup_batch(keys))
            answers.append(handle.lookup_batch(keys))
    assert answers[0] == answers[1] == answers[2] == answers[3]
    assert answers[0][(9,)] == ((9, "n9"),)
    assert answers[0][(7.5,)] == ()


@pytest.mark.parametrize("kind", KINDS)
def test_a_wrong_kind_in_a_batch_names_key_and_column_and_sends_nothing(kind: str) -> None:
    fn = ArrowDictLookup(ROWS)
    with open_lookup(provider(fn, kind)) as handle:
        with pytest.raises(ConfigError, match=r"key \(True,\) for .*column 'id': a bool "
                                              r"value \(True\) can never equal a value of a "
                                              r"bigint column"):
            handle.lookup_batch([(1,), (2,), (True,)])
        with pytest.raises(ConfigError, match=r"key \('1',\) .*column 'id': a str value"):
            handle.lookup_batch([(1,), ("1",)])
        with pytest.raises(ConfigError, match="out of the range of bigint"):
            handle.lookup_batch([(1,), (2**63,)])
        with pytest.raises(TypeError, match=r"tuple of 1 value\(s\) \(id\)"):
            handle.lookup_batch([(1,), 2])
        with pytest.raises(TypeError, match="hashable"):
            handle.lookup_batch([(1,), ([2],)])
    assert fn.arrow_calls == []


@pytest.mark.parametrize("kind", KINDS)
def test_keys_equal_as_spark_values_answer_under_each_tuple(kind: str) -> None:
    fn = ArrowDictLookup([(Decimal("0.10"), "tenth"), (Decimal("2.00"), "two")],
                         schema="d DECIMAL(10,2), name STRING", key_columns=["d"])
    with open_lookup(provider(fn, kind)) as handle:
        # 0.1 and Decimal("0.1") differ as Python objects, not as DECIMAL(10,2) values;
        # 2, 2.0 and Decimal("2.000") are one key in Python too.
        keys = [(0.1,), (Decimal("0.1"),), (2,), (2.0,), (Decimal("2.000"),), (0.105,)]
        found = handle.lookup_batch(keys)
        for key in keys[:2]:
            assert found[key] == ((Decimal("0.10"), "tenth"),)
        for key in keys[2:5]:
            assert found[key] == ((Decimal("2.00"), "two"),)
        assert found[(0.105,)] == ()  # no DECIMAL(10,2) equals it: never sent
    assert fn.arrow_calls == [[(Decimal("0.10"),), (Decimal("2.00"),)]]
    assert fn.key_types == [[pa.decimal128(10, 2)]]


@pytest.mark.parametrize("kind", KINDS)
def test_nulls_nan_and_duplicates_in_one_batch(kind: str) -> None:
    fn = ArrowDictLookup(ROWS)
    with open_lookup(provider(fn, kind)) as handle:
        other_nan = np.float64("nan")
        keys = [(1,), (None,), (math.nan,), (1,), (1.0,), (other_nan,), (3,), (1.5,),
                (np.int32(3),)]
        found = handle.lookup_batch(keys)
        assert found[(1,)] == found[(1.0,)] == ((1, "a"),)
        assert found[(3,)] == ((3, "c"),)
        for key in [(None,), (math.nan,), (other_nan,), (1.5,)]:
            assert found[key] == ()
        assert len(found) == len(set(keys)) == 6  # two NaN objects: two keys
    assert fn.arrow_calls == [[(1,), (3,)]]


def test_a_null_key_is_never_checked_nor_sent() -> None:
    fn = ArrowDictLookup([(1, "x", 10)], schema="a BIGINT, b STRING, v BIGINT",
                         key_columns=["a", "b"])
    with open_lookup(provider(fn, "partial")) as handle:
        # A null part (None, NaN): the key never matches, whatever the other part holds.
        nan = math.nan
        found = handle.lookup_batch([(nan, 3), (None, b"x"), (1, "x"), (1, "y")])
        assert found == {(nan, 3): (), (None, b"x"): (), (1, "x"): ((1, "x", 10),),
                         (1, "y"): ()}
    assert fn.arrow_calls == [[(1, "x"), (1, "y")]]


def test_composite_keys_are_deduplicated_in_arrow() -> None:
    rows = [(shop, sku, f"{shop}{sku}") for shop in ("s1", "s2") for sku in range(4)]
    fn = ArrowDictLookup(rows, schema="shop STRING, sku INT, v STRING",
                         key_columns=["shop", "sku"])
    with open_lookup(provider(fn, "none")) as handle:
        keys = [("s1", 1), ("s2", 1), ("s1", 1), ("s1", 2), ("s2", 1.0), ("s3", 1)]
        found = handle.lookup_batch(keys)
    assert found == {("s1", 1): (("s1", 1, "s11"),), ("s2", 1): (("s2", 1, "s21"),),
                     ("s1", 2): (("s1", 2, "s12"),), ("s3", 1): ()}
    assert fn.arrow_calls == [[("s1", 1), ("s2", 1), ("s1", 2), ("s3", 1)]]


def test_one_round_trip_per_batch_of_misses() -> None:
    fn = ArrowDictLookup([(i, f"n{i}") for i in range(100)])
    with open_lookup(provider(fn, "partial")) as handle:
        handle.lookup_batch([(i,) for i in range(10)])
        handle.lookup_batch([(i % 15,) for i in range(60)])  # 5 misses among 60 keys
        handle.lookup_batch([(i,) for i in range(15)])  # all cached
        assert [len(call) for call in fn.arrow_calls] == [10, 5]
        assert fn.arrow_calls[1] == [(i,) for i in range(10, 15)]
        m = handle.metrics
        assert (m.hit_count, m.miss_count, m.load_count) == (25, 15, 2)


def test_batches_above_batch_size_are_split_and_no_cache_loads_every_time() -> None:
    fn = ArrowDictLookup([(i, f"n{i}") for i in range(100)])
    with open_lookup(provider(fn, "none", batch_size=4)) as handle:
        found = handle.lookup_batch([(i,) for i in range(10)] * 2)
        assert found[(9,)] == ((9, "n9"),)
        handle.lookup_batch([(1,)])
    assert [len(call) for call in fn.arrow_calls] == [4, 4, 2, 1]


def test_timestamps_and_other_values_come_back_as_the_tuple_path_gives_them() -> None:
    at = datetime(2024, 3, 1, 12, 30, 15, 123456, tzinfo=timezone.utc)
    rows = [(1, at, Decimal("1.50"), b"\x00\x01", None), (2, None, None, None, 2.5)]
    schema = "id BIGINT, at TIMESTAMP, d DECIMAL(10,2), b BINARY, f DOUBLE"
    answers = []
    for fn in (ArrowDictLookup(rows, schema=schema), DictLookup(rows, schema=schema)):
        cache = DefaultLookupCache.new_builder().maximum_size(10).build()
        with open_lookup(PartialCachingLookupProvider.of(fn, cache)) as handle:
            answers += [handle.lookup_batch([(1,), (2,)]), handle.lookup_batch([(2,), (1,)])]
    assert answers[0] == answers[1] == answers[2] == answers[3]
    (row,) = answers[0][(1,)]
    assert row[1] == at
    assert row[1].tzinfo is timezone.utc


def test_lookup_of_one_key_goes_the_same_way() -> None:
    fn = ArrowDictLookup(ROWS)
    with open_lookup(provider(fn, "partial")) as handle:
        assert handle.lookup((2,)) == ((2, "b"), (2, "b2"))
        assert handle.lookup((2.0,)) == ((2, "b"), (2, "b2"))
        assert handle.lookup((None,)) == ()
        with pytest.raises(ConfigError, match="a bool value"):
            handle.lookup((False,))
    assert fn.arrow_calls == [[(2,)]]


def test_true_and_1_in_one_batch_are_not_one_key_on_the_tuple_path_either() -> None:
    fn = DictLookup(ROWS)
    with open_lookup(provider(fn, "partial")) as handle, pytest.raises(
            ConfigError, match=r"key \(True,\) .*column 'id': a bool value"):
        handle.lookup_batch([(1,), (True,)])  # equal as Python objects, not as keys
    assert fn.batch_calls == []


PG_TABLE = """
CREATE TABLE dim (id bigint PRIMARY KEY, name text, at timestamptz, price numeric(10, 2));
INSERT INTO dim SELECT g, 'n' || g, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 s',
    g * 0.25 FROM generate_series(1, 50) AS g;
CREATE TABLE lines (shop text, sku int, line int, PRIMARY KEY (shop, sku, line));
INSERT INTO lines VALUES ('s1', 1, 1), ('s1', 1, 2), ('s2', 1, 1);
"""


@pytest.mark.postgres
@pytest.mark.parametrize("kind", KINDS)
def test_postgresql_over_adbc_answers_as_the_function_does(
        postgres_dsn: str, pg_schema: str, kind: str) -> None:
    import adbc_driver_postgresql.dbapi
    import psycopg

    from lookup import SqlLookupFunction

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{pg_schema}"')
        conn.execute(PG_TABLE)

    def connect() -> Any:
        return adbc_driver_postgresql.dbapi.connect(postgres_dsn)

    keys = [(i,) for i in (3, 1, 99, 3, 50)] + [(None,), (math.nan,), (7.0,), (7.5,)]
    reference = SqlLookupFunction(connect, f"{pg_schema}.dim", "id")
    reference.open()
    try:
        expected = {key: tuple(rows) for key, rows in reference.lookup_batch(keys).items()}
    finally:
        reference.close()
    fn = SqlLookupFunction(connect, f"{pg_schema}.dim", "id")
    with open_lookup(provider(fn, kind)) as handle:
        for _ in range(2):
            found = handle.lookup_batch(keys)
            assert found == expected
            assert found[(7,)][0][2] == datetime(2024, 1, 1, 0, 0, 7, tzinfo=timezone.utc)
            assert found[(7.5,)] == found[(99,)] == ()
        with pytest.raises(ConfigError, match=r"column 'id': a bool value"):
            handle.lookup_batch([(1,), (True,)])
        assert handle.metrics.load_count == (2 if kind == "none" else 1)
    lines = SqlLookupFunction(connect, f"{pg_schema}.lines", ["shop", "sku"])
    with open_lookup(provider(lines, kind)) as handle:
        found = handle.lookup_batch([("s1", 1), ("s2", 1.0), ("s1", 1), ("s3", 1)])
        assert found == {("s1", 1): (("s1", 1, 1), ("s1", 1, 2)), ("s2", 1): (("s2", 1, 1),),
                         ("s3", 1): ()}


def _probe_names(handle: Any, keys: list[int]) -> tuple[Any, list[Any]]:
    """A probe of distinct keys, and each key's names read through its answer's form."""
    probe = handle.runtime.probe([pa.array(keys, pa.int64())])
    names = probe.rows.column("name").to_pylist()
    out = []
    for group in probe.groups.tolist():
        if group < 0:
            out.append([])
        elif probe.one_row_each:
            out.append([names[group]])
        else:
            out.append(names[probe.offsets[group]:probe.offsets[group + 1]])
    return probe, out


def test_a_warm_probe_of_one_row_keys_answers_row_numbers() -> None:
    """Every key answered by the cache with at most one row: each key's group is its row
    (a join then skips expanding groups); any other batch answers in groups."""
    with open_lookup(provider(ArrowDictLookup(ROWS), "partial")) as handle:
        handle.lookup_batch([(1,), (3,), (4,), (5,), (2,)])  # loads them all, 4 missing
        probe, names = _probe_names(handle, [5, 4, 1, 3])
        assert probe.one_row_each
        assert not len(probe.offsets)
        assert names == [["e"], [], ["a"], ["c"]]
        probe, names = _probe_names(handle, [5, 2, 1])  # 2 has two rows
        assert not probe.one_row_each
        assert names == [["e"], ["b", "b2"], ["a"]]
        probe, names = _probe_names(handle, [6, 1])  # 6 is loaded now
        assert not probe.one_row_each
        assert names == [[], ["a"]]
