"""Rows to Arrow record batches, with the source's declared schema."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from scan.reader import ReaderOutput
from spark_lookup.errors import SourceError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ArrowBatchOutput", "RowListOutput", "rows_to_record_batch"]

Row = tuple[Any, ...]


def rows_to_record_batch(rows: Sequence[Row], schema: pa.Schema, what: str) -> pa.RecordBatch:
    """Convert rows (tuples in schema order) column by column into a ``RecordBatch``.

    Raises
    ------
    SourceError
        If a row has the wrong number of fields, a value does not convert to its
        column's Arrow type, or a NOT NULL column holds a null; the message names
        ``what`` (the source) and the column.
    """
    import pyarrow as pa

    width = len(schema)
    if not rows:
        return pa.RecordBatch.from_arrays(
            [pa.array([], type=field.type) for field in schema], schema=schema
        )
    check_row_widths(rows, width, what)
    arrays = []
    for index, field in enumerate(schema):
        # One C-level pass per column (much cheaper than zip(*rows) on large batches),
        # then one pyarrow call converts the column.
        column = list(map(itemgetter(index), rows))
        try:
            array = pa.array(column, type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise SourceError(
                f"{what}: column {field.name!r} does not convert to {field.type}: {exc}"
            ) from exc
        if not field.nullable and array.null_count:
            raise SourceError(f"{what}: column {field.name!r} is NOT NULL but holds nulls")
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def check_row_widths(rows: Sequence[Row], width: int, what: str) -> None:
    """Check every row is a tuple of ``width`` fields.

    Raises
    ------
    SourceError
        Naming ``what``, the expected and the actual width or type.
    """
    first = rows[0]
    if type(first) is not tuple:
        raise SourceError(f"{what} emitted a {type(first).__name__}, expected a tuple row")
    widths = set(map(len, rows))
    if widths != {width}:
        bad = sorted(widths - {width})
        raise SourceError(
            f"{what} emitted rows of {bad} fields, expected {width} (the schema's fields)"
        )


class RowListOutput(ReaderOutput):
    """Collects rows into a list, checking their width per batch."""

    def __init__(self, rows: list[Row], width: int, what: str) -> None:
        self.rows = rows
        self._width = width
        self._what = what

    def collect(self, record: Row) -> None:
        self.collect_batch((record,))

    def collect_batch(self, records: Sequence[Row]) -> None:
        if records:
            check_row_widths(records, self._width, self._what)
            self.rows.extend(records)


class ArrowBatchOutput(ReaderOutput):
    """Buffers rows and cuts them into record batches of at most ``max_rows`` rows."""

    def __init__(self, schema: pa.Schema, max_rows: int, what: str) -> None:
        self._schema = schema
        self._max_rows = max_rows
        self._what = what
        self._rows: list[Row] = []

    def collect(self, record: Row) -> None:
        self._rows.append(record)

    def collect_batch(self, records: Sequence[Row]) -> None:
        self._rows.extend(records)

    def __len__(self) -> int:
        return len(self._rows)

    def full_batches(self) -> list[pa.RecordBatch]:
        """Convert and drop the buffered rows in whole batches of ``max_rows``."""
        batches = []
        while len(self._rows) >= self._max_rows:
            chunk, self._rows = self._rows[: self._max_rows], self._rows[self._max_rows :]
            batches.append(rows_to_record_batch(chunk, self._schema, self._what))
        return batches

    def flush(self) -> pa.RecordBatch | None:
        """Convert and drop whatever is buffered (None if nothing)."""
        if not self._rows:
            return None
        rows, self._rows = self._rows, []
        return rows_to_record_batch(rows, self._schema, self._what)
