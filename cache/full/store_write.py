"""Writing a snapshot store's files: a version (crash-safely, checked as it is written),
the pointer, the spools of a load, and the small records beside them."""

from __future__ import annotations

import contextlib
import os
import uuid
import zlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from cache.full.index_file import ComputedArray, write_arrays
from cache.full.spool import ColumnSpool, Span
from cache.full.store_format import (
    CHECKSUM_CHUNK,
    CURRENT,
    DAMAGED_PREFIX,
    META_KEY,
    VERSION_FILE,
    StoredSnapshot,
    as_embedded,
    checksum,
)

__all__ = ["SnapshotWriter"]

_TMP_PREFIX = ".tmp-"
_SPOOL_PREFIX = ".spool-"


class SnapshotWriter:
    """Writes the files of one store's directory for its `SnapshotStore`, which checks
    that it holds the lock first (only the holder writes versions and the pointer).

    ``wrote_batch`` is called after each record batch written to a version's temporary
    file (the store's test hook).
    """

    def __init__(self, directory: Path, *, fingerprint: str, batch_rows: int | None,
                 wrote_batch: Callable[[Path, int], None]) -> None:
        self._dir = directory
        self._fingerprint = fingerprint
        self._batch_rows = batch_rows
        self._wrote_batch = wrote_batch

    def spool(self, schema: pa.Schema) -> ColumnSpool:
        """A spool for the columns of the next version (see `SnapshotStore.spool`); spools
        left by a dead loader are deleted first."""
        self._remove_files(lambda name: name.startswith(_SPOOL_PREFIX))
        prefix = f"{_SPOOL_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}-"
        return ColumnSpool(self._dir, prefix, schema)

    def publish(
        self, table: pa.Table, *, version: int, loaded_at: float, unique: bool,
        source_version: str,
        index: tuple[Mapping[str, Any], Mapping[str, np.ndarray | ComputedArray]] | None,
        spool: ColumnSpool | None,
    ) -> StoredSnapshot:
        """Write ``table`` (and its key ``index``) as ``version``, point to it, and delete
        every other version and any temporary file left by a dead writer (see
        `SnapshotStore.publish`)."""
        if spool is not None and spool.finish() is not table:
            raise ValueError("publish(table, spool=...) takes the table the spool finished")
        stem = f"v{version:010d}-{round(loaded_at * 1000)}"
        record = StoredSnapshot(
            version=version, loaded_at=loaded_at, num_rows=table.num_rows, unique=unique,
            file=f"{stem}.arrow", fingerprint=self._fingerprint,
            source_version=source_version, index=f"{stem}.index" if index is not None else "")
        self._remove_files(lambda name: name.startswith((_TMP_PREFIX, DAMAGED_PREFIX)) or (
            name.startswith(_SPOOL_PREFIX) and (spool is None or not spool.holds(name))))
        metadata = {**(table.schema.metadata or {}), META_KEY: as_embedded(record).to_json()}
        data = self._dir / record.file
        tmp = self._tmp_name(".arrow")
        tmp_index = self._tmp_name(".index")
        try:
            try:
                # A spooled table is not read whole here: its batches were checked in full.
                table.validate(full=spool is None)
            except (pa.ArrowInvalid, ValueError) as exc:
                raise OSError(f"the table to publish as {record.file} is invalid: {exc}") from exc
            with open(tmp, "wb", buffering=0) as raw:
                sink = _ChecksummingSink(raw, () if spool is None else spool.spans())
                with pa.ipc.new_file(pa.PythonFile(sink, mode="w"),
                                     table.schema.with_metadata(metadata)) as writer:
                    # Uncompressed (the default) so that readers can map it without a copy.
                    for number, batch in enumerate(table.to_batches(self._batch_rows), 1):
                        writer.write_batch(batch)
                        self._wrote_batch(tmp, number)
            _fsync(tmp)
            record = replace(record, checksum=_checked_back(tmp, table, sink.checksum))
            if index is not None:
                write_arrays(tmp_index, *index)
                record = replace(record, index_checksum=checksum(tmp_index))
                os.replace(tmp_index, self._dir / record.index)
            os.replace(tmp, data)
            _fsync(self._dir)
            self.point(record)
        except BaseException:
            for name in (tmp, tmp_index):
                with contextlib.suppress(OSError):
                    name.unlink()
            raise
        kept = {record.file, record.index}
        self._remove_files(lambda name: bool(VERSION_FILE.fullmatch(name)) and name not in kept)
        return record

    def point(self, record: StoredSnapshot) -> None:
        """Make ``record`` the published version: ``CURRENT`` replaced, durably."""
        self.write_small(CURRENT, record.to_json(), durable=True)

    def _tmp_name(self, suffix: str) -> Path:
        return self._dir / f"{_TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}"

    def write_small(self, name: str, data: bytes, *, durable: bool) -> None:
        """Replace the file ``name`` with ``data`` atomically (``durable``: fsynced)."""
        tmp = self._tmp_name("")
        try:
            with open(tmp, "wb") as file:
                file.write(data)
                if durable:
                    file.flush()
                    os.fsync(file.fileno())
            os.replace(tmp, self._dir / name)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        if durable:
            _fsync(self._dir)

    def _remove_files(self, wanted: Callable[[str], bool]) -> None:
        for entry in os.scandir(self._dir):
            if wanted(entry.name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def _fsync(path: Path) -> None:
    # fsync flushes the inode's data whichever descriptor wrote it; a directory's fsync
    # makes a rename in it durable.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _ChecksummingSink:
    """A binary file that keeps the CRC-32 of every byte written through it.

    A buffer of the table that lies in one of ``spans`` (a spooled table's mapped
    files) is copied from its file a chunk at a time instead of read through the map,
    which would bring each of its pages into the writer's resident set: the same bytes,
    read through the page cache.
    """

    def __init__(self, raw: Any, spans: tuple[Span, ...] | list[Span] = ()) -> None:
        self._raw = raw
        self._spans = spans
        self._crc = 0
        self._chunk: bytearray | None = None
        self.closed = False

    @property
    def checksum(self) -> str:
        return f"{self._crc:08x}"

    def write(self, data: Any) -> int:
        if self._spans and isinstance(data, pa.Buffer):
            for span in self._spans:
                start = data.address - span.address
                if start >= 0 and start + data.size <= span.size:
                    self._copy(span.path, start, data.size)
                    return int(data.size)
        view = memoryview(data).cast("B")
        self._put(view)
        return len(view)

    def _put(self, view: memoryview) -> None:
        self._crc = zlib.crc32(view, self._crc)
        while view:  # an unbuffered write may take part of it (at most 2 GiB at once)
            view = view[self._raw.write(view):]

    def _copy(self, path: Path, start: int, size: int) -> None:
        if self._chunk is None:
            self._chunk = bytearray(CHECKSUM_CHUNK)
        chunk = memoryview(self._chunk)
        with open(path, "rb", buffering=0) as source:
            source.seek(start)
            while size:
                got = source.readinto(chunk[:min(size, len(chunk))])
                if not got:
                    raise OSError(f"{path} ends before the table's buffer it holds")
                self._put(chunk[:got])
                size -= got

    def tell(self) -> int:
        position: int = self._raw.tell()
        return position

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        self.closed = True
        self._raw.flush()


def _checked_back(path: Path, table: pa.Table, written: str) -> str:
    """Check that ``path`` holds the bytes written (``written``: their CRC-32) and is a
    whole Arrow file of ``table``'s schema and rows; return its checksum.

    Raises
    ------
    OSError
        When it is not (nothing is published then).
    """
    found = checksum(path)
    if found != written:
        raise OSError(f"{path} does not hold the bytes written (checksum {found}, {written})")
    with pa.memory_map(str(path), "r") as source:
        try:  # the footer and each batch's metadata only: no data page is read
            reader = pa.ipc.open_file(source)
            rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
            same = reader.schema.remove_metadata().equals(table.schema.remove_metadata())
        except (pa.ArrowInvalid, ValueError) as exc:
            raise OSError(f"{path} failed its check after writing: {exc}") from exc
    if rows != table.num_rows or not same:
        raise OSError(f"{path} holds {rows} rows (schema {'as' if same else 'unlike'} written), "
                      f"not {table.num_rows}")
    return found
