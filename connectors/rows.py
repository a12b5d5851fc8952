"""Arrow rows as the Python tuples of the per-key APIs (``lookup``, ``get_if_present``).

The values are pyarrow's Python values of the column's Arrow type (``int``, ``str``,
``Decimal``, ``date``, ``bytes``, ``list``; structs as ``dict``), except that maps are
``dict`` s rather than lists of pairs, and TIMESTAMP values carry
``datetime.timezone.utc`` (pyarrow's carry ``zoneinfo`` UTC: the same instants).
Turned back into Arrow with the same schema they give the same values.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["group_rows", "python_rows", "python_values"]


def python_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The Python values of one column (maps as ``dict``)."""
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.unit in ("s", "ms", "us"):
        return _timestamps(column, kind)
    values: list[Any] = column.to_pylist()
    if pa.types.is_map(column.type):
        return [None if v is None else dict(v) for v in values]
    return values


_MIN_US = -62135596800 * 1_000_000  # 0001-01-01, the first day of datetime
_MAX_US = 253402300799 * 1_000_000  # 9999-12-31 23:59:59


def _timestamps(column: pa.Array | pa.ChunkedArray, kind: pa.TimestampType) -> list[Any]:
    # pyarrow makes each datetime in Python (about 1.2 us each, 2.6 us with a zone);
    # numpy makes naive ones in C, and aware ones are built from their pickled state
    # (CPython's datetime(bytes, tzinfo)), fields computed for the whole column at once.
    micros = column.cast(pa.timestamp("us")).cast(pa.int64()).fill_null(0).to_numpy()
    if len(micros) and (micros.min() < _MIN_US or micros.max() > _MAX_US):
        values: list[Any] = column.to_pylist()  # beyond datetime's range: pyarrow says so
        return values
    stamps = micros.astype("datetime64[us]")
    values = stamps.astype(object).tolist() if kind.tz is None else _aware_utc(stamps)
    if column.null_count:
        valid = column.is_valid().to_pylist()
        values = [v if ok else None for v, ok in zip(values, valid, strict=True)]
    return values


def _aware_utc(stamps: np.ndarray) -> list[dt.datetime]:
    days = stamps.astype("datetime64[D]")
    months = days.astype("datetime64[M]")
    year = months.astype(np.int64) // 12 + 1970
    month = months.astype(np.int64) % 12 + 1
    day = (days - months).astype(np.int64) + 1
    rest = (stamps - days).astype(np.int64)
    hour, rest = np.divmod(rest, 3_600_000_000)
    minute, rest = np.divmod(rest, 60_000_000)
    second, micro = np.divmod(rest, 1_000_000)
    state = np.empty((len(stamps), 10), np.uint8)
    state[:, 0], state[:, 1] = year >> 8, year & 0xFF
    state[:, 2], state[:, 3], state[:, 4] = month, day, hour
    state[:, 5], state[:, 6] = minute, second
    state[:, 7], state[:, 8], state[:, 9] = micro >> 16, (micro >> 8) & 0xFF, micro & 0xFF
    make: Any = dt.datetime  # its pickle constructor: datetime(state bytes, tzinfo)
    # Each row's 10 bytes as one bytes object (void items are never stripped), in C.
    states = state.reshape(-1).view("V10").tolist()
    return list(map(make, states, repeat(dt.timezone.utc)))


def python_rows(batch: pa.RecordBatch | pa.Table) -> list[tuple[Any, ...]]:
    """The rows of ``batch`` as tuples in schema order (one pass per column)."""
    if batch.num_rows == 0:
        return []
    columns = [python_values(column) for column in batch.columns]
    return list(zip(*columns, strict=True))


def group_rows(
    keys: Sequence[Any], positions: Sequence[int], index: Sequence[int],
    rows: Sequence[tuple[Any, ...]],
) -> dict[Any, list[tuple[Any, ...]]]:
    """The per-key answer of a batched lookup: for each key given, the rows whose index
    is its distinct key's position (``-1``: never matches, no rows)."""
    by_position: dict[int, list[tuple[Any, ...]]]
    if len(set(index)) == len(index):  # a row per key, the usual case
        by_position = {p: [row] for p, row in zip(index, rows, strict=True)}
    else:
        by_position = {}
        for p, row in zip(index, rows, strict=True):
            by_position.setdefault(p, []).append(row)
    get = by_position.get
    return {key: get(p) or [] for key, p in zip(keys, positions, strict=True)}
