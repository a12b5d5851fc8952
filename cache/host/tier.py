"""`HostTier`: the partial cache the Python workers of a host share, behind each
worker's in-process cache.

One directory per provider (its ``provider_id``, so two applications never share one):

- ``lock``: writers hold its ``flock`` (the kernel frees a killed writer's);
- ``users``: every process using the tier holds a shared ``flock`` on it, so a sweep
  deletes only directories nobody uses;
- ``CURRENT``: the name of the generation served, replaced atomically;
- ``gen-<n>/index`` (`cache.host.slots`) and ``gen-<n>/seg-*`` (`cache.host.segments`).

A generation grows only by appending; a writer that finds it too full, or over
``maximum_size``, writes the next one with the live entries (the most recently written
first) and points ``CURRENT`` at it. Readers take no lock: they look at ``CURRENT``'s
identity once per call, and everything they read is checked (slot versions and
checksums, run checksums, block CRCs, every row's key against the key asked, a missing
key's against the key-only row its slot points at), so a torn, damaged or foreign entry
is a miss, never a row of another key.

A tier that ``tracks_changes`` (a provider with a change feed) never keeps a row read
before a change of its key that a worker was told of: each worker notes the keys its
feed names (`changed`: a ``CHANGED`` slot holding when), and a put of a load that began
at or before a key's noted change, or before a newer load's rows of that key, leaves
that key out. An "everything changed" starts an empty generation whose floor refuses
every load begun before it (`flush`); a compaction, which drops the notes, raises the
floor to the latest of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cache.host.segments import Segments
from cache.host.slots import (
    CHANGED,
    CLAIMED,
    ENDED,
    ENTRY,
    MAX_COUNT,
    MAX_RUNS,
    RUN_ROWS,
    Slots,
    change_fields,
    changed_at,
    claim_fresh,
    claim_stamp,
)
from cache.key_hash import hash_keys
from spark_lookup.host_dirs import sweep_directories, sweep_once, trash_path, try_flock

__all__ = ["HostAnswers", "HostTier", "sweep"]

log = logging.getLogger("cache")

_NEVER = np.iinfo(np.int64).max
_FIRST_CAPACITY = 1 << 14
_USERS = "host-tier-users"  # named for this module: a sweep deletes only what holds it
_TRASH_PREFIX = ".trash-host-tier-"
_MAX_BLOCKS = 16
_MIN_REWRITE_BYTES = 8 << 20
_FRESH_FILL = 0.6  # a new generation's share of slots filled: room to grow to FILL


class HostAnswers(NamedTuple):
    """The tier's answer to ``n`` distinct keys: which it holds (an empty answer
    included), how long ago each was written (seconds), and the rows, key after key
    (``counts[i]`` rows of key ``i``)."""

    hit: np.ndarray
    age: np.ndarray
    counts: np.ndarray
    rows: pa.Table
    claimed: np.ndarray
    """Keys another live process is loading now (single loads: wait for them)."""


class HostTier:
    """A partial cache in ``directory`` shared by a host's processes (see the module).

    ``write_ttl`` / ``missing_ttl``: seconds a row / a missing key stays (None: until
    size eviction); ``cache_missing_key``: whether missing keys are kept at all;
    ``tracks_changes``: puts are checked against changes noted (see the module).
    """

    def __init__(self, directory: Path, schema: pa.Schema, key_columns: list[str], *,
                 maximum_size: int | None, write_ttl: float | None,
                 missing_ttl: float | None, cache_missing_key: bool,
                 tracks_changes: bool = False,
                 clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.schema = schema
        self.key_columns = key_columns
        self._key_positions = [schema.get_field_index(name) for name in key_columns]
        self.maximum_size = maximum_size
        self._write_life = None if write_ttl is None else int(write_ttl * 1000)
        self._missing_life = self._write_life if missing_ttl is None else (
            int(missing_ttl * 1000) if self._write_life is None
            else min(self._write_life, int(missing_ttl * 1000)))
        # A missing key's slot points at a row of its key alone, checked as any row is:
        # keys of every type can be kept missing without risking another key's "no rows".
        self._keep_missing = cache_missing_key
        self.tracks_changes = tracks_changes
        self._clock = clock
        self._users_fd: int | None = None
        self._current_id: tuple[int, int, int] | None = None
        self._generation: str | None = None
        self._slots: Slots | None = None
        self._segments: Segments | None = None

    # --- opening and closing

    def open(self) -> None:
        """Join the tier (making its directory); sweep the unused tiers beside it."""
        root = self.directory.parent
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        sweep_once(root, lambda: sweep(root, keep=self.directory), log=log,
                   what="host tiers")
        for _ in range(5):
            self.directory.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(self.directory / _USERS, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_SH)
            if (self.directory / _USERS).exists():
                self._users_fd = fd
                return
            os.close(fd)  # swept away between our open and our lock: make it again
        raise OSError(f"could not join the host tier in {self.directory}")

    def close(self) -> None:
        self._drop_generation()
        if self._users_fd is not None:
            os.close(self._users_fd)
            self._users_fd = None

    def _drop_generation(self) -> None:
        if self._slots is not None:
            self._slots.close()
        if self._segments is not None:
            self._segments.close()
        self._slots = self._segments = None
        self._generation = None

    def now_ms(self) -> int:
        """The tier's clock (ms since the epoch): a put's ``began`` is read from it."""
        return int(self._clock() * 1000)

    def _follow(self) -> bool:
        """Map the generation ``CURRENT`` names, if it changed; False: none usable."""
        current = self.directory / "CURRENT"
        try:
            stat = current.stat()
        except FileNotFoundError:
            self._current_id = None
            self._drop_generation()
            return False
        identity = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if identity == self._current_id:
            return self._slots is not None
        self._current_id = identity
        try:
            name = current.read_text().strip()
        except OSError:
            name = ""
        if name == self._generation and self._slots is not None:
            return True
        self._drop_generation()
        if not name.startswith("gen-"):
            return False
        try:
            slots = Slots(self.directory / name / "index")
        except (OSError, ValueError) as exc:
            log.warning("host tier %s: generation %s unreadable (%s); serving misses",
                        self.directory, name, exc)
            return False
        self._slots = slots
        self._segments = Segments(self.directory / name, slots.generation, self.schema)
        self._generation = name
        return True

    # --- reading

    def get(self, keys: list[pa.Array]) -> HostAnswers:
        """The tier's answers to distinct keys of the key types."""
        n = len(keys[0])
        none = HostAnswers(np.zeros(n, dtype=bool), np.zeros(n), np.zeros(n, dtype=np.int64),
                           self.schema.empty_table(), np.zeros(n, dtype=bool))
        if not n or not self._follow():
            return none
        assert self._slots is not None
        assert self._segments is not None
        hashes = hash_keys(keys)
        found, entries = self._slots.find(hashes)
        now = self.now_ms()
        count = entries["count"]
        present = found >= 0
        claimed = present & (count == CLAIMED) & claim_fresh(entries, now, _CLAIM_MS)
        hit = present & (count < ENDED) & self._alive_at(entries["written"], count, now)
        counts = np.where(hit, count, 0)
        rows = self.schema.empty_table()
        if hit.any():
            hit, counts, rows = self._rows_of(keys, hit, counts, entries)
        age = np.maximum(now - entries["written"], 0) / 1000.0
        return HostAnswers(hit, age, counts, rows, claimed & ~hit)

    def _rows_of(self, keys: list[pa.Array], hit: np.ndarray, counts: np.ndarray,
                 entries: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Table]:
        """The rows of the hits, checked against their keys: a missing key's one row
        (its key alone) is checked too, then left out."""
        assert self._segments is not None
        hit, counts = hit.copy(), counts.copy()
        with_rows = np.flatnonzero(hit)
        taken = np.zeros(len(hit), dtype=np.int64)
        taken[with_rows] = np.maximum(counts[with_rows], 1)
        chosen = entries[with_rows]
        ok, rows = self._segments.gather(chosen["segment"], chosen["offset"],
                                         chosen["first"], taken[with_rows])
        if not ok.all():
            hit[with_rows[~ok]] = False
            taken[with_rows[~ok]] = 0
        hit, taken, rows = self._own_rows(keys, hit, taken, rows)
        counts = np.where(hit, counts, 0)
        if bool((taken > counts).any()):
            owners = np.repeat(np.arange(len(hit)), taken)
            rows = rows.filter(pa.array(counts[owners] > 0))
        return hit, counts, rows

    def _own_rows(self, keys: list[pa.Array], hit: np.ndarray, counts: np.ndarray,
                  rows: pa.Table) -> tuple[np.ndarray, np.ndarray, pa.Table]:
        """Turn into misses the keys whose rows do not all carry that key (another
        key's rows under the same hash, a recycled or damaged reference)."""
        if not rows.num_rows:
            return hit, counts, rows
        owners = np.repeat(np.arange(len(counts)), counts)
        take = pa.array(owners, type=pa.int64())
        same = np.ones(len(owners), dtype=bool)
        for position, asked in zip(self._key_positions, keys, strict=True):
            equal = pc.equal(rows.column(position), asked.take(take))
            same &= pc.fill_null(equal, False).to_numpy(zero_copy_only=False)
        if same.all():
            return hit, counts, rows
        bad = np.unique(owners[~same])
        hit = hit.copy()
        hit[bad] = False
        keep = ~np.isin(owners, bad)
        counts = counts.copy()
        counts[bad] = 0
        return hit, counts, rows.filter(pa.array(keep))

    def _alive_at(self, written: np.ndarray, count: np.ndarray, now: int) -> np.ndarray:
        """Which entries written at ``written`` (ms) with ``count`` rows live at ``now``."""
        life = np.where(count > 0, _life(self._write_life), _life(self._missing_life))
        alive: np.ndarray = (life == _NEVER) | (written + np.minimum(life, _NEVER // 2) > now)
        return alive

    # --- writing

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Slots]:
        """The writer's lock, with a usable generation (a new one if there is none)."""
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A generation deleted under us (CURRENT unchanged) would fail every put. One
            # made from nothing refuses loads begun before it: changes noted in the one
            # lost are not known.
            if not self._follow() or not (self.directory / str(self._generation)).is_dir():
                self._publish(self._new_generation(_FIRST_CAPACITY, self.now_ms()))
            assert self._slots is not None
            yield self._slots
        finally:
            os.close(fd)

    def _new_generation(self, capacity: int, floor: int) -> str:
        number = 0
        for entry in os.scandir(self.directory):
            if entry.name.startswith("gen-") and entry.name[4:].isdigit():
                number = max(number, int(entry.name[4:]) + 1)
        name = f"gen-{number}"
        (self.directory / name).mkdir(mode=0o700)
        Slots.create(self.directory / name / "index", capacity, floor)
        return name

    def _publish(self, name: str) -> None:
        tmp = self.directory / f"CURRENT.tmp-{os.getpid()}"
        tmp.write_text(name)
        os.replace(tmp, self.directory / "CURRENT")
        old = self._generation
        if not self._follow():
            raise OSError(f"host tier {self.directory}: generation {name} unreadable")
        if old is not None and old != name:
            # Readers keep what they mapped; what they have not opened yet is a miss.
            shutil.rmtree(self.directory / old, ignore_errors=True)

    def claim(self, keys: list[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
        """Claim distinct keys for loading (single loads): which this process should
        load, and which another live process is loading already."""
        n = len(keys[0])
        hashes = hash_keys(keys)
        with self._locked() as slots:
            found, entries = slots.find(hashes)
            now = self.now_ms()
            claimed = ((found >= 0) & (entries["count"] == CLAIMED)
                       & claim_fresh(entries, now, _CLAIM_MS))
            owners = entries["run"]
            for pid in np.unique(owners[claimed]):
                if int(pid) == _pid() or not _alive(int(pid)):
                    claimed &= owners != pid
            mine = ~claimed
            # A key noted changed keeps its note: loaded here, unclaimed (a claim would
            # erase the note that refuses older loads' puts).
            claims = np.flatnonzero(mine & _distinct(hashes) & (entries["count"] != CHANGED))
            if len(claims) and _pid() < RUN_ROWS:  # a pid a slot holds
                # Too full to claim: loaded anyway, the put compacts.
                slots.write(hashes[claims], np.full(len(claims), _pid()),
                            np.full(len(claims), claim_stamp(now)),
                            np.full(len(claims), CLAIMED))
        return mine, claimed[:n]

    def put(self, keys: list[pa.Array], index: np.ndarray, rows: pa.Table,
            began: int | None = None) -> None:
        """Store the answers of distinct keys: row ``j`` of ``rows`` is key ``index[j]``'s
        (every key asked, rows or none: a key with none is a missing key). ``began``:
        when their load began (ms, `now_ms`; default now): their write time, and what
        a tier that tracks changes checks."""
        n = len(keys[0]) if keys else 0
        if not n:
            return
        began = self.now_ms() if began is None else began
        counts = np.bincount(index, minlength=n).astype(np.int64) if len(index) else \
            np.zeros(n, dtype=np.int64)
        hashes = hash_keys(keys)
        kept = _distinct(hashes)
        # Written only to end claims at once: answers nothing.
        answered = kept & (counts <= MAX_COUNT) & ((counts > 0) | self._keep_missing)
        with self._locked() as slots:
            assert self._segments is not None
            if self.tracks_changes:
                kept = kept & ~self._outdated(slots, hashes, began)
                if not kept.any():
                    return
            entries = np.zeros(n, dtype=ENTRY)
            entries["count"] = np.where(answered, counts, ENDED)
            entries["written"] = began
            table, entries["first"] = self._block_of(keys, index, rows, counts,
                                                     answered & (counts == 0))
            if table.num_rows:
                entries["segment"], entries["offset"] = self._segments.append(table)
            hashes, entries = hashes[kept], entries[kept]
            if not self._write(slots, hashes, entries) or self._over_size(slots):
                self._compact(entries)
            else:
                self._merge_tail(slots)

    @staticmethod
    def _outdated(slots: Slots, hashes: np.ndarray, began: int) -> np.ndarray:
        """Which keys a load begun at ``began`` may not put: all at or below the
        generation's floor; else those noted changed since, or holding a newer load's
        rows."""
        if began <= slots.floor:
            return np.ones(len(hashes), dtype=bool)
        found, old = slots.find(hashes)
        count = old["count"]
        outdated: np.ndarray = (found >= 0) & (
            ((count == CHANGED) & (changed_at(old) >= began))
            | ((count < ENDED) & (old["written"] > began)))
        return outdated

    def changed(self, keys: list[pa.Array], at: int) -> None:
        """Note that keys (of the key types) changed by ``at`` (ms, `now_ms`): their
        rows are dropped, and no load begun at or before ``at`` may put them."""
        hashes = np.unique(hash_keys(keys))
        if not len(hashes):
            return
        with self._locked() as slots:
            found, old = slots.find(hashes)
            later = (found >= 0) & (old["count"] == CHANGED) & (changed_at(old) >= at)
            hashes = hashes[~later]
            runs, rows = change_fields(np.full(len(hashes), at, dtype=np.int64))
            if slots.write(hashes, runs, rows, np.full(len(hashes), CHANGED)):
                slots.latest_change = at
            else:  # too full: the next generation's floor stands for these notes
                self._compact(np.zeros(0, dtype=ENTRY), at)

    def flush(self, at: int) -> None:
        """Everything may have changed by ``at`` (ms): an empty generation, refusing
        every load begun at or before ``at``."""
        with self._locked():
            self._publish(self._new_generation(_FIRST_CAPACITY, at))

    def abandon(self) -> None:
        """Serve nothing more to anyone (the tier could not note a change): ``CURRENT``
        is removed, so every reader misses and the next writer starts a generation
        that refuses the loads begun before it."""
        with contextlib.suppress(FileNotFoundError):
            (self.directory / "CURRENT").unlink()

    def _block_of(self, keys: list[pa.Array], index: np.ndarray, rows: pa.Table,
                  counts: np.ndarray, missing: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """A put's block: the rows key after key, then a row holding only its key for
        each ``missing`` key (what a later read checks its answer against); and each
        key's first row there."""
        firsts = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(counts[:-1], out=firsts[1:])
        pieces = []
        if rows.num_rows:
            table = rows.take(pa.array(np.argsort(index, kind="stable"), type=pa.int64()))
            pieces.append(table if table.schema == self.schema else table.cast(self.schema))
        which = np.flatnonzero(missing)
        if len(which):
            firsts[which] = rows.num_rows + np.arange(len(which))
            pieces.append(self._key_rows([k.take(pa.array(which)) for k in keys]))
        if not pieces:
            return self.schema.empty_table(), firsts
        return (pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)), firsts

    def _key_rows(self, keys: list[pa.Array]) -> pa.Table:
        """Rows holding ``keys`` and nulls elsewhere."""
        n = len(keys[0])
        columns = [pa.nulls(n, field.type) for field in self.schema]
        for position, key in zip(self._key_positions, keys, strict=True):
            columns[position] = key.cast(self.schema.field(position).type)
        return pa.Table.from_arrays(columns, schema=self.schema)

    @staticmethod
    def _write(slots: Slots, hashes: np.ndarray, entries: np.ndarray) -> bool:
        """Write entries of one block into slots, with runs for them: False when the
        generation is too full (the caller compacts)."""
        runs, rows = np.zeros(len(entries), dtype=np.int64), np.zeros(len(entries),
                                                                       dtype=np.int64)
        answer = np.flatnonzero(entries["count"] < ENDED)
        if len(answer):
            first, written = entries["first"][answer], entries["written"][answer]
            chunk = first // RUN_ROWS
            # One run per write time and stretch of RUN_ROWS rows of the block.
            group, inverse = np.unique(written * 4096 + chunk, return_inverse=True)
            added = slots.add_runs(int(entries["segment"][answer[0]]),
                                   int(entries["offset"][answer[0]]),
                                   (group % 4096) * RUN_ROWS, group // 4096)
            if added is None:
                return False
            runs[answer] = added[inverse]
            rows[answer] = first - chunk * RUN_ROWS
        return slots.write(hashes, runs, rows, entries["count"])

    def _merge_tail(self, slots: Slots) -> None:
        """Keep a generation's blocks few: a read takes from each block it touches, so
        once there are many, the newest are merged into one (a row is rewritten about
        log(n) times; a read touches at most ``_MAX_BLOCKS`` + log2(n) blocks)."""
        segments = self._segments
        assert segments is not None
        segment = segments.last()
        recorded, live = slots.live_blocks
        if recorded != segment:
            live = []  # a new segment: older ones are never merged
        offsets_all, batches_all = segments.blocks(segment)
        known = dict(zip(offsets_all, batches_all, strict=True))
        live = [o for o in live if o in known]
        if offsets_all and (not live or offsets_all[-1] > live[-1]):
            live.append(offsets_all[-1])  # the block this put appended
        slots.live_blocks = (segment, live)
        if len(live) <= _MAX_BLOCKS:
            return
        offsets = live
        batches = [known[o] for o in live]
        sizes = [0 if b is None else b.num_rows for b in batches]
        # The newest blocks, back to the first that holds more rows than all after it:
        # what is left grows at least twofold block to block.
        start, total = len(sizes) - 1, sizes[-1]
        while start > 0 and sizes[start - 1] <= total:
            start -= 1
            total += sizes[start]
        if start >= len(sizes) - 1:
            return
        moved_runs = self._runs_in(slots, segment, offsets[start:], sizes[start:],
                                   batches[start:])
        if moved_runs is None:
            return
        old_runs, bases, written = moved_runs
        merged = [b for b in batches[start:] if b is not None]
        if not merged:
            return
        rows = pa.Table.from_batches(merged, self.schema)
        new_segment, new_offset = segments.append(rows)
        new_runs = slots.add_runs(new_segment, new_offset, bases, written)
        assert new_runs is not None  # room checked by _runs_in
        keys = [rows.column(i).combine_chunks() for i in self._key_positions]
        hashes = np.unique(hash_keys(keys))
        found, entries = slots.find(hashes)
        # The keys whose slots point into the merged blocks (not at newer rows).
        at = np.minimum(np.searchsorted(old_runs, entries["run"]), max(len(old_runs) - 1, 0))
        moved = ((found >= 0) & (entries["count"] < ENDED) & (len(old_runs) > 0)
                 & (old_runs[at] == entries["run"]))
        if moved.any():
            slots.write(hashes[moved], new_runs[at[moved]], entries["row"][moved],
                        entries["count"][moved])
        slots.live_blocks = (new_segment, [*offsets[:start], new_offset]
                             if new_segment == segment else [new_offset])

    @staticmethod
    def _runs_in(slots: Slots, segment: int, offsets: list[int], sizes: list[int],
                 batches: list[pa.RecordBatch | None]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The runs of blocks merged into one (their numbers, ascending), and where
        each starts in the merged block, and when it was written; None when the
        generation has no room for as many more runs."""
        numbers, run_segment, run_offset, base, written = slots.whole_runs()
        merged_offsets = np.asarray(offsets, dtype=np.int64)  # ascending
        merged_bases = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
        readable = np.array([b is not None for b in batches])
        which = np.minimum(np.searchsorted(merged_offsets, run_offset), len(offsets) - 1)
        inside = ((run_segment == segment) & (merged_offsets[which] == run_offset)
                  & readable[which])  # a block that failed its CRC carries nothing
        if slots.runs_used + int(inside.sum()) > MAX_RUNS:
            return None
        return (numbers[inside], merged_bases[which[inside]] + base[inside],
                written[inside])

    def release(self, keys: list[pa.Array]) -> None:
        """End this process's claims of keys it could not load (others load them)."""
        self._expire(keys)

    def _expire(self, keys: list[pa.Array]) -> None:
        hashes = hash_keys(keys)
        with self._locked() as slots:
            found, entries = slots.find(hashes)
            mine = np.flatnonzero((found >= 0) & (entries["count"] == CLAIMED)
                                  & (entries["run"] == _pid()))
            if len(mine):
                zeros = np.zeros(len(mine), dtype=np.int64)
                slots.write(hashes[mine], zeros, zeros, np.full(len(mine), ENDED))

    def _over_size(self, slots: Slots) -> bool:
        """Over ``maximum_size`` keys, or rows rewritten by merges to twice what the
        generation began with (merged blocks stay in the files until then): time for
        the next generation."""
        if self.maximum_size is not None and slots.used > self.maximum_size * 5 // 4:
            return True
        assert self._segments is not None
        return self._segments.used_bytes() > max(_MIN_REWRITE_BYTES, 2 * slots.base_bytes)

    def _compact(self, pending: np.ndarray, floor: int = 0) -> None:
        """Write the next generation: ``pending`` (entries already in this generation's
        segments), then the live entries, newest first, up to ``maximum_size``. Its
        floor: ``floor`` or the latest change noted here (whose notes it drops)."""
        assert self._slots is not None
        assert self._segments is not None
        now = self.now_ms()
        floor = max(floor, self._slots.floor, self._slots.latest_change)
        _, live = self._slots.whole()
        live = live[self._alive_at(live["written"], live["count"], now)]
        keep = np.concatenate([pending[pending["count"] < ENDED],
                               live[np.argsort(-live["written"], kind="stable")]])
        if self.maximum_size is not None:
            keep = keep[: self.maximum_size + len(pending)]
        taken = np.maximum(keep["count"], 1)
        ok, rows = self._segments.gather(keep["segment"], keep["offset"], keep["first"],
                                         taken)
        keep, taken = keep[ok], taken[ok]
        hashes, chosen = self._first_of_each_key(rows, taken)
        if self.maximum_size is not None:
            chosen = chosen[: self.maximum_size]
        if len(chosen) < len(keep):
            owners = np.repeat(np.arange(len(keep)), taken)
            rows = rows.filter(pa.array(np.isin(owners, chosen)))
        keep, taken, hashes = keep[chosen], taken[chosen], hashes[chosen]
        keep["first"] = np.concatenate(([0], np.cumsum(taken)[:-1])).astype(np.int64)
        keep["written"] = _coarse(keep["written"])
        capacity = max(_FIRST_CAPACITY, int(len(keep) / _FRESH_FILL) + 1)
        name = self._new_generation(capacity, floor)
        slots = Slots(self.directory / name / "index")
        try:
            segments = Segments(self.directory / name, slots.generation, self.schema)
            if rows.num_rows:
                keep["segment"], keep["offset"] = segments.append(rows)
            self._write(slots, hashes, keep)
            slots.base_bytes = segments.used_bytes()
        finally:
            slots.close()
        self._publish(name)

    def _first_of_each_key(self, rows: pa.Table, taken: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
        """The hashes of entries' keys, from their rows (a slot keeps only a tag), and
        the entries to keep: each key's first (the newest)."""
        if not len(taken):
            return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
        starts = pa.array(np.concatenate(([0], np.cumsum(taken)[:-1])), type=pa.int64())
        hashes = hash_keys([rows.column(p).take(starts).combine_chunks()
                            for p in self._key_positions])
        _, first = np.unique(hashes, return_index=True)
        return hashes, np.sort(first)

    # --- what it costs

    def nbytes(self) -> int:
        """Bytes the tier's current generation takes on the host (index and rows)."""
        if not self._follow() or self._segments is None or self._slots is None:
            return 0
        return self._slots.nbytes + self._segments.used_bytes()


_CLAIM_MS = 60_000
"""How long a claim holds when its owner neither answers nor dies: a waiter gives up
sooner (the lookup's own timeout) and loads the key itself."""


def _pid() -> int:
    return os.getpid()


def _coarse(written: np.ndarray) -> np.ndarray:
    """Write times rounded down (older: expiring no later) to few enough distinct ones
    for the runs a generation holds (one run per write time)."""
    step = 1
    while len(np.unique(written // step)) > MAX_RUNS // 2:
        step *= 4
    coarse: np.ndarray = written // step * step
    return coarse


def _life(life: int | None) -> int:
    return _NEVER if life is None else life


def _distinct(hashes: np.ndarray) -> np.ndarray:
    """Keys whose hash no other key of the batch has (two keys of one hash: neither
    is stored; they stay in-process only)."""
    _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
    distinct: np.ndarray = counts[inverse] == 1
    return distinct


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(root: Path, *, keep: Path | None = None) -> list[Path]:
    """Delete the tiers under ``root`` that no process uses (``keep``: never)."""

    def considered(path: Path) -> bool:
        return (path != keep and (path / _USERS).exists()) or path.name.startswith(
            _TRASH_PREFIX)

    def set_aside(path: Path) -> Path | None:
        try:
            fd = os.open(path / _USERS, os.O_RDWR)
        except OSError:
            return None
        try:
            if not try_flock(fd):
                return None
            trash = trash_path(path, _TRASH_PREFIX)
            os.rename(path, trash)
            return trash
        finally:
            os.close(fd)

    return sweep_directories(root, set_aside, trash_prefix=_TRASH_PREFIX,
                             considered=considered, log=log, what="host tier",
                             unused_for="its last user")
