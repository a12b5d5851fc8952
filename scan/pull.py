"""The bases of the built-in sources and of custom ones: bounded, splits planned on
request, read by pulling split readers.

A `PullSource` is its split (with a serializer), its split planning
(`PullSource.planner`) and its split reader (`PullSource.split_reader`,
usually a `QueueSplitReader`); the enumerator, the reader, the split states and
the serializers of the enumerator's state come from here. A `SplitListSource` is
less: its schema, its list of splits and how one split is read.
"""

from __future__ import annotations

import inspect
import threading
from abc import abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any, Generic, get_args, get_origin

import pyarrow as pa

from scan.arrow import conform_to_schema, rows_to_record_batch
from scan.connector.arrow_records import ArrowRecordsBySplits
from scan.connector.emitter import ArrowRecordEmitter
from scan.connector.pulling import PullingSourceReader
from scan.connector.split_reader import SplitReader, SplitsChange
from scan.enumerator import SplitEnumerator, SplitEnumeratorContext
from scan.planners import (
    ListPlanner,
    PullEnumeratorState,
    PullEnumeratorStateSerializer,
    PullSplitEnumerator,
    SplitPlanner,
)
from scan.reader import SourceReader, SourceReaderContext
from scan.serializers import JsonVersionedSerializer, SimpleVersionedSerializer
from scan.source import Boundedness, Source
from scan.split import SplitT
from spark_lookup.schema import to_arrow_schema

__all__ = [
    "PullSource",
    "QueueSplitReader",
    "RowsState",
    "SplitFieldsSerializer",
    "SplitListSource",
]

# Rows of a split `SplitListSource.read` yields one at a time, converted to one batch:
# small enough that a queue of two batches stays cheap.
_FETCH_ROWS = 4096


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


