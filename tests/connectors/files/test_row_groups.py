"""How FileSource decodes a Parquet row group (connectors/files/row_groups.py): units of a
bounded size in bytes, the last one flagged by counting rows; and restores that land
anywhere among several units of a row group."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors import Predicate
from connectors.files import row_groups as _row_groups
from connectors.files.row_groups import decode_rows, row_group_batches
from connectors.files.side_by_side import SideBySideReader
from connectors.files.source import FileSplit
from scan import FileSource, LocalSourceRunner, ReaderOptions, read_arrow
from scan.connector.fetcher import SplitFetcher
from scan.connector.queue import ElementQueue
from scan.connector.records import RecordsWithSplitIds
from spark_lookup.errors import SourceError, SparkLookupError
from tests.scan.helpers import wait_done

ROWS = 20_000


def _rows_per_unit(tmp_path: Path, table: pa.Table, **options: object) -> int:
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, **options)  # type: ignore[arg-type]
    return decode_rows(pq.ParquetFile(path).metadata.row_group(0), table.schema)


def test_narrow_fixed_width_rows_decode_in_the_largest_units(tmp_path: Path) -> None:
    table = pa.table({"id": pa.array(range(ROWS), pa.int64())})
    assert _rows_per_unit(tmp_path, table) == _row_groups.MAX_DECODE_ROWS


@pytest.mark.parametrize("dictionary", [False, True])
def test_wide_rows_decode_in_units_of_about_the_target_bytes(tmp_path: Path,
                                                             dictionary: bool) -> None:
    # 1,000-byte strings: stored plain, the footer's size says so; dictionary-encoded
    # (one distinct value), the footer holds one copy and the min/max lengths tell.
    table = pa.table({"s": pa.array(["x" * 1000] * ROWS)})
    rows = _rows_per_unit(tmp_path, table, use_dictionary=dictionary)
    assert rows * 1000 <= _row_groups.DECODE_BYTES < rows * 1010


def test_very_wide_rows_still_decode_a_floor_of_rows(tmp_path: Path) -> None:
    table = pa.table({"s": pa.array(["x" * 100_000] * 200)})
    assert _rows_per_unit(tmp_path, table, use_dictionary=False) == _row_groups.MIN_DECODE_ROWS


def test_undeclared_columns_do_not_count(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    wide = pa.array(["x" * 1000] * ROWS)
    pq.write_table(pa.table({"id": pa.array(range(ROWS), pa.int64()), "s": wide}), path)
    group = pq.ParquetFile(path).metadata.row_group(0)
    assert decode_rows(group, pa.schema([("id", pa.int64())])) == _row_groups.MAX_DECODE_ROWS


def test_scaled_units_are_that_many_times_larger_within_the_scaled_ceiling(
        tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"s": pa.array(["x" * 1000] * ROWS),
                             "id": pa.array(range(ROWS), pa.int64())}), path)
    group = pq.ParquetFile(path).metadata.row_group(0)
    wide = pa.schema([("s", pa.string())])
    assert decode_rows(group, wide, 4) in range(4 * decode_rows(group, wide),
                                                4 * decode_rows(group, wide) + 4)
    narrow = pa.schema([("id", pa.int64())])
    assert decode_rows(group, narrow, 4) == 4 * _row_groups.MAX_DECODE_ROWS


def test_units_cover_the_row_group_and_only_the_last_is_flagged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_row_groups, "MAX_DECODE_ROWS", 300)
    path = tmp_path / "t.parquet"
    table = pa.table({"id": pa.array(range(1000), pa.int64()), "v": [f"v{i}" for i in range(1000)]})
    pq.write_table(table, path, row_group_size=1000)
    units = list(row_group_batches(pq.ParquetFile(path), 0, table.schema))
    assert [(batch.num_rows, last) for batch, last in units] == [
        (300, False), (300, False), (300, False), (100, True)]
    assert pa.Table.from_batches([batch for batch, _ in units]).equals(table)


@pytest.mark.parametrize("filtered", [False, True])
def test_restores_inside_and_between_the_units_of_a_row_group_are_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filtered: bool) -> None:
    # Units of 16 rows, row groups of 100: checkpoints after every poll of 5 rows land
    # inside units, on their borders and (filtered: only ids 40-59 and 90-99 are kept,
    # so whole units are left empty) after units that emitted nothing.
    monkeypatch.setattr(_row_groups, "MIN_DECODE_ROWS", 16)
    monkeypatch.setattr(_row_groups, "MAX_DECODE_ROWS", 16)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": pa.array(range(300), pa.int64())}), path, row_group_size=100)
    filters = [Predicate("id", "in", [*range(40, 60), *range(90, 100)])] if filtered else []
    source = FileSource(path, schema="id BIGINT", filters=filters)
    expected = sorted(row["id"] for row in read_arrow(source, 2).to_pylist())
    assert len(expected) == (30 if filtered else 300)
    options = ReaderOptions(records_per_poll=5)
    emitted: list[tuple[int, ...]] = []
    checkpoint = None
    for parallelism in [1, 2, 3] * 30:
        with LocalSourceRunner(source, parallelism, restore_from=checkpoint,
                               options=options) as runner:
            emitted += runner.run(max_records=7)
            if runner.is_finished():
                break
            checkpoint = runner.checkpoint()
    assert sorted(row[0] for row in emitted) == expected


def test_one_reader_of_a_bulk_load_reads_two_row_groups_side_by_side(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One reader on 2 cores, no checkpoints: two splits in flight, their units
    # interleaved (so not in file order), every row once, the lanes' threads stopped.
    import os
    import threading

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_row_groups, "MAX_DECODE_ROWS", 5)  # 20-row units with the lanes
    path = tmp_path / "t.parquet"
    table = pa.table({"id": pa.array(range(1000), pa.int64()), "v": [f"v{i}" for i in range(1000)]})
    pq.write_table(table, path, row_group_size=100)
    loaded = read_arrow(FileSource(path), 1)
    ids = loaded.column("id").to_pylist()
    assert sorted(ids) == list(range(1000))
    assert ids != sorted(ids)
    assert not [t for t in threading.enumerate() if t.name.startswith("scan-split-lane")]
    # A read that takes checkpoints reads its splits one after the other, in order.
    with LocalSourceRunner(FileSource(path), 1) as runner:
        assert [row[0] for row in runner.run()] == list(range(1000))


class _GatedReader(SideBySideReader[FileSplit]):
    """Split ``a`` yields its one batch once ``gate`` opens; any other split at once."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__(lanes=2)
        self.gate = gate

    def batches(self, split: FileSplit) -> Iterator[pa.RecordBatch]:
        if split.path == "a":
            self.gate.wait(10)
        yield pa.record_batch({"path": [split.path]})

    def read_error(self, split: FileSplit, exc: BaseException) -> SparkLookupError:
        return SourceError(str(exc))


def test_a_split_added_while_the_lanes_are_busy_is_read_at_once() -> None:
    # A fetch waiting for its only lane (a whole row group, at p=1) is woken by the
    # split added meanwhile, which starts on the second lane and is handed over first:
    # it does not wait for the first split's batch.
    gate = threading.Event()
    queue: ElementQueue[RecordsWithSplitIds[pa.RecordBatch]] = ElementQueue(4)
    errors: list[BaseException] = []
    fetcher = SplitFetcher(0, queue, _GatedReader(gate), errors.append)
    fetcher.start()
    try:
        fetcher.add_splits([FileSplit("a", 0)])
        time.sleep(0.05)  # the fetch of "a" is under way
        fetcher.add_splits([FileSplit("b", 0)])
        assert wait_done(queue.available_future(), 10)
        first = queue.poll()
        assert first is not None
        assert first.finished_splits() == {"b#0"}
        assert queue.poll() is None  # "a" waits for its gate (and the poll arms the future)
        gate.set()
        assert wait_done(queue.available_future(), 10)
        second = queue.poll()
        assert second is not None
        assert second.finished_splits() == {"a#0"}
    finally:
        gate.set()
        fetcher.shutdown()
        fetcher.join(10)
    assert not errors
