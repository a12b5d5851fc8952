"""The base of the built-in sources: bounded, splits planned on request, read by
pulling split readers.

A concrete source is its split (with a serializer), its split planning
(`PullSource.planner`) and its split reader (`PullSource.split_reader`,
usually a `QueueSplitReader`); the enumerator, the reader, the split states and
the serializers of the enumerator's state come from here.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any, Generic

import pyarrow as pa

from scan.connector.arrow_records import ArrowRecordsBySplits
from scan.connector.emitter import ArrowRecordEmitter
from scan.connector.pulling import PullingSourceReader
from scan.connector.split_reader import SplitReader, SplitsChange
from scan.enumerator import SplitEnumerator, SplitEnumeratorContext
from scan.planners import (
    PullEnumeratorState,
    PullEnumeratorStateSerializer,
    PullSplitEnumerator,
    SplitPlanner,
)
from scan.reader import SourceReader, SourceReaderContext
from scan.serializers import JsonVersionedSerializer, SimpleVersionedSerializer
from scan.source import Boundedness, Source
from scan.split import SplitT

__all__ = ["PullSource", "QueueSplitReader", "RowsState", "SplitFieldsSerializer"]


class RowsState(Generic[SplitT]):
    """A split's progress as the rows emitted since it (re)started; its checkpointed
    split adds them to the split's own count of rows to skip (``field``)."""

    __slots__ = ("field", "rows", "split")

    def __init__(self, split: SplitT, field: str) -> None:
        self.split = split
        self.field = field
        self.rows = 0

    def advance(self, rows: int) -> None:
        self.rows += rows

    def to_split(self) -> SplitT:
        split: Any = self.split  # built-in splits are frozen dataclasses
        moved: SplitT = replace(split, **{self.field: getattr(split, self.field) + self.rows})
        return moved


class SplitFieldsSerializer(JsonVersionedSerializer[SplitT]):
    """Writes a built-in split (a frozen dataclass) as the JSON list of its fields, in
    declaration order, and reads each field back through its converter."""

    def __init__(self, split_type: Callable[..., SplitT], what: str,
                 *readers: Callable[[Any], Any],
                 writers: Mapping[str, Callable[[Any], Any]] | None = None) -> None:
        self.WHAT = what
        self._type = split_type
        dataclass_type: Any = split_type  # SplitT's bound does not say it is a dataclass
        self._names = tuple(f.name for f in fields(dataclass_type))
        if len(readers) != len(self._names):
            raise TypeError(f"{len(self._names)} readers needed for {self._names}")
        self._readers = readers
        self._writers = dict(writers or {})

    def to_json(self, obj: SplitT) -> Any:
        return [self._writers.get(name, _as_is)(getattr(obj, name)) for name in self._names]

    def from_json(self, version: int, value: Any) -> SplitT:
        if len(value) != len(self._readers):
            raise ValueError(f"expected {len(self._readers)} fields, got {len(value)}")
        return self._type(*(read(v) for read, v in zip(self._readers, value, strict=True)))


def _as_is(value: Any) -> Any:
    return value


class QueueSplitReader(SplitReader[pa.RecordBatch, SplitT]):
    """Reads its assigned splits in order, one batch per fetch (`read_next`);
    a wake-up returns an empty fetch at once."""

    def __init__(self) -> None:
        self._splits: deque[SplitT] = deque()
        self._woken = threading.Event()

    @abstractmethod
    def read_next(self, split: SplitT) -> tuple[pa.RecordBatch | pa.Table | None, bool]:
        """The next rows of ``split`` (None: none this time) and whether it is done."""

    def split_done(self) -> None:
        """Forget the finished split's reading position (an optional hook)."""

    def fetch(self) -> ArrowRecordsBySplits:
        records = ArrowRecordsBySplits()
        if self._woken.is_set():
            self._woken.clear()
            return records
        if not self._splits:
            return records
        split = self._splits[0]
        rows, done = self.read_next(split)
        if rows is not None and rows.num_rows:
            records.add(split.split_id, rows)
        if done:
            self._splits.popleft()
            self.split_done()
            records.add_finished(split.split_id)
        return records

    def handle_splits_changes(self, change: SplitsChange[SplitT]) -> None:
        self._splits.extend(change.splits)

    def wake_up(self) -> None:
        # A running read is not interrupted; fetch returns between batches.
        self._woken.set()


class PullSource(Source[SplitT, PullEnumeratorState[SplitT]]):
    """A bounded source of Arrow batches whose enumerator hands out the splits a
    `SplitPlanner` makes, one per request."""

    ROWS_FIELD = "skip"
    """The split's field counting rows to skip on a restore (see `RowsState`)."""

    @abstractmethod
    def planner(self, progress: Any | None) -> SplitPlanner[SplitT]:
        """The planner of this source's splits, from the start (None) or from the
        ``progress`` a checkpoint of it recorded."""

    @abstractmethod
    def split_reader(self) -> Callable[[], SplitReader[Any, SplitT]]:
        """Makes a split reader, on its fetcher thread, where the reader runs."""

    @abstractmethod
    def serializer(self) -> SimpleVersionedSerializer[SplitT]:
        """The serializer of this source's splits."""

    def split_state(self, split: SplitT) -> Any:
        """The mutable state of ``split`` while it is read."""
        return RowsState(split, self.ROWS_FIELD)

    def emitter(self) -> Any:
        """Turns fetched batches into output and advances split states."""
        return ArrowRecordEmitter()

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def create_enumerator(self, context: SplitEnumeratorContext[SplitT]
                          ) -> SplitEnumerator[SplitT, PullEnumeratorState[SplitT]]:
        return PullSplitEnumerator(context, self.planner(None))

    def restore_enumerator(
        self, context: SplitEnumeratorContext[SplitT], state: PullEnumeratorState[SplitT]
    ) -> SplitEnumerator[SplitT, PullEnumeratorState[SplitT]]:
        return PullSplitEnumerator(context, self.planner(state.progress), state.pending)

    def create_reader(self, context: SourceReaderContext) -> SourceReader[SplitT]:
        """A reader of this source's splits; where its subtask runs."""
        return PullingSourceReader(context, self.split_reader(), self.emitter(),
                                   self.split_state)

    @property
    def split_serializer(self) -> SimpleVersionedSerializer[SplitT]:
        return self.serializer()

    @property
    def enumerator_state_serializer(
        self,
    ) -> SimpleVersionedSerializer[PullEnumeratorState[SplitT]]:
        return PullEnumeratorStateSerializer(
            self.serializer(), 1, f"the {type(self).__name__} enumerator state")
