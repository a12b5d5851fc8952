"""Conversions between rows and Arrow record batches, and the checks at their borders.

Pure functions with no state; they run wherever they are called (a reader's thread, a
fetcher thread, the driver). pyarrow is imported when first needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from connectors.convert import cast_column, castable
from connectors.rows import python_rows
from spark_lookup.errors import SourceError
from spark_lookup.shown import shown

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "check_batch_schema",
    "check_row_widths",
    "conform_to_schema",
    "describe_schema",
    "record_batch_to_rows",
    "rows_to_record_batch",
]

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


def record_batch_to_rows(batch: pa.RecordBatch) -> list[Row]:
    """The rows of ``batch`` as tuples in column order (one Python object per value).

    What an output that collects rows does with a batch; the Arrow paths never call it.
    Values are those of the per-key APIs (`connectors.rows.python_rows`: a
    TIMESTAMP an aware UTC ``datetime``, a map a ``dict``).
    """
    if batch.num_columns == 0:
        return [()] * batch.num_rows
    return python_rows(batch)


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


def describe_schema(schema: pa.Schema) -> str:
    """``schema`` on one line: ``name: type [not null], ...`` (for error messages)."""
    return ", ".join(
        f"{field.name}: {field.type}{'' if field.nullable else ' not null'}" for field in schema
    )


def check_batch_schema(batch: Any, schema: pa.Schema, what: str) -> None:
    """Check that ``batch`` is a ``pyarrow.RecordBatch`` of exactly ``schema`` (names,
    order, types and nullability; metadata aside) and that its NOT NULL columns hold no
    nulls.

    Called where batches of a source enter the runner's outputs, so a source that emits
    the wrong columns fails there, naming itself, not later in a cache or in Spark.

    Raises
    ------
    SourceError
        Naming ``what``, the expected schema and the actual one (or the column).
    """
    import pyarrow as pa

    if not isinstance(batch, pa.RecordBatch):
        raise SourceError(f"{what} emitted a {type(batch).__name__} to collect_arrow, expected a "
                          "pyarrow.RecordBatch")
    if not batch.schema.equals(schema):
        raise SourceError(
            f"{what} emitted a record batch of schema ({describe_schema(batch.schema)}), "
            f"expected the declared schema ({describe_schema(schema)})"
        )
    for index, field in enumerate(schema):
        if not field.nullable and batch.column(index).null_count:
            raise SourceError(f"{what}: column {field.name!r} is NOT NULL but holds nulls")


def conform_to_schema(
    data: Any, schema: pa.Schema, what: str, error: type[Exception] = SourceError
) -> Any:
    """``data`` (a ``RecordBatch`` or ``Table``) as exactly ``schema``: its columns
    picked by name in schema order (others are dropped), each cast to its declared type
    by the connector layer's casts (`connectors.convert`: vectorized, strict, no
    silent truncation or overflow), NOT NULL columns checked for nulls.

    A column already of its declared type is passed through uncopied.

    Raises
    ------
    error
        (``SourceError`` unless given) naming ``what``, the column, its type and the
        declared type; or the missing columns and those ``data`` has.
    """
    import pyarrow as pa

    names = data.schema.names
    missing = [field.name for field in schema if field.name not in names]
    if missing:
        raise error(f"{what} has no column(s) {missing}; it has {names}")
    columns = []
    for field in schema:
        column = data.column(field.name)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not column.type.equals(field.type):
            # The connector layer's casts: the same rules as every source's values.
            if not castable(column.type, field.type):
                raise error(
                    f"{what}: column {field.name!r} of type {column.type} cannot be read as "
                    f"{field.type}"
                )
            converted, bad = cast_column(column, field.type)
            if bad:
                position, reason = next(iter(bad.items()))
                raise error(f"{what}: column {field.name!r} of type {column.type} does not convert "
                            f"to {field.type}: {shown(column[position].as_py(), 60)} ({reason})")
            column = converted
        if not field.nullable and column.null_count:
            raise error(f"{what}: column {field.name!r} is NOT NULL but holds nulls")
        columns.append(column)
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.Table.from_arrays(columns, schema=schema)
