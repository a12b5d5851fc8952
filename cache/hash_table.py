"""An open-addressing hash table from 64-bit key hashes to slot numbers, probed and
filled a batch at a time with numpy.

Written here rather than taken from a library because nothing at hand fits: a pandas
index cannot grow (every append rebuilds it) and costs 34 bytes a key, a dict makes a
Python object per key, and Arrow's hash tables live only inside one kernel call. This
one costs 6 to 12 bytes a key (``int32`` buckets, at most 70% full) and answers a
batch of 10,000 probes in a few numpy passes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["HashTable"]

_EMPTY = -1
_MIN_CAPACITY = 16
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_GOLDEN_INT = 0x9E3779B97F4A7C15
_MASK64 = 2**64 - 1
_WINDOW = 8
_REBUILD_CHUNK = 1 << 16  # an insert's temporaries: a dozen words a key, a few MB


def _capacity_for(count: int) -> int:
    """The smallest power of two that holds ``count`` at a load of at most 0.7."""
    capacity = _MIN_CAPACITY
    while capacity * 7 < count * 10:
        capacity *= 2
    return capacity


class HashTable:
    """Buckets of slot numbers, found by linear probing from a hash's home bucket.

    The table keeps no hashes of its own: each call is given ``slot_hashes``, the hash
    of every slot, which the owner stores anyway. A slot, once entered, stays until
    `rebuild` (the owner marks dead slots itself and repoints a key's bucket to
    its new slot with `repoint`).
    """

    __slots__ = ("buckets", "count", "mask", "shift")

    def __init__(self, capacity: int = _MIN_CAPACITY) -> None:
        self._size(capacity)

    @classmethod
    def over(cls, buckets: np.ndarray, count: int) -> HashTable:
        """A table over existing ``buckets`` (``int32``, a power of two long: a mapped
        file's, say) holding ``count`` slots; nothing is copied."""
        table = cls.__new__(cls)
        table.buckets = buckets
        capacity = len(buckets)
        table.mask = np.uint64(capacity - 1)
        table.shift = np.uint64(64 - (capacity.bit_length() - 1))
        table.count = count
        return table

    def _size(self, capacity: int) -> None:
        self.buckets = np.full(capacity, _EMPTY, dtype=np.int32)
        self.mask = np.uint64(capacity - 1)
        self.shift = np.uint64(64 - (capacity.bit_length() - 1))
        self.count = 0

    def _home(self, hashes: np.ndarray) -> np.ndarray:
        """Each hash's first bucket: the top bits of hash times 2**64 / phi (Fibonacci
        hashing), which spreads consecutive integers (surrogate keys) evenly."""
        home: np.ndarray = ((hashes * _GOLDEN) >> self.shift).view(np.int64)
        return home

    @property
    def nbytes(self) -> int:
        """Bytes of the bucket array."""
        return int(self.buckets.nbytes)

    def find(self, hashes: np.ndarray, slot_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The slot holding each of ``hashes`` (-1: none) and its bucket (where the
        search ended: the empty bucket an insert would take, for a hash not found)."""
        buckets = self.buckets
        position = self._home(hashes)
        if not self.count:
            return np.full(len(hashes), _EMPTY, dtype=np.int64), position
        # One pass answers most probes (the table is at most half full); the ones that
        # met another key's bucket walk on, fewer at every step.
        occupant = buckets[position].astype(np.int64)
        match = (occupant >= 0) & (slot_hashes[occupant] == hashes)
        slots = np.where(match, occupant, _EMPTY)
        active = np.flatnonzero((occupant >= 0) & ~match)
        mask = np.int64(self.mask)
        step = np.arange(1, _WINDOW + 1, dtype=np.int64)
        while len(active):
            # The rest look at the next _WINDOW buckets at once (one pass, not one a step).
            window = (position[active, None] + step) & mask
            occupant = buckets[window].astype(np.int64)
            match = (occupant >= 0) & (slot_hashes[occupant] == hashes[active, None])
            stop = match | (occupant < 0)
            ended = stop.any(axis=1)
            first = stop.argmax(axis=1)
            rows = np.flatnonzero(ended)
            at = first[rows]
            found = match[rows, at]
            slots[active[rows[found]]] = occupant[rows[found], at[found]]
            position[active[rows]] = window[rows, at]
            position[active[~ended]] = window[~ended, -1]
            active = active[~ended]
        return slots, position

    def find_one(self, hash_value: int, slot_hashes: np.ndarray) -> int:
        """The slot holding ``hash_value`` (a Python int below 2**64), or -1: one key,
        without numpy's per-call cost."""
        if not self.count:
            return _EMPTY
        buckets = self.buckets
        mask = int(self.mask)
        position = ((hash_value * _GOLDEN_INT) & _MASK64) >> int(self.shift)
        while True:
            occupant = int(buckets[position])
            if occupant < 0:
                return _EMPTY
            if int(slot_hashes[occupant]) == hash_value:
                return occupant
            position = (position + 1) & mask

    def slots_of(self, hash_value: int, slot_hashes: np.ndarray) -> list[int]:
        """Every slot holding ``hash_value``, in probe order (several only when distinct
        keys share a hash: their owner tells them apart)."""
        found: list[int] = []
        if not self.count:
            return found
        buckets = self.buckets
        mask = int(self.mask)
        position = ((hash_value * _GOLDEN_INT) & _MASK64) >> int(self.shift)
        for _ in range(len(buckets)):
            occupant = int(buckets[position])
            if occupant < 0:
                break
            if int(slot_hashes[occupant]) == hash_value:
                found.append(occupant)
            position = (position + 1) & mask
        return found

    def insert(self, hashes: np.ndarray, slots: np.ndarray, slot_hashes: np.ndarray) -> None:
        """Enter ``slots`` under their ``hashes`` (distinct, and none in the table yet;
        ``slot_hashes`` already holds theirs)."""
        if not len(hashes):
            return
        if (self.count + len(hashes)) * 10 > len(self.buckets) * 7:
            self._grow(self.count + len(hashes), slot_hashes)
        buckets = self.buckets
        mask = np.int64(self.mask)
        position = self._home(hashes)
        pending = np.arange(len(hashes), dtype=np.int64)
        while len(pending):
            here = position[pending]
            free = buckets[here] == _EMPTY
            # Of several keys wanting one free bucket, the first takes it.
            candidates = np.flatnonzero(free)
            _, first = np.unique(here[candidates], return_index=True)
            winners = candidates[first]
            buckets[here[winners]] = slots[pending[winners]]
            placed = np.zeros(len(pending), dtype=bool)
            placed[winners] = True
            pending = pending[~placed]
            position[pending] = (position[pending] + 1) & mask
        self.count += len(hashes)

    def repoint(self, positions: np.ndarray, slots: np.ndarray) -> None:
        """Point the buckets at ``positions`` (found by `find`) to new ``slots``."""
        self.buckets[positions] = slots

    def rebuild(self, slot_hashes: np.ndarray, count: int | None = None) -> None:
        """Empty the table and enter slots ``0 .. len(slot_hashes) - 1`` (distinct
        hashes), sized for ``count`` slots (default: those)."""
        size = len(slot_hashes) if count is None else count
        self._size(_capacity_for(max(size, len(slot_hashes))))
        # A chunk at a time: the temporaries of an insert (a few int64 per key) stay
        # bounded however many keys a snapshot has.
        for start in range(0, len(slot_hashes), _REBUILD_CHUNK):
            stop = min(start + _REBUILD_CHUNK, len(slot_hashes))
            self.insert(slot_hashes[start:stop], np.arange(start, stop, dtype=np.int64),
                        slot_hashes)

    def _grow(self, count: int, slot_hashes: np.ndarray) -> None:
        occupied = self.buckets[self.buckets != _EMPTY]
        old_slots = occupied.astype(np.int64)
        self._size(_capacity_for(count))
        self.insert(slot_hashes[old_slots], old_slots, slot_hashes)
