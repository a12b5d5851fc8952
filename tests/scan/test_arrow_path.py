"""Sources that fetch Arrow batches, end to end: every entry point, the schema check
where batches enter, no row conversion on the bulk path, fetchers, back-pressure and
checkpoints inside a fetched batch."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import scan.outputs
import scan.reader
from connectors.files import row_groups as _row_groups
from scan import (
    CollectionSource,
    FileSource,
    InputStatus,
    LocalSourceRunner,
    ReaderOptions,
    ReaderOutput,
    plan_splits,
    read_arrow,
    read_split,
    read_split_arrow,
)
from scan.checkpoint import decode_checkpoint
from scan.connector import (
    ArrowRecordEmitter,
    MultiThreadFetcherManager,
    PullingSourceReader,
    SingleThreadFetcherManager,
)
from scan.serializers import unpack_versioned
from spark_lookup.errors import SourceError
from tests.scan.helpers import (
    ArrowListState,
    ArrowMockSource,
    ArrowMockSplitReader,
    Faults,
    ListOutput,
    ListSplit,
    TestReaderContext,
    bag,
    poll_until_end,
    run_all,
)

Row = tuple[Any, ...]


def _source(name: str, splits: int = 4, size: int = 25, **kwargs: Any) -> ArrowMockSource:
    source = ArrowMockSource(f"arrow-{name}", splits, size, **kwargs)
    source.faults.__init__()  # type: ignore[misc]  # fresh switches for each test
    return source


@pytest.mark.parametrize("parallelism", [1, 3])
def test_an_arrow_source_reads_through_every_entry_point(parallelism: int) -> None:
    source = _source("entry-points", batch=7)
    rows = source.rows()
    assert bag(run_all(source, parallelism)) == bag(rows)
    table = read_arrow(source, parallelism, max_batch_rows=10)
    assert bag((v,) for v in table.column("n").to_pylist()) == bag(rows)
    assert all(len(chunk) <= 10 for chunk in table.column("n").chunks)
    for split in plan_splits(source):
        expected = [(i,) for i in range(split.start, split.end)]
        assert list(read_split(source, split)) == expected
        batches = list(read_split_arrow(source, split, max_batch_rows=4))
        assert [(v,) for b in batches for v in b.column(0).to_pylist()] == expected


WRONG = [
    (pa.schema([pa.field("m", pa.int64())]), r"\(m: int64\), expected the declared schema "),
    (pa.schema([pa.field("n", pa.int32())]), r"\(n: int32\), expected the declared schema "),
]


@pytest.mark.parametrize(("arrow_schema", "message"), WRONG)
def test_batches_not_of_the_declared_schema_fail_where_they_enter(
    arrow_schema: pa.Schema, message: str
) -> None:
    source = _source("wrong-schema", arrow_schema=arrow_schema)
    expected = rf"ArrowMockSource emitted a record batch of schema {message}\(n: int64\)"
    with LocalSourceRunner(source, 2) as runner, pytest.raises(SourceError, match=expected):
        runner.run()
    with pytest.raises(SourceError, match=expected):
        read_arrow(source, 2)
    with pytest.raises(SourceError, match=expected):
        list(read_split_arrow(source, plan_splits(source)[0]))


def _tripwires(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every row conversion of the scan layer fail the test."""

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a row conversion ran on the Arrow path")

    monkeypatch.setattr(scan.outputs, "rows_to_record_batch", forbidden)
    monkeypatch.setattr(scan.outputs, "record_batch_to_rows", forbidden)
    monkeypatch.setattr(scan.reader, "record_batch_to_rows", forbidden)


def _parquet(path: Path, rows: int, group: int) -> pa.Table:
    table = pa.table({"id": list(range(rows)), "v": [f"v{i}" for i in range(rows)]})
    pq.write_table(table, str(path), row_group_size=group)
    return table


@pytest.mark.parametrize("parallelism", [1, 3])
def test_the_bulk_path_converts_no_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parallelism: int
) -> None:
    expected = _parquet(tmp_path / "t.parquet", 1000, 128)
    sources: list[Any] = [
        FileSource(tmp_path / "t.parquet"),
        CollectionSource(expected, num_splits=5),
        _source("no-rows"),
    ]
    _tripwires(monkeypatch)
    for source in sources[:2]:
        table = read_arrow(source, parallelism, max_batch_rows=100).sort_by("id")
        assert table.equals(expected)
        split = plan_splits(source)[1]
        assert sum(b.num_rows for b in read_split_arrow(source, split)) > 0
    assert read_arrow(sources[2], parallelism).num_rows == len(sources[2].rows())


class _ArrowOnly(ReaderOutput):
    def __init__(self) -> None:
        self.batches: list[pa.RecordBatch] = []

    def collect(self, record: Row) -> None:
        raise AssertionError("a row was collected from an Arrow source")

    def collect_batch(self, records: Any) -> None:
        raise AssertionError("rows were collected from an Arrow source")

    def collect_arrow(self, batch: pa.RecordBatch) -> None:
        self.batches.append(batch)

    @property
    def rows(self) -> list[int]:  # what poll_until_end counts
        return [v for b in self.batches for v in b.column(0).to_pylist()]


