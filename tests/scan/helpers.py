"""Test doubles and drivers for the scan tests.

- :class:`ListSplit` / :class:`MockSplitReader`: Flink's ``MockSplitReader``: a split is
  a range of ints; the reader can block until woken, fail on demand, and records what it
  was asked to do.
- :class:`MockSource`: a source on top of them, pull-based, for framework tests.
- :class:`ArrowMockSource`: the same ints fetched as Arrow record batches (of a schema
  that may differ from the declared one, to test the checks).
- :class:`RecordingSource`: wraps any source and records the splits its enumerator
  assigns (to check per-split order of what the runner emitted).
- :class:`TestReaderContext` and :func:`poll_until_end`: drive one reader by hand.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from scan import (
    Boundedness,
    InputStatus,
    LocalSourceRunner,
    ReaderOptions,
    ReaderOutput,
    Source,
    SourceReader,
    SourceReaderContext,
    SourceSplit,
    SplitEnumerator,
    SplitEnumeratorContext,
)
from scan.connector import (
    ArrowRecordEmitter,
    ArrowRecordsBySplits,
    PullingSourceReader,
    RecordEmitter,
    RecordsBySplits,
    SplitReader,
    SplitsChange,
)
from scan.enumerator import ReaderInfo
from scan.planners import (
    ListPlanner,
    PullEnumeratorState,
    PullEnumeratorStateSerializer,
    PullSplitEnumerator,
)
from scan.serializers import JsonVersionedSerializer, SimpleVersionedSerializer

Row = tuple[Any, ...]


def bag(rows: Iterable[Row]) -> Counter[Row]:
    """The multiset of rows (to compare reads regardless of interleaving)."""
    return Counter(rows)


# --- a mock connector -----------------------------------------------------------------


@dataclass(frozen=True)
class ListSplit(SourceSplit):
    """Ints ``start`` .. ``end - 1`` of split ``index``."""

    index: int
    start: int
    end: int

    @property
    def split_id(self) -> str:
        return f"mock-{self.index}"


class ListSplitSerializer(JsonVersionedSerializer[ListSplit]):
    VERSION = 1
    WHAT = "a mock split"

    def to_json(self, obj: ListSplit) -> Any:
        return [obj.index, obj.start, obj.end]

    def from_json(self, version: int, value: Any) -> ListSplit:
        return ListSplit(*value)


class Faults:
    """Shared switches of a MockSplitReader (set from the test thread)."""

    def __init__(self) -> None:
        self.block = threading.Event()  # set: fetch blocks until woken up
        self.blocked = threading.Event()  # set by a fetch that is blocking
        self.fail_after_fetches: int | None = None  # raise on this fetch (0-based)
        self.fail_on_finish = False  # raise when asked for the batch that finishes a split
        self.fetches = 0
        self.wakeups = 0
        self.closed = 0
        self.added: list[str] = []


class MockSplitReader(SplitReader[Row, ListSplit]):
    """Hands out each split in batches of ``batch`` ints as 1-tuples."""

    def __init__(self, faults: Faults, batch: int = 3) -> None:
        self._faults = faults
        self._batch = batch
        self._splits: deque[ListSplit] = deque()
        self._position = -1
        self._woken = threading.Event()

    def fetch(self) -> RecordsBySplits[Row]:
        faults = self._faults
        records: RecordsBySplits[Row] = RecordsBySplits()
        while faults.block.is_set() and not self._woken.is_set():
            faults.blocked.set()
            time.sleep(0.001)
        if self._woken.is_set():
            self._woken.clear()
            return records
        if faults.fail_after_fetches is not None and faults.fetches >= faults.fail_after_fetches:
            raise RuntimeError("injected fetch failure")
        faults.fetches += 1
        if not self._splits:
            return records
        split = self._splits[0]
        if self._position < 0:
            self._position = split.start
        end = min(split.end, self._position + self._batch)
        if end >= split.end and faults.fail_on_finish:
            raise RuntimeError("injected failure at the end of a split")
        if end > self._position:
            records.add(split.split_id, [(i,) for i in range(self._position, end)])
        self._position = end
        if end >= split.end:
            records.add_finished(split.split_id)
            self._splits.popleft()
            self._position = -1
        return records

    def handle_splits_changes(self, change: SplitsChange[ListSplit]) -> None:
        self._faults.added.extend(s.split_id for s in change.splits)
        self._splits.extend(change.splits)

    def wake_up(self) -> None:
        self._faults.wakeups += 1
        self._woken.set()

    def close(self) -> None:
        self._faults.closed += 1


class ListState:
    def __init__(self, split: ListSplit) -> None:
        self.split = split
        self.position = split.start

    def to_split(self) -> ListSplit:
        return replace(self.split, start=self.position)


class ListEmitter(RecordEmitter[Row, ListState]):
    def emit_record(self, element: Row, output: ReaderOutput, split_state: ListState) -> None:
        output.collect(element)
        split_state.position = element[0] + 1


FAULTS: dict[str, Faults] = {}
"""Faults by source name: a source pickles as its name, the switches stay here."""


class MockSource(Source[ListSplit, PullEnumeratorState[ListSplit]]):
    """``num_splits`` splits of ``size`` ints each; the emitter works record by record
    (the default ``emit_records`` loop), so it also covers that path."""

    def __init__(self, name: str, num_splits: int, size: int, batch: int = 3) -> None:
        self.name = name
        self.splits = [ListSplit(i, i * size, (i + 1) * size) for i in range(num_splits)]
        self.batch = batch
        FAULTS.setdefault(name, Faults())

    @property
    def faults(self) -> Faults:
        return FAULTS[self.name]

    def rows(self) -> list[Row]:
        return [(i,) for s in self.splits for i in range(s.start, s.end)]

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def schema(self) -> str:
        return "n BIGINT"

    def create_enumerator(
        self, context: SplitEnumeratorContext[ListSplit]
    ) -> SplitEnumerator[ListSplit, PullEnumeratorState[ListSplit]]:
        return PullSplitEnumerator(context, ListPlanner(self.splits))

    def restore_enumerator(
        self, context: SplitEnumeratorContext[ListSplit], state: PullEnumeratorState[ListSplit]
    ) -> SplitEnumerator[ListSplit, PullEnumeratorState[ListSplit]]:
        planner = ListPlanner(self.splits, ListPlanner.position_of(state.progress))
        return PullSplitEnumerator(context, planner, state.pending)

    def create_reader(self, context: SourceReaderContext) -> SourceReader[ListSplit]:
        faults, batch = self.faults, self.batch
        return PullingSourceReader(
            context, lambda: MockSplitReader(faults, batch), ListEmitter(), ListState
        )

    @property
    def split_serializer(self) -> SimpleVersionedSerializer[ListSplit]:
        return ListSplitSerializer()

    @property
    def enumerator_state_serializer(
        self,
    ) -> SimpleVersionedSerializer[PullEnumeratorState[ListSplit]]:
        return PullEnumeratorStateSerializer(ListSplitSerializer(), 1, "mock enumerator state")


class ArrowMockSplitReader(MockSplitReader):
    """The ints of :class:`MockSplitReader` (same faults), as one batch of ``schema``
    (one int column) per fetch."""

    def __init__(self, faults: Faults, batch: int, schema: pa.Schema) -> None:
        super().__init__(faults, batch)
        self._schema = schema

    def fetch(self) -> ArrowRecordsBySplits:  # type: ignore[override]
        rows = super().fetch()
        records = ArrowRecordsBySplits(finished=rows.finished_splits())
        while (split_id := rows.next_split()) is not None:
            values = [row[0] for row in rows.next_records_from_split(1 << 30)]
            column = pa.array(values, self._schema.field(0).type)
            records.add(split_id, pa.RecordBatch.from_arrays([column], schema=self._schema))
        return records


class ArrowListState(ListState):
    def advance(self, rows: int) -> None:
        self.position += rows


DECLARED = pa.schema([pa.field("n", pa.int64())])
"""The Arrow form of MockSource's schema "n BIGINT"."""


