"""The host tier's rows: append-only files of Arrow IPC record batches, one block per put.

A block is a 16-byte header (magic, length, CRC-32 of the message) and one record-batch
message. The writer (holding the tier's lock) writes a block in full, then moves the
file's tail past it, so a reader never parses a block a killed writer left half
written. A reader maps each file once, parses the blocks below the tail once, checks
their CRC on that first parse, and keeps them as zero-copy slices of the mapping: the
pages are the host's one copy.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from cache.base import row_ranges

__all__ = ["SEGMENT_BYTES", "Segments"]

SEGMENT_BYTES = 1 << 30
"""A segment's mapped size: sparse, so only written pages take room."""
_MAGIC = b"SLHTSEG1"
_HEADER = 64  # magic, generation, tail
_BLOCK_MAGIC = 0x534C4231
_BLOCK_HEADER = struct.Struct("<IIII")  # magic, message length, crc32, reserved


class _Parsed:
    """What one process parsed of one segment: blocks below ``end``."""

    __slots__ = ("bases", "batches", "end", "offsets")

    def __init__(self) -> None:
        self.end = _HEADER
        self.batches: list[pa.RecordBatch | None] = []
        self.offsets: list[int] = []
        self.bases = np.zeros(1, dtype=np.int64)


class Segments:
    """Segment files ``seg-NNNNN`` of one generation of the tier (``directory``)."""

    def __init__(self, directory: Path, generation: int, schema: pa.Schema) -> None:
        self.directory = directory
        self.generation = generation
        self.schema = schema
        self._maps: dict[int, mmap.mmap] = {}
        self._parsed: dict[int, _Parsed] = {}
        self._writing = 0

    def _path(self, segment: int) -> Path:
        return self.directory / f"seg-{segment:05d}"

    # --- the writer's side (under the tier's lock)

    def used_bytes(self) -> int:
        """Bytes written to every segment of this generation."""
        total = 0
        segment = 0
        while True:
            try:
                with open(self._path(segment), "rb") as f:
                    header = f.read(_HEADER)
            except FileNotFoundError:
                return total
            if len(header) == _HEADER and header[:8] == _MAGIC:
                total += struct.unpack_from("<Q", header, 16)[0]
            segment += 1

    def last(self) -> int:
        """The segment appends go to."""
        segment = self._writing
        while self._path(segment + 1).exists():
            segment += 1
        return segment

    def blocks(self, segment: int) -> tuple[list[int], list[pa.RecordBatch | None]]:
        """The offsets and rows of every block of ``segment`` (None: failed its CRC)."""
        parsed = self._parse(segment, SEGMENT_BYTES)
        return ([], []) if parsed is None else (parsed.offsets, parsed.batches)

    def append(self, rows: pa.Table) -> tuple[int, int]:
        """Write ``rows`` as one block: its segment and the offset of its header."""
        batch = rows.combine_chunks().to_batches()
        record = batch[0] if batch else pa.RecordBatch.from_pylist([], schema=self.schema)
        message = record.serialize()
        size = _BLOCK_HEADER.size + message.size
        segment = self._writing
        while self._path(segment + 1).exists():
            segment += 1
        while True:
            fd = os.open(self._path(segment), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                header = os.pread(fd, _HEADER, 0)
                if (len(header) == _HEADER and header[:8] == _MAGIC
                        and struct.unpack_from("<Q", header, 8)[0] != self.generation):
                    header = b""  # not this generation's: never written into
                elif header and (len(header) < _HEADER or header[:8] != _MAGIC):
                    # Damaged: readers may still map blocks of it, so it is never
                    # written again (nor shrunk under them); appends go to the next.
                    segment += 1
                    continue
                if not header:
                    if os.fstat(fd).st_size:
                        segment += 1
                        continue
                    os.ftruncate(fd, SEGMENT_BYTES)
                    os.pwrite(fd, _MAGIC + struct.pack("<QQ", self.generation, _HEADER), 0)
                    tail = _HEADER
                else:
                    tail = struct.unpack_from("<Q", header, 16)[0]
                    if tail < _HEADER or tail % 8:
                        segment += 1  # a damaged tail: writing there could overwrite blocks
                        continue
                if tail + size <= SEGMENT_BYTES:
                    crc = zlib.crc32(message)
                    os.pwrite(fd, _BLOCK_HEADER.pack(_BLOCK_MAGIC, message.size, crc, 0)
                              + message.to_pybytes(), tail)
                    # Only now is the block visible: a killed writer leaves the tail.
                    os.pwrite(fd, struct.pack("<Q", tail + size), 16)
                    self._writing = segment
                    return segment, tail
            finally:
                os.close(fd)
            segment += 1

    # --- the readers' side

    def _map(self, segment: int) -> mmap.mmap | None:
        mapped = self._maps.get(segment)
        if mapped is None:
            try:
                with open(self._path(segment), "rb") as f:
                    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                return None
            if (len(mapped) < SEGMENT_BYTES or mapped[:8] != _MAGIC
                    or struct.unpack_from("<Q", mapped, 8)[0] != self.generation):
                mapped.close()
                return None  # another generation's, or not ours: nothing of it is served
            self._maps[segment] = mapped
        return mapped

    def _parse(self, segment: int, need: int) -> _Parsed | None:
        """The segment parsed at least past offset ``need``; None if it cannot be read."""
        parsed = self._parsed.get(segment)
        if parsed is None:
            parsed = self._parsed[segment] = _Parsed()
        if need < parsed.end:
            return parsed
        mapped = self._map(segment)
        if mapped is None:
            return None
        tail = struct.unpack_from("<Q", mapped, 16)[0]
        if tail > SEGMENT_BYTES:
            return parsed
        buffer = pa.py_buffer(mapped)
        added = False
        while parsed.end + _BLOCK_HEADER.size <= tail:
            start = parsed.end
            magic, length, crc, _ = _BLOCK_HEADER.unpack_from(mapped, start)
            body = start + _BLOCK_HEADER.size
            if magic != _BLOCK_MAGIC or body + length > tail:
                parsed.end = tail  # damaged: nothing after it can be found either
                break
            batch: pa.RecordBatch | None = None
            message = buffer.slice(body, length)
            if zlib.crc32(memoryview(mapped)[body: body + length]) == crc:
                try:
                    batch = pa.ipc.read_record_batch(message, self.schema)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OSError):
                    batch = None
            parsed.batches.append(batch)
            parsed.offsets.append(start)
            parsed.end = body + length
            added = True
        if added:
            counts = [0 if b is None else b.num_rows for b in parsed.batches]
            parsed.bases = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        return parsed

    def gather(self, segment: np.ndarray, offset: np.ndarray, first: np.ndarray,
               count: np.ndarray) -> tuple[np.ndarray, pa.Table]:
        """The rows of references (one per key, numpy arrays): which resolved, and
        their rows, key after key. A reference to a block that is not there, or did not
        pass its checksum, does not resolve."""
        ok = np.zeros(len(segment), dtype=bool)
        pieces: list[pa.RecordBatch] = []
        owners: list[np.ndarray] = []
        for seg in np.unique(segment):  # a Python step per segment and block touched
            mine = np.flatnonzero(segment == seg)
            parsed = self._parse(int(seg), int(offset[mine].max()))
            if parsed is None or not parsed.offsets:
                continue
            offsets = np.asarray(parsed.offsets, dtype=np.int64)
            block = np.minimum(np.searchsorted(offsets, offset[mine]), len(offsets) - 1)
            sizes = np.diff(parsed.bases)
            # A block that failed its checksum has no rows: references into it fail here.
            found = (offsets[block] == offset[mine]) & (first[mine] + count[mine] <= sizes[block])
            ok[mine[found]] = True
            mine, block = mine[found], block[found]
            # Taken block by block: a take over a table of many chunks concatenates
            # them all first (the whole tier, for a thousand rows).
            for b in np.unique(block):
                keys_here = mine[block == b]
                batch = parsed.batches[int(b)]
                assert batch is not None
                pieces.append(batch.take(pa.array(
                    row_ranges(first[keys_here], count[keys_here]), type=pa.int64())))
                owners.append(np.repeat(keys_here, count[keys_here]))
        if not pieces:
            return ok, self.schema.empty_table()
        rows = pa.Table.from_batches(pieces, self.schema)
        who = np.concatenate(owners)
        if len(pieces) > 1 and bool((np.diff(who) < 0).any()):
            rows = rows.take(pa.array(np.argsort(who, kind="stable"), type=pa.int64()))
        return ok, rows

    def close(self) -> None:
        self._parsed.clear()
        for mapped in self._maps.values():
            with contextlib.suppress(BufferError):  # a table still holds its pages
                mapped.close()
        self._maps.clear()
