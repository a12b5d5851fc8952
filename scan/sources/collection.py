"""An in-memory collection of rows, in contiguous splits."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import types as T

from scan.connector.emitter import RecordEmitter
from scan.connector.pulling import PullingSourceReader
from scan.connector.records import RecordsBySplits
from scan.connector.split_reader import SplitReader, SplitsChange
from scan.enumerator import SplitEnumerator, SplitEnumeratorContext
from scan.reader import ReaderOutput, SourceReader, SourceReaderContext
from scan.serializers import JsonVersionedSerializer, SimpleVersionedSerializer
from scan.source import Boundedness, Source
from scan.sources._enumerator import (
    ListPlanner,
    PullEnumeratorState,
    PullEnumeratorStateSerializer,
    PullSplitEnumerator,
)
from scan.sources._types import infer_python_type
from scan.split import SourceSplit
from spark_lookup.errors import ConfigError
from spark_lookup.schema import SchemaLike, parse_schema

__all__ = ["CollectionSource", "CollectionSplit"]

Row = tuple[Any, ...]

# Rows one fetch hands over; small enough that a queue of two stays cheap.
_FETCH_ROWS = 4096


@dataclass(frozen=True)
class CollectionSplit(SourceSplit):
    """Rows ``start`` (inclusive) to ``end`` (exclusive) of split number ``index``;
    a restored split starts where the checkpoint left it."""

    index: int
    start: int
    end: int

    @property
    def split_id(self) -> str:
        return f"split-{self.index}"


class _SplitSerializer(JsonVersionedSerializer[CollectionSplit]):
    VERSION = 1
    WHAT = "a CollectionSource split"

    def to_json(self, obj: CollectionSplit) -> Any:
        return [obj.index, obj.start, obj.end]

    def from_json(self, version: int, value: Any) -> CollectionSplit:
        index, start, end = value
        return CollectionSplit(int(index), int(start), int(end))


class _State:
    __slots__ = ("position", "split")

    def __init__(self, split: CollectionSplit) -> None:
        self.split = split
        self.position = split.start

    def to_split(self) -> CollectionSplit:
        return replace(self.split, start=self.position)


class _Emitter(RecordEmitter[Row, _State]):
    def emit_record(self, element: Row, output: ReaderOutput, split_state: _State) -> None:
        output.collect(element)
        split_state.position += 1

    def emit_records(
        self, elements: Sequence[Row], output: ReaderOutput, split_state: _State
    ) -> None:
        output.collect_batch(elements)
        split_state.position += len(elements)


class _SplitReader(SplitReader[Row, CollectionSplit]):
    def __init__(self, rows: tuple[Row, ...]) -> None:
        self._rows = rows
        self._splits: deque[CollectionSplit] = deque()
        self._position = -1
        self._woken = threading.Event()

    def fetch(self) -> RecordsBySplits[Row]:
        records: RecordsBySplits[Row] = RecordsBySplits()
        if self._woken.is_set():
            self._woken.clear()
            return records
        if not self._splits:
            return records
        split = self._splits[0]
        if self._position < 0:
            self._position = split.start
        end = min(split.end, self._position + _FETCH_ROWS)
        if end > self._position:
            records.add(split.split_id, self._rows[self._position : end])
        self._position = end
        if end >= split.end:
            records.add_finished(split.split_id)
            self._splits.popleft()
            self._position = -1
        return records

    def handle_splits_changes(self, change: SplitsChange[CollectionSplit]) -> None:
        self._splits.extend(change.splits)

    def wake_up(self) -> None:
        self._woken.set()


class CollectionSource(Source[CollectionSplit, PullEnumeratorState[CollectionSplit]]):
    """Rows held in memory, cut into ``num_splits`` contiguous splits of near-equal size.

    Built anywhere; the rows are copied into tuples at construction and travel with the
    source when it is pickled (so keep them small). Splits are read in order; the
    rows of one split are emitted in the order given. Meant for tests, examples and
    small reference tables.

    Parameters
    ----------
    rows
        Sequences of values, one per row, in schema order.
    num_splits
        How many splits (some are empty when there are fewer rows than splits).
    schema
        A Spark DDL string or ``StructType``. Without it, the types are inferred from
        the first non-null value of each column and the columns are named ``_1``,
        ``_2``, ... (as Spark names tuple fields).

    Raises
    ------
    ConfigError
        (a ``ValueError``) for a row of the wrong width, an invalid ``num_splits`` or
        ``schema``, or a column whose type cannot be inferred.

    Examples
    --------
    >>> from scan import CollectionSource, LocalSourceRunner
    >>> source = CollectionSource([(1, "a"), (2, "b"), (3, "c")], num_splits=2)
    >>> source.schema.simpleString()
    'struct<_1:bigint,_2:string>'
    >>> with LocalSourceRunner(source, parallelism=1) as runner:
    ...     runner.run()
    [(1, 'a'), (2, 'b'), (3, 'c')]
    """

    def __init__(
        self,
        rows: Iterable[Sequence[Any]],
        num_splits: int = 1,
        schema: SchemaLike | None = None,
    ) -> None:
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
            raise ConfigError(f"num_splits must be a positive int, got {num_splits!r}")
        frozen: list[Row] = []
        for number, row in enumerate(rows):
            if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
                raise ConfigError(
                    f"row {number} must be a sequence of values, got {type(row).__name__}"
                )
            frozen.append(tuple(row))
        self._rows = tuple(frozen)
        self._num_splits = num_splits
        self._schema = (
            parse_schema(schema, "CollectionSource schema")
            if schema is not None
            else self._infer_schema()
        )
        width = len(self._schema.fields)
        for number, row in enumerate(self._rows):
            if len(row) != width:
                raise ConfigError(
                    f"row {number} has {len(row)} values, but the schema has {width} fields"
                )

    def _infer_schema(self) -> T.StructType:
        if not self._rows:
            raise ConfigError(
                "cannot infer the schema of a CollectionSource without rows; pass schema"
            )
        width = len(self._rows[0])
        fields = []
        for column in range(width):
            value = next(
                (r[column] for r in self._rows if len(r) > column and r[column] is not None), None
            )
            if value is None:
                raise ConfigError(f"column _{column + 1} holds only nulls; pass schema")
            data_type = infer_python_type(value, f"column _{column + 1}")
            fields.append(T.StructField(f"_{column + 1}", data_type, True))
        return T.StructType(fields)

    @property
    def rows(self) -> tuple[Row, ...]:
        """The rows, as tuples."""
        return self._rows

    @property
    def num_splits(self) -> int:
        """The number of splits."""
        return self._num_splits

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def schema(self) -> T.StructType:
        return self._schema

    def splits(self) -> list[CollectionSplit]:
        """The splits, in order (contiguous ranges, sizes differ by at most one)."""
        count, parts = len(self._rows), self._num_splits
        bounds = [count * i // parts for i in range(parts + 1)]
        return [CollectionSplit(i, bounds[i], bounds[i + 1]) for i in range(parts)]

    def create_enumerator(
        self, context: SplitEnumeratorContext[CollectionSplit]
    ) -> SplitEnumerator[CollectionSplit, PullEnumeratorState[CollectionSplit]]:
        return PullSplitEnumerator(context, ListPlanner(self.splits()))

    def restore_enumerator(
        self,
        context: SplitEnumeratorContext[CollectionSplit],
        state: PullEnumeratorState[CollectionSplit],
    ) -> SplitEnumerator[CollectionSplit, PullEnumeratorState[CollectionSplit]]:
        position = ListPlanner.position_of(state.progress)
        return PullSplitEnumerator(context, ListPlanner(self.splits(), position), state.pending)

    def create_reader(self, context: SourceReaderContext) -> SourceReader[CollectionSplit]:
        rows = self._rows
        return PullingSourceReader(context, lambda: _SplitReader(rows), _Emitter(), _State)

    @property
    def split_serializer(self) -> SimpleVersionedSerializer[CollectionSplit]:
        return _SplitSerializer()

    @property
    def enumerator_state_serializer(
        self,
    ) -> SimpleVersionedSerializer[PullEnumeratorState[CollectionSplit]]:
        return PullEnumeratorStateSerializer(
            _SplitSerializer(), 1, "the CollectionSource enumerator state"
        )
