"""Dense integer keys: a key's group found by arithmetic, not by hashing.

Dimension tables are very often keyed by surrogate integers that fill a range (an
identity column, a sequence), and a full snapshot holds its distinct keys sorted. When
they fill the range exactly, the ``i``-th key is ``lowest + i`` and a probe is one
subtraction; when they fill at least half of it, one ``int32`` array over the range
maps ``key - lowest`` to the group (4 to 8 bytes a key, against 20 for the hash table).
Either answers a batch with no hash, one random read at most, and exactly: the key's
own value is the position. Spark's broadcast join has the same "dense" mode for long
keys.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["DenseKeys", "dense_rows"]

_MAX_SPREAD = 2
"""The range may be at most this many times the number of keys (else: hash them)."""


def _integers(array: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """The values of an integer-like array as int64, and which of them are usable
    (None: all): nulls, and unsigned values past 2**63, are not (their int64 is 0)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    usable = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None
    if array.null_count:
        array = array.fill_null(0)
    if not pa.types.is_integer(array.type):
        # Dates, times and timestamps are their integers (casts between them refuse).
        array = array.view(pa.int32() if array.type.bit_width == 32 else pa.int64())
    values = array.to_numpy(zero_copy_only=False)
    if values.dtype == np.uint64:
        small = values < np.uint64(2**63)
        if not small.all():
            usable = small if usable is None else usable & small
            values = np.where(small, values, np.uint64(0))
    return values.astype(np.int64, copy=False), usable


class DenseKeys:
    """Group numbers of distinct, sorted integer-like keys that fill most of their range.

    Build with `of`, which returns None when the keys are too sparse for it.
    """

    __slots__ = ("lowest", "positions", "span")

    def __init__(self, lowest: int, span: int, positions: np.ndarray | None) -> None:
        self.lowest = lowest
        self.span = span
        # None: the keys fill the range, key lowest + i is group i.
        self.positions = positions

    @classmethod
    def of(cls, sorted_keys: pa.Array) -> DenseKeys | None:
        """An index of ``sorted_keys`` (distinct, ascending, no null), or None when they
        spread over more than twice their number of values (or do not fit int64)."""
        count = len(sorted_keys)
        if not count:
            return None
        values, usable = _integers(sorted_keys)
        if usable is not None:  # past int64 (or a null): hash them
            return None
        lowest, highest = int(values[0]), int(values[-1])
        span = highest - lowest + 1
        if span == count:
            return cls(lowest, span, None)
        if span > _MAX_SPREAD * count or span >= 2**31:
            return None
        positions = np.full(span, -1, dtype=np.int32)
        positions[values - lowest] = np.arange(count, dtype=np.int32)
        return cls(lowest, span, positions)

    @property
    def nbytes(self) -> int:
        """Bytes of the position array (none when the keys fill their range)."""
        return 0 if self.positions is None else int(self.positions.nbytes)

    def groups(self, keys: pa.Array) -> np.ndarray:
        """The group of each key of ``keys`` (the snapshot's key type), -1 for a key
        not held or null."""
        values, usable = _integers(keys)
        # Unsigned comparison: a key below ``lowest`` wraps past ``span``.
        offset = (values - self.lowest).view(np.uint64)
        inside = offset < np.uint64(self.span)
        if usable is not None:
            inside &= usable
        at = np.where(inside, offset, 0).view(np.int64)
        if self.positions is None:
            return np.where(inside, at, -1)
        return np.where(inside, self.positions[at], -1).astype(np.int64, copy=False)


_CHUNK = 1 << 20


def dense_rows(keys: pa.Array) -> tuple[DenseKeys | None, bool | None]:
    """An index of ``keys`` in any order (no null) whose group of row ``i`` is ``i``,
    and whether every key is distinct: ``(None, None)`` when they are too sparse for
    one (or past int64: hash them), ``(None, False)`` when a key repeats."""
    count = len(keys)
    values, usable = _integers(keys)
    if not count or usable is not None:
        return None, None
    lowest, highest = int(values.min()), int(values.max())
    span = highest - lowest + 1
    if span > _MAX_SPREAD * count or span >= 2**31:
        return None, None
    if span < count:
        return None, False  # more keys than values between the lowest and the highest
    positions = np.full(span, -1, dtype=np.int32)
    for start in range(0, count, _CHUNK):  # bounded temporaries
        stop = min(start + _CHUNK, count)
        at = values[start:stop] - lowest
        rows = np.arange(start, stop, dtype=np.int32)
        if (positions[at] >= 0).any():
            return None, False
        positions[at] = rows
        if not np.array_equal(positions[at], rows):  # a key repeated within the chunk
            return None, False
    if span == count and np.array_equal(positions, np.arange(span, dtype=np.int32)):
        return DenseKeys(lowest, span, None), True  # sorted, and filling the range
    return DenseKeys(lowest, span, positions), True
