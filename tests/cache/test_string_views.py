"""Short-string columns of a snapshot gathered through views: the same values as Arrow's
``take`` (nulls, long values, binary, sliced columns), published and mapped with the
snapshot, never built for key columns or mostly long values, and a damaged view is
refused rather than read past the column's bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from cache.answers import Answers
from cache.full.shared import SharedFullCache
from cache.full.snapshot import FullSnapshot
from cache.full.store import SnapshotStore
from cache.string_views import StringViews
from lookup.spark.assemble import JoinShape, join_batch


def _values(count: int) -> list[str | None]:
    # Mostly inline (up to 12 bytes), every fifth one long, every 17th null.
    return [None if i % 17 == 0 else
            ("x" * (i % 8) + str(i % 1000)) if i % 5 else f"a value past twelve bytes {i}"
            for i in range(count)]


@pytest.mark.parametrize("kind", ["string", "binary", "sliced"])
def test_gathers_equal_arrows_take(kind: str) -> None:
    values = _values(20_000)
    if kind == "binary":
        column = pa.array([None if v is None else v.encode() for v in values], pa.binary())
    elif kind == "sliced":
        column = pa.array(["before"] * 9 + values).slice(9)
    else:
        column = pa.array(values)
    table = pa.table({"k": np.arange(len(column)), "v": column})
    views = StringViews.of(table, skip=["k"])
    assert list(views.payload()) == ["view:v"]
    rng = np.random.default_rng(3)
    rows = rng.integers(0, len(column), 5_000)
    missing = rng.random(5_000) < 0.1
    got = views.take("v", table.column("v"), rows, missing)
    assert got is not None
    assert got.type == column.type
    assert got.equals(pc.take(column, pa.array(rows, mask=missing)))
    everything = views.take("v", table.column("v"), rows, None)
    assert everything is not None
    assert everything.equals(pc.take(column, pa.array(rows)))


def test_no_views_for_key_columns_long_values_or_other_types() -> None:
    table = pa.table({"k": ["a", "b"], "long": ["x" * 40, "y" * 40], "n": [1, 2]})
    views = StringViews.of(table, skip=["k"])
    assert views.payload() == {}
    assert views.nbytes == 0
    assert views.take("long", table.column("long"), np.array([0]), None) is None


def test_a_damaged_view_is_refused() -> None:
    table = pa.table({"v": pa.array(["a value past twelve bytes", "s", "h", "o"] * 100)})
    views = StringViews.of(table)
    raw = views.payload()["view:v"].copy()
    fields = raw.view(np.int32).reshape(-1, 4)
    fields[0, 3] = 1 << 30  # a long value's offset far past the column's data
    damaged = StringViews.from_payload({"view:v": raw}, table)
    with pytest.raises(ValueError, match="do not fit"):
        damaged.take("v", table.column("v"), np.array([1, 0]), None)


def test_views_that_do_not_fit_the_table_are_not_used() -> None:
    table = pa.table({"v": ["a", "b", "c"]})
    short = StringViews.of(pa.table({"v": ["a", "b"]})).payload()
    assert StringViews.from_payload(short, table).payload() == {}
    chunked = pa.table({"v": pa.chunked_array([["a"], ["b", "c"]])})
    assert StringViews.of(chunked).payload() == {}


def test_a_join_over_a_snapshot_with_views_gives_takes_answer() -> None:
    count = 5_000
    dim = pa.table({"k": np.arange(count, dtype=np.int64), "v": pa.array(_values(count)),
                    "s": np.arange(count) * 0.5})
    snapshot = FullSnapshot.build(dim, ["k"], loaded_at=1.0)
    assert snapshot.views.payload()  # "v" is mostly short
    keys = np.random.default_rng(5).integers(-10, count + 10, 2_000)
    stream = pa.record_batch({"id": np.arange(len(keys)), "k": keys})
    groups = snapshot.groups([stream.column("k")])
    shape = JoinShape(("k",), ("v", "s"), ("v", "s"), (pa.string(), pa.float64()), "left")

    class Runtime:
        probes_rows = True

        def __init__(self, views: StringViews | None) -> None:
            self.views = views

        def probe(self, keys: object, describe: str = "", as_of_range: object = None
                  ) -> Answers:
            return Answers(None, groups, snapshot.offsets, snapshot.table, one_row_each=True,
                         views=self.views)

    with_views = join_batch(stream, shape, Runtime(snapshot.views))  # type: ignore[arg-type]
    without = join_batch(stream, shape, Runtime(None))  # type: ignore[arg-type]
    assert with_views.equals(without)
    assert with_views.column("v").null_count > 0  # misses and null values both


def test_views_are_published_and_mapped_with_the_snapshot(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "store")
    writer = SharedFullCache(["k"], store)
    writer.open()
    values = _values(3_000)
    try:
        built = FullSnapshot.build(pa.table({"k": np.arange(3_000), "v": pa.array(values)}),
                                   ["k"], loaded_at=5.0, version=1)
        assert built._views is None  # the loader publishes views it never holds
        with store.try_lock():
            writer.publish(built)
    finally:
        writer.close()
    reader = SharedFullCache(["k"], store)
    reader.open()
    try:
        served = reader.snapshot()
        mapped = served.views.payload()["view:v"]
        assert not mapped.flags.writeable  # a view of the published file, not a copy
        rows = np.arange(0, 3_000, 7)
        got = served.views.take("v", served.table.column("v"), rows, None)
        assert got is not None
        assert got.to_pylist() == [values[i] for i in rows]
    finally:
        reader.close()


def test_a_computed_array_must_be_as_long_as_it_says(tmp_path: Path) -> None:
    from cache.full.index_file import ComputedArray, map_arrays, write_arrays

    pieces = [np.arange(3, dtype=np.uint64), np.arange(3, 5, dtype=np.uint64)]
    write_arrays(tmp_path / "ok", {}, {"a": ComputedArray(np.dtype(np.uint64), 5,
                                                          lambda: iter(pieces))})
    assert map_arrays(tmp_path / "ok")[1]["a"].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="4 values written, not 5"):
        write_arrays(tmp_path / "short", {}, {"a": ComputedArray(
            np.dtype(np.uint64), 5, lambda: iter([*pieces[:1], pieces[0][:1]]))})
