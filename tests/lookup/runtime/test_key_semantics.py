"""Keys are values of their column's Spark type, never Python objects compared by
Python equality (issue 14, item 3): through the per-key API and the batch (Arrow) path
of joins, with a partial cache and without."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from cache import DefaultLookupCache
from lookup import LookupFunctionProvider, PartialCachingLookupProvider, open_lookup
from lookup.spark.assemble import join_batch
from lookup.spark.join import plan_join
from spark_lookup.errors import ConfigError
from tests.lookup.functions import DictLookup

BIG = 2**53 + 1


def cached(fn: Any) -> PartialCachingLookupProvider:
    cache = DefaultLookupCache.new_builder().maximum_size(1000) \
        .expire_after_write(timedelta(hours=1)).build()
    return PartialCachingLookupProvider.of(fn, cache, max_retries=0)


@pytest.mark.parametrize("kind", ["partial", "none"])
def test_true_is_no_key_of_a_string_column_and_1_none_either(kind: str) -> None:
    fn = DictLookup([("1", 10), ("true", 20)], schema="code STRING, n BIGINT",
                    key_columns=["code"])
    provider = cached(fn) if kind == "partial" else LookupFunctionProvider.of(fn)
    with open_lookup(provider) as handle:
        assert handle.lookup(("1",)) == (("1", 10),)
        for key in [(1,), (True,), (1.0,)]:
            with pytest.raises(ConfigError, match="can never equal a value of a string column"):
                handle.lookup(key)  # never the cached row of ("1",)
        assert all(k != ("1",) for calls in fn.batch_calls for k in calls if k != ("1",))


def test_a_str_never_reaches_the_function_of_a_bigint_column() -> None:
    fn = DictLookup([(1, "a")])
    with open_lookup(cached(fn)) as handle:
        with pytest.raises(ConfigError, match="a str value"):
            handle.lookup_batch([(1,), ("1",)])
        assert fn.batch_calls == []


def test_numpy_and_decimal_keys_are_the_same_bigint() -> None:
    fn = DictLookup([(5, "five"), (BIG, "big")])
    with open_lookup(cached(fn)) as handle:
        assert handle.lookup((Decimal("5"),)) == ((5, "five"),)
        assert handle.lookup((np.uint64(5),)) == ((5, "five"),)  # no TypeError after it
        assert handle.lookup((np.int64(BIG),)) == ((BIG, "big"),)
        assert handle.lookup((float(BIG),)) == ()  # 2**53 + 1 has no double: no match
        assert handle.lookup((5.0,)) == ((5, "five"),)
        assert len(fn.batch_calls) == 3  # 5 (cached after), BIG, and 2**53 as a double


def test_decimal_keys_compare_as_decimals() -> None:
    fn = DictLookup([(Decimal("1.50"), "x")], schema="d DECIMAL(10,2), v STRING",
                    key_columns=["d"])
    with open_lookup(cached(fn)) as handle:
        assert handle.lookup((Decimal("1.5"),)) == ((Decimal("1.50"), "x"),)
        assert handle.lookup((1.5,)) == ((Decimal("1.50"), "x"),)
        assert handle.lookup((Decimal("1.505"),)) == ()  # no DECIMAL(10,2) equals it
        with pytest.raises(ConfigError, match="out of the range"):
            handle.lookup((Decimal("1E+1000000"),))


STREAM = T.StructType([T.StructField("id", T.LongType()), T.StructField("x", T.StringType())])


@pytest.mark.parametrize("kind", ["partial", "none"])
def test_a_join_keeps_bigint_keys_exact_beyond_2_53(kind: str) -> None:
    fn = DictLookup([(BIG, "odd"), (BIG - 1, "even")])
    provider = cached(fn) if kind == "partial" else LookupFunctionProvider.of(fn)
    plan = plan_join(STREAM, provider, "id", prefix="d_")
    batch = pa.RecordBatch.from_arrays(
        [pa.array([BIG, None, BIG - 1, BIG], pa.int64()), pa.array(["a", "b", "c", "d"])],
        names=["id", "x"],
    )
    with open_lookup(provider) as handle:
        for _ in range(2):  # loaded, then (partial) cached
            out = join_batch(batch, plan.shape, handle.runtime, provider.describe())
            assert out.column("id").to_pylist() == [BIG, None, BIG - 1, BIG]
            assert out.column("d_name").to_pylist() == ["odd", None, "even", "odd"]


def test_a_probe_answer_past_the_dimension_is_refused_not_gathered() -> None:
    # The join gathers without Arrow's bounds check (it checks the row numbers once):
    # a row number past the answer's rows must fail, never read outside the table.
    import numpy as np
    import pyarrow as pa

    from cache.answers import Answers
    from lookup.spark.assemble import JoinShape, join_batch

    class Broken:
        probes_rows = True

        def probe(self, keys: Any, describe: str = "lookup", as_of_range: Any = None
                  ) -> Answers:
            return Answers(None, np.array([0, 7], dtype=np.int64), np.array([], dtype=np.int64),
                         pa.table({"id": [1], "name": ["a"]}), one_row_each=True)

    shape = JoinShape(("id",), ("name",), ("name",), (pa.string(),), "left")
    batch = pa.record_batch({"id": pa.array([1, 2], pa.int64())})
    with pytest.raises(IndexError, match="past the dimension's 1 rows"):
        join_batch(batch, shape, Broken(), "test")  # type: ignore[arg-type]


_NULL_KEY_TYPES = {
    "float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(),
    "string": pa.string(), "date": pa.date32(), "decimal": pa.decimal128(10, 2),
}


def _random_keys(rng: np.random.Generator, type_: pa.DataType, n: int) -> pa.Array:
    """``n`` keys of ``type_`` drawn from a few distinct values (so they repeat), a fifth
    of them null."""
    drawn = rng.integers(-4, 5, size=n)
    nulls = rng.random(n) < 0.2
    if pa.types.is_string(type_):
        values: list[Any] = [f"k{v}" for v in drawn]
    elif pa.types.is_decimal(type_):
        values = [Decimal(int(v)) / 4 for v in drawn]
    elif pa.types.is_date(type_):
        values = [int(v) for v in drawn]
    elif pa.types.is_floating(type_):
        values = [v / 4 for v in drawn]
    else:
        values = [int(v) for v in drawn]
    array = pa.array(values, pa.int32() if pa.types.is_date(type_) else None)
    return pa.array([None if null else value for value, null
                     in zip(array.cast(type_).to_pylist(), nulls, strict=True)], type_)


@pytest.mark.parametrize("shared", [False, True], ids=["in-process", "shared"])
@pytest.mark.parametrize("name", list(_NULL_KEY_TYPES))
def test_a_full_cache_never_answers_null_key_rows(name: str, shared: bool,
                                                   tmp_path: Any) -> None:
    """Random keys that repeat, a fifth of them null, of each type, alone and as the
    first column of a composite key: every key finds exactly the rows a reference finds
    (a NULL floating key was served with the largest key's rows, issue 40)."""
    import pyarrow.parquet as pq

    from lookup import FullCachingLookupProvider
    from scan import FileSource
    from triggers import PeriodicCacheReloadTrigger

    rng = np.random.default_rng(40)
    type_ = _NULL_KEY_TYPES[name]
    n = 300
    table = pa.table({"k": _random_keys(rng, type_, n),
                      "s": _random_keys(rng, pa.string(), n),
                      "id": pa.array(range(n), pa.int64())})
    pq.write_table(table, tmp_path / "dim.parquet", row_group_size=64)
    rows = list(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))
    for key in (["k"], ["k", "s"]):
        positions = [table.column_names.index(column) for column in key]
        asked = sorted({tuple(row[p] for p in positions) for row in rows
                        if all(row[p] is not None for p in positions)}, key=repr)
        provider = FullCachingLookupProvider.of(
            FileSource(str(tmp_path / "dim.parquet")),
            PeriodicCacheReloadTrigger(timedelta(hours=1)), key,
            share_across_workers=shared, snapshot_dir=tmp_path / "store" if shared else None,
            initial_load_timeout=timedelta(seconds=30))
        with open_lookup(provider) as handle:
            found = handle.lookup_batch(asked)
        for probe in asked:
            want = sorted(row[2] for row in rows
                          if tuple(row[p] for p in positions) == probe)
            got = sorted(row[2] for row in found[probe])
            assert got == want, f"{name} keyed by {key}: {probe!r} found ids {got}, not {want}"


