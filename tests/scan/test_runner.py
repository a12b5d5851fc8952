"""LocalSourceRunner: coordination, checkpoints, restore, the bulk path, errors."""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from scan import (
    Boundedness,
    CollectionSource,
    LocalSourceRunner,
    ReaderOptions,
    SplitEnumerator,
    SplitEnumeratorContext,
    plan_splits,
    read_arrow,
)
from scan._mailboxes import EnumeratorContext, Mailbox
from scan.checkpoint import decode_checkpoint
from scan.planners import PullEnumeratorState
from scan.serializers import unpack_versioned
from spark_lookup.errors import ConfigError, SourceError
from tests.scan.helpers import ListSplit, MockSource, RecordingSource, bag, run_all

Row = tuple[Any, ...]


def _mock(name: str, splits: int = 4, size: int = 25) -> MockSource:
    source = MockSource(f"runner-{name}", splits, size)
    source.faults.__init__()  # type: ignore[misc]
    return source


def _split_ids_in(source: MockSource, checkpoint: bytes) -> tuple[list[str], list[list[str]]]:
    """Split ids not yet assigned (enumerator) and owned by each reader."""
    data = decode_checkpoint(checkpoint)
    state: PullEnumeratorState[ListSplit] = unpack_versioned(
        source.enumerator_state_serializer, data.enumerator, "state"
    )
    position = state.progress["position"]
    unassigned = [s.split_id for s in state.pending] + [
        s.split_id for s in source.splits[position:]
    ]
    readers = [
        [unpack_versioned(source.split_serializer, p, "split").split_id for p in splits]
        for splits in data.readers
    ]
    return unassigned, readers


# --- arguments


@pytest.mark.parametrize("parallelism", [0, -1, 1.5, True, None])
def test_parallelism_must_be_positive(parallelism: Any) -> None:
    with pytest.raises(ConfigError, match="parallelism"):
        LocalSourceRunner(_mock("args"), parallelism)