class SplitListSource(PullSource[SplitT]):
    """A bounded source given by its `schema`, its list of splits (`splits`) and how
    one split is read (`read`), as PySpark's ``DataSourceReader`` is by
    ``partitions()`` and ``read(partition)``; planning, checkpoints and restore come
    from here.

    Its split is a frozen dataclass subclassing `SourceSplit`, named as this class's
    parameter (``class Pages(SplitListSource[Page])``). Its fields are values a
    checkpoint holds (JSON scalars, bytes, decimals, dates and times, UUIDs, tuples),
    one of them the int ``ROWS_FIELD`` (``skip`` unless a subclass names another): the
    rows of the split already emitted. A checkpoint advances it by the rows emitted
    since, so a restored split is read on from there.

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> from scan import LocalSourceRunner, SourceSplit
    >>> @dataclass(frozen=True)
    ... class Page(SourceSplit):
    ...     number: int
    ...     skip: int = 0
    ...
    ...     @property
    ...     def split_id(self) -> str:
    ...         return f"page-{self.number}"
    >>> class Squares(SplitListSource[Page]):
    ...     schema = "n BIGINT, square BIGINT"
    ...
    ...     def splits(self):
    ...         return [Page(0), Page(1)]
    ...
    ...     def read(self, split):
    ...         first = 3 * split.number + split.skip
    ...         return ((n, n * n) for n in range(first, 3 * split.number + 3))
    >>> with LocalSourceRunner(Squares(), parallelism=1) as runner:
    ...     runner.run()
    [(0, 0), (1, 1), (2, 4), (3, 9), (4, 16), (5, 25)]
    """

    _split_type: type[Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not inspect.isabstract(cls):
            cls._split_type = _split_type(cls)

    @abstractmethod
    def splits(self) -> Sequence[SplitT]:
        """The splits, in the order they are handed out. Runs where the enumerator does;
        a restore calls it again and finds its place by position, so it must give the
        same list each time."""

    @abstractmethod
    def read(self, split: SplitT) -> Iterable[Any]:
        """The rows of ``split`` after the first ``ROWS_FIELD`` of them: rows (tuples in
        schema order), Arrow record batches or tables (cast to the schema, columns
        picked by name), in any mix.

        Runs on a reader's fetcher thread (open clients there, in the iterable); an
        iterable with a ``close`` method is closed when the split is done.
        """

    def planner(self, progress: Any | None) -> SplitPlanner[SplitT]:
        """A `ListPlanner` over `splits`, at the position ``progress`` recorded."""
        position = 0 if progress is None else ListPlanner.position_of(progress)
        return ListPlanner(self.splits(), position)

    def split_reader(self) -> Callable[[], SplitReader[Any, SplitT]]:
        """Makes a reader that reads each split through `read`."""
        read, schema, what = self.read, to_arrow_schema(self.schema), type(self).__name__
        return lambda: _ReadingSplitReader(read, schema, what)

    def serializer(self) -> SimpleVersionedSerializer[SplitT]:
        """A `SplitFieldsSerializer` of the split's fields, each read back as written."""
        split_type = self._split_type
        return SplitFieldsSerializer(split_type, f"a {type(self).__name__} split",
                                     *(_as_is for _ in fields(split_type)))


def _split_type(cls: type[SplitListSource[Any]]) -> type[Any]:
    """The split dataclass ``cls`` names as `SplitListSource`'s parameter.

    Raises
    ------
    TypeError
        When it names none, or one without the field ``cls.ROWS_FIELD``.
    """
    for klass in cls.__mro__:
        for base in klass.__dict__.get("__orig_bases__", ()):
            if get_origin(base) is not SplitListSource:
                continue
            (split_type,) = get_args(base)
            if not (isinstance(split_type, type) and is_dataclass(split_type)):
                break
            if cls.ROWS_FIELD not in {f.name for f in fields(split_type)}:
                raise TypeError(f"{split_type.__name__} has no field {cls.ROWS_FIELD!r} "
                                f"({cls.__name__}.ROWS_FIELD): a checkpoint counts there "
                                "the rows of a split already emitted")
            return split_type
    raise TypeError(f"{cls.__name__} names no split type: subclass "
                    "SplitListSource[YourSplit], YourSplit a frozen dataclass subclassing "
                    "SourceSplit")


class _ReadingSplitReader(QueueSplitReader[SplitT]):
    """Reads each split through a `SplitListSource`'s ``read``: its Arrow data as it
    comes, its rows gathered into batches."""

    def __init__(self, read: Callable[[SplitT], Iterable[Any]], schema: pa.Schema,
                 what: str) -> None:
        super().__init__()
        self._read = read
        self._schema = schema
        self._what = what
        self._items: Iterator[Any] | None = None
        self._held: pa.RecordBatch | pa.Table | None = None  # met while gathering rows

    def read_next(self, split: SplitT) -> tuple[pa.RecordBatch | pa.Table | None, bool]:
        if self._items is None:
            self._items = iter(self._read(split))
        if self._held is not None:
            held, self._held = self._held, None
            return self._conformed(held), False
        rows: list[Any] = []
        for item in self._items:
            if isinstance(item, (pa.RecordBatch, pa.Table)):
                if not rows:
                    return self._conformed(item), False
                self._held = item
                break
            rows.append(item)
            if len(rows) >= _FETCH_ROWS:
                break
        else:
            return (self._batch(rows) if rows else None), True
        return self._batch(rows), False

    def _conformed(self, data: pa.RecordBatch | pa.Table) -> pa.RecordBatch | pa.Table:
        conformed: pa.RecordBatch | pa.Table = conform_to_schema(data, self._schema, self._what)
        return conformed

    def _batch(self, rows: list[Any]) -> pa.RecordBatch:
        return rows_to_record_batch(rows, self._schema, self._what)

    def split_done(self) -> None:
        self._forget()

    def close(self) -> None:
        self._forget()

    def _forget(self) -> None:
        items, self._items, self._held = self._items, None, None
        close = getattr(items, "close", None)
        if close is not None:
            close()
