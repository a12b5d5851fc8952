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
identity once per call, and everything they read is checked (slot checksums, block
CRCs, every row's key against the key asked), so a torn, damaged or foreign entry is a
miss, never a row of another key.
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
from cache.host.slots import CLAIMED, ENDED, FILL, SLOT, Slots
from cache.key_hash import hash_keys, is_exact
from spark_lookup.host_dirs import sweep_directories, sweep_once, trash_path, try_flock

__all__ = ["HostAnswers", "HostTier", "sweep"]

log = logging.getLogger("cache")

_NEVER = np.iinfo(np.int64).max
_FIRST_CAPACITY = 1 << 14
_USERS = "host-tier-users"  # named for this module: a sweep deletes only what holds it
_TRASH_PREFIX = ".trash-host-tier-"
_MAX_BLOCKS = 16
_MIN_REWRITE_BYTES = 8 << 20


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
    size eviction); ``cache_missing_key``: whether missing keys are kept at all.
    """

    def __init__(self, directory: Path, schema: pa.Schema, key_columns: list[str], *,
                 maximum_size: int | None, write_ttl: float | None,
                 missing_ttl: float | None, cache_missing_key: bool,
                 clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.schema = schema
        self.key_columns = key_columns
        self._key_positions = [schema.get_field_index(name) for name in key_columns]
        self._exact = is_exact([schema.field(name).type for name in key_columns])
        self.maximum_size = maximum_size
        self._write_life = None if write_ttl is None else int(write_ttl * 1000)
        self._missing_life = self._write_life if missing_ttl is None else (
            int(missing_ttl * 1000) if self._write_life is None
            else min(self._write_life, int(missing_ttl * 1000)))
        # A missing key has no row to check its key against: only a key that is its
        # own hash can be kept missing without risking another key's "no rows".
        self._keep_missing = cache_missing_key and self._exact
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

    def _now_ms(self) -> int:
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
        found, records = self._slots.find(hashes)
        now = self._now_ms()
        count = (records["meta"] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        present = found >= 0
        claimed = present & (count == CLAIMED) & (records["written"] + _CLAIM_MS > now)
        hit = present & (count < ENDED) & self._alive_at(records["written"], count, now)
        if not self._exact:
            hit &= count > 0
        counts = np.where(hit, count, 0)
        with_rows = np.flatnonzero(hit & (counts > 0))
        rows = self.schema.empty_table()
        if len(with_rows):
            ref = records["ref"][with_rows]
            ok, rows = self._segments.gather(
                (ref >> np.uint64(48)).astype(np.int64),
                (ref & np.uint64((1 << 48) - 1)).astype(np.int64),
                (records["meta"][with_rows] >> np.uint64(32)).astype(np.int64),
                counts[with_rows])
            if not ok.all():
                hit[with_rows[~ok]] = False
                counts[with_rows[~ok]] = 0
            hit, counts, rows = self._own_rows(keys, hit, counts, rows)
        age = np.maximum(now - records["written"], 0) / 1000.0
        return HostAnswers(hit, age, counts, rows, claimed & ~hit)

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
            if not self._follow():
                self._publish(self._new_generation(_FIRST_CAPACITY))
            assert self._slots is not None
            yield self._slots
        finally:
            os.close(fd)

    def _new_generation(self, capacity: int) -> str:
        number = 0
        for entry in os.scandir(self.directory):
            if entry.name.startswith("gen-") and entry.name[4:].isdigit():
                number = max(number, int(entry.name[4:]) + 1)
        name = f"gen-{number}"
        (self.directory / name).mkdir(mode=0o700)
        Slots.create(self.directory / name / "index", capacity)
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
            found, records = slots.find(hashes)
            now = self._now_ms()
            count = (records["meta"] & np.uint64(0xFFFFFFFF)).astype(np.int64)
            claimed = (found >= 0) & (count == CLAIMED) & (records["written"] + _CLAIM_MS > now)
            owners = records["ref"].astype(np.int64)
            for pid in np.unique(owners[claimed]):
                if int(pid) == os.getpid() or not _alive(int(pid)):
                    claimed &= owners != pid
            mine = ~claimed
            claims = np.zeros(int((mine & _distinct(hashes)).sum()), dtype=SLOT)
            claims["hash"] = hashes[mine & _distinct(hashes)]
            claims["meta"] = CLAIMED
            claims["ref"] = os.getpid()
            claims["written"] = now
            if len(claims):
                slots.write(claims)  # too full to claim: loaded anyway, the put compacts
        return mine, claimed[:n]

    def put(self, keys: list[pa.Array], index: np.ndarray, rows: pa.Table) -> None:
        """Store the answers of distinct keys: row ``j`` of ``rows`` is key ``index[j]``'s
        (every key asked, rows or none: a key with none is a missing key)."""
        n = len(keys[0]) if keys else 0
        if not n:
            return
        counts = np.bincount(index, minlength=n).astype(np.int64) if len(index) else \
            np.zeros(n, dtype=np.int64)
        hashes = hash_keys(keys)
        order = np.argsort(index, kind="stable")
        firsts = np.zeros(n, dtype=np.int64)
        np.cumsum(counts[:-1], out=firsts[1:])
        with self._locked() as slots:
            assert self._segments is not None
            now = self._now_ms()
            records = np.zeros(n, dtype=SLOT)
            records["hash"] = hashes
            if rows.num_rows:
                table = rows.take(pa.array(order, type=pa.int64()))
                if table.schema != self.schema:
                    table = table.cast(self.schema)
                segment, offset = self._segments.append(table)
                records["ref"] = np.uint64((segment << 48) | offset)
            records["meta"] = (firsts.astype(np.uint64) << np.uint64(32)) | counts.astype(
                np.uint64)
            records["written"] = now
            if not self._keep_missing:
                # Written only to end claims at once: answers nothing.
                records["meta"][counts == 0] = ENDED
            records = records[_distinct(hashes)]
            if not slots.write(records) or self._over_size(slots):
                self._compact(records)
            else:
                self._merge_tail(slots)

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
        merged = [b for b in batches[start:] if b is not None]
        if not merged:
            return
        rows = pa.Table.from_batches(merged, self.schema)
        new_segment, new_offset = segments.append(rows)
        merged_offsets = np.asarray(offsets[start:], dtype=np.int64)  # ascending
        merged_bases = np.cumsum([0, *sizes[start:-1]]).astype(np.int64)
        keys = [rows.column(i).combine_chunks() for i in self._key_positions]
        hashes = np.unique(hash_keys(keys))
        found, records = slots.find(hashes)
        records = records[found >= 0]
        ref = records["ref"]
        old_segment = (ref >> np.uint64(48)).astype(np.int64)
        old_offset = (ref & np.uint64((1 << 48) - 1)).astype(np.int64)
        count = (records["meta"] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        which = np.minimum(np.searchsorted(merged_offsets, old_offset), len(merged_offsets) - 1)
        in_merged = merged_offsets[which] == old_offset
        moved_base = np.where(in_merged, merged_bases[which], -1)
        moved = (old_segment == segment) & (moved_base >= 0) & (count > 0) & (count < ENDED)
        records = records[moved]
        first = (records["meta"] >> np.uint64(32)).astype(np.int64) + moved_base[moved]
        records["ref"] = np.uint64((new_segment << 48) | new_offset)
        records["meta"] = (first.astype(np.uint64) << np.uint64(32)) | (
            records["meta"] & np.uint64(0xFFFFFFFF))
        if len(records):
            slots.write(records)
        slots.live_blocks = (new_segment, [*offsets[:start], new_offset]
                             if new_segment == segment else [new_offset])

    def release(self, keys: list[pa.Array]) -> None:
        """End this process's claims of keys it could not load (others load them)."""
        self._expire(keys)

    def _expire(self, keys: list[pa.Array]) -> None:
        hashes = hash_keys(keys)
        with self._locked() as slots:
            found, records = slots.find(hashes)
            now = self._now_ms()
            count = (records["meta"] & np.uint64(0xFFFFFFFF)).astype(np.int64)
            mine = (found >= 0) & (count == CLAIMED) & (records["ref"] == os.getpid())
            ended = records[mine]
            ended["meta"] = ENDED
            ended["written"] = now
            if len(ended):
                slots.write(ended)

    def _over_size(self, slots: Slots) -> bool:
        """Over ``maximum_size`` keys, or rows rewritten by merges to twice what the
        generation began with (merged blocks stay in the files until then): time for
        the next generation."""
        if self.maximum_size is not None and slots.used > self.maximum_size * 5 // 4:
            return True
        assert self._segments is not None
        return self._segments.used_bytes() > max(_MIN_REWRITE_BYTES, 2 * slots.base_bytes)

    def _compact(self, pending: np.ndarray) -> None:
        """Write the next generation: the live entries, newest first, up to
        ``maximum_size``, then ``pending`` (already in this generation's segments)."""
        assert self._slots is not None
        assert self._segments is not None
        now = self._now_ms()
        live = self._slots.whole()
        live = live[self._alive_at(live["written"], (live["meta"] & np.uint64(0xFFFFFFFF))
                                   .astype(np.int64), now)]
        live = live[~np.isin(live["hash"], pending["hash"])]
        keep = np.concatenate([pending, live[np.argsort(-live["written"], kind="stable")]])
        if self.maximum_size is not None:
            keep = keep[: self.maximum_size]
        count = (keep["meta"] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        keep = keep[count < ENDED]
        count = count[count < ENDED]
        with_rows = np.flatnonzero(count > 0)
        ref = keep["ref"][with_rows]
        ok, rows = self._segments.gather(
            (ref >> np.uint64(48)).astype(np.int64),
            (ref & np.uint64((1 << 48) - 1)).astype(np.int64),
            (keep["meta"][with_rows] >> np.uint64(32)).astype(np.int64), count[with_rows])
        good = np.ones(len(keep), dtype=bool)
        good[with_rows[~ok]] = False
        keep, count = keep[good], count[good]
        capacity = _FIRST_CAPACITY
        while capacity * FILL < 1.5 * max(len(keep), 1):  # half full: room to grow
            capacity *= 2
        name = self._new_generation(capacity)
        slots = Slots(self.directory / name / "index")
        try:
            segments = Segments(self.directory / name, slots.generation, self.schema)
            if rows.num_rows:
                segment, offset = segments.append(rows)
                keep["ref"][count > 0] = np.uint64((segment << 48) | offset)
                firsts = np.zeros(len(keep), dtype=np.int64)
                np.cumsum(count[:-1], out=firsts[1:])
                keep["meta"] = (firsts.astype(np.uint64) << np.uint64(32)) | count.astype(
                    np.uint64)
            slots.write(keep)
            slots.base_bytes = segments.used_bytes()
        finally:
            slots.close()
        self._publish(name)

    # --- what it costs

    def nbytes(self) -> int:
        """Bytes the tier's current generation takes on the host (index and rows)."""
        if not self._follow() or self._segments is None or self._slots is None:
            return 0
        return self._slots.capacity * SLOT.itemsize + self._segments.used_bytes()


_CLAIM_MS = 60_000
"""How long a claim holds when its owner neither answers nor dies: a waiter gives up
sooner (the lookup's own timeout) and loads the key itself."""


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