def test_source_must_be_a_source() -> None:
    with pytest.raises(ConfigError, match=r"scan\.Source"):
        LocalSourceRunner([(1,)], 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_records", [-1, 1.5, True, "3"])
def test_max_records_is_validated(max_records: Any) -> None:
    with LocalSourceRunner(_mock("max"), 1) as runner, pytest.raises(ConfigError):
        runner.run(max_records)


def test_run_with_zero_max_records_reads_nothing() -> None:
    with LocalSourceRunner(_mock("zero"), 1) as runner:
        assert runner.run(0) == []


def test_run_stops_soon_after_max_records_and_continues() -> None:
    source = _mock("stops")
    with LocalSourceRunner(source, 2, options=ReaderOptions(records_per_poll=3)) as runner:
        first = runner.run(10)
        assert 10 <= len(first) < 10 + 3
        rest = runner.run()
        assert runner.is_finished()
        assert runner.run() == []
    assert bag(first + rest) == bag(source.rows())


# --- coordination


def test_no_more_splits_reaches_every_reader_once() -> None:
    source = RecordingSource(_mock("once", splits=2))
    with LocalSourceRunner(source, 5) as runner:
        runner.run()
    signals = Counter(subtask for kind, subtask, _ in source.log if kind == "no_more_splits")
    assert signals == Counter(range(5))


def test_context_delivers_no_more_splits_once_per_registration() -> None:
    mailbox = Mailbox(lambda: None)
    context: EnumeratorContext[ListSplit] = EnumeratorContext(1, [mailbox], print, list)  # type: ignore[arg-type]
    context.register(0)
    context.signal_no_more_splits(0)
    context.signal_no_more_splits(0)
    assert [m[0] for m in mailbox.drain()] == ["no_more_splits"]
    with pytest.raises(SourceError, match="no more splits"):
        context.assign_split(ListSplit(0, 0, 1), 0)
    context.register(0)  # a new registration (a restored reader)
    context.signal_no_more_splits(0)
    assert [m[0] for m in mailbox.drain()] == ["no_more_splits"]
    with pytest.raises(SourceError, match="registered readers"):
        context.assign_split(ListSplit(0, 0, 1), 3)


class _PushEnumerator(SplitEnumerator[ListSplit, PullEnumeratorState[ListSplit]]):
    """Assigns every split round-robin as readers register (no requests needed)."""

    def __init__(self, context: SplitEnumeratorContext[ListSplit], splits: Sequence[ListSplit]):
        self.context = context
        self.unassigned = list(splits)

    def start(self) -> None:
        pass

    def add_reader(self, subtask_id: int) -> None:
        mine = self.unassigned[subtask_id :: self.context.current_parallelism]
        self.context.assign_splits({subtask_id: mine})
        self.context.signal_no_more_splits(subtask_id)
        if subtask_id == self.context.current_parallelism - 1:
            self.unassigned = []

    def handle_split_request(self, subtask_id: int) -> None:
        self.context.signal_no_more_splits(subtask_id)

    def add_splits_back(self, splits: Sequence[ListSplit], subtask_id: int) -> None:
        self.unassigned += splits

    def snapshot_state(self, checkpoint_id: int) -> PullEnumeratorState[ListSplit]:
        return PullEnumeratorState(tuple(self.unassigned), {"position": 10**6})


class _PushSource(MockSource):
    def create_enumerator(self, context: Any) -> Any:
        return _PushEnumerator(context, self.splits)


def test_splits_in_flight_are_checkpointed_with_their_reader_only() -> None:
    source = _PushSource("runner-push", 5, 4)
    source.faults.__init__()  # type: ignore[misc]
    with LocalSourceRunner(source, 2) as runner:
        # The enumerator assigned everything at registration; nothing was polled yet.
        checkpoint = runner.checkpoint()
        rows = runner.run()
    unassigned, readers = _split_ids_in(source, checkpoint)
    assert unassigned == []
    assert readers == [["mock-0", "mock-2", "mock-4"], ["mock-1", "mock-3"]]
    assert bag(rows) == bag(source.rows())


@pytest.mark.parametrize("stop", [0, 1, 7, 30, 60, 99, 100])
def test_every_split_is_in_exactly_one_place_in_a_checkpoint(stop: int) -> None:
    source = _mock("places")
    with LocalSourceRunner(source, 3, options=ReaderOptions(records_per_poll=2)) as runner:
        runner.run(stop)
        unassigned, readers = _split_ids_in(source, runner.checkpoint())
    owned = [s for splits in readers for s in splits]
    assert len(owned) == len(set(owned))
    assert not set(owned) & set(unassigned)
    for split_id in unassigned:
        assert split_id not in owned


def test_restore_with_the_same_parallelism_keeps_each_readers_splits() -> None:
    source = _PushSource("runner-keep", 6, 4)
    with LocalSourceRunner(source, 3) as runner:
        first = runner.checkpoint()
    with LocalSourceRunner(source, 3, restore_from=first) as runner:
        second = runner.checkpoint()
    assert _split_ids_in(source, first)[1] == _split_ids_in(source, second)[1]


def test_restore_with_another_parallelism_spreads_the_splits() -> None:
    source = _PushSource("runner-spread", 6, 4)
    with LocalSourceRunner(source, 2) as runner:
        checkpoint = runner.checkpoint()
    with LocalSourceRunner(source, 4, restore_from=checkpoint) as runner:
        spread = _split_ids_in(source, runner.checkpoint())[1]
        rows = runner.run()
    assert sorted(len(s) for s in spread) == [1, 1, 2, 2]
    assert bag(rows) == bag(source.rows())


class _AsyncEnumerator(SplitEnumerator[ListSplit, PullEnumeratorState[ListSplit]]):
    """Discovers its splits with call_async; requests wait until they are known."""

    def __init__(
        self, context: SplitEnumeratorContext[ListSplit], splits: list[ListSplit], fail: bool
    ):
        self.context = context
        self.splits = splits
        self.fail = fail
        self.known: list[ListSplit] | None = None
        self.waiting: list[int] = []
        self.completed: list[int] = []

    def start(self) -> None:
        def discover() -> list[ListSplit]:
            if self.fail:
                raise OSError("discovery failed")
            return list(self.splits)

        self.context.call_async(discover, self.discovered)

    def discovered(self, splits: list[ListSplit] | None, error: BaseException | None) -> None:
        if error is not None:
            raise SourceError("discovery failed") from error
        self.known = splits
        for subtask in self.waiting:
            self.handle_split_request(subtask)

    def handle_split_request(self, subtask_id: int) -> None:
        if self.known is None:
            self.waiting.append(subtask_id)
        elif self.known:
            self.context.assign_split(self.known.pop(), subtask_id)
        else:
            self.context.signal_no_more_splits(subtask_id)

    def add_splits_back(self, splits: Sequence[ListSplit], subtask_id: int) -> None:
        pass

    def add_reader(self, subtask_id: int) -> None:
        pass

    def snapshot_state(self, checkpoint_id: int) -> PullEnumeratorState[ListSplit]:
        return PullEnumeratorState((), {"position": 0})

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed.append(checkpoint_id)


class _AsyncSource(MockSource):
    fail = False
    enumerator: _AsyncEnumerator | None = None

    def create_enumerator(self, context: Any) -> Any:
        self.enumerator = _AsyncEnumerator(context, self.splits, self.fail)
        return self.enumerator


def test_call_async_results_are_handled_on_the_coordinator() -> None:
    source = _AsyncSource("runner-async", 3, 5)
    source.faults.__init__()  # type: ignore[misc]
    with LocalSourceRunner(source, 2) as runner:
        assert bag(runner.run()) == bag(source.rows())
        runner.checkpoint()
        runner.checkpoint()
    assert source.enumerator is not None
    assert source.enumerator.completed == [1, 2]


def test_call_async_errors_reach_the_handler() -> None:
    source = _AsyncSource("runner-async-fail", 3, 5)
    source.fail = True
    with LocalSourceRunner(source, 2) as runner, pytest.raises(SourceError, match="discovery"):
        runner.run()


def test_source_events_travel_both_ways() -> None:
    from scan.planners import ListPlanner, PullSplitEnumerator

    seen: list[tuple[str, Any]] = []

    class Echo(PullSplitEnumerator[ListSplit]):
        def handle_source_event(self, subtask_id: int, event: Any) -> None:
            seen.append(("enumerator", (subtask_id, event)))
            self._context.send_event_to_reader(subtask_id, f"echo {event}")

    class EventSource(MockSource):
        def create_enumerator(self, context: Any) -> Any:
            return Echo(context, ListPlanner(self.splits))

        def create_reader(self, context: Any) -> Any:
            reader = super().create_reader(context)
            original_start = reader.start

            def start() -> None:
                context.send_source_event_to_coordinator(f"hello from {context.index_of_subtask}")
                original_start()

            reader.start = start  # type: ignore[method-assign]
            reader.handle_source_events = lambda e: seen.append(("reader", e))  # type: ignore[method-assign]
            return reader

    source = EventSource("runner-events", 2, 3)
    source.faults.__init__()  # type: ignore[misc]
    run_all(source, 2)
    assert sorted(seen) == [
        ("enumerator", (0, "hello from 0")),
        ("enumerator", (1, "hello from 1")),
        ("reader", "echo hello from 0"),
        ("reader", "echo hello from 1"),
    ]


# --- restore errors


def test_restore_refuses_a_checkpoint_of_another_source() -> None:
    with LocalSourceRunner(_mock("other"), 1) as runner:
        checkpoint = runner.checkpoint()
    with pytest.raises(SourceError, match="not of"):
        LocalSourceRunner(CollectionSource([(1,)]), 1, restore_from=checkpoint)


@pytest.mark.parametrize("blob", [b"", b"garbage", b"SLSCAN\x00\x01{not json", "text"])
def test_restore_refuses_what_is_not_a_checkpoint(blob: Any) -> None:
    with pytest.raises(SourceError):
        LocalSourceRunner(_mock("garbage"), 1, restore_from=blob)


def test_restore_refuses_a_newer_checkpoint_format() -> None:
    with LocalSourceRunner(_mock("newer"), 1) as runner:
        checkpoint = runner.checkpoint()
    newer = b"SLSCAN" + struct.pack(">H", 99) + checkpoint[8:]
    with pytest.raises(SourceError, match=r"version 99.*upgrade"):
        LocalSourceRunner(_mock("newer"), 1, restore_from=newer)


def test_restore_refuses_a_newer_split_format() -> None:
    source = _mock("newer-split")
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=1)) as runner:
        runner.run(1)
        checkpoint = runner.checkpoint()
    payload = json.loads(checkpoint[8:])
    payload["readers"][0][0]["version"] = 7
    tampered = checkpoint[:8] + json.dumps(payload).encode()
    with (
        LocalSourceRunner(source, 1, restore_from=tampered) as runner,
        pytest.raises(SourceError, match=r"checkpointed split.*version 7"),
    ):
        runner.run()


