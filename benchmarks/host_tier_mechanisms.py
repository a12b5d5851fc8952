"""Host tier for partial caches (issue 44): three candidate mechanisms, measured.

Each mechanism is a minimal prototype here, not in the library. All share rows of
``key BIGINT, qty INT, price DOUBLE, name STRING, ts TIMESTAMP`` (one row per key; a
row's columns derive from its key and a version, so any torn or foreign row is caught):

- ``lmdb-ipc``: LMDB (py ``lmdb``), one entry per key: 8-byte key -> the Arrow IPC
  record-batch message of its rows. A read is one read transaction and one
  ``Cursor.getmulti``; a write is one write transaction and one ``putmulti``.
- ``lmdb-ref``: LMDB, one entry per key: 8-byte key -> a 16-byte row reference
  (segment, block offset, first row, count) into append-only Arrow IPC segment files
  (as ``mmap-hash``). A ``dupsort``/``dupfixed`` database, so ``getmulti(keyfixed=True)``
  answers a batch as one buffer (numpy reads it) rather than a tuple per key.
- ``mmap-hash``: a memory-mapped open-addressing table (32-byte slots: 64-bit key
  hash from ``cache.key_hash``, row reference, a checksum of both) over a file in the
  host directory, probed with numpy a batch at a time; rows in append-only Arrow IPC
  segment files (one record-batch message per write). Writers are serialized by
  ``fcntl.flock``; readers take no lock: a slot whose checksum does not match is a miss
  (torn), an empty slot ends the probe, and every gathered row's key is compared with
  the key asked for (a foreign row is a miss).
- ``socket``: a host process serving Arrow batches over a Unix socket, started on
  demand by the first client (``flock`` on a spawn lock, so one starts), holding the
  library's ``DefaultLookupCache``; one request is the batch's keys as Arrow IPC, one
  reply the rows as Arrow IPC plus per-key offsets. It exits when idle.

Measured per mechanism: the write cost of a batch of 1,000 new keys (filling the tier
to ``--keys``), the cost of a batch of 1,000 distinct keys at 100% and 50% host hits
(median and p95, in this process and with 4 reader processes at once), Python objects
per key on the read path (the peak of ``sys.getallocatedblocks()`` sampled at every
call and return during one read, for 2,000 keys minus for 1,000, per key), and faults:
a writer killed with SIGKILL at random points while overwriting keys (readers verify
every row meanwhile and after) and at the worst point (injected).

    .venv/bin/python benchmarks/host_tier_mechanisms.py [--quick] [--keys 100000]
        [--batches 200] [--readers 4] [--kills 8]
        [--mechanisms lmdb-ipc,lmdb-ref,mmap-hash,socket]

``--quick``: 20,000 keys, 30 batches, 1 random kill (under a minute).

Writes ``benchmarks/out/host_tier_mechanisms.json``. Without ``lmdb`` installed the two
LMDB mechanisms are skipped (said so in the output); LMDB is not a library dependency.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import json
import mmap
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks._util import write_result
from cache.base import expand, row_ranges
from cache.key_hash import hash_keys, spread

try:
    import lmdb
except ImportError:  # optional: the LMDB mechanisms are skipped
    lmdb = None

SCHEMA = pa.schema([("key", pa.int64()), ("qty", pa.int32()), ("price", pa.float64()),
                    ("name", pa.string()), ("ts", pa.timestamp("us"))])
BATCH = 1000
SCRIPT = str(Path(__file__).resolve())
Result = tuple[np.ndarray, np.ndarray, pa.Table]  # hit[n], offsets[n + 1], rows


def make_rows(keys: np.ndarray, version: int) -> pa.RecordBatch:
    """One row per key; every column derives from the key and ``version``."""
    keys = keys.astype(np.int64)
    key_array = pa.array(keys)
    return pa.record_batch([
        key_array,
        pa.array(np.full(len(keys), version, dtype=np.int32)),
        pa.array(keys * 0.5 + version),
        pc.binary_join_element_wise("item-", pc.cast(key_array, pa.string()), ""),
        pa.array(keys * 1000 + version, pa.timestamp("us")),
    ], schema=SCHEMA)


def wrong_rows(keys: np.ndarray, result: Result) -> int:
    """Rows that are not exactly their key's row at some version (torn or foreign),
    plus hit keys without exactly one row."""
    hit, offsets, rows = result
    counts = np.diff(offsets)
    bad = int(((counts != 1) & hit).sum() + ((counts != 0) & ~hit).sum())
    if not rows.num_rows:
        return bad
    key = np.asarray(rows.column("key").to_numpy())
    qty = np.asarray(rows.column("qty").to_numpy()).astype(np.int64)
    price = np.asarray(rows.column("price").to_numpy())
    ts = np.asarray(rows.column("ts").cast(pa.int64()).to_numpy())
    name_ok = pc.equal(rows.column("name"), pc.binary_join_element_wise(
        "item-", pc.cast(rows.column("key"), pa.string()), "")).to_numpy(zero_copy_only=False)
    expected = np.repeat(keys, counts)
    wrong = ((key != expected) | (price != key * 0.5 + qty) | (ts != key * 1000 + qty)
             | ~np.asarray(name_ok, dtype=bool))
    return bad + int(wrong.sum())


@contextlib.contextmanager
def flocked(path: Path) -> Any:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # releases the lock (the kernel does it too when the process dies)


# --- append-only Arrow IPC segment files (lmdb-ref and mmap-hash)

SEGMENT_BYTES = 1 << 28  # sparse: pages exist only where rows were written
_SEG_HEADER = 64  # magic, generation, tail


class Segments:
    """Segment files ``seg-NNNNN``: a header (magic, generation, tail) and record-batch
    messages of ``SCHEMA``, appended by one writer at a time (the caller's lock), each
    complete before the tail moves past it. Readers map the files and parse the
    messages below the tail once per process: one Table per segment, so a gather is one
    ``take`` per segment a batch touches."""

    def __init__(self, directory: Path, generation: int) -> None:
        self.directory = directory
        self.generation = generation
        self._maps: dict[int, tuple[mmap.mmap, pa.Buffer]] = {}
        self._parsed: dict[int, tuple[int, list[pa.RecordBatch], list[int], pa.Table | None]] = {}
        self._offsets: dict[int, np.ndarray] = {}
        self._bases: dict[int, np.ndarray] = {}

    def _path(self, segment: int) -> Path:
        return self.directory / f"seg-{segment:05d}"

    # writer side (under the caller's lock)
    def append(self, batch: pa.RecordBatch) -> tuple[int, int]:
        message = batch.serialize()
        segment = 0
        while self._path(segment + 1).exists():
            segment += 1
        path = self._path(segment)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            header = os.pread(fd, _SEG_HEADER, 0)
            if len(header) < _SEG_HEADER or header[:8] != b"HTSEG001":
                os.ftruncate(fd, SEGMENT_BYTES)
                tail = _SEG_HEADER
                os.pwrite(fd, b"HTSEG001" + struct.pack("<QQ", self.generation, tail), 0)
            else:
                tail = struct.unpack_from("<Q", header, 16)[0]
            if tail + message.size > SEGMENT_BYTES:
                os.close(fd)
                segment += 1
                fd = os.open(self._path(segment), os.O_RDWR | os.O_CREAT, 0o600)
                os.ftruncate(fd, SEGMENT_BYTES)
                tail = _SEG_HEADER
                os.pwrite(fd, b"HTSEG001" + struct.pack("<QQ", self.generation, tail), 0)
            os.pwrite(fd, message, tail)  # the rows first ...
            os.pwrite(fd, struct.pack("<Q", tail + message.size), 16)  # ... then the tail
        finally:
            os.close(fd)
        return segment, tail

    # reader side
    def _map(self, segment: int) -> tuple[mmap.mmap, pa.Buffer] | None:
        mapped = self._maps.get(segment)
        if mapped is None:
            try:
                with open(self._path(segment), "rb") as f:
                    mm = mmap.mmap(f.fileno(), SEGMENT_BYTES, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                return None
            if mm[:8] != b"HTSEG001" or struct.unpack_from("<Q", mm, 8)[0] != self.generation:
                mm.close()
                return None  # another generation's file: nothing of it is served
            mapped = self._maps[segment] = (mm, pa.py_buffer(mm))
        return mapped

    def _table(self, segment: int, need: int) -> pa.Table | None:
        """The segment's blocks parsed at least up to offset ``need``."""
        end, batches, offsets, table = self._parsed.get(segment, (_SEG_HEADER, [], [], None))
        if need < end:
            return table
        mapped = self._map(segment)
        if mapped is None:
            return None
        mm, buffer = mapped
        tail = struct.unpack_from("<Q", mm, 16)[0]
        if tail > SEGMENT_BYTES:
            return table
        reader = pa.BufferReader(buffer.slice(0, tail))
        reader.seek(end)
        while end < tail:
            message = pa.ipc.read_message(reader)
            batches.append(pa.ipc.read_record_batch(message, SCHEMA))
            offsets.append(end)
            end = reader.tell()
        table = pa.Table.from_batches(batches, SCHEMA) if batches else None
        self._parsed[segment] = (end, batches, offsets, table)
        self._offsets[segment] = np.asarray(offsets, dtype=np.int64)
        self._bases[segment] = np.concatenate(
            ([0], np.cumsum([b.num_rows for b in batches]))).astype(np.int64)
        return table

    def gather(self, segment: np.ndarray, offset: np.ndarray, first: np.ndarray,
               count: np.ndarray) -> tuple[np.ndarray, pa.Table]:
        """Rows of references (numpy arrays, one per hit key): which of them resolved
        (a reference to a block not below a tail is not served) and their rows, in
        order."""
        ok = np.zeros(len(segment), dtype=bool)
        parts = []
        for seg in np.unique(segment):  # one or two segments: a Python step per segment
            mine = np.flatnonzero(segment == seg)
            table = self._table(int(seg), int(offset[mine].max()))
            if table is None:
                continue
            offsets = self._offsets[int(seg)]
            block = np.searchsorted(offsets, offset[mine])
            block = np.minimum(block, len(offsets) - 1)
            found = offsets[block] == offset[mine]
            bases = self._bases[int(seg)]
            starts = bases[block] + first[mine]
            found &= starts + count[mine] <= bases[block + 1]
            ok[mine[found]] = True
            parts.append((mine[found], table, row_ranges(starts[found], count[mine][found])))
        if not parts:
            return ok, SCHEMA.empty_table()
        if len(parts) == 1:
            _, table, rows = parts[0]
            return ok, table.take(pa.array(rows))
        order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
        # rows of one key are contiguous within its part; keys come back in key order
        taken = pa.concat_tables([t.take(pa.array(r)) for _, t, r in parts])
        counts = np.concatenate([count[p[0]] for p in parts])
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        return ok, taken.take(pa.array(row_ranges(starts[order], counts[order])))

    def close(self) -> None:
        self._parsed.clear()
        for mm, _ in self._maps.values():
            with contextlib.suppress(BufferError):
                mm.close()
        self._maps.clear()


def _finish(keys: np.ndarray, hit: np.ndarray, counts: np.ndarray, rows: pa.Table) -> Result:
    """Offsets from counts; a hit whose rows do not carry its key is turned into a miss
    (a foreign entry: another key's rows under the same hash, or a recycled reference)."""
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(np.where(hit, counts, 0), out=offsets[1:])
    if rows.num_rows:
        row_keys = np.asarray(rows.column("key").to_numpy())
        foreign = row_keys != np.repeat(keys, np.diff(offsets))
        if foreign.any():
            owners = np.repeat(np.arange(len(keys)), np.diff(offsets))[foreign]
            hit = hit.copy()
            hit[owners] = False
            keep = np.repeat(hit, np.diff(offsets))
            rows = rows.filter(pa.array(keep))
            offsets[1:] = np.cumsum(np.where(hit, counts, 0))
    return hit, offsets, rows


# --- (b) memory-mapped open-addressing hash table

SLOT = np.dtype([("hash", "<u8"), ("ref", "<u8"), ("meta", "<u8"), ("check", "<u8")])
_INDEX_HEADER = 4096
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SALT = np.uint64(0x5BD1E9955BD1E995)
_WINDOW = 8
_MAX_PROBE = 256


def _slot_check(hashes: np.ndarray, ref: np.ndarray, meta: np.ndarray) -> np.ndarray:
    """A slot's checksum: never 0 (0 marks an empty slot)."""
    check: np.ndarray = spread(hashes ^ spread(ref ^ spread(meta ^ _SALT))) | np.uint64(1)
    return check


class MmapHash:
    name = "mmap-hash"

    def __init__(self, directory: Path, capacity: int = 1 << 18) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.lock = directory / "lock"
        index = directory / "index"
        if not index.exists():
            with flocked(self.lock):
                if not index.exists():
                    tmp = directory / f"index.tmp-{os.getpid()}"
                    with open(tmp, "wb") as f:
                        f.write(b"HTIDX001" + struct.pack(
                            "<QQ", capacity, secrets.randbits(63)))
                        f.truncate(_INDEX_HEADER + capacity * SLOT.itemsize)
                    os.replace(tmp, index)
        with open(index, "r+b") as f:
            self._mm = mmap.mmap(f.fileno(), 0)
        magic, capacity, generation = struct.unpack_from("<8sQQ", self._mm, 0)
        assert magic == b"HTIDX001"
        self.slots = np.ndarray(capacity, dtype=SLOT, buffer=self._mm, offset=_INDEX_HEADER)
        self.mask = np.int64(capacity - 1)
        self.shift = np.uint64(64 - (capacity.bit_length() - 1))
        self.segments = Segments(directory, generation)

    def _home(self, hashes: np.ndarray) -> np.ndarray:
        home: np.ndarray = ((hashes * _GOLDEN) >> self.shift).view(np.int64)
        return home

    def _find(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per hash: the matching slot's position (-1: none) and the ref and meta read
        with it (one copy of each slot, checked: what was checked is what is used)."""
        n = len(hashes)
        found = np.full(n, -1, dtype=np.int64)
        ref = np.zeros(n, dtype=np.uint64)
        meta = np.zeros(n, dtype=np.uint64)
        position = self._home(hashes)
        active = np.arange(n, dtype=np.int64)
        width, walked = 1, 0
        while len(active) and walked < _MAX_PROBE:
            window = (position[active, None] + np.arange(width)) & self.mask
            records = self.slots[window]  # a copy: later writes cannot change it
            check = records["check"]
            valid = check == _slot_check(records["hash"], records["ref"], records["meta"])
            match = valid & (records["hash"] == hashes[active, None])
            stop = match | (check == 0)
            ended = stop.any(axis=1)
            first = stop.argmax(axis=1)
            rows = np.flatnonzero(ended)
            at = first[rows]
            hit = match[rows, at]
            who = active[rows[hit]]
            found[who] = window[rows[hit], at[hit]]
            ref[who] = records["ref"][rows[hit], at[hit]]
            meta[who] = records["meta"][rows[hit], at[hit]]
            position[active] += width
            active = active[~ended]
            walked += width
            width = _WINDOW
        return found, ref, meta

    def get(self, keys: pa.Array) -> Result:
        key_values = np.asarray(keys.to_numpy())
        hashes = hash_keys([keys])
        found, ref, meta = self._find(hashes)
        hit = found >= 0
        where = np.flatnonzero(hit)
        count = (meta[where] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        ok, rows = self.segments.gather(
            (ref[where] >> np.uint64(40)).astype(np.int64),
            (ref[where] & np.uint64((1 << 40) - 1)).astype(np.int64),
            (meta[where] >> np.uint64(32)).astype(np.int64), count)
        hit[where[~ok]] = False
        counts = np.zeros(len(keys), dtype=np.int64)
        counts[where[ok]] = count[ok]
        return _finish(key_values, hit, counts, rows)

    def put(self, batch: pa.RecordBatch, crash_after: float | None = None) -> None:
        """Cache one row per key (new or replacing). ``crash_after``: write that share
        of the slots, tear the next one, and SIGKILL this process (fault injection)."""
        keys = batch.column(0)
        hashes = hash_keys([keys])
        with flocked(self.lock):
            segment, offset = self.segments.append(batch)
            n = len(hashes)
            ref = np.full(n, (segment << 40) | offset, dtype=np.uint64)
            meta = (np.arange(n, dtype=np.uint64) << np.uint64(32)) | np.uint64(1)
            records = np.zeros(n, dtype=SLOT)
            records["hash"], records["ref"], records["meta"] = hashes, ref, meta
            records["check"] = _slot_check(hashes, ref, meta)
            found, _, _ = self._find(hashes)
            target = found.copy()
            # new keys: the first empty or torn slot along the probe sequence
            pending = np.flatnonzero(found < 0)
            position = self._home(hashes[pending])
            while len(pending):
                slot = self.slots[position]
                check = slot["check"]
                free = (check == 0) | (check != _slot_check(slot["hash"], slot["ref"],
                                                            slot["meta"]))
                candidates = np.flatnonzero(free)
                _, first = np.unique(position[candidates], return_index=True)
                winners = candidates[first]
                target[pending[winners]] = position[winners]
                placed = np.zeros(len(pending), dtype=bool)
                placed[winners] = True
                # reserve them for this batch: write now (rows are already in place)
                self.slots[position[winners]] = records[pending[winners]]
                pending, position = pending[~placed], (position[~placed] + 1) & self.mask
            replace = np.flatnonzero(found >= 0)
            if crash_after is None:
                self.slots[target[replace]] = records[replace]
                return
            half = int(len(replace) * crash_after)
            self.slots[target[replace[:half]]] = records[replace[:half]]
            torn = records[replace[half]].copy()
            torn["check"] = self.slots[target[replace[half]]]["check"]  # old checksum
            self.slots[target[replace[half]]] = torn
            os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        self.segments.close()
        del self.slots
        with contextlib.suppress(BufferError):
            self._mm.close()


# --- (a) LMDB

def _key_bytes(keys: np.ndarray) -> list[bytes]:
    packed = keys.astype(">i8").tobytes()
    return [packed[i : i + 8] for i in range(0, len(packed), 8)]  # py-lmdb wants bytes


class LmdbIpc:
    name = "lmdb-ipc"

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(directory / "lmdb"), map_size=1 << 31, sync=False,
                             metasync=False, readahead=False)

    def get(self, keys: pa.Array) -> Result:
        key_values = np.asarray(keys.to_numpy())
        with self.env.begin(buffers=True) as txn:
            pairs = txn.cursor().getmulti(_key_bytes(key_values))
            batches = [pa.ipc.read_record_batch(pa.py_buffer(value), SCHEMA)
                       for _, value in pairs]
            rows = pa.Table.from_batches(batches, SCHEMA).combine_chunks()  # a copy
            found = np.frombuffer(b"".join(bytes(k) for k, _ in pairs), dtype=">i8")
        hit = np.isin(key_values, found)
        counts = np.zeros(len(keys), dtype=np.int64)
        counts[hit] = [b.num_rows for b in batches]
        return _finish(key_values, hit, counts, rows)

    def put(self, batch: pa.RecordBatch, crash_after: float | None = None) -> None:
        keys = _key_bytes(np.asarray(batch.column(0).to_numpy()))
        values = [batch.slice(i, 1).serialize() for i in range(batch.num_rows)]
        with self.env.begin(write=True) as txn:
            if crash_after is not None:
                cut = int(len(keys) * crash_after)
                txn.cursor().putmulti(list(zip(keys[:cut], values[:cut], strict=True)))
                os.kill(os.getpid(), signal.SIGKILL)
            txn.cursor().putmulti(list(zip(keys, values, strict=True)))

    def close(self) -> None:
        self.env.close()


_REF = np.dtype([("key", ">i8"), ("ref", "<u8"), ("meta", "<u8")])


class LmdbRef:
    name = "lmdb-ref"

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(directory / "lmdb"), map_size=1 << 31, sync=False,
                             metasync=False, readahead=False, max_dbs=2)
        self.db = self.env.open_db(b"ref", dupsort=True, dupfixed=True)
        with self.env.begin(write=True) as txn:
            generation = txn.get(b"generation")
            if generation is None:
                generation = struct.pack("<Q", secrets.randbits(63))
                txn.put(b"generation", generation)
        self.segments = Segments(directory, struct.unpack("<Q", generation)[0])

    def get(self, keys: pa.Array) -> Result:
        key_values = np.asarray(keys.to_numpy())
        with self.env.begin(db=self.db, buffers=True) as txn:
            view = txn.cursor().getmulti(_key_bytes(key_values), dupdata=True,
                                         dupfixed_bytes=16, keyfixed=True)
            found = np.frombuffer(view, dtype=_REF).copy()
        # getmulti answers the found keys in request order
        hit = np.isin(key_values, found["key"])
        count = (found["meta"] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        ok, rows = self.segments.gather(
            (found["ref"] >> np.uint64(40)).astype(np.int64),
            (found["ref"] & np.uint64((1 << 40) - 1)).astype(np.int64),
            (found["meta"] >> np.uint64(32)).astype(np.int64), count)
        where = np.flatnonzero(hit)
        hit[where[~ok]] = False
        counts = np.zeros(len(keys), dtype=np.int64)
        counts[where[ok]] = count[ok]
        return _finish(key_values, hit, counts, rows)

    def put(self, batch: pa.RecordBatch, crash_after: float | None = None) -> None:
        keys = _key_bytes(np.asarray(batch.column(0).to_numpy()))
        with self.env.begin(write=True, db=self.db) as txn:  # LMDB's writer lock
            segment, offset = self.segments.append(batch)
            values = np.zeros(len(keys), dtype=[("ref", "<u8"), ("meta", "<u8")])
            values["ref"] = (segment << 40) | offset
            values["meta"] = (np.arange(len(keys), dtype=np.uint64) << np.uint64(32)) | 1
            packed = values.tobytes()
            cursor = txn.cursor()
            cut = len(keys) if crash_after is None else int(len(keys) * crash_after)
            for i in range(cut):  # replace: one value per key (dupsort keeps several)
                cursor.replace(keys[i], packed[16 * i : 16 * i + 16])
            if crash_after is not None:
                os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        self.segments.close()
        self.env.close()


# --- (c) a host process over a Unix socket

_FRAME = struct.Struct("<cQ")
IDLE_SECONDS = 3.0


def _ipc(table: pa.Table | pa.RecordBatch) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write(table)
    return sink.getvalue()


def _recv_exact(sock: socket.socket, size: int) -> bytearray | None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            return None
        got += n
    return buffer


class ServerState:
    """What the host process holds: the library's columnar partial cache."""

    def __init__(self) -> None:
        from cache import DefaultLookupCache
        self.cache = DefaultLookupCache.new_builder().maximum_size(10_000_000).build()
        self.cache.bind(SCHEMA, ["key"])
        self.cache.open()

    def handle(self, op: bytes, payload: bytearray) -> bytes | pa.Buffer:
        batch = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
        keys = batch.column("key").combine_chunks()
        if op == b"P":
            self.cache.put_arrow([keys], pa.array(np.arange(len(keys))), batch)
            return b""
        answers = self.cache.get_arrow([keys])
        positions, rows = expand(answers.groups, answers.offsets)
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(np.bincount(positions, minlength=len(keys)), out=offsets[1:])
        hit = np.zeros(len(keys) + (-len(keys)) % 8, dtype=np.uint8)
        assert answers.hit is not None
        hit[: len(keys)] = answers.hit
        table = answers.rows.take(pa.array(rows))
        return b"".join((struct.pack("<Q", len(keys)), offsets.tobytes(), hit.tobytes(),
                         _ipc(table).to_pybytes()))


def serve(directory: Path) -> None:
    state = ServerState()
    path = directory / "sock"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(64)
    server.settimeout(0.2)
    lock = threading.Lock()
    activity = {"open": 0, "last": time.monotonic()}

    def connection(sock: socket.socket) -> None:
        try:
            while True:
                header = _recv_exact(sock, _FRAME.size)
                if header is None:
                    return
                op, size = _FRAME.unpack(header)
                payload = _recv_exact(sock, size)
                if payload is None:
                    return  # a client died mid-request: nothing of it is applied
                reply = state.handle(op, payload)
                sock.sendall(_FRAME.pack(b"R", len(reply)))
                sock.sendall(reply)
        except (OSError, pa.ArrowInvalid):
            return
        finally:
            sock.close()
            with lock:
                activity["open"] -= 1
                activity["last"] = time.monotonic()

    while True:
        try:
            sock, _ = server.accept()
        except TimeoutError:
            with lock:
                idle = activity["open"] == 0 and time.monotonic() - activity["last"] > IDLE_SECONDS
            if idle or not directory.exists():
                break
            continue
        with lock:
            activity["open"] += 1
        threading.Thread(target=connection, args=(sock,), daemon=True).start()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server.close()


class SocketTier:
    name = "socket"

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.started_server = False
        self.sock = self._connect()

    def _try(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.directory / "sock"))
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            return None
        return sock

    def _connect(self) -> socket.socket:
        sock = self._try()
        if sock is not None:
            return sock
        with flocked(self.directory / "spawn.lock"):  # one client starts the server
            sock = self._try()
            if sock is not None:
                return sock
            subprocess.Popen([sys.executable, SCRIPT, "--serve", str(self.directory)],
                             start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.started_server = True
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                sock = self._try()
                if sock is not None:
                    return sock
                time.sleep(0.01)
        raise RuntimeError("the host process did not start")

    def _call(self, op: bytes, payload: pa.Buffer, cut: int | None = None) -> bytearray:
        self.sock.sendall(_FRAME.pack(op, payload.size))
        if cut is not None:
            self.sock.sendall(memoryview(payload)[:cut])
            os.kill(os.getpid(), signal.SIGKILL)
        self.sock.sendall(payload)
        header = _recv_exact(self.sock, _FRAME.size)
        assert header is not None
        reply = _recv_exact(self.sock, _FRAME.unpack(header)[1])
        assert reply is not None
        return reply

    def get(self, keys: pa.Array) -> Result:
        reply = self._call(b"G", _ipc(pa.record_batch([keys], names=["key"])))
        n = struct.unpack_from("<Q", reply, 0)[0]
        offsets = np.frombuffer(reply, dtype=np.int64, count=n + 1, offset=8)
        at = 8 + 8 * (n + 1)
        hit = np.frombuffer(reply, dtype=np.uint8, count=n, offset=at).astype(bool)
        at += n + (-n) % 8
        rows = pa.ipc.open_stream(pa.py_buffer(reply)[at:]).read_all()
        return hit, offsets, rows

    def put(self, batch: pa.RecordBatch, crash_after: float | None = None) -> None:
        payload = _ipc(batch)
        cut = None if crash_after is None else int(payload.size * crash_after)
        self._call(b"P", payload, cut)

    def close(self) -> None:
        self.sock.close()


MECHANISMS: dict[str, Callable[[Path], Any]] = {
    "lmdb-ipc": LmdbIpc, "lmdb-ref": LmdbRef, "mmap-hash": MmapHash, "socket": SocketTier,
}


# --- measurement

def key_batches(rng: np.random.Generator, keys: int, batches: int, hit_share: float,
                size: int = BATCH) -> list[np.ndarray]:
    hits = int(size * hit_share)
    out = []
    for _ in range(batches):
        chosen = rng.choice(keys, hits, replace=False)
        missing = keys + rng.choice(keys, size - hits, replace=False)
        out.append(rng.permutation(np.concatenate([chosen, missing])).astype(np.int64))
    return out


def timed_reads(tier: Any, batches: list[np.ndarray], hit_share: float) -> tuple[list[float], int]:
    """Milliseconds per batch; wrong rows (verified outside the timing)."""
    times, wrong = [], 0
    for keys in batches:
        array = pa.array(keys)
        started = time.perf_counter()
        result = tier.get(array)
        times.append((time.perf_counter() - started) * 1e3)
        wrong += wrong_rows(keys, result)
        expected_hits = int(len(keys) * hit_share)
        if int(result[0].sum()) != expected_hits:
            raise AssertionError(f"{tier.name}: {int(result[0].sum())} hits of {expected_hits}")
    return times, wrong


def summary(times: list[float]) -> dict[str, float]:
    return {"median_ms": float(np.median(times)), "p95_ms": float(np.percentile(times, 95)),
            "batches": len(times)}


def peak_blocks(call: Callable[[], Any]) -> int:
    """The most pymalloc blocks alive at any call or return during ``call`` (Python
    objects, mostly), less those alive before."""
    gc.collect()
    gc.disable()
    base = peak = sys.getallocatedblocks()

    def sample(frame: Any, event: str, arg: Any) -> None:
        nonlocal peak
        peak = max(peak, sys.getallocatedblocks())

    sys.setprofile(sample)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    peak = max(peak, sys.getallocatedblocks())
    del result
    gc.enable()
    return peak - base


def objects_per_key(call: Callable[[pa.Array], Any], rng: np.random.Generator, keys: int
                    ) -> float:
    """Python objects per key on a read: the peak for 2,000 keys less that for 1,000."""
    per = []
    for _ in range(3):
        small = pa.array(rng.choice(keys, 1000, replace=False).astype(np.int64))
        large = pa.array(rng.choice(keys, 2000, replace=False).astype(np.int64))
        call(small)
        call(large)  # warm: parsed blocks and the like are not counted
        per.append((peak_blocks(lambda a=large: call(a))
                    - peak_blocks(lambda a=small: call(a))) / 1000)
    return float(np.median(per))


def spawn_role(role: str, mechanism: str, directory: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, SCRIPT, "--role", role, "--mechanism", mechanism,
         "--dir", str(directory), *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


SHARES = (1.0, 0.5)  # host hits in a batch


def parallel_reads(mechanism: str, directory: Path, keys: int, batches: int, readers: int
                   ) -> list[tuple[list[float], int]]:
    """Per share of hits: every reader's times and wrong rows, all readers at once."""
    procs = [spawn_role("reader", mechanism, directory, "--keys", str(keys), "--batches",
                        str(batches), "--seed", str(100 + i)) for i in range(readers)]
    out = []
    for _ in SHARES:
        for proc in procs:  # every reader is open and warm before any starts timing
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{mechanism} reader failed")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        times: list[float] = []
        wrong = 0
        for proc in procs:
            assert proc.stdout is not None
            result = json.loads(proc.stdout.readline())
            times += result["times"]
            wrong += result["wrong"]
        out.append((times, wrong))
    for proc in procs:
        proc.communicate(timeout=60)
    return out


def reader_role(tier: Any, keys: int, batches: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for share in SHARES:
        work = key_batches(rng, keys, batches, share)
        timed_reads(tier, work[:5], share)  # warm (this process's maps and parses)
        print("ready", flush=True)
        sys.stdin.readline()
        times, wrong = timed_reads(tier, work, share)
        print(json.dumps({"times": times, "wrong": wrong}), flush=True)


def writer_role(tier: Any, keys: int, seed: int, inject: float | None, once: bool) -> None:
    """Overwrite random cached keys with rising versions until killed; with
    ``inject``: one batch, killed by itself part-way (the worst point); with ``once``:
    one batch."""
    rng = np.random.default_rng(seed)
    if inject is not None or once:
        tier.put(make_rows(rng.choice(keys, BATCH, replace=False), 7), crash_after=inject)
        return
    print("ready", flush=True)
    version = seed * 1000
    while True:
        version += 1
        tier.put(make_rows(rng.choice(keys, BATCH, replace=False), version))


def crash_test(mechanism: str, tier: Any, directory: Path, keys: int, kills: int,
               rng: np.random.Generator) -> dict[str, Any]:
    """A writer killed with SIGKILL at random points while this process reads and
    verifies, then the whole tier verified; then one kill at the worst point."""
    verified = wrong = 0
    everything = np.arange(keys, dtype=np.int64)

    def check_all() -> tuple[int, int]:
        lost = bad = 0
        for start in range(0, keys, 10_000):
            part = everything[start : start + 10_000]
            result = tier.get(pa.array(part))
            bad += wrong_rows(part, result)
            lost += int((~result[0]).sum())
        return lost, bad

    lost_total = 0
    for kill in range(kills):
        writer = spawn_role("writer", mechanism, directory, "--keys", str(keys),
                            "--seed", str(kill + 1))
        assert writer.stdout is not None
        writer.stdout.readline()
        deadline = time.monotonic() + float(rng.uniform(0.05, 0.5))
        while time.monotonic() < deadline:
            batch = rng.choice(keys, BATCH, replace=False).astype(np.int64)
            wrong += wrong_rows(batch, tier.get(pa.array(batch)))
            verified += 1
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        lost, bad = check_all()
        lost_total += lost
        wrong += bad
    # the worst point: half a batch written, a torn slot or half a request, then SIGKILL
    injected = spawn_role("writer", mechanism, directory, "--keys", str(keys),
                          "--seed", "999", "--inject", "0.5")
    injected.wait(timeout=120)
    lost, bad = check_all()
    # the next writer must not hang on a lock the dead one held
    started = time.perf_counter()
    after = spawn_role("writer", mechanism, directory, "--keys", str(keys), "--seed", "998",
                       "--once")
    try:
        after.wait(timeout=30)
        next_writer_s: float | None = time.perf_counter() - started
    except subprocess.TimeoutExpired:
        after.kill()
        next_writer_s = None
    lost2, bad2 = check_all()
    return {"kills": kills, "batches_verified_during_writes": verified,
            "wrong_rows": wrong + bad + bad2, "keys_lost_after_random_kills": lost_total,
            "keys_lost_after_injected_kill": lost, "keys_lost_after_next_writer": lost2,
            "injected_kill_signal": -injected.returncode,
            "next_writer_finished_s": next_writer_s}


def measure(mechanism: str, root: Path, keys: int, batches: int, readers: int, kills: int,
            rng: np.random.Generator) -> dict[str, Any]:
    directory = root / mechanism
    load_before = os.getloadavg()
    if mechanism == "mmap-hash":  # a fixed table, at most about 30% full here
        capacity = 1 << 16
        while capacity < 3 * keys:
            capacity *= 2
        tier = MmapHash(directory, capacity)
    else:
        tier = MECHANISMS[mechanism](directory)
    write_times = []
    for start in range(0, keys, BATCH):
        batch = make_rows(np.arange(start, min(start + BATCH, keys)), 0)
        started = time.perf_counter()
        tier.put(batch)
        write_times.append((time.perf_counter() - started) * 1e3)
    out: dict[str, Any] = {"write_batch_1000": summary(write_times)}
    for share in SHARES:
        work = key_batches(rng, keys, batches, share)
        timed_reads(tier, work[:5], share)
        times, wrong = timed_reads(tier, work, share)
        out[f"read_{int(share * 100)}pct"] = {**summary(times), "wrong_rows": wrong}
    for share, (times, wrong) in zip(SHARES, parallel_reads(
            mechanism, directory, keys, batches, readers), strict=True):
        out[f"read_{int(share * 100)}pct_{readers}_readers"] = {**summary(times),
                                                               "wrong_rows": wrong}
    out["objects_per_key_read"] = objects_per_key(tier.get, rng, keys)
    if isinstance(tier, SocketTier):
        state = ServerState()  # the host process's side, measured in this process
        for start in range(0, keys, 10_000):
            part = make_rows(np.arange(start, min(start + 10_000, keys)), 0)
            state.handle(b"P", bytearray(_ipc(part).to_pybytes()))

        def server_side(keys_array: pa.Array) -> Any:
            request = bytearray(_ipc(pa.record_batch([keys_array], names=["key"])).to_pybytes())
            return state.handle(b"G", request)

        out["objects_per_key_read_server"] = objects_per_key(server_side, rng, keys)
    out["crash"] = crash_test(mechanism, tier, directory, keys, kills, rng)
    out["files_bytes"] = sum(p.stat().st_blocks * 512 for p in directory.rglob("*")
                             if p.is_file())
    tier.close()
    if isinstance(tier, SocketTier):
        deadline = time.monotonic() + IDLE_SECONDS + 5
        while (directory / "sock").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        out["server_gone_after_idle"] = not (directory / "sock").exists()
    out["load_average"] = [load_before[0], os.getloadavg()[0]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run (< 60 s)")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS))
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--mechanism", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--inject", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve))
        return
    if args.role:
        tier = MECHANISMS[args.mechanism](Path(args.dir))
        if args.role == "reader":
            reader_role(tier, args.keys, args.batches, args.seed)
        else:
            writer_role(tier, args.keys, args.seed, args.inject, args.once)
        tier.close()
        return
    if args.quick:
        args.keys, args.batches, args.kills = min(args.keys, 20_000), 30, 1
    rng = np.random.default_rng(44)
    results: dict[str, Any] = {}
    skipped = {}
    with tempfile.TemporaryDirectory(prefix="host-tier-") as tmp:
        for mechanism in args.mechanisms.split(","):
            if mechanism.startswith("lmdb") and lmdb is None:
                skipped[mechanism] = "py lmdb is not installed (pip install lmdb)"
                print(f"{mechanism}: skipped, {skipped[mechanism]}", flush=True)
                continue
            started = time.perf_counter()
            result = measure(mechanism, Path(tmp), args.keys, args.batches, args.readers,
                             args.kills, rng)
            result["seconds"] = time.perf_counter() - started
            results[mechanism] = result
            r100, r50 = result["read_100pct"], result["read_50pct"]
            p100 = result[f"read_100pct_{args.readers}_readers"]
            crash = result["crash"]
            print(f"{mechanism}: write {result['write_batch_1000']['median_ms']:.2f} ms; "
                  f"read 100% {r100['median_ms']:.2f}/{r100['p95_ms']:.2f} ms, "
                  f"50% {r50['median_ms']:.2f}/{r50['p95_ms']:.2f} ms, "
                  f"{args.readers} readers 100% {p100['median_ms']:.2f}/{p100['p95_ms']:.2f} ms"
                  f"; {result['objects_per_key_read']:.2f} objects/key; "
                  f"wrong rows {crash['wrong_rows']}, lost {crash['keys_lost_after_random_kills']}"
                  f"/{crash['keys_lost_after_injected_kill']}; "
                  f"load {result['load_average']}; {result['seconds']:.0f} s", flush=True)
    path = write_result("host_tier_mechanisms", {
        "command": " ".join([".venv/bin/python", "benchmarks/host_tier_mechanisms.py",
                             *sys.argv[1:]]),
        "keys": args.keys, "batch": BATCH, "batches": args.batches, "readers": args.readers,
        "lmdb_version": None if lmdb is None else lmdb.__version__,
        "pyarrow_version": pa.__version__, "skipped": skipped, "results": results,
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