class ArrowMockSource(MockSource):
    """:class:`MockSource` whose readers fetch Arrow batches of ``arrow_schema`` (the
    declared schema's Arrow form unless given) and emit them with
    :class:`~scan.connector.ArrowRecordEmitter`."""

    def __init__(
        self,
        name: str,
        num_splits: int,
        size: int,
        batch: int = 3,
        arrow_schema: pa.Schema = DECLARED,
    ) -> None:
        super().__init__(name, num_splits, size, batch)
        self.arrow_schema = arrow_schema

    def create_reader(self, context: SourceReaderContext) -> SourceReader[ListSplit]:
        faults, batch, schema = self.faults, self.batch, self.arrow_schema
        return PullingSourceReader(
            context,
            lambda: ArrowMockSplitReader(faults, batch, schema),
            ArrowRecordEmitter(),
            ArrowListState,
        )


# --- recording wrapper --------------------------------------------------------------------


class _RecordingContext(SplitEnumeratorContext[Any]):
    def __init__(self, inner: SplitEnumeratorContext[Any], log: list[tuple[str, int, Any]]):
        self._inner = inner
        self._log = log

    @property
    def current_parallelism(self) -> int:
        return self._inner.current_parallelism

    @property
    def registered_readers(self) -> Mapping[int, ReaderInfo]:
        return self._inner.registered_readers

    def assign_splits(self, assignment: Mapping[int, Sequence[Any]]) -> None:
        for subtask, splits in assignment.items():
            for split in splits:
                self._log.append(("split", subtask, split))
        self._inner.assign_splits(assignment)

    def signal_no_more_splits(self, subtask_id: int) -> None:
        self._log.append(("no_more_splits", subtask_id, None))
        self._inner.signal_no_more_splits(subtask_id)

    def send_event_to_reader(self, subtask_id: int, event: Any) -> None:
        self._inner.send_event_to_reader(subtask_id, event)

    def call_async(self, callable: Callable[[], Any], handler: Callable[..., None]) -> None:
        self._inner.call_async(callable, handler)


