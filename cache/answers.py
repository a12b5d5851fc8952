"""The Arrow answer to a batch of distinct keys: what a cache's ``get_arrow``, a lookup
runtime's ``probe`` and a full snapshot give, and what a join assembles its output from."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from cache.string_views import StringViews

__all__ = ["Answers"]


@dataclass(frozen=True)
class Answers:
    """The answer to ``n`` distinct keys, as Arrow: key ``i``'s rows are
    ``rows[offsets[groups[i]] : offsets[groups[i] + 1]]``; ``groups[i]`` is -1 when it
    has none. ``hit, groups, offsets, rows = answers`` unpacks the first four."""

    hit: np.ndarray | None
    """``bool[n]``: which keys a cache answered (an empty answer included); None where
    every key is answered (a runtime's probe, a full snapshot)."""
    groups: np.ndarray
    """``int64[n]``: each key's group of rows; -1 for none (a miss, or an empty answer)."""
    offsets: np.ndarray
    """``int64``: where each group's rows start in ``rows``, and the last one ends."""
    rows: pa.Table
    """Rows of the dimension schema; may hold rows of other keys too."""
    one_row_each: bool = False
    """Every group has one row and group ``g``'s row is ``rows[g]``: a join takes
    ``groups`` as row numbers (``offsets`` is then ``0, 1, ..., len(rows)``, or empty
    when the answer comes from a full snapshot, which keeps none)."""
    views: StringViews | None = None
    """Faster gathers of ``rows``' short-string columns (a full snapshot's), if any."""
    key_rows: np.ndarray | None = None
    """``int64[n]``, where no key has more than one row: key ``i``'s row in ``rows`` (-1:
    none), so a join need not expand ``groups`` (the default cache's, when it knows)."""

    def first_rows(self) -> np.ndarray:
        """Each key's first row in ``rows`` (-1: none), whichever form the answer has."""
        if self.one_row_each:
            return self.groups
        return np.where(self.groups >= 0, self.offsets[np.maximum(self.groups, 0)], -1)

    def __iter__(self) -> Iterator[Any]:
        # A custom cache's get_arrow was written against a four-field tuple: keep
        # unpacking it working.
        return iter((self.hit, self.groups, self.offsets, self.rows))
