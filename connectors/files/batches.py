"""What the file-based sources share: a fetched batch made the declared schema's (the
connector layer's casts and bad-value policy, then the filters), one such conversion
per process for a source's readers, and readers that stream a split's batches."""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pyspark.sql import types as T

from connectors.convert import Conformer, castable
from connectors.policy import BadValuePolicy, BadValueStats
from connectors.predicates import Predicate, predicates_mask
from scan.pull import PullSource, QueueSplitReader
from scan.split import SplitT
from spark_lookup.errors import (
    ConfigError,
    ConnectorError,
    SourceError,
    SparkLookupError,
    TransientConnectorError,
    raise_from,
)
from spark_lookup.per_process import PerProcess
from spark_lookup.schema import to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BatchReading",
    "BatchReadingSource",
    "BatchStreamReader",
    "io_error",
    "lake_error",
    "skip_rows",
    "with_last",
]


def io_error(what: str, exc: BaseException) -> ConnectorError:
    """A permanent error: ``what`` failed, with the cause's type and text."""
    return ConnectorError(f"{what} failed: {type(exc).__name__}: {exc}")


# What object stores and their clients say of errors that may pass.
_TRANSIENT = re.compile(r"timed? ?out|connection|temporar|throttl|too many requests|\b50[234]\b|"
                        r"unavailable", re.I)


def lake_error(text: str, exc: BaseException, transient: re.Pattern[str] | None = None
               ) -> ConnectorError:
    """``text`` as a table format library's error: transient when ``exc`` may pass (a
    timeout, a lost connection, throttling, or what ``transient`` matches), else
    permanent."""
    message = str(exc)
    if (isinstance(exc, (TimeoutError, ConnectionError)) or _TRANSIENT.search(message)
            or (transient is not None and transient.search(message))):
        return TransientConnectorError(text)
    return ConnectorError(text)


T_ = TypeVar("T_")


def with_last(items: Iterator[T_]) -> Iterator[tuple[T_, bool]]:
    """Each item with whether it is the last (one item of look-ahead), so the fetch that
    carries a split's last batch also finishes it."""
    previous = next(items, _END)
    while previous is not _END:
        current = next(items, _END)
        yield previous, current is _END
        previous = current


_END: Any = object()


def skip_rows(batches: Iterable[pa.RecordBatch], skip: int) -> Iterator[pa.RecordBatch]:
    """``batches`` less their first ``skip`` rows (those emitted before a checkpoint);
    a batch left empty is not yielded."""
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        yield batch.slice(skip)
        skip = 0


class BatchReading:
    """How a file's batches become the schema's: the shared conversion of the connector
    layer (the same casts and bad-value policy as every other source), then the
    filters. Per process (its counter); shared by the source's readers."""

    def __init__(self, schema: T.StructType, mode: BadValuePolicy,
                 filters: Sequence[Predicate], what: str = "FileSource") -> None:
        self.schema = to_arrow_schema(schema)
        self.stats = BadValueStats(what)
        self._conformer = Conformer(
            "file", self.schema, [f.dataType.simpleString() for f in schema.fields], mode,
            self.stats,
        )
        self._filters = tuple(filters)

    @property
    def filters(self) -> tuple[Predicate, ...]:
        """The predicates rows must meet."""
        return self._filters

    def conform(self, batch: pa.RecordBatch, path: str, start: int) -> pa.RecordBatch:
        import pyarrow as pa

        names = batch.schema.names
        missing = [f.name for f in self.schema if f.name not in names]
        if missing:
            raise ConfigError(f"{path!r} has no column(s) {missing}; it has {names}")
        wires = [batch.column(names.index(f.name)) for f in self.schema]
        for field, wire in zip(self.schema, wires, strict=True):
            if not castable(wire.type, field.type):
                raise ConfigError(
                    f"{path!r}: column {field.name!r} holds {wire.type} values, which cannot be "
                    f"read as {field.type}"
                )
        columns, keep = self._conformer.conform(wires, lambda row: f"row {start + row}", where=path)
        out = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        if keep is not None:
            out = out.filter(keep)
        for field, column in zip(self.schema, out.columns, strict=True):
            if not field.nullable and column.null_count:
                raise SourceError(f"{path!r}: column {field.name!r} is NOT NULL but holds nulls")
        if self._filters:
            out = out.filter(predicates_mask(out, self._filters))
        return out

    def conform_all(self, batches: Iterable[pa.RecordBatch], path: str
                    ) -> Iterator[pa.RecordBatch]:
        """Each of a file's ``batches`` conformed, its rows numbered from the file's start."""
        start = 0
        for batch in batches:
            rows = batch.num_rows
            yield self.conform(batch, path, start)
            start += rows


class BatchStreamReader(QueueSplitReader[SplitT]):
    """Reads a split as the stream of batches `batches` yields, one per fetch, the
    fetch of the last one finishing the split; other errors than ours, of the
    libraries reading (those of `READ_ERRORS`), become `read_error`'s."""

    READ_ERRORS: tuple[type[BaseException], ...] = (Exception,)

    def __init__(self) -> None:
        super().__init__()
        self._batches: Iterator[tuple[pa.RecordBatch, bool]] | None = None

    @abstractmethod
    def batches(self, split: SplitT) -> Iterator[pa.RecordBatch]:
        """The rows of ``split`` still to emit, conformed (from its checkpointed position)."""

    @abstractmethod
    def read_error(self, split: SplitT, exc: BaseException) -> SparkLookupError:
        """``exc``, raised reading ``split``, as our error."""

    def flagged_batches(self, split: SplitT) -> Iterator[tuple[pa.RecordBatch, bool]]:
        """`batches`, each with whether it is the split's last (by default found
        by reading one batch ahead; a reader that knows sooner says so here)."""
        return with_last(self.batches(split))

    def read_next(self, split: SplitT) -> tuple[pa.RecordBatch | None, bool]:
        try:
            if self._batches is None:
                self._batches = self.flagged_batches(split)
            item = next(self._batches, None)
        except SparkLookupError:
            raise
        except self.READ_ERRORS as exc:
            raise_from(self.read_error(split, exc), exc)
        if item is None:
            return None, True
        return item

    def split_done(self) -> None:
        self._batches = None

    def close(self) -> None:
        self._batches = None


ReadingT = TypeVar("ReadingT", bound=BatchReading)


class BatchReadingSource(PerProcess, PullSource[SplitT], Generic[SplitT, ReadingT]):
    """A source whose readers of one process share one `BatchReading` (made on
    first use, by `new_reading`), which counts the values they could not read."""

    _PER_PROCESS: tuple[str, ...] = ("_reading",)
    _reading: ReadingT | None

    @abstractmethod
    def new_reading(self) -> ReadingT:
        """The conversion of this source's batches, for this process."""

    def _reading_state(self) -> ReadingT:
        if self._reading is None:
            self._reading = self.new_reading()
        return self._reading

    @property
    def bad_value_count(self) -> int:
        """Values this process could not read as their column's type."""
        return 0 if self._reading is None else self._reading.stats.count
