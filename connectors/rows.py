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
    if not column.null_count and (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        # numpy's ints and floats become Python's in one C loop, twice as fast.
        numbers: list[Any] = column.to_numpy().tolist()
        return numbers
    values: list[Any] = column.to_pylist()
    if pa.types.is_map(column.type):
        return [None if v is None else dict(v) for v in values]
    return values


_MIN_US = -62135596800 * 1_000_000  # 0001-01-01, the first day of datetime
_MAX_US = 253402300799 * 1_000_000  # 9999-12-31 23:59:59


def _timestamps(column: pa.Array | pa.ChunkedArray, kind: pa.TimestampType) -> list[Any]:
    # pyarrow makes each datetime in Python (about 1.2 us each, 9 us with a zone);
    # numpy makes naive ones in C, and aware ones are built from their pickled state
    # (CPython's datetime(bytes, tzinfo)), fields computed for the whole column at once.
    micros = _micros(column, kind)
    if len(micros) and (micros.min() < _MIN_US or micros.max() > _MAX_US):
        values: list[Any] = column.to_pylist()  # beyond datetime's range: pyarrow says so
        return values
    if kind.tz is None:
        values = micros.astype("datetime64[us]").astype(object).tolist()
    else:
        values = _aware_utc(micros)
    if column.null_count:
        valid = column.is_valid().to_pylist()
        values = [v if ok else None for v, ok in zip(values, valid, strict=True)]
    return values


def _micros(column: pa.Array | pa.ChunkedArray, kind: pa.TimestampType) -> np.ndarray:
    """Microseconds since the epoch as int64 (0 for a null): the column's own buffer
    when it is in microseconds already."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    ints = (column if kind.unit == "us" else column.cast(pa.timestamp("us"))).view(pa.int64())
    if ints.null_count:
        ints = ints.fill_null(0)
    micros: np.ndarray = ints.to_numpy()
    return micros


# A datetime's pickled state: year (2 bytes), month, day, hour, minute, second, then
# the microsecond (3 bytes), big-endian: 8 bytes and 2.
_STATE = np.dtype([("high", ">u8"), ("low", ">u2")])


def _aware_utc(micros: np.ndarray) -> list[dt.datetime]:
    days, rest = np.divmod(micros, 86_400_000_000)
    year, month, day = _civil(days)
    hour, rest = np.divmod(rest, 3_600_000_000)
    minute, rest = np.divmod(rest, 60_000_000)
    second, micro = np.divmod(rest, 1_000_000)
    state = np.empty(len(micros), _STATE)
    state["high"] = ((year << 48) | (month << 40) | (day << 32) | (hour << 24)
                     | (minute << 16) | (second << 8) | (micro >> 16))
    state["low"] = micro & 0xFFFF
    make: Any = dt.datetime  # its pickle constructor: datetime(state bytes, tzinfo)
    # Each row's 10 bytes as one bytes object (void items are never stripped), in C.
    return list(map(make, state.view("V10").tolist(), repeat(dt.timezone.utc)))


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Year, month and day of days since 1970-01-01 (proleptic Gregorian): Howard
    Hinnant's ``civil_from_days``, in integer arithmetic on whole arrays (numpy's
    datetime64 conversions compute the calendar value by value, several times slower)."""
    z = days + 719_468  # days since 0000-03-01: leap days fall at the end of a year
    era = z // 146_097  # 400-year eras
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153  # months from March
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    return yoe + era * 400 + (month <= 2), month, day


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
