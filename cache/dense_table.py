"""Slot numbers of integer keys that lie close together, found by subtraction.

A partial cache of surrogate keys (1, 2, 3, ...) holds keys that fill most of a range.
There a bucket per value of the range, at the key minus the range's start, finds a
key's slot in one memory access, where `cache.hash_table.HashTable` reads a bucket and
then the slot's hash (two cache misses a key once the cache outgrows the CPU's caches:
half of a probe of 10,000 keys in 100,000). The range must stay dense: at most
`SPREAD` buckets a key, 4 bytes each, about what the hash table costs a key. The
owner moves its keys to a hash table when they spread further (`suits`).

Keys are exact (`cache.key_hash.is_exact`): a key's hash is its 64 bits, so a bucket
holds only slots of its own key and no comparison is needed. Ranges are in the order
of those bits read as signed integers; offsets are computed modulo 2**64, so no key,
however large, overflows.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SPREAD", "DenseTable", "suits"]

SPREAD = 3
"""The most buckets a key: a range at most this many times the keys it holds."""
_MIN_RANGE = 4096  # a small cache may span this much, however few its keys
_EMPTY = -1
_MASK64 = 2**64 - 1
_SIGN = 2**63


def _signed(values: np.ndarray) -> np.ndarray:
    return values.view(np.int64)


def suits(low: int, high: int, count: int) -> bool:
    """Whether ``count`` keys spanning ``low..high`` (signed) are dense enough."""
    return high - low + 1 <= max(SPREAD * count, _MIN_RANGE)


class DenseTable:
    """Buckets of slot numbers, bucket ``i`` for the key ``base + i``; the same calls as
    `cache.hash_table.HashTable` (`find`, `find_one`, `slots_of`, `insert`, `repoint`,
    `rebuild`), which ignore ``slot_hashes``: a key is its own bucket."""

    __slots__ = ("base", "buckets", "count")

    def __init__(self) -> None:
        self.base = 0  # the signed key of bucket 0
        self.buckets = np.zeros(0, dtype=np.int32)
        self.count = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the bucket array."""
        return int(self.buckets.nbytes)

    @property
    def span(self) -> tuple[int, int]:
        """The signed keys of the first and last bucket (``(0, -1)`` when there are none)."""
        return self.base, self.base + len(self.buckets) - 1

    def _offsets(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        offsets = hashes - np.uint64(self.base & _MASK64)  # wraps: never overflows
        inside = offsets < np.uint64(len(self.buckets))
        return np.where(inside, offsets, 0).astype(np.int64), inside

    def find(self, hashes: np.ndarray, slot_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The slot holding each of ``hashes`` (-1: none) and its bucket (-1: out of range)."""
        if not self.count:
            return (np.full(len(hashes), _EMPTY, dtype=np.int64),
                    np.full(len(hashes), _EMPTY, dtype=np.int64))
        at, inside = self._offsets(hashes)
        slots = np.where(inside, self.buckets[at], _EMPTY).astype(np.int64)
        return slots, np.where(inside, at, _EMPTY)

    def find_one(self, hash_value: int, slot_hashes: np.ndarray) -> int:
        """The slot holding ``hash_value`` (a Python int below 2**64), or -1."""
        offset = (hash_value - self.base) & _MASK64
        if offset >= len(self.buckets):
            return _EMPTY
        return int(self.buckets[offset])

    def slots_of(self, hash_value: int, slot_hashes: np.ndarray) -> list[int]:
        """The slot holding ``hash_value``, as a list (empty: none)."""
        slot = self.find_one(hash_value, slot_hashes)
        return [slot] if slot >= 0 else []

    def insert(self, hashes: np.ndarray, slots: np.ndarray, slot_hashes: np.ndarray) -> None:
        """Enter ``slots`` under their ``hashes`` (distinct, none in the table yet),
        widening the range to hold them (with room to grow that way, while dense)."""
        if not len(hashes):
            return
        signed = _signed(hashes)
        low, high = int(signed.min()), int(signed.max())
        first, last = self.span
        if len(self.buckets):
            low, high = min(low, first), max(high, last)
        if low < first or high > last or not len(self.buckets):
            self._widen(low, high, self.count + len(hashes))
        at, _ = self._offsets(hashes)
        self.buckets[at] = slots
        self.count += len(hashes)

    def _widen(self, low: int, high: int, count: int) -> None:
        first, last = self.span
        # A quarter more on the side that grew, so keys that keep rising (new customers)
        # copy the buckets a logarithmic number of times, not once a batch.
        room = (high - low + 1) // 4
        grown_low = low - room if len(self.buckets) and low < first else low
        grown_high = high + room if not len(self.buckets) or high > last else high
        if not suits(grown_low, grown_high, count):
            grown_low, grown_high = low, high
        grown_low = max(grown_low, -_SIGN)
        grown_high = min(grown_high, _SIGN - 1)
        buckets = np.full(grown_high - grown_low + 1, _EMPTY, dtype=np.int32)
        if len(self.buckets):
            start = first - grown_low
            buckets[start:start + len(self.buckets)] = self.buckets
        self.base, self.buckets = grown_low, buckets

    def repoint(self, positions: np.ndarray, slots: np.ndarray) -> None:
        """Point the buckets at ``positions`` (found by `find`) to new ``slots``."""
        self.buckets[positions] = slots

    def rebuild(self, slot_hashes: np.ndarray, count: int | None = None) -> None:
        """Empty the table and enter slots ``0 .. len(slot_hashes) - 1`` (distinct)."""
        self.base, self.buckets, self.count = 0, np.zeros(0, dtype=np.int32), 0
        self.insert(slot_hashes, np.arange(len(slot_hashes), dtype=np.int64), slot_hashes)

    def entered(self) -> tuple[np.ndarray, np.ndarray]:
        """(hash, slot) of every key entered: what a hash table is filled from when
        the keys spread too far."""
        occupied = np.flatnonzero(self.buckets != _EMPTY)
        keys = (occupied + self.base).astype(np.int64).view(np.uint64)
        return keys, self.buckets[occupied].astype(np.int64)