def test_checkpoint_is_json_not_pickle() -> None:
    with LocalSourceRunner(_mock("json"), 2) as runner:
        runner.run(10)
        checkpoint = runner.checkpoint()
    assert checkpoint.startswith(b"SLSCAN")
    json.loads(checkpoint[8:])  # the body is plain JSON
    assert decode_checkpoint(checkpoint).checkpoint_id == 1


def test_checkpoint_ids_continue_after_a_restore() -> None:
    source = _mock("ids")
    with LocalSourceRunner(source, 1) as runner:
        runner.checkpoint()
        second = runner.checkpoint()
    with LocalSourceRunner(source, 1, restore_from=second) as runner:
        assert decode_checkpoint(runner.checkpoint()).checkpoint_id == 3


# --- failures and lifecycle


def test_reader_failure_fails_the_run_and_the_runner() -> None:
    source = _mock("fails")
    source.faults.fail_after_fetches = 3
    runner = LocalSourceRunner(source, 2)
    with pytest.raises(SourceError, match="split fetcher failed"):
        runner.run()
    assert not runner.is_finished()
    with pytest.raises(SourceError, match="failed earlier"):
        runner.run()
    runner.close()


def test_closed_runner_refuses_work_and_closes_once() -> None:
    source = _mock("closed")
    runner = LocalSourceRunner(source, 2)
    runner.run(5)
    runner.close()
    runner.close()
    assert source.faults.closed == 2, "each reader's split reader, once"
    with pytest.raises(SourceError, match="closed"):
        runner.run()


