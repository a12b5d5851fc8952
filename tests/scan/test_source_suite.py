"""Flink's connector test suite (``SourceTestSuiteBase``), ported onto the local runner
and run against every built-in source (see ``conftest.case``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from scan import (
    InputStatus,
    LocalSourceRunner,
    ReaderOptions,
    plan_splits,
    read_arrow,
    read_split,
    read_split_arrow,
)
from spark_lookup.errors import SourceError
from tests.fixtures.scan import Case
from tests.scan.helpers import (
    ListOutput,
    RecordingSource,
    TestReaderContext,
    bag,
    checkpoints_along_the_way,
    poll_until_end,
    run_all,
    wait_done,
)

Row = tuple[Any, ...]

# Small polls put checkpoints anywhere, including inside chunks and row groups.
FINE = ReaderOptions(records_per_poll=7)


def _per_split_order_holds(case: Case, source: RecordingSource, emitted: list[Row]) -> None:
    position = {row: i for i, row in enumerate(emitted)}
    assert len(position) == len(emitted), "test rows are unique"
    assert source.assigned, "the enumerator assigned no split"
    for split in source.assigned:
        expected = case.rows_of_split(split)
        seen = sorted(expected, key=position.__getitem__)
        assert seen == expected, f"rows of {split.split_id} out of order"


def test_single_split_keeps_order(case: Case) -> None:
    source = RecordingSource(case.make(1))
    rows = run_all(source, 1)
    assert len(source.assigned) == 1
    assert rows == case.rows_of_split(source.assigned[0])
    assert bag(rows) == bag(case.rows)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_multiple_splits_keep_per_split_order(case: Case, parallelism: int) -> None:
    source = RecordingSource(case.make(6))
    rows = run_all(source, parallelism, options=FINE)
    assert len(source.assigned) > 1
    assert bag(rows) == bag(case.rows)
    _per_split_order_holds(case, source, rows)


@pytest.mark.parametrize(
    ("before", "after"),
    [(2, 2), (2, 4), (3, 1)],
    ids=["same-parallelism", "larger-parallelism", "smaller-parallelism"],
)
def test_checkpoint_and_restore_is_exactly_once(case: Case, before: int, after: int) -> None:
    source = case.make(6)
    stops = [0, 1, 20, 61, 100, len(case.rows)]
    taken, whole = checkpoints_along_the_way(source, before, stops, FINE)
    assert bag(whole) == bag(case.rows)
    for emitted, checkpoint in taken:
        with LocalSourceRunner(case.make(6), after, restore_from=checkpoint) as runner:
            rest = runner.run()
        assert bag(emitted + rest) == bag(case.rows), f"checkpoint after {len(emitted)} rows"


def test_restore_of_a_restored_run_is_exactly_once(case: Case) -> None:
    source = case.make(6)
    with LocalSourceRunner(source, 2, options=FINE) as runner:
        first = runner.run(max_records=30)
        checkpoint = runner.checkpoint()
    with LocalSourceRunner(case.make(6), 3, restore_from=checkpoint, options=FINE) as runner:
        second = runner.run(max_records=50)
        checkpoint = runner.checkpoint()
    with LocalSourceRunner(case.make(6), 1, restore_from=checkpoint) as runner:
        third = runner.run()
    assert bag(first + second + third) == bag(case.rows)


def test_idle_reader_still_finishes(case: Case) -> None:
    source = RecordingSource(case.make(2))
    splits = len(plan_splits(case.make(2)))
    parallelism = splits + 3
    with LocalSourceRunner(source, parallelism) as runner:
        rows = runner.run()
        assert runner.is_finished()
    assert bag(rows) == bag(case.rows)
    signals = Counter(subtask for kind, subtask, _ in source.log if kind == "no_more_splits")
    assert signals == Counter(range(parallelism)), "no-more-splits once per reader"


def test_failing_reader_raises_and_never_looks_finished(case: Case) -> None:
    source = case.make(6)
    runner = LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=5))
    try:
        first = runner.run(max_records=10)
        assert len(first) >= 10
        expected = case.break_source()
        with pytest.raises(expected):
            runner.run()
        assert not runner.is_finished()
        with pytest.raises(SourceError, match="failed earlier"):
            runner.run()
        with pytest.raises(SourceError, match="failed earlier"):
            runner.checkpoint()
    finally:
        runner.close()


@pytest.mark.parametrize("parallelism", [1, 4])
def test_arrow_bulk_path_reads_everything(case: Case, parallelism: int) -> None:
    source = case.make(6)
    table = read_arrow(source, parallelism, max_batch_rows=40)
    assert table.schema.names == [f.name for f in source.schema.fields]
    assert bag(tuple(r.values()) for r in table.to_pylist()) == bag(case.rows)


def test_arrow_bulk_path_continues_a_run(case: Case) -> None:
    with LocalSourceRunner(case.make(6), 2, options=FINE) as runner:
        first = runner.run(max_records=33)
        batches = list(runner.read_arrow_batches(max_batch_rows=16))
        assert runner.is_finished()
        assert runner.run() == []
    rest = [tuple(r.values()) for b in batches for r in b.to_pylist()]
    assert all(b.num_rows <= 16 for b in batches)
    assert bag(first + rest) == bag(case.rows)


def test_splits_planned_on_a_driver_read_standalone(case: Case) -> None:
    import pickle

    source = case.make(6)
    splits = plan_splits(source)
    shipped = pickle.loads(pickle.dumps((source, splits)))  # what Spark does
    rows: list[Row] = []
    for split in shipped[1]:
        own = list(read_split(shipped[0], split))
        assert own == case.rows_of_split(split)
        rows += own
    assert bag(rows) == bag(case.rows)
    arrow_rows = [
        tuple(r.values())
        for split in splits
        for batch in read_split_arrow(source, split, max_batch_rows=10)
        for r in pa.Table.from_batches([batch]).to_pylist()
    ]
    assert bag(arrow_rows) == bag(case.rows)


def test_splits_round_trip_through_their_serializer(case: Case) -> None:
    source = case.make(6)
    serializer = source.split_serializer
    for split in plan_splits(source):
        data = serializer.serialize(split)
        assert serializer.deserialize(serializer.version, data) == split


# --- the reader cases (Flink's SourceReaderTestBase), on each source's own reader


def test_reader_reads_all_splits(case: Case) -> None:
    source = case.make(6)
    splits = plan_splits(source)
    with source.create_reader(TestReaderContext(FINE)) as reader:
        reader.add_splits(splits)
        reader.start()
        reader.notify_no_more_splits()
        output = ListOutput()
        assert poll_until_end(reader, output) is InputStatus.END_OF_INPUT
    assert bag(output.rows) == bag(case.rows)


def test_reader_adds_splits_to_a_running_fetcher(case: Case) -> None:
    source = case.make(6)
    first, *others = plan_splits(source)
    context = TestReaderContext(FINE)
    with source.create_reader(context) as reader:
        reader.add_splits([first])
        reader.start()
        output = ListOutput()
        poll_until_end(reader, output, limit=3)
        reader.add_splits(others)  # the fetcher is running (or still has the first)
        reader.notify_no_more_splits()
        poll_until_end(reader, output)
    assert bag(output.rows) == bag(case.rows)
    assert context.split_requests == 0, "a reader given splits before start asks for none"


def test_reader_polling_from_an_empty_queue(case: Case) -> None:
    source = case.make(6)
    context = TestReaderContext()
    with source.create_reader(context) as reader:
        reader.start()
        assert context.split_requests == 1, "a reader without splits asks for one at start"
        output = ListOutput()
        assert reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE
        assert reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE
        reader.notify_no_more_splits()
        assert reader.poll_next(output) is InputStatus.END_OF_INPUT
    assert output.rows == []


def test_reader_availability_completes_when_data_arrives(case: Case) -> None:
    source = case.make(6)
    splits = plan_splits(source)
    with source.create_reader(TestReaderContext()) as reader:
        reader.start()
        output = ListOutput()
        assert reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE
        future = reader.is_available()
        assert not future.done()
        reader.add_splits(splits[:1])
        assert wait_done(future)
        poll_until_end(reader, output, limit=1)
        assert output.rows


def test_reader_snapshot_after_reading_everything(case: Case) -> None:
    source = case.make(6)
    splits = plan_splits(source)
    with source.create_reader(TestReaderContext(FINE)) as reader:
        reader.add_splits(splits)
        assert reader.snapshot_state(1) == splits, "nothing read: the splits as given"
        reader.notify_no_more_splits()
        output = ListOutput()
        poll_until_end(reader, output)
        assert reader.snapshot_state(2) == [], "every split finished"


def test_reader_snapshot_midway_resumes_exactly(case: Case) -> None:
    source = case.make(6)
    splits = plan_splits(source)
    with source.create_reader(TestReaderContext(FINE)) as reader:
        reader.add_splits(splits)
        output = ListOutput()
        poll_until_end(reader, output, limit=40)
        saved = reader.snapshot_state(1)
    assert saved
    assert saved != splits
    with source.create_reader(TestReaderContext(FINE)) as reader:
        reader.add_splits(saved)
        reader.notify_no_more_splits()
        rest = ListOutput()
        poll_until_end(reader, rest)
    assert bag(output.rows + rest.rows) == bag(case.rows)
