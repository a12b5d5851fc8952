"""Estimates of the memory held by cached rows (for ``num_cached_bytes``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

_getsizeof = sys.getsizeof
_SHARED = (type(None), bool)


def estimate_entry_bytes(key: tuple[Any, ...], rows: Sequence[tuple[Any, ...]]) -> int:
    """Approximate bytes of one cache entry: key, rows, and their scalar values.

    Counts each object once per reference (interned small ints and shared strings are
    over-counted), which is close enough for capacity planning and far cheaper than a
    full object-graph walk.
    """
    total = _getsizeof(key) + _getsizeof(rows)
    for value in key:
        if type(value) not in _SHARED:
            total += _getsizeof(value)
    for row in rows:
        total += _getsizeof(row)
        for value in row:
            if type(value) not in _SHARED:
                total += _getsizeof(value)
    return total