class _Unbounded(MockSource):
    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED


def test_unbounded_sources_need_max_records() -> None:
    with LocalSourceRunner(_Unbounded("runner-unbounded", 1, 10), 1) as runner:
        with pytest.raises(ConfigError, match="max_records"):
            runner.run()
        with pytest.raises(ConfigError, match="bounded"):
            runner.read_arrow_batches()
        assert len(runner.run(3)) >= 3
    with pytest.raises(ConfigError, match="bounded"):
        plan_splits(_Unbounded("runner-unbounded", 1, 10))


def test_rows_of_the_wrong_width_are_refused() -> None:
    class Wide(MockSource):
        @property
        def schema(self) -> str:
            return "a BIGINT, b BIGINT"

    with (
        LocalSourceRunner(Wide("runner-wide", 1, 3), 1) as runner,
        pytest.raises(SourceError, match=r"rows of \[1\] fields, expected 2"),
    ):
        runner.run()


# --- the bulk path


def test_bulk_path_yields_batches_of_the_declared_schema() -> None:
    source = CollectionSource([(i, str(i)) for i in range(1000)], 5, schema="id INT, v STRING")
    with LocalSourceRunner(source, 3) as runner:
        batches = list(runner.read_arrow_batches(max_batch_rows=128))
    assert all(b.num_rows <= 128 for b in batches)
    assert {str(b.schema) for b in batches} == {"id: int32\nv: string"}
    assert sum(b.num_rows for b in batches) == 1000


@pytest.mark.parametrize("rows", [0, 1, 2, 1024])
def test_bulk_path_handles_any_size(rows: int) -> None:
    source = CollectionSource([(i,) for i in range(rows)], 3, schema="id BIGINT")
    table = read_arrow(source, 2, max_batch_rows=100)
    assert sorted(table.column("id").to_pylist()) == list(range(rows))


def test_bulk_path_names_the_column_that_does_not_convert() -> None:
    source = CollectionSource([(1, "x"), (2, "not a number")], schema="a INT, b DOUBLE")
    with pytest.raises(SourceError, match=r"column 'b' does not convert to double"):
        read_arrow(source)


def test_bulk_path_refuses_nulls_in_not_null_columns() -> None:
    source = CollectionSource([(1,), (None,)], schema="a INT NOT NULL")
    with pytest.raises(SourceError, match="NOT NULL"):
        read_arrow(source)


def test_bulk_path_failure_is_raised_and_threads_stop() -> None:
    source = _mock("bulk-fails")
    source.faults.fail_after_fetches = 2
    runner = LocalSourceRunner(source, 3)
    with pytest.raises(SourceError, match="split fetcher failed"):
        list(runner.read_arrow_batches())
    assert runner._bulk is None  # stopped: its threads joined
    with pytest.raises(SourceError, match="failed earlier"):
        runner.checkpoint()
    runner.close()


def test_bulk_path_stopped_early_leaves_the_runner_unusable() -> None:
    source = CollectionSource([(i,) for i in range(5000)], 4, schema="id BIGINT")
    runner = LocalSourceRunner(source, 2)
    batches = runner.read_arrow_batches(max_batch_rows=10)
    next(batches)
    with pytest.raises(SourceError, match="still running"):
        runner.checkpoint()
    batches.close()
    with pytest.raises(SourceError, match="stopped before the end"):
        runner.run()
    runner.close()


def test_close_during_the_bulk_path_stops_its_threads() -> None:
    source = CollectionSource([(i,) for i in range(5000)], 4, schema="id BIGINT")
    runner = LocalSourceRunner(source, 2)
    batches = runner.read_arrow_batches(max_batch_rows=10)
    next(batches)
    bulk = runner._bulk
    runner.close()
    assert bulk is not None
    assert not bulk._threads
    batches.close()


@pytest.mark.parametrize("size", [0, -5, 2.0, None])
def test_bulk_path_batch_size_is_validated(size: Any) -> None:
    with (
        LocalSourceRunner(_mock("batch-size"), 1) as runner,
        pytest.raises(ConfigError, match="max_batch_rows"),
    ):
        runner.read_arrow_batches(size)
