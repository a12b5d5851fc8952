"""ArrowRecordsBySplits, ArrowRecordEmitter and the row fallback of collect_arrow."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from scan import ReaderOutput
from scan.connector import ArrowRecordEmitter, ArrowRecordsBySplits
from spark_lookup.errors import SourceError
from tests.scan.helpers import ListOutput

Row = tuple[Any, ...]


def _batch(start: int, stop: int) -> pa.RecordBatch:
    values = list(range(start, stop))
    return pa.record_batch({"n": values, "s": [str(i) for i in values]})


def _values(batches: list[pa.RecordBatch]) -> list[int]:
    return [v for b in batches for v in b.column("n").to_pylist()]


def _data_address(batch: pa.RecordBatch) -> int:
    # The values buffer of the int column: equal addresses mean the same memory.
    return int(batch.column("n").buffers()[1].address)


def test_slices_hold_at_most_max_records_rows_across_batches() -> None:
    records = ArrowRecordsBySplits({"a": [_batch(0, 5), _batch(5, 7), _batch(7, 20)]})
    assert records.next_split() == "a"
    taken = [records.next_records_from_split(4) for _ in range(6)]
    assert [sum(b.num_rows for b in t) for t in taken] == [4, 4, 4, 4, 4, 0]
    assert _values([b for t in taken for b in t]) == list(range(20))
    # The second poll ends the first batch, takes the second whole and starts the third.
    assert [b.num_rows for b in taken[1]] == [1, 2, 1]
    assert records.next_split() is None


def test_slices_are_zero_copy() -> None:
    batch = pa.record_batch({"n": list(range(100))})
    records = ArrowRecordsBySplits({"a": batch})
    records.next_split()
    whole = records.next_records_from_split(1000)
    assert len(whole) == 1
    assert whole[0] is batch, "a batch that fits is handed over as is"
    records = ArrowRecordsBySplits({"a": batch})
    records.next_split()
    first = records.next_records_from_split(10)[0]
    second = records.next_records_from_split(10)[0]
    assert _data_address(first) == _data_address(second) == _data_address(batch)
    assert second.column("n").offset == 10
    assert second.column("n").to_pylist() == list(range(10, 20))


def test_splits_come_in_the_order_added_and_empty_ones_are_skipped() -> None:
    records = ArrowRecordsBySplits()
    records.add("b", _batch(0, 2))
    records.add("empty", _batch(0, 0))
    records.add("a", pa.Table.from_batches([_batch(2, 3), _batch(3, 5)]))
    records.add("b", [_batch(5, 6)])
    records.add_finished("a")
    assert records.num_rows == 6
    seen: dict[str, list[int]] = {}
    while (split := records.next_split()) is not None:
        seen[split] = _values(records.next_records_from_split(100))
        assert records.next_records_from_split(100) == []
    assert seen == {"b": [0, 1, 5], "a": [2, 3, 4]}
    assert records.finished_splits() == {"a"}


def test_is_empty_only_without_rows_and_finished_splits() -> None:
    assert ArrowRecordsBySplits().is_empty()
    assert ArrowRecordsBySplits({"a": _batch(0, 0)}).is_empty()
    assert not ArrowRecordsBySplits(finished=["a"]).is_empty()
    assert not ArrowRecordsBySplits({"a": _batch(0, 1)}).is_empty()


@pytest.mark.parametrize("data", [[(1,)], "rows", None, [pa.array([1])]])
def test_records_that_are_not_arrow_batches_are_refused(data: Any) -> None:
    with pytest.raises(SourceError, match="records of split 'a' must be a pyarrow.RecordBatch"):
        ArrowRecordsBySplits({"a": data})


class _Offset:
    def __init__(self) -> None:
        self.rows = 0

    def advance(self, rows: int) -> None:
        self.rows += rows


class _ArrowOnly(ReaderOutput):
    """Keeps batches; a row reaching it is a failure of the test."""

    def __init__(self) -> None:
        self.batches: list[pa.RecordBatch] = []

    def collect(self, record: Row) -> None:
        raise AssertionError("a row was collected on the Arrow path")

    def collect_batch(self, records: Any) -> None:
        raise AssertionError("rows were collected on the Arrow path")

    def collect_arrow(self, batch: pa.RecordBatch) -> None:
        self.batches.append(batch)


def test_emitter_hands_batches_over_and_advances_by_row_count() -> None:
    state, output = _Offset(), _ArrowOnly()
    emitter: ArrowRecordEmitter[_Offset] = ArrowRecordEmitter()
    emitter.emit_records([_batch(0, 3), _batch(3, 4)], output, state)
    emitter.emit_record(_batch(4, 9), output, state)
    assert state.rows == 9
    assert _values(output.batches) == list(range(9))


def test_emitter_leaves_the_state_when_the_output_refuses_a_batch() -> None:
    class Refusing(ReaderOutput):
        def collect(self, record: Row) -> None:
            raise AssertionError

        def collect_arrow(self, batch: pa.RecordBatch) -> None:
            raise SourceError("wrong schema")

    state = _Offset()
    with pytest.raises(SourceError):
        ArrowRecordEmitter().emit_record(_batch(0, 3), Refusing(), state)
    assert state.rows == 0


def test_an_output_that_collects_rows_gets_batches_as_rows() -> None:
    output = ListOutput()
    output.collect_arrow(_batch(0, 3))
    output.collect_arrow(pa.RecordBatch.from_pylist([], schema=pa.schema([("x", pa.int8())])))
    assert output.rows == [(0, "0"), (1, "1"), (2, "2")]
    empty_width = pa.RecordBatch.from_pydict({"n": [1, 2]}).select([])
    output.collect_arrow(empty_width)
    assert output.rows[-2:] == [(), ()]
