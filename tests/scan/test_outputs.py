"""The runner's outputs: batches checked against the declared schema where they enter,
re-chunked by Arrow alone; rows converted; both kept in order."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from scan.outputs import ArrowBatchOutput, BatchPacker, RowListOutput
from spark_lookup.errors import SourceError
from spark_lookup.schema import parse_schema, to_arrow_schema

Row = tuple[Any, ...]

SCHEMA = to_arrow_schema("id BIGINT NOT NULL, name STRING")


def _batch(start: int, stop: int, schema: pa.Schema = SCHEMA) -> pa.RecordBatch:
    ids = list(range(start, stop))
    return pa.RecordBatch.from_arrays(
        [pa.array(ids, schema.field(0).type), pa.array([f"n{i}" for i in ids])], schema=schema
    )


def _ids(batches: list[pa.RecordBatch]) -> list[int]:
    return [v for b in batches for v in b.column(0).to_pylist()]


def _address(batch: pa.RecordBatch) -> int:
    return int(batch.column(0).buffers()[1].address)


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (
            pa.record_batch({"id": [1], "nam": ["x"]}),
            r"schema \(id: int64, nam: string\), expected the declared schema "
            r"\(id: int64 not null, name: string\)",
        ),
        (
            pa.record_batch({"id": pa.array([1], pa.int32()), "name": ["x"]}),
            r"\(id: int32, name: string\), expected .*\(id: int64 not null, name: string\)",
        ),
        (  # nullability is part of the schema
            pa.record_batch({"id": [1], "name": ["x"]}),
            r"\(id: int64, name: string\), expected .*\(id: int64 not null, name: string\)",
        ),
        (pa.record_batch({"name": ["x"], "id": [1]}), r"\(name: string, id: int64\)"),
        (pa.table({"id": [1], "name": ["x"]}), "emitted a Table to collect_arrow"),
        ([(1, "x")], "emitted a list to collect_arrow"),
    ],
)
def test_a_batch_not_of_the_declared_schema_is_refused_naming_both(
    batch: Any, expected: str
) -> None:
    for output in (
        ArrowBatchOutput(SCHEMA, 10, "MySource"),
        RowListOutput([], parse_schema("id BIGINT NOT NULL, name STRING"), "MySource"),
    ):
        with pytest.raises(SourceError, match=rf"^MySource .*{expected}"):
            output.collect_arrow(batch)


def test_nulls_in_a_not_null_column_are_refused() -> None:
    ids = pa.array([1, None], pa.int64())
    batch = pa.RecordBatch.from_arrays([ids, pa.array(["a", "b"])], schema=SCHEMA)
    with pytest.raises(SourceError, match="MySource: column 'id' is NOT NULL but holds nulls"):
        ArrowBatchOutput(SCHEMA, 10, "MySource").collect_arrow(batch)


def test_metadata_does_not_matter() -> None:
    output = ArrowBatchOutput(SCHEMA, 10, "s")
    output.collect_arrow(_batch(0, 2).replace_schema_metadata({"origin": "file"}))
    assert _ids(output.flush()) == [0, 1]


def test_batches_of_max_rows_pass_through_uncopied() -> None:
    output = ArrowBatchOutput(SCHEMA, 4, "s")
    source = [_batch(0, 4), _batch(4, 8)]
    for batch in source:
        output.collect_arrow(batch)
    ready = output.full_batches()
    assert [b is s for b, s in zip(ready, source, strict=True)] == [True, True]
    assert output.flush() == []


def test_large_batches_are_cut_into_zero_copy_slices() -> None:
    output = ArrowBatchOutput(SCHEMA, 4, "s")
    big = _batch(0, 10)
    output.collect_arrow(big)
    ready = output.full_batches()
    assert [b.num_rows for b in ready] == [4, 4]
    assert {_address(b) for b in ready} == {_address(big)}
    (last,) = output.flush()
    assert last.num_rows == 2
    assert _address(last) == _address(big)
    assert _ids([*ready, last]) == list(range(10))


def test_small_batches_are_merged_while_they_fit() -> None:
    output = ArrowBatchOutput(SCHEMA, 10, "s")
    for start in range(0, 12, 3):
        output.collect_arrow(_batch(start, start + 3))
    ready = output.full_batches()
    assert [b.num_rows for b in ready] == [9]
    rest = output.flush()
    assert [b.num_rows for b in rest] == [3]
    assert _ids(ready + rest) == list(range(12))
    assert all(b.schema.equals(SCHEMA) for b in ready + rest)


def test_a_source_batch_is_not_copied_to_fill_a_batch() -> None:
    """A near-full batch after a small remainder is handed on as it is: the remainder
    goes alone, smaller than max_rows, instead of copying everything after it."""
    output = ArrowBatchOutput(SCHEMA, 8, "s")
    tail, full = _batch(0, 3), _batch(3, 11)
    output.collect_arrow(tail)
    output.collect_arrow(full)
    ready = output.full_batches()
    assert [b.num_rows for b in ready] == [3, 8]
    assert ready[0] is tail
    assert ready[1] is full


def test_rows_and_batches_keep_their_order() -> None:
    output = ArrowBatchOutput(SCHEMA, 5, "s")
    output.collect_batch([(0, "n0"), (1, "n1")])
    output.collect_arrow(_batch(2, 4))
    output.collect((4, "n4"))
    output.collect_batch([(5, "n5"), (6, "n6")])
    output.collect_arrow(_batch(7, 13))
    batches = output.full_batches() + output.flush()
    assert _ids(batches) == list(range(13))
    assert all(b.num_rows <= 5 for b in batches)
    assert all(b.schema.equals(SCHEMA) for b in batches)


def test_rows_are_converted_in_whole_batches_until_the_flush() -> None:
    output = ArrowBatchOutput(SCHEMA, 4, "s")
    output.collect_batch([(i, f"n{i}") for i in range(10)])
    assert [b.num_rows for b in output.full_batches()] == [4, 4]
    assert [b.num_rows for b in output.flush()] == [2]
    assert output.flush() == []


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), max_size=12),
    max_rows=st.integers(1, 16),
    drain_every=st.integers(1, 5),
)
def test_packer_keeps_every_row_in_order_within_max_rows(
    sizes: list[int], max_rows: int, drain_every: int
) -> None:
    packer = BatchPacker(max_rows)
    out: list[pa.RecordBatch] = []
    start = 0
    for index, size in enumerate(sizes):
        packer.add(_batch(start, start + size))
        start += size
        if index % drain_every == 0:
            out += packer.take_ready()
    out += packer.flush()
    assert _ids(out) == list(range(start))
    assert all(0 < b.num_rows <= max_rows for b in out)
    # Merged only while they fit: two neighbours never fit together in one batch,
    # unless the first was cut from a larger one.
    for first, second in itertools.pairwise(out):
        assert first.num_rows + second.num_rows > max_rows or first.num_rows == max_rows


def test_row_list_output_converts_batches_and_checks_rows() -> None:
    rows: list[Row] = []
    output = RowListOutput(rows, parse_schema("id BIGINT NOT NULL, name STRING"), "s")
    output.collect_arrow(_batch(0, 2))
    output.collect((2, "n2"))
    assert rows == [(0, "n0"), (1, "n1"), (2, "n2")]
    with pytest.raises(SourceError, match=r"rows of \[1\] fields, expected 2"):
        output.collect((3,))


def test_row_list_output_needs_no_arrow_mapping_for_rows() -> None:
    schema = T.StructType([T.StructField("t", T.DayTimeIntervalType())])
    rows: list[Row] = []
    RowListOutput(rows, schema, "s").collect_batch([("anything",)])
    assert rows == [("anything",)]
