"""The host tier's index: a memory-mapped open-addressing table of fixed-size slots.

A slot holds a key's 64-bit hash (`cache.key_hash`), where its rows are (segment,
block, first row, count), when it was written (its expiry follows from the tier's
lifetimes), and a checksum of all of these. Readers take no lock and copy the slots
they probe: a slot whose checksum does not match is torn (a writer killed mid-write,
a damaged file) and reads as a miss; an empty slot ends a probe. Writers hold the tier's lock.

A count of ``CLAIMED`` marks a key being loaded since ``written`` by the process whose
pid is in ``ref`` (single loads): others wait for its rows rather than load it again.
A count of ``ENDED`` is a slot that answers nothing (a claim given up).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import struct
from pathlib import Path

import numpy as np

from cache.key_hash import spread

__all__ = ["CLAIMED", "ENDED", "FILL", "SLOT", "Slots", "slot_checks"]

SLOT = np.dtype([("hash", "<u8"), ("ref", "<u8"), ("meta", "<u8"), ("written", "<i8"),
                 ("check", "<u8")])
"""``ref``: segment << 48 | block offset (a claim: its owner's pid); ``meta``: first row
<< 32 | count; ``written``: milliseconds since the epoch."""
CLAIMED = 0xFFFFFFFF
ENDED = 0xFFFFFFFE
_MAGIC = b"SLHTIDX1"
_HEADER = 4096  # magic, capacity, generation, then the writer's counters
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SALT = np.uint64(0x5BD1E9955BD1E995)
_WINDOW = 8
_MAX_PROBE = 512
FILL = 0.75
"""The share of slots filled before a generation grows."""
_MAX_LIVE_BLOCKS = 256  # in the header's 4096 bytes, after 56 of its own


def slot_checks(records: np.ndarray) -> np.ndarray:
    """Each slot's checksum over all its fields; never 0 (0 marks an empty slot)."""
    mixed = spread(records["hash"] ^ _SALT)
    for name in ("ref", "meta", "written"):
        mixed = spread(mixed ^ records[name].view(np.uint64))
    checks: np.ndarray = mixed | np.uint64(1)
    return checks


class Slots:
    """One generation's index file, mapped; ``create`` makes a new one."""

    def __init__(self, path: Path) -> None:
        with open(path, "r+b") as f:
            self._mm = mmap.mmap(f.fileno(), 0)
        if len(self._mm) < _HEADER or self._mm[:8] != _MAGIC:
            self._mm.close()
            raise ValueError(f"{path} is no host tier index")
        capacity, self.generation = struct.unpack_from("<QQ", self._mm, 8)
        if capacity & (capacity - 1) or len(self._mm) != _HEADER + capacity * SLOT.itemsize:
            self._mm.close()
            raise ValueError(f"{path} has a damaged header")
        self.capacity = int(capacity)
        self.slots = np.ndarray(self.capacity, dtype=SLOT, buffer=self._mm, offset=_HEADER)
        self._mask = np.int64(self.capacity - 1)
        self._shift = np.uint64(64 - (self.capacity.bit_length() - 1))

    @staticmethod
    def create(path: Path, capacity: int) -> None:
        """Write an empty index of ``capacity`` slots (a power of two) at ``path``,
        atomically (the caller holds the tier's lock)."""
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(_MAGIC + struct.pack("<QQ", capacity, secrets.randbits(63)))
            f.truncate(_HEADER + capacity * SLOT.itemsize)
        os.replace(tmp, path)

    @property
    def used(self) -> int:
        """Slots the writer filled (its counter in the header)."""
        return int(struct.unpack_from("<Q", self._mm, 24)[0])

    @property
    def base_bytes(self) -> int:
        """Bytes of rows the generation started with (set by the compaction making it)."""
        return int(struct.unpack_from("<Q", self._mm, 32)[0])

    @base_bytes.setter
    def base_bytes(self, value: int) -> None:
        struct.pack_into("<Q", self._mm, 32, value)

    @property
    def live_blocks(self) -> tuple[int, list[int]]:
        """The writer's record of the segment it appends to and the offsets of its
        blocks no merge has replaced, oldest first (at most ``_MAX_LIVE_BLOCKS``)."""
        segment, count = struct.unpack_from("<QQ", self._mm, 40)
        count = min(int(count), _MAX_LIVE_BLOCKS)
        return int(segment), list(struct.unpack_from(f"<{count}Q", self._mm, 56))

    @live_blocks.setter
    def live_blocks(self, value: tuple[int, list[int]]) -> None:
        segment, offsets = value
        offsets = offsets[-_MAX_LIVE_BLOCKS:]
        struct.pack_into(f"<QQ{len(offsets)}Q", self._mm, 40, segment, len(offsets), *offsets)

    def _count_used(self, n: int) -> None:
        struct.pack_into("<Q", self._mm, 24, self.used + n)

    def _home(self, hashes: np.ndarray) -> np.ndarray:
        home: np.ndarray = ((hashes * _GOLDEN) >> self._shift).view(np.int64)
        return home

    def find(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per hash: the position of its slot (-1: none) and a copy of the slot as it
        was checked (what was checked is what is used: a later write cannot change it)."""
        n = len(hashes)
        found = np.full(n, -1, dtype=np.int64)
        records = np.zeros(n, dtype=SLOT)
        position = self._home(hashes)
        active = np.arange(n, dtype=np.int64)
        width, walked = 1, 0
        while len(active) and walked < _MAX_PROBE:
            window = (position[active, None] + np.arange(width)) & self._mask
            seen = self.slots[window]
            check = seen["check"]
            valid = check == slot_checks(seen)
            match = valid & (seen["hash"] == hashes[active, None])
            stop = match | (check == 0)
            ended = stop.any(axis=1)
            first = stop.argmax(axis=1)
            rows = np.flatnonzero(ended)
            at = first[rows]
            hit = match[rows, at]
            who = active[rows[hit]]
            found[who] = window[rows[hit], at[hit]]
            records[who] = seen[rows[hit], at[hit]]
            position[active] += width
            active = active[~ended]
            walked += width
            width = _WINDOW
        return found, records

    def write(self, records: np.ndarray) -> bool:
        """Write ``records`` (checksums are computed here) over their keys' slots or
        into free ones; False when the table is too full to place them all (the
        caller compacts)."""
        records = records.copy()
        records["check"] = slot_checks(records)
        found, _ = self.find(records["hash"])
        target = found.copy()
        pending = np.flatnonzero(found < 0)
        if self.used + len(pending) > self.capacity * FILL:
            return False
        position = self._home(records["hash"][pending])
        walked = 0
        while len(pending) and walked < _MAX_PROBE:
            seen = self.slots[position]
            check = seen["check"]
            free = (check == 0) | (check != slot_checks(seen))
            candidates = np.flatnonzero(free)
            _, first = np.unique(position[candidates], return_index=True)
            winners = candidates[first]
            target[pending[winners]] = position[winners]
            # Placed now, so the next round sees these slots taken.
            self.slots[position[winners]] = records[pending[winners]]
            placed = np.zeros(len(pending), dtype=bool)
            placed[winners] = True
            pending, position = pending[~placed], (position[~placed] + 1) & self._mask
            walked += 1
        if len(pending):
            return False
        self._count_used(int((found < 0).sum()))
        replace = np.flatnonzero(found >= 0)
        self.slots[target[replace]] = records[replace]
        return True

    def whole(self) -> np.ndarray:
        """Copies of the slots that are whole and answer a key (rows or none)."""
        records = self.slots.copy()
        count = records["meta"] & np.uint64(0xFFFFFFFF)
        keep = ((records["check"] != 0) & (records["check"] == slot_checks(records))
                & (count != CLAIMED) & (count != ENDED))
        kept: np.ndarray = records[keep]
        return kept

    def close(self) -> None:
        del self.slots
        with contextlib.suppress(BufferError):  # a view still refers to it: the GC closes it
            self._mm.close()
