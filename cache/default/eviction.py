"""Which entries of the default cache go: the expired, then the least recently used.

The cache calls `Eviction` around each batch: expired
entries go before a put, and after it the cache is brought back within ``maximum_size``
keys (or rows, with `Eviction.count_rows`: a cache of versions) and ``maximum_bytes``
bytes.
"""

from __future__ import annotations

import math

import numpy as np

from cache.default.entries import NEVER, Entries

__all__ = ["Eviction"]

# When full, evict this fraction of the bound beyond what must go, so that the next
# eviction (one argpartition over the live entries) is that many insertions away.
_SLACK = 64


class Eviction:
    """The bounds of one cache's entries on keys and bytes (None: unbounded).

    With ``count_rows``, ``maximum_size`` bounds the rows held (`Entries.live_rows`: a
    missing key counts as one) rather than the keys: a cache of a key's versions."""

    __slots__ = ("count_rows", "maximum_bytes", "maximum_size")

    def __init__(self, maximum_size: int | None, maximum_bytes: int | None) -> None:
        self.maximum_size = maximum_size
        self.maximum_bytes = maximum_bytes
        self.count_rows = False

    def expire(self, entries: Entries, now: float) -> None:
        """Kill every expired entry, if any can have expired by ``now``."""
        if entries.deadline is None or now < entries.next_deadline or not entries.count:
            return
        touched = entries.touched[: entries.count]
        deadline = entries.deadline[: entries.count]
        live = touched > 0
        entries.kill(np.flatnonzero(live & (deadline <= now)))
        remaining = deadline[touched > 0]
        entries.next_deadline = float(remaining.min()) if len(remaining) else NEVER
        self.compact(entries)

    def compact(self, entries: Entries) -> None:
        """Compact once dead entries outnumber the live ones."""
        if entries.compact_when_dead():
            self.evict(entries)  # the copy, like a merge, may hold more bytes than its parts

    def evict(self, entries: Entries) -> None:
        """Bring the entries within the bounds, least recently used first."""
        bound = self.maximum_size
        if bound is not None:
            if self.count_rows:
                if entries.live_rows > bound:
                    _evict_oldest_rows(entries, entries.live_rows - bound + bound // _SLACK)
            elif entries.live > bound:
                _evict_oldest(entries, entries.live - bound + bound // _SLACK)
        limit = self.maximum_bytes
        if limit is None:
            return
        held = entries.nbytes()
        while held > limit and entries.live:
            entries.compact()
            held = entries.nbytes()
            if held <= limit:
                break
            per_entry = held / entries.live
            excess = held - limit + limit // _SLACK
            _evict_oldest(entries, max(1, math.ceil(excess / per_entry)))
            entries.compact()
            held = entries.nbytes()


def _by_recency(entries: Entries) -> tuple[np.ndarray, np.ndarray]:
    """The live slots, and a key ordering them least recent batch first (within a
    batch, the earlier slot)."""
    live = np.flatnonzero(entries.touched[: entries.count] > 0)
    order = (entries.touched[live].astype(np.uint64) << np.uint64(32)) | live.astype(np.uint64)
    return live, order


def _evict_oldest(entries: Entries, count: int) -> None:
    live, order = _by_recency(entries)
    if count >= len(live):
        entries.kill(live)
        return
    entries.kill(live[np.argpartition(order, count - 1)[:count]])


def _evict_oldest_rows(entries: Entries, rows: int) -> None:
    """Kill whole entries, least recently used first, until at least ``rows`` rows
    (a missing key counting as one) are gone."""
    live, order = _by_recency(entries)
    oldest = live[np.argsort(order)]
    starts = entries.starts
    held = np.cumsum(np.maximum(starts[oldest + 1] - starts[oldest], 1))
    entries.kill(oldest[: int(np.searchsorted(held, rows)) + 1])