@pytest.mark.parametrize("mode", ["none", "partial", "full"])
def test_every_mode_refuses_a_key_of_the_wrong_kind_alike(mode: str) -> None:
    """A str is no key of a BIGINT column: every mode refuses it (a full cache answered
    it with no rows where the others raised), and 1.0 is the BIGINT 1 in every mode."""
    from lookup import FullCachingLookupProvider
    from scan import CollectionSource
    from spark_lookup.errors import KeyKindError
    from triggers import PeriodicCacheReloadTrigger

    rows = [(1, "a"), (2, "b")]
    if mode == "full":
        provider: Any = FullCachingLookupProvider.of(
            CollectionSource(rows, schema="id BIGINT, v STRING"),
            PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
            share_across_workers=False)
    else:
        fn = DictLookup(rows, schema="id BIGINT, v STRING", key_columns=["id"])
        provider = cached(fn) if mode == "partial" else LookupFunctionProvider.of(fn)
    with open_lookup(provider) as handle:
        for key in [("1",), (True,)]:
            with pytest.raises(KeyKindError):
                handle.lookup(key)
            with pytest.raises(KeyKindError):
                handle.lookup_batch([(1,), key])
        assert handle.lookup((1.0,)) == ((1, "a"),)
        assert handle.lookup_batch([(1,), (np.int64(1),), (None,)]) == {
            (1,): ((1, "a"),), (None,): ()}
