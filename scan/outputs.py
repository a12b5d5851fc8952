"""The outputs the runner and the standalone helpers give readers: rows in a list, or
Arrow record batches of the declared schema.

An output lives on the thread that polls its reader and is called only from there.
Both check what a source emits where it enters: rows for their width, batches for the
declared Arrow schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from scan.arrow import (
    check_batch_schema,
    check_row_widths,
    record_batch_to_rows,
    rows_to_record_batch,
)
from scan.reader import ReaderOutput
from spark_lookup.schema import to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ArrowBatchOutput", "BatchPacker", "RowListOutput"]

Row = tuple[Any, ...]


class RowListOutput(ReaderOutput):
    """Collects rows into ``rows``; batches are checked against the declared schema and
    converted to rows ([`LocalSourceRunner.run`][] and [`read_split`][]).

    Parameters
    ----------
    rows
        The list rows are appended to.
    schema
        The source's declared schema (its Arrow form is derived on the first batch, so
        a source that only emits rows needs no Arrow mapping of its types).
    what
        The source, for error messages.
    """

    def __init__(self, rows: list[Row], schema: T.StructType, what: str) -> None:
        self.rows = rows
        self._schema = schema
        self._width = len(schema.fields)
        self._arrow_schema: pa.Schema | None = None
        self._what = what

    def collect(self, record: Row) -> None:
        self.collect_batch((record,))

    def collect_batch(self, records: Sequence[Row]) -> None:
        if records:
            check_row_widths(records, self._width, self._what)
            self.rows.extend(records)

    def collect_arrow(self, batch: pa.RecordBatch) -> None:
        if self._arrow_schema is None:
            self._arrow_schema = to_arrow_schema(self._schema)
        check_batch_schema(batch, self._arrow_schema, self._what)
        self.rows.extend(record_batch_to_rows(batch))


class BatchPacker:
    """Re-chunks a stream of record batches (one schema) into batches of at most
    ``max_rows`` rows, by Arrow slicing and concatenation only.

    A batch of ``max_rows`` or more rows is cut into zero-copy slices of ``max_rows``;
    smaller pieces are held back and merged (one copy) while they fit together, so a
    source whose fetches are already near ``max_rows`` passes through uncopied, while
    small polls still come out as few, large batches. Not thread-safe: one per reader.
    """

    def __init__(self, max_rows: int) -> None:
        self._max_rows = max_rows
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._ready: list[pa.RecordBatch] = []

    def add(self, batch: pa.RecordBatch) -> None:
        """Take ``batch`` (after every batch added before it)."""
        rows = batch.num_rows
        if not rows:
            return
        if self._pending_rows + rows > self._max_rows:
            self._close_pending()
        if not self._pending:
            offset = 0
            if rows == self._max_rows:
                self._ready.append(batch)
                return
            while rows - offset >= self._max_rows:
                self._ready.append(batch.slice(offset, self._max_rows))
                offset += self._max_rows
            if offset:
                rows -= offset
                batch = batch.slice(offset)
        if rows:
            self._pending.append(batch)
            self._pending_rows += rows
        if self._pending_rows == self._max_rows:
            self._close_pending()

    def take_ready(self) -> list[pa.RecordBatch]:
        """The batches completed so far, in order; they are handed over once."""
        ready, self._ready = self._ready, []
        return ready

    def flush(self) -> list[pa.RecordBatch]:
        """Every batch left, the held-back pieces included."""
        self._close_pending()
        return self.take_ready()

    def _close_pending(self) -> None:
        if not self._pending:
            return
        pending, self._pending, self._pending_rows = self._pending, [], 0
        self._ready.append(pending[0] if len(pending) == 1 else _concat(pending))


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    import pyarrow as pa

    if hasattr(pa, "concat_batches"):  # pyarrow >= 19
        return pa.concat_batches(batches)
    combined = pa.Table.from_batches(batches).combine_chunks()
    return combined.to_batches()[0]


class ArrowBatchOutput(ReaderOutput):
    """Collects what a reader emits as record batches of the declared Arrow schema, of
    at most ``max_rows`` rows (the bulk path: [`LocalSourceRunner.read_arrow_batches`][]
    and [`read_split_arrow`][]).

    Batches (`collect_arrow`) are checked against ``schema`` and kept as they
    are, re-chunked by a `BatchPacker`: no Python object per row. Rows are
    buffered and converted column by column, ``max_rows`` at a time; rows and batches
    may be mixed and keep their order.

    Parameters
    ----------
    schema
        The source's declared schema as Arrow (``to_arrow_schema(source.schema)``).
    max_rows
        The most rows per batch handed out.
    what
        The source, for error messages.
    """

    def __init__(self, schema: pa.Schema, max_rows: int, what: str) -> None:
        self._schema = schema
        self._max_rows = max_rows
        self._what = what
        self._rows: list[Row] = []
        self._packer = BatchPacker(max_rows)

    def collect(self, record: Row) -> None:
        self._rows.append(record)

    def collect_batch(self, records: Sequence[Row]) -> None:
        self._rows.extend(records)

    def collect_arrow(self, batch: pa.RecordBatch) -> None:
        check_batch_schema(batch, self._schema, self._what)
        if self._rows:
            self._convert_rows(everything=True)  # rows emitted before stay before
        self._packer.add(batch)

    def full_batches(self) -> list[pa.RecordBatch]:
        """The completed batches, dropped from the output (rows are converted in whole
        batches of ``max_rows``; a smaller remainder stays buffered)."""
        self._convert_rows(everything=False)
        return self._packer.take_ready()

    def flush(self) -> list[pa.RecordBatch]:
        """Every batch left, the last ones possibly smaller than ``max_rows``."""
        self._convert_rows(everything=True)
        return self._packer.flush()

    def _convert_rows(self, everything: bool) -> None:
        rows = self._rows
        if not rows:
            return
        size = self._max_rows
        end = len(rows) if everything else len(rows) - len(rows) % size
        for start in range(0, end, size):
            self._packer.add(rows_to_record_batch(rows[start : start + size], self._schema,
                                                  self._what))
        del rows[:end]
