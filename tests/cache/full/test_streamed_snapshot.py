"""FullSnapshot.stream (a load written to a spool as its batches arrive) builds the
snapshot FullSnapshot.build builds from the same rows in memory: the same table (values,
types, order), the same key index (header and arrays), the same answers to probes."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import cache.full.spool as spool_module
from cache.full.snapshot import FullSnapshot
from cache.full.spool import ColumnSpool
from spark_lookup.errors import ConfigError

RNG = np.random.default_rng(7)
N = 3000


def shuffled(values: np.ndarray) -> np.ndarray:
    return values[RNG.permutation(len(values))]


def names(n: int) -> pa.Array:
    return pa.array([f"name-{i}" if i % 97 else None for i in range(n)])


TABLES: dict[str, tuple[pa.Table, list[str]]] = {
    "dense int keys": (pa.table({"k": shuffled(np.arange(N)), "v": names(N)}), ["k"]),
    "dense int keys with gaps": (pa.table({"k": shuffled(np.arange(0, 3 * N, 3) // 2),
                                           "v": names(N)}), ["k"]),
    "spread int keys": (pa.table({"k": shuffled(np.arange(N) * 7919 + 11), "v": names(N)}),
                        ["k"]),
    "spread int32 keys": (pa.table({"k": pa.array(shuffled(np.arange(N) * 977), pa.int32()),
                                    "v": names(N)}), ["k"]),
    "dates": (pa.table({"k": pa.array([dt.date(2000, 1, 1) + dt.timedelta(days=int(d))
                                       for d in shuffled(np.arange(N) * 3)]),
                        "v": names(N)}), ["k"]),
    "text keys": (pa.table({"k": [f"key-{i:05d}" for i in shuffled(np.arange(N))],
                            "v": names(N)}), ["k"]),
    "float keys, NaN and null ones": (pa.table({
        "k": pa.array([math.nan if i == 5 else None if i == 6 else i / 4
                       for i in shuffled(np.arange(N))]), "v": names(N)}), ["k"]),
    "two key columns": (pa.table({"a": shuffled(np.arange(N)) % 50,
                                  "b": [f"b{i}" for i in range(N)], "v": names(N)}),
                        ["a", "b"]),
    "null keys": (pa.table({"k": pa.array([None if i % 10 == 0 else int(i)
                                           for i in shuffled(np.arange(N))], pa.int64()),
                            "v": names(N)}), ["k"]),
    "several rows a key": (pa.table({"k": shuffled(np.arange(N)) % 400, "v": names(N),
                                     "w": pa.array(shuffled(np.arange(N)) % 3, pa.int8()),
                                     "tags": pa.array([[i] for i in range(N)])}), ["k"]),
    "several rows a text key": (pa.table({"k": [f"k{i % 300}" for i in shuffled(np.arange(N))],
                                          "v": names(N)}), ["k"]),
    "no rows": (pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.string())}),
                ["k"]),
    "only null keys": (pa.table({"k": pa.array([None] * 5, pa.string()), "v": names(5)}),
                       ["k"]),
}


def batches(table: pa.Table) -> list[pa.RecordBatch]:
    """The table as a load hands it over: uneven batches, some empty, slices of it."""
    cuts = [0, 1, 1, 701, 714, 714, 1714, 2000, table.num_rows]
    return [batch_of(table.slice(start, max(0, stop - start)))
            for start, stop in itertools.pairwise(cuts)]


def batch_of(part: pa.Table) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([column.combine_chunks() for column in part.columns],
                                      schema=part.schema)


def streamed(tmp_path: Path, table: pa.Table, keys: list[str]) -> FullSnapshot:
    spool = ColumnSpool(tmp_path, f".spool-{uuid.uuid4().hex[:8]}-", table.schema)
    return FullSnapshot.stream(batches(table), keys, spool=spool, loaded_at=5.0, version=3,
                               source_version="v7")


def probes(table: pa.Table, keys: list[str]) -> list[pa.Array]:
    """Every key of the table, some twice, and keys it does not hold."""
    columns = [table.column(name).combine_chunks() for name in keys]
    extra: list[Any] = []
    for column in columns:
        kind = column.type
        if pa.types.is_string(kind):
            extra.append(pa.array(["nope", "key-0000"], kind))
        elif pa.types.is_date(kind):
            extra.append(pa.array([dt.date(1999, 1, 1), dt.date(2100, 1, 1)], kind))
        else:
            extra.append(pa.array([-1, 10**9], kind))
    return [pa.concat_arrays([column, column.slice(0, 10), more])
            for column, more in zip(columns, extra, strict=True)]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_streamed_snapshot_is_the_one_built_in_memory(tmp_path: Path, name: str) -> None:
    table, keys = TABLES[name]
    built = FullSnapshot.build(table, keys, loaded_at=5.0, version=3, source_version="v7")
    got = streamed(tmp_path, table, keys)
    got.table.validate(full=True)
    assert got.table.equals(built.table)
    assert got.table.schema.equals(built.table.schema, check_metadata=True)
    assert all(column.num_chunks == 1 for column in got.table.columns)
    assert (got.unique, got.num_rows, got.num_keys) == (built.unique, built.num_rows,
                                                        built.num_keys)
    assert (got.loaded_at, got.version, got.source_version) == (5.0, 3, "v7")
    assert got.offsets.tolist() == built.offsets.tolist()
    header, arrays = got.key_index.payload()
    built_header, built_arrays = built.key_index.payload()
    assert header == built_header
    assert sorted(arrays) == sorted(built_arrays)
    for array_name, array in arrays.items():
        assert np.array_equal(array, built_arrays[array_name]), array_name
    if table.num_rows:
        asked = probes(table, keys)
        assert got.groups(asked).tolist() == built.groups(asked).tolist()
        rows = [row for row in zip(*(a.to_pylist() for a in asked), strict=True)
                if all(v is not None and v == v for v in row)][-40:]  # no null, no NaN
        assert [a.tolist() for a in got.locate(rows)] == [
            a.tolist() for a in built.locate(rows)]
        assert got.rows(got.locate(rows)[1]) == built.rows(built.locate(rows)[1])


def test_several_rows_a_key_are_sorted_in_bounded_takes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool_module, "_TAKE_ROWS", 64)
    table, keys = TABLES["several rows a key"]
    got = streamed(tmp_path, table, keys)
    assert got.table.equals(FullSnapshot.build(table, keys, loaded_at=0.0).table)
    # What is left is the sorted table's files (the load's order was deleted).
    assert {path.name.split("-")[2] for path in tmp_path.iterdir()} == {"1"}


def test_a_missing_key_column_is_refused_before_any_batch_is_read(tmp_path: Path) -> None:
    table = pa.table({"k": [1, 2]})
    spool = ColumnSpool(tmp_path, ".spool-keys-", table.schema)

    def never() -> Any:
        raise AssertionError("a batch was read")
        yield

    with pytest.raises(ConfigError, match="'nope'"):
        FullSnapshot.stream(never(), ["nope"], spool=spool, loaded_at=0.0)
