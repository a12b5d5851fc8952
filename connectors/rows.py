"""Arrow rows as the Python tuples of the per-key APIs (``lookup``, ``get_if_present``).

The values are pyarrow's Python values of the column's Arrow type (``int``, ``str``,
``Decimal``, ``date``, aware UTC ``datetime`` for TIMESTAMP, naive for TIMESTAMP_NTZ,
``bytes``, ``list``; structs as ``dict``), except that maps are ``dict`` s rather than
lists of pairs. Turned back into Arrow with the same schema they give the same values.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["python_rows", "python_values"]


def python_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The Python values of one column (maps as ``dict``)."""
    values: list[Any] = column.to_pylist()
    if pa.types.is_map(column.type):
        return [None if v is None else dict(v) for v in values]
    return values


def python_rows(batch: pa.RecordBatch | pa.Table) -> list[tuple[Any, ...]]:
    """The rows of ``batch`` as tuples in schema order (one pass per column)."""
    if batch.num_rows == 0:
        return []
    columns = [python_values(column) for column in batch.columns]
    return list(zip(*columns, strict=True))