class RecordingSource(Source[Any, Any]):
    """Delegates to ``inner`` and logs the enumerator's assignments and signals."""

    def __init__(self, inner: Source[Any, Any]) -> None:
        self.inner = inner
        self.log: list[tuple[str, int, Any]] = []

    @property
    def assigned(self) -> list[Any]:
        return [split for kind, _, split in self.log if kind == "split"]

    @property
    def boundedness(self) -> Boundedness:
        return self.inner.boundedness

    @property
    def schema(self) -> Any:
        return self.inner.schema

    def create_enumerator(self, context: SplitEnumeratorContext[Any]) -> Any:
        return self.inner.create_enumerator(_RecordingContext(context, self.log))

    def restore_enumerator(self, context: SplitEnumeratorContext[Any], state: Any) -> Any:
        return self.inner.restore_enumerator(_RecordingContext(context, self.log), state)

    def create_reader(self, context: SourceReaderContext) -> SourceReader[Any]:
        return self.inner.create_reader(context)

    @property
    def split_serializer(self) -> SimpleVersionedSerializer[Any]:
        return self.inner.split_serializer

    @property
    def enumerator_state_serializer(self) -> SimpleVersionedSerializer[Any]:
        return self.inner.enumerator_state_serializer


# --- driving a reader by hand --------------------------------------------------------------


class TestReaderContext(SourceReaderContext):
    """Counts split requests; records events."""

    __test__ = False  # not a pytest test class

    def __init__(self, options: ReaderOptions | None = None) -> None:
        self.split_requests = 0
        self.events: list[Any] = []
        self._options = options or ReaderOptions()

    @property
    def index_of_subtask(self) -> int:
        return 0

    @property
    def current_parallelism(self) -> int:
        return 1

    @property
    def options(self) -> ReaderOptions:
        return self._options

    def send_split_request(self) -> None:
        self.split_requests += 1

    def send_source_event_to_coordinator(self, event: Any) -> None:
        self.events.append(event)


class ListOutput(ReaderOutput):
    def __init__(self) -> None:
        self.rows: list[Row] = []

    def collect(self, record: Row) -> None:
        self.rows.append(record)


def poll_until_end(
    reader: SourceReader[Any], output: ListOutput, timeout: float = 10.0, limit: int | None = None
) -> InputStatus:
    """Poll, waiting on ``is_available`` when nothing is ready, until END_OF_INPUT (or
    ``limit`` rows); fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        status = reader.poll_next(output)
        if status is InputStatus.END_OF_INPUT:
            return status
        if limit is not None and len(output.rows) >= limit:
            return status
        if status is InputStatus.NOTHING_AVAILABLE:
            remaining = deadline - time.monotonic()
            done, _ = wait([reader.is_available()], timeout=max(0.0, remaining))
            if not done:
                raise AssertionError(f"reader stalled; {len(output.rows)} rows so far")


def wait_done(future: Future[None], timeout: float = 5.0) -> bool:
    done, _ = wait([future], timeout=timeout)
    return bool(done)


# --- runner drivers ----------------------------------------------------------------------


def run_all(source: Source[Any, Any], parallelism: int, **kwargs: Any) -> list[Row]:
    with LocalSourceRunner(source, parallelism, **kwargs) as runner:
        rows = runner.run()
        assert runner.is_finished()
        return rows


def checkpoints_along_the_way(
    source: Source[Any, Any], parallelism: int, stops: Sequence[int], options: ReaderOptions
) -> tuple[list[tuple[list[Row], bytes]], list[Row]]:
    """Run ``source``, checkpointing after each stop (records emitted so far); returns
    (rows emitted before, checkpoint) per stop, and all rows of the run."""
    taken: list[tuple[list[Row], bytes]] = []
    emitted: list[Row] = []
    with LocalSourceRunner(source, parallelism, options=options) as runner:
        for stop in stops:
            emitted += runner.run(max_records=max(0, stop - len(emitted)))
            taken.append((list(emitted), runner.checkpoint()))
        emitted += runner.run()
    return taken, emitted
