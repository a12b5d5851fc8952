"""The host tier's index: a memory-mapped open-addressing table of 16-byte slots, and
the table of runs the slots point into.

A slot is two 64-bit words: a 32-bit tag of the key's hash (`cache.key_hash`), the run
its rows are in, the row of the run they start at, their count, a 28-bit checksum, and
in each word the same 2-bit version. A run is rows of one block written at one time (a
put's, or what a merge or a compaction carried of one): its block (segment, offset),
its first row there and its write time (ms), with a checksum of its own. Runs are only
appended, so a slot's write time is its run's (its expiry follows from the tier's
lifetimes). The tag only filters: every row served is compared with the key asked, and
a missing key's slot points at a row holding only its key, compared and never served.

Readers take no lock and copy the slots they probe. A writer gives a slot a version
neither of its old words has, so a slot half written (a writer killed between its two
8-byte stores, or copied by a reader mid-write) holds two versions and reads as a miss;
a damaged slot or run fails its checksum and reads as a miss; an empty slot (both words
0) ends a probe. Writers hold the tier's lock.

A count of ``CLAIMED`` marks a key being loaded by the process whose pid the slot holds
in place of a run, since the time it holds in place of a row (single loads): others
wait for its rows rather than load it again. A count of ``ENDED`` answers nothing (a
claim given up). A count of ``CHANGED`` answers nothing either and holds, in its run
and row fields, when a change feed said the key changed (ms): a load that began before
then may not put the key (`cache.host.tier`).
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

__all__ = ["CHANGED", "CLAIMED", "ENDED", "ENTRY", "FILL", "MAX_COUNT", "MAX_RUNS", "RUN_ROWS",
           "SLOT_BYTES", "Slots", "change_fields", "changed_at", "claim_fresh", "claim_stamp"]

SLOT_BYTES = 16
ENTRY = np.dtype([("segment", "<i8"), ("offset", "<i8"), ("first", "<i8"),
                  ("count", "<i8"), ("written", "<i8"), ("run", "<i8"), ("row", "<i8")])
"""A slot as read: its rows' block and first row there, their count, when they were
written (ms since the epoch), and the slot's own run and row fields (a claim: its
owner's pid and `claim_stamp`)."""
_RUN = np.dtype([("ref", "<u8"), ("base", "<u8"), ("written", "<i8"), ("check", "<u8")])
CLAIMED = 0xFFFF
CHANGED = 0xFFFE
ENDED = 0xFFFD
"""The lowest count that is no count of rows: below it, a slot answers its key."""
MAX_COUNT = 0xFFFC
"""The most rows a slot can count (a key with more stays in-process)."""
RUN_ROWS = 1 << 24
"""A slot's row within its run is below this: longer runs are split."""
MAX_RUNS = 1 << 18
"""Runs a generation can hold (a sparse area after the slots): then it is rewritten."""
_RUN_BITS = 24
_MAGIC = b"SLHTIDX3"
_HEADER = 4096  # magic, capacity, generation, then the writer's counters
_SALT = np.uint64(0x5BD1E9955BD1E995)
_LOW32 = np.uint64(0xFFFFFFFF)
_LOW24 = np.uint64(0xFFFFFF)
_LOW16 = np.uint64(0xFFFF)
_VERSION = np.uint64(3)
# The checksum's 28 bits: 6 in the first word's bits 2-7, 22 in the second's bits 2-23.
_CHECK0 = np.uint64(0x3F << 2)
_CHECK1 = np.uint64(0x3FFFFF << 2)
_FIRST_WINDOW = 4  # 64 bytes, most keys' slot at 85% full: one round for most gets
_WINDOW = 8
_WIDEST = 64
_MAX_PROBE = 4096
FILL = 0.85
"""The share of slots filled before a generation is rewritten bigger."""
_MAX_LIVE_BLOCKS = 256  # in the header's 4096 bytes, after 64 of its own
_FLOOR_AT = 64 + 8 * _MAX_LIVE_BLOCKS  # then the floor and the latest change (ms)
_CLAIM_UNIT_MS = 16  # a claim's time, in a slot's 24-bit row field: wraps after 3 days


def _u64(value: int) -> np.uint64:
    return np.uint64(value)  # type: ignore[no-any-return]