def test_built_in_readers_emit_batches_only(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("id,v\n" + "".join(f"{i},v{i}\n" for i in range(50)))
    _parquet(tmp_path / "t.parquet", 50, 16)
    for source in (
        FileSource(tmp_path / "t.parquet"),
        FileSource(tmp_path / "t.csv", "csv"),
        CollectionSource([(i, f"v{i}") for i in range(50)], 3, schema="id BIGINT, v STRING"),
    ):
        with source.create_reader(TestReaderContext(ReaderOptions(records_per_poll=7))) as r:
            r.add_splits(plan_splits(source))
            r.notify_no_more_splits()
            output = _ArrowOnly()
            poll_until_end(r, output)  # type: ignore[arg-type]
        assert sorted(output.rows) == list(range(50))
        assert all(b.num_rows <= 7 for b in output.batches)


def test_a_bulk_reader_told_there_are_no_splits_gets_no_thread(tmp_path: Path) -> None:
    # The readers' first requests are answered before their threads start: of 4 readers
    # of a file of 2 row groups, the 2 without a split finish without a thread.
    import threading

    _parquet(tmp_path / "t.parquet", 50, 25)
    names: set[str] = set()

    def trace(frame: Any, event: str, arg: Any) -> None:
        names.add(threading.current_thread().name)

    threading.settrace(trace)
    try:
        table = read_arrow(FileSource(tmp_path / "t.parquet"), 4)
    finally:
        threading.settrace(None)
    assert sorted(table.column("id").to_pylist()) == list(range(50))
    assert sorted(n for n in names if n.startswith("scan-reader")) == [
        "scan-reader-0", "scan-reader-1"]
    # And a read with no split at all (a directory without data files) starts none.
    names.clear()
    empty = tmp_path / "empty"
    empty.mkdir()
    threading.settrace(trace)
    try:
        assert read_arrow(FileSource(empty, schema="id BIGINT"), 2).num_rows == 0
    finally:
        threading.settrace(None)
    assert not [n for n in names if n.startswith("scan-reader")]


def test_a_multi_threaded_fetcher_manager_moves_batches() -> None:
    source = _source("multi-fetchers", splits=6, size=40, batch=9)
    faults, schema = source.faults, source.arrow_schema
    context = TestReaderContext(ReaderOptions(records_per_poll=5))
    manager: MultiThreadFetcherManager[Any, ListSplit] = MultiThreadFetcherManager(
        lambda: ArrowMockSplitReader(faults, 9, schema), num_fetchers=3
    )
    reader = PullingSourceReader(
        context, lambda: ArrowMockSplitReader(faults, 9, schema), ArrowRecordEmitter(),
        ArrowListState, fetcher_manager=manager,
    )
    with reader:
        reader.add_splits(source.splits)
        reader.notify_no_more_splits()
        output = ListOutput()
        assert poll_until_end(reader, output) is InputStatus.END_OF_INPUT
    assert bag(output.rows) == bag(source.rows())
    for split in source.splits:  # each split's rows in split order
        own = [row for row in output.rows if split.start <= row[0] < split.end]
        assert own == [(i,) for i in range(split.start, split.end)]


def _eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)


def test_back_pressure_counts_fetched_batches_not_rows() -> None:
    faults = Faults()
    schema = pa.schema([pa.field("n", pa.int64())])
    manager: SingleThreadFetcherManager[Any, ListSplit] = SingleThreadFetcherManager(
        lambda: ArrowMockSplitReader(faults, 10_000, schema), 2
    )
    try:
        manager.add_splits([ListSplit(0, 0, 1_000_000)])
        _eventually(lambda: manager.queue.size() == 2)
        time.sleep(0.02)
        # Two fetches of 10,000 rows queued, one fetched and waiting to be put: no more.
        assert faults.fetches <= 3
        fetch = manager.queue.poll()
        assert fetch is not None
        assert fetch.num_rows == 10_000
        _eventually(lambda: faults.fetches >= 4)
    finally:
        manager.close()


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_checkpoint_inside_a_fetched_batch_is_exact(tmp_path: Path, parallelism: int) -> None:
    path = tmp_path / "t.parquet"
    expected = _parquet(path, 1000, 1000)  # one row group, one fetch
    source = FileSource(path)
    rows = list(zip(expected.column("id").to_pylist(), expected.column("v").to_pylist(),
                    strict=True))
    options = ReaderOptions(records_per_poll=7)
    with LocalSourceRunner(source, parallelism, options=options) as runner:
        before = runner.run(max_records=10)
        checkpoint = runner.checkpoint()
    assert before == rows[:14], "two polls of 7 rows, both slices of the one fetched batch"
    (packed,) = [p for reader in decode_checkpoint(checkpoint).readers for p in reader]
    split = unpack_versioned(source.split_serializer, packed, "split")
    assert (split.row_group, split.offset) == (0, 14)
    assert _row_groups.MIN_DECODE_ROWS > 1000, "the test needs the whole row group in one fetch"
    with LocalSourceRunner(source, 3, restore_from=checkpoint) as runner:
        assert before + runner.run() == rows
