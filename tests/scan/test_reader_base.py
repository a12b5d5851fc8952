"""SourceReaderBase and PullingSourceReader on the mock connector: emission, state,
end of input, errors, and split requests."""

from __future__ import annotations

from typing import Any

import pytest

from scan import InputStatus, ReaderOptions
from scan.connector import RecordsBySplits, SourceReaderBase
from scan.connector.emitter import RecordEmitter
from scan.connector.fetcher import SingleThreadFetcherManager
from scan.reader import ReaderOutput
from spark_lookup.errors import ConfigError, SourceError
from tests.scan.helpers import (
    Faults,
    ListOutput,
    ListSplit,
    ListState,
    MockSource,
    MockSplitReader,
    TestReaderContext,
    poll_until_end,
    wait_done,
)

Row = tuple[Any, ...]


def _source(name: str, splits: int = 3, size: int = 10) -> MockSource:
    source = MockSource(f"reader-base-{name}", splits, size)
    source.faults.__init__()  # type: ignore[misc]  # fresh switches for each test
    return source


def test_emits_at_most_records_per_poll() -> None:
    source = _source("per-poll", splits=1, size=50)
    with source.create_reader(TestReaderContext(ReaderOptions(records_per_poll=4))) as reader:
        reader.add_splits(source.splits)
        reader.notify_no_more_splits()
        output = ListOutput()
        while True:
            before = len(output.rows)
            status = reader.poll_next(output)
            assert len(output.rows) - before <= 4
            if status is InputStatus.END_OF_INPUT:
                break
            if status is InputStatus.NOTHING_AVAILABLE:
                assert wait_done(reader.is_available())
    assert output.rows == source.rows()


def test_end_of_input_needs_no_more_splits() -> None:
    source = _source("end-needs-signal")
    context = TestReaderContext()
    with source.create_reader(context) as reader:
        reader.add_splits(source.splits)
        output = ListOutput()
        poll_until_end(reader, output, limit=len(source.rows()))
        # Every split is finished, but the enumerator has not said "no more":
        for _ in range(5):
            status = reader.poll_next(output)
            if status is InputStatus.NOTHING_AVAILABLE:
                break
            assert status is InputStatus.MORE_AVAILABLE
        assert status is InputStatus.NOTHING_AVAILABLE
        future = reader.is_available()
        reader.notify_no_more_splits()
        assert future.done(), "no-more-splits wakes a waiting reader"
        assert reader.poll_next(output) is InputStatus.END_OF_INPUT
    assert output.rows == source.rows()


def test_a_failure_with_the_last_batch_never_looks_finished() -> None:
    source = _source("fail-on-finish", splits=1, size=5)
    source.faults.fail_on_finish = True
    with source.create_reader(TestReaderContext()) as reader:
        reader.add_splits(source.splits)
        reader.notify_no_more_splits()
        output = ListOutput()
        with pytest.raises(SourceError, match="split fetcher failed") as raised:
            poll_until_end(reader, output)
        assert "end of a split" in str(raised.value.__cause__)
        with pytest.raises(SourceError):
            reader.poll_next(output)  # still failed, never END_OF_INPUT


def test_error_is_raised_on_the_next_poll_even_with_data_queued() -> None:
    source = _source("fail-midway", splits=1, size=30)
    source.faults.fail_after_fetches = 2
    with source.create_reader(TestReaderContext(ReaderOptions(records_per_poll=1))) as reader:
        reader.add_splits(source.splits)
        output = ListOutput()
        with pytest.raises(SourceError):
            poll_until_end(reader, output)
        assert len(output.rows) <= 6, "only the records fetched before the failure"


def test_snapshot_positions_match_what_was_emitted() -> None:
    source = _source("snapshot", splits=2, size=10)
    with source.create_reader(TestReaderContext(ReaderOptions(records_per_poll=1))) as reader:
        reader.add_splits(source.splits)
        output = ListOutput()
        poll_until_end(reader, output, limit=13)
        saved = reader.snapshot_state(1)
    # Split 0 finished (its 10 records), split 1 resumes after the 3 emitted.
    assert output.rows == [(i,) for i in range(13)]
    assert saved == [ListSplit(1, 13, 20)]


def test_a_split_added_twice_is_refused() -> None:
    source = _source("twice")
    with source.create_reader(TestReaderContext()) as reader:
        reader.add_splits(source.splits[:1])
        with pytest.raises(SourceError, match="added twice"):
            reader.add_splits(source.splits[:1])


def test_records_of_a_split_the_reader_does_not_own_are_refused() -> None:
    class Stray(MockSplitReader):
        def fetch(self) -> RecordsBySplits[Row]:
            return RecordsBySplits({"someone-else": [(1,)]})

    class Emitter(RecordEmitter[Row, ListState]):
        def emit_record(self, element: Row, output: ReaderOutput, split_state: ListState) -> None:
            output.collect(element)

    class Reader(SourceReaderBase[Row, ListSplit, ListState]):
        def init_split_state(self, split: ListSplit) -> ListState:
            return ListState(split)

        def to_split(self, split_id: str, state: ListState) -> ListSplit:
            return state.to_split()

    manager: SingleThreadFetcherManager[Row, ListSplit] = SingleThreadFetcherManager(
        lambda: Stray(Faults())
    )
    reader = Reader(manager, Emitter(), TestReaderContext())
    try:
        reader.add_splits([ListSplit(0, 0, 1)])
        assert wait_done(reader.is_available())
        with pytest.raises(SourceError, match="does not own"):
            reader.poll_next(ListOutput())
    finally:
        reader.close()


def test_pulling_reader_requests_one_split_at_a_time() -> None:
    source = _source("requests", splits=2, size=4)
    context = TestReaderContext()
    with source.create_reader(context) as reader:
        reader.start()
        assert context.split_requests == 1
        reader.add_splits(source.splits[:1])
        output = ListOutput()
        poll_until_end(reader, output, limit=4)
        while context.split_requests == 1:
            status = reader.poll_next(output)
            if status is InputStatus.NOTHING_AVAILABLE:
                wait_done(reader.is_available(), 0.05)
        assert context.split_requests == 2, "one request after finishing the split"
        reader.notify_no_more_splits()
        assert poll_until_end(reader, output) is InputStatus.END_OF_INPUT
        assert context.split_requests == 2, "no request after no-more-splits"


def test_restored_reader_does_not_ask_before_finishing_its_splits() -> None:
    source = _source("restored", splits=3, size=3)
    context = TestReaderContext()
    with source.create_reader(context) as reader:
        reader.add_splits(source.splits)
        reader.start()
        assert context.split_requests == 0
        output = ListOutput()
        poll_until_end(reader, output, limit=9)
        while context.split_requests == 0:
            if reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE:
                wait_done(reader.is_available(), 0.05)
        assert context.split_requests == 1


def test_is_available_is_done_while_a_batch_is_being_emitted() -> None:
    source = _source("available", splits=1, size=20)
    with source.create_reader(TestReaderContext(ReaderOptions(records_per_poll=1))) as reader:
        reader.add_splits(source.splits)
        output = ListOutput()
        poll_until_end(reader, output, limit=1)
        assert reader.is_available().done()


def test_close_stops_the_fetcher_and_closes_its_split_reader() -> None:
    source = _source("close")
    reader = source.create_reader(TestReaderContext())
    reader.add_splits(source.splits)
    reader.close()
    assert source.faults.closed == 1


@pytest.mark.parametrize("field", ["element_queue_capacity", "records_per_poll"])
@pytest.mark.parametrize("value", [0, -1, 2.5, True])
def test_reader_options_are_validated(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        ReaderOptions(**{field: value})