def _checksums(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """The 28-bit checksum of slots' words, over every bit but the checksum's own."""
    mixed = spread(spread((w0 & ~_CHECK0) ^ _SALT) ^ (w1 & ~_CHECK1))
    checks: np.ndarray = mixed >> _u64(36)
    return checks


def _stored_checks(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    stored: np.ndarray = (((w0 & _CHECK0) >> _u64(2)) << _u64(22)) | (
        (w1 & _CHECK1) >> _u64(2))
    return stored


def _whole(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Slots written in full and undamaged: one version in both words, checksum right."""
    version = w0 & _VERSION
    whole: np.ndarray = ((version == (w1 & _VERSION)) & (version != 0)
                         & (_stored_checks(w0, w1) == _checksums(w0, w1)))
    return whole


def _next_versions(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """A version (1-3) unlike both old words' (so no mix of old and new words is whole)."""
    v0, v1 = w0 & _VERSION, w1 & _VERSION
    one = _u64(1)
    candidate = v0 % _VERSION + one
    chosen: np.ndarray = np.where(candidate == v1, candidate % _VERSION + one, candidate)
    return chosen


def _pack(fields: tuple[np.ndarray, ...], versions: np.ndarray) -> np.ndarray:
    """Slots' two words from their (tag, run, row, count), checksum and versions in
    place."""
    tags, runs, rows, counts = fields
    w0 = (tags.astype(np.uint64) << _u64(32)) | (
        (runs.astype(np.uint64) & _LOW24) << _u64(8)) | versions
    w1 = (rows.astype(np.uint64) << _u64(40)) | (
        (counts.astype(np.uint64) & _LOW16) << _u64(24)) | versions
    check = _checksums(w0, w1)
    w0 |= (check >> _u64(22)) << _u64(2)
    w1 |= (check & _u64(0x3FFFFF)) << _u64(2)
    return np.stack([w0, w1], axis=1)


def _run_checks(runs: np.ndarray) -> np.ndarray:
    """Each run's checksum over its fields; never 0 (0: no run written there)."""
    mixed = spread(runs["ref"] ^ _SALT)
    mixed = spread(mixed ^ runs["base"])
    checks: np.ndarray = spread(mixed ^ runs["written"].view(np.uint64)) | _u64(1)
    return checks


def _blocks_of(runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each run's block: its segment and its offset there."""
    ref = runs["ref"]
    return (ref >> _u64(48)).astype(np.int64), (ref & _u64((1 << 48) - 1)).astype(np.int64)


def claim_stamp(now_ms: int) -> int:
    """A claim's time as its slot holds it."""
    return (now_ms // _CLAIM_UNIT_MS) % RUN_ROWS


def change_fields(at_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A change's time (ms since the epoch) as its slot holds it: run and row fields."""
    at = np.asarray(at_ms, dtype=np.int64)
    return at >> _RUN_BITS, at & ((1 << _RUN_BITS) - 1)


def changed_at(entries: np.ndarray) -> np.ndarray:
    """When the changes of `CHANGED` slots (as read) were noted, in ms."""
    at: np.ndarray = (entries["run"] << _RUN_BITS) | entries["row"]
    return at


def claim_fresh(entries: np.ndarray, now_ms: int, hold_ms: int) -> np.ndarray:
    """Which claims (as read) were made less than ``hold_ms`` before ``now_ms``."""
    since = (claim_stamp(now_ms) - entries["row"]) % RUN_ROWS
    fresh: np.ndarray = since * _CLAIM_UNIT_MS < hold_ms
    return fresh


class Slots:
    """One generation's index file, mapped; ``create`` makes a new one."""

    def __init__(self, path: Path) -> None:
        with open(path, "r+b") as f:
            self._mm = mmap.mmap(f.fileno(), 0)
        if len(self._mm) < _HEADER or self._mm[:8] != _MAGIC:
            self._mm.close()
            raise ValueError(f"{path} is no host tier index")
        capacity, self.generation = struct.unpack_from("<QQ", self._mm, 8)
        if not 0 < capacity < 1 << 32 or len(self._mm) != _file_size(capacity):
            self._mm.close()
            raise ValueError(f"{path} has a damaged header")
        self.capacity = int(capacity)
        self.words = np.ndarray((self.capacity, 2), dtype=np.uint64, buffer=self._mm,
                                offset=_HEADER)
        self.runs = np.ndarray(MAX_RUNS, dtype=_RUN, buffer=self._mm,
                               offset=_HEADER + self.capacity * SLOT_BYTES)
        self._capacity = np.uint64(self.capacity)
        # Runs are only appended, and never changed once counted: each is copied out of
        # the file and checked once, and read from this copy after, so a get checks no
        # run again and bytes later rewritten in the file cannot change what it serves.
        self._runs_seen = np.zeros(0, dtype=_RUN)
        self._runs_whole = np.zeros(0, dtype=bool)

    @staticmethod
    def create(path: Path, capacity: int, floor: int = 0) -> None:
        """Write an empty index of ``capacity`` slots at ``path``, atomically (the caller
        holds the tier's lock), refusing loads begun at or before ``floor`` (ms). The
        runs' area is sparse: unwritten, it takes no room."""
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(_MAGIC + struct.pack("<QQ", capacity, secrets.randbits(63)))
            f.seek(_FLOOR_AT)
            f.write(struct.pack("<qq", floor, floor))
            f.truncate(_file_size(capacity))
        os.replace(tmp, path)

    @property
    def floor(self) -> int:
        """Loads begun at or before this time (ms) may put nothing here: the generation
        began after an "everything changed", or dropped older changes' slots."""
        return int(struct.unpack_from("<q", self._mm, _FLOOR_AT)[0])

    @property
    def latest_change(self) -> int:
        """The latest time (ms) a `CHANGED` slot written here holds (or the floor)."""
        return int(struct.unpack_from("<q", self._mm, _FLOOR_AT + 8)[0])

    @latest_change.setter
    def latest_change(self, value: int) -> None:
        struct.pack_into("<q", self._mm, _FLOOR_AT + 8, max(value, self.latest_change))

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
    def runs_used(self) -> int:
        """Runs the writer appended (its counter in the header)."""
        return min(int(struct.unpack_from("<Q", self._mm, 40)[0]), MAX_RUNS)

    @property
    def nbytes(self) -> int:
        """Bytes of the file in use: the slots and the runs written."""
        return _HEADER + self.capacity * SLOT_BYTES + self.runs_used * _RUN.itemsize

    @property
    def live_blocks(self) -> tuple[int, list[int]]:
        """The writer's record of the segment it appends to and the offsets of its
        blocks no merge has replaced, oldest first (at most ``_MAX_LIVE_BLOCKS``)."""
        segment, count = struct.unpack_from("<QQ", self._mm, 48)
        count = min(int(count), _MAX_LIVE_BLOCKS)
        return int(segment), list(struct.unpack_from(f"<{count}Q", self._mm, 64))

    @live_blocks.setter
    def live_blocks(self, value: tuple[int, list[int]]) -> None:
        segment, offsets = value
        offsets = offsets[-_MAX_LIVE_BLOCKS:]
        struct.pack_into(f"<QQ{len(offsets)}Q", self._mm, 48, segment, len(offsets), *offsets)

    def _count_used(self, n: int) -> None:
        struct.pack_into("<Q", self._mm, 24, self.used + n)

    def _wrap(self, positions: np.ndarray) -> np.ndarray:
        """Positions past the end, from the start (never more than a table further)."""
        wrapped: np.ndarray = np.where(positions >= self.capacity, positions - self.capacity,
                                       positions)
        return wrapped

    def _placed(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keys' tags and home slots, from independent halves of their mixed hash."""
        mixed = spread(hashes)
        home: np.ndarray = (((mixed >> _u64(32)) * self._capacity) >> _u64(32)).view(np.int64)
        return mixed & _LOW32, home

    # --- runs

    def add_runs(self, segment: int, offset: int, bases: np.ndarray,
                 written: np.ndarray) -> np.ndarray | None:
        """Append runs of block (``segment``, ``offset``) starting at rows ``bases``:
        their numbers, or None when the table is full (the caller compacts)."""
        start = self.runs_used
        if start + len(bases) > MAX_RUNS:
            return None
        added = np.zeros(len(bases), dtype=_RUN)
        added["ref"] = np.uint64((segment << 48) | offset)
        added["base"] = bases.astype(np.uint64)
        added["written"] = written
        added["check"] = _run_checks(added)
        self.runs[start: start + len(bases)] = added
        # Counted only once written: a slot never points at a run not yet whole.
        struct.pack_into("<Q", self._mm, 40, start + len(bases))
        return np.arange(start, start + len(bases), dtype=np.int64)

    def whole_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                  np.ndarray]:
        """Of every run appended and undamaged: its number, segment, block offset,
        first row and write time (for merges: which runs a merged block held)."""
        seen, whole = self._runs_checked()
        ok = np.flatnonzero(whole)
        runs = seen[ok]
        segment, offset = _blocks_of(runs)
        return ok, segment, offset, runs["base"].astype(np.int64), runs["written"]

    def _entries(self, words: np.ndarray) -> np.ndarray:
        """Slots' words read as entries: a row-holding slot whose run is damaged or
        was never written answers nothing (``ENDED``)."""
        w0, w1 = words[:, 0], words[:, 1]
        entries = np.zeros(len(words), dtype=ENTRY)
        count = ((w1 >> _u64(24)) & _LOW16).astype(np.int64)
        run = ((w0 >> _u64(8)) & _LOW24).astype(np.int64)
        entries["run"] = run
        entries["row"] = (w1 >> _u64(40)).astype(np.int64)
        rows = count < ENDED
        seen, whole = self._runs_checked()
        at = np.where(rows & (run < len(seen)), run, 0)
        runs = seen[at] if len(seen) else np.zeros(len(run), dtype=_RUN)
        ok = rows & (run < len(seen)) & (whole[at] if len(seen) else False)
        count[rows & ~ok] = ENDED
        entries["count"] = count
        segment, offset = _blocks_of(runs)
        entries["segment"] = np.where(ok, segment, 0)
        entries["offset"] = np.where(ok, offset, 0)
        entries["first"] = np.where(ok, runs["base"].astype(np.int64) + entries["row"], 0)
        entries["written"] = np.where(ok, runs["written"], 0)
        return entries

    def _runs_checked(self) -> tuple[np.ndarray, np.ndarray]:
        """Every run counted so far, as copied and checked (see ``__init__``)."""
        used = min(self.runs_used, MAX_RUNS)
        if used > len(self._runs_seen):
            added = self.runs[len(self._runs_seen): used].copy()
            self._runs_seen = np.concatenate((self._runs_seen, added))
            self._runs_whole = np.concatenate((self._runs_whole,
                                               added["check"] == _run_checks(added)))
        return self._runs_seen, self._runs_whole

    # --- slots

    def find(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per hash: the position of its slot (-1: none) and its `ENTRY` as it was
        checked (what was checked is what is used: a later write cannot change it)."""
        found, words, _ = self._probe(*self._placed(hashes))
        return found, self._entries(words)

    def _probe(self, tags: np.ndarray, position: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per tag: the position of its whole slot (-1: none), that slot's words, and
        where its probe stopped: the empty slot a new key of the tag goes to (-1: the
        probe's limit, or found)."""
        n = len(tags)
        found = np.full(n, -1, dtype=np.int64)
        empty_at = np.full(n, -1, dtype=np.int64)
        words = np.zeros((n, 2), dtype=np.uint64)
        position = position.copy()
        active = np.arange(n, dtype=np.int64)
        width, walked = _FIRST_WINDOW, 0
        while len(active) and walked < _MAX_PROBE:
            window = self._wrap(position[active, None] + np.arange(width))
            seen = self.words[window]
            w0, w1 = seen[..., 0], seen[..., 1]
            match = (w0 >> _u64(32)) == tags[active, None]
            candidates = np.nonzero(match)  # checked only where the tag matches: few
            match[candidates] = _whole(w0[candidates], w1[candidates])
            stop = match | ((w0 == 0) & (w1 == 0))
            ended = stop.any(axis=1)
            first = stop.argmax(axis=1)
            rows = np.flatnonzero(ended)
            at = first[rows]
            hit = match[rows, at]
            who = active[rows[hit]]
            found[who] = window[rows[hit], at[hit]]
            words[who] = seen[rows[hit], at[hit]]
            empty_at[active[rows[~hit]]] = window[rows[~hit], at[~hit]]
            position[active] = self._wrap(position[active] + width)
            active = active[~ended]
            walked += width
            # Wider windows further out: a long cluster takes few rounds (numpy calls).
            width = min(4 * width, _WIDEST)
        return found, words, empty_at

    def write(self, hashes: np.ndarray, runs: np.ndarray, rows: np.ndarray,
              counts: np.ndarray) -> bool:
        """Write slots of distinct keys over their keys' slots or into free ones; False
        when the table is too full to place them all (the caller compacts)."""
        if not len(hashes):
            return True
        tags, home = self._placed(hashes)
        fields = (tags, runs, rows, counts)
        if not self.used:  # an empty table (a compaction's): placed at once
            pending = np.arange(len(hashes))
            if len(pending) > self.capacity * FILL:
                return False
            found = np.full(len(hashes), -1)
            left = self._place_first(pending, home, fields)
            start = home[left]
        else:
            # A probe that finds no slot of the key ends at the empty slot it goes to.
            found, _, start = self._probe(tags, home)
            pending = left = np.flatnonzero(found < 0)
            if self.used + len(pending) > self.capacity * FILL or (start[left] < 0).any():
                return False
            start = start[left]
        if not self._place(left, start, fields):
            return False
        self._count_used(len(pending))
        replace = np.flatnonzero(found >= 0)
        self._store(found[replace], tuple(f[replace] for f in fields))
        return True

    def _place_first(self, pending: np.ndarray, home: np.ndarray,
                     fields: tuple[np.ndarray, ...]) -> np.ndarray:
        """Fill an empty table at once (a compaction's): keys in the order of their
        homes, each in its home or the slot after the previous key's. Returns the keys
        that would run past the end (placed by `_place`, from the table's start)."""
        order = np.argsort(home, kind="stable")
        rank = np.arange(len(order))
        position = np.maximum.accumulate(home[order] - rank) + rank
        fits = position < self.capacity
        chosen = pending[order[fits]]
        self._store(position[fits], tuple(f[chosen] for f in fields))
        left: np.ndarray = pending[order[~fits]]
        return left

    def _place(self, pending: np.ndarray, position: np.ndarray,
               fields: tuple[np.ndarray, ...]) -> bool:
        """Put new keys' slots in the first empty slot from their homes,
        a window at a time; keys that chose the same slot: the first takes it, the
        others go on from it."""
        walked, width = 0, _WINDOW
        while len(pending) and walked < _MAX_PROBE:
            window = self._wrap(position[:, None] + np.arange(width))
            seen = self.words[window]
            # Only empty slots: a torn one stays (a reader's probe goes past it).
            free = (seen[..., 0] == 0) & (seen[..., 1] == 0)
            some = free.any(axis=1)
            chosen = window[np.arange(len(pending)), free.argmax(axis=1)]
            candidates = np.flatnonzero(some)
            _, first = np.unique(chosen[candidates], return_index=True)
            winners = candidates[first]
            # Placed now, so the next round sees these slots taken.
            self._store(chosen[winners], tuple(f[pending[winners]] for f in fields))
            placed = np.zeros(len(pending), dtype=bool)
            placed[winners] = True
            position = np.where(some, chosen, self._wrap(position + width))
            pending, position = pending[~placed], position[~placed]
            walked += width
            width = min(2 * width, _WIDEST)
        return not len(pending)

    def _store(self, positions: np.ndarray, fields: tuple[np.ndarray, ...]) -> None:
        old = self.words[positions]
        versions = _next_versions(old[:, 0], old[:, 1])
        self.words[positions] = _pack(fields, versions)

    def whole(self) -> tuple[np.ndarray, np.ndarray]:
        """The positions and entries of the slots that are whole and answer a key."""
        words = self.words.copy()
        positions = np.flatnonzero(_whole(words[:, 0], words[:, 1]))
        entries = self._entries(words[positions])
        keep = entries["count"] < ENDED
        return positions[keep], entries[keep]

    def close(self) -> None:
        del self.words
        del self.runs
        with contextlib.suppress(BufferError):  # a view still refers to it: the GC closes it
            self._mm.close()


def _file_size(capacity: int) -> int:
    return _HEADER + capacity * SLOT_BYTES + MAX_RUNS * _RUN.itemsize
