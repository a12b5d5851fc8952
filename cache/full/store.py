"""A host-level store of full-cache snapshots: Arrow IPC files every process maps.

Design notes: DESIGN.md, cache/ ``cache/full/store.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from cache.full.index_file import ComputedArray, map_arrays
from cache.full.spool import ColumnSpool
from cache.full.store_format import (
    CURRENT,
    DAMAGED_PREFIX,
    FORMAT_VERSION,
    META_KEY,
    StoredSnapshot,
    as_embedded,
    checksum,
)
from cache.full.store_write import SnapshotWriter
from spark_lookup.errors import ConfigError
from spark_lookup.host_dirs import sweep_directories, sweep_once, trash_path, try_flock
from spark_lookup.options import check_int

__all__ = [
    "DEFAULT_RETENTION",
    "FORMAT_VERSION",
    "Mapped",
    "SnapshotStore",
    "StoredSnapshot",
    "check_store_name",
    "default_snapshot_root",
    "sweep",
]

log = logging.getLogger("cache")

DEFAULT_RETENTION = timedelta(days=1)
"""How long a store nobody uses is kept before a sweep deletes it."""

_LOCK = "lock"
_USERS = "users"
_FAILED = "FAILED"
_MARKER = ".spark-lookup-store"
_TRASH_PREFIX = ".trash-"
_VERIFIED = "VERIFIED"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_READ_ATTEMPTS = 5


def default_snapshot_root() -> Path:
    """``<system temp dir>/spark-lookup-snapshots``: where stores go by default."""
    return Path(tempfile.gettempdir()) / "spark-lookup-snapshots"


def check_store_name(name: object, what: str = "snapshot_name") -> str:
    """Return ``name`` if it can name a store directory, else raise [`ConfigError`][].

    1-128 letters, digits, ``_``, ``.`` or ``-``, starting with a letter or digit (so
    never a hidden file, a path or ``..``).
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"{what} must be 1-128 letters, digits, '_', '.' or '-' starting with a letter "
            f"or digit, got {name!r}"
        )
    return name



class Mapped(NamedTuple):
    """A published version, mapped: its table and its key index (header and arrays, or
    None for a version written without one)."""

    table: pa.Table
    key_index: tuple[dict[str, Any], dict[str, np.ndarray]] | None


class SnapshotStore:
    """The files of one table's snapshots in one local directory, shared by processes.

    Built where it is used (a Python worker); holds only paths and open lock files, and
    is not meant to be pickled. Thread-safe: the loading thread and the lookup threads
    of a process may use one store at once. One process at a time publishes (the one
    that holds `try_lock`); any number read.

    Parameters
    ----------
    directory : str or os.PathLike
        The store's directory (its name is the table's identity); created on first use
        with mode 0700. Its parent must be owned by this user and not writable by
        others, since the files are trusted once found there.
    fingerprint : str
        What the table is (key columns and schema, say): versions with another
        fingerprint are ignored, and replaced by the next publish.
    batch_rows : int, optional
        Rows per Arrow record batch written (default: the whole table in one batch,
        which is what readers index fastest).
    retention : timedelta
        A sibling store in the same parent directory that no process has attached for
        this long, and that nobody uses now, is deleted by `attach` (once per
        process per parent directory).

    Raises
    ------
    ConfigError
        For an invalid argument.

    Examples
    --------
    >>> import pyarrow as pa, tempfile, os
    >>> store = SnapshotStore(os.path.join(tempfile.mkdtemp(), "countries"))
    >>> store.attach()
    >>> with store.try_lock() as locked:
    ...     record = store.publish(pa.table({"id": [1, 2]}), version=1, loaded_at=0.0,
    ...                            unique=True)
    >>> record.version, record.file
    (1, 'v0000000001-0.arrow')
    >>> found = store.read_latest()
    >>> found[0] == record, found[1].column("id").to_pylist()
    (True, [1, 2])
    >>> store.detach()
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fingerprint: str = "",
        batch_rows: int | None = None,
        retention: timedelta = DEFAULT_RETENTION,
    ) -> None:
        self._dir = Path(directory)
        check_store_name(self._dir.name, "the store directory's name")
        if not isinstance(fingerprint, str):
            raise ConfigError(f"fingerprint must be a str, got {fingerprint!r}")
        self.fingerprint = fingerprint
        self._batch_rows = None if batch_rows is None else check_int(batch_rows, "batch_rows")
        if not isinstance(retention, timedelta) or retention <= timedelta(0):
            raise ConfigError(f"retention must be a positive timedelta, got {retention!r}")
        self._retention = retention
        self._writer = SnapshotWriter(self._dir, fingerprint=fingerprint,
                                      batch_rows=self._batch_rows, wrote_batch=self._wrote_batch)
        self._state_lock = threading.Lock()
        self._users_fd: int | None = None
        self._lock_fd: int | None = None
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"SnapshotStore({str(self._dir)!r})"

    @property
    def directory(self) -> Path:
        """The store's directory."""
        return self._dir

    # --- lifecycle

    def attach(self) -> None:
        """Start using the store: create the directory if needed and hold the shared
        ``users`` lock (a store in use is never swept). Idempotent.

        Also, once per process per parent directory, deletes sibling stores left behind
        (see ``retention``).

        Raises
        ------
        ConfigError
            When the directory or its parent is not owned by this user, is writable by
            others, or is a symbolic link.
        """
        with self._state_lock:
            if self._users_fd is not None:
                return
            for _ in range(_READ_ATTEMPTS):
                self._ensure_dir()
                fd = os.open(self._dir / _USERS, os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a sweep decides
                try:
                    same = os.fstat(fd).st_ino == os.stat(self._dir / _USERS).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    os.utime(fd)  # "last attached", what a sweep measures age from
                    self._users_fd = fd
                    break
                os.close(fd)  # a sweep removed the directory under us: make it again
            else:  # pragma: no cover - needs a sweep racing us five times
                raise OSError(f"could not attach {self._dir}: it keeps being swept")
        root, keep, retention = self._dir.parent, self._dir, self._retention
        sweep_once(root, lambda: sweep(root, keep=keep, retention=retention), log=log,
                   what="snapshot stores")

    def detach(self) -> None:
        """Stop using the store (releases the ``users`` lock). Idempotent."""
        with self._state_lock:
            fd, self._users_fd = self._users_fd, None
        if fd is not None:
            os.close(fd)

    # --- reading

    def pointer_key(self) -> tuple[int, int] | None:
        """A cheap fingerprint of ``CURRENT`` (inode, mtime): changes with every publish.

        One ``stat``; None when nothing is published. Readers call it at most every few
        milliseconds to notice a new version without reading anything.
        """
        try:
            st = os.stat(self._dir / CURRENT)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def latest(self) -> StoredSnapshot | None:
        """The published version, or None (none yet, unreadable, of a newer format, or
        of another fingerprint; the reason is logged once)."""
        try:
            data = (self._dir / CURRENT).read_bytes()
        except FileNotFoundError:
            return None
        try:
            record = StoredSnapshot.from_json(data)
        except ValueError as exc:
            self._warn_once(f"{self._dir / CURRENT} is ignored: {exc}")
            return None
        if record.fingerprint != self.fingerprint:
            self._warn_once(
                f"{self._dir} holds a table of another shape (fingerprint "
                f"{record.fingerprint!r}, expected {self.fingerprint!r}); it will be replaced"
            )
            return None
        return record

    def read(self, record: StoredSnapshot) -> pa.Table:
        """Map the data file of ``record`` and read it without copying (see `open`)."""
        return self.open(record).table

    def open(self, record: StoredSnapshot) -> Mapped:
        """Map the data and key index files of ``record``, without copying.

        Their checksums are checked first, unless ``VERIFIED`` records that a process of
        this host checked these very files (same identity) already: a damaged file is
        never mapped (reading a bad offset from a map can crash the process); the version
        is set aside as ``.damaged-<file>`` so that no process reads it again.

        Raises
        ------
        FileNotFoundError
            When the version has been deleted (a newer one was published meanwhile).
        ValueError
            When a file is damaged (set aside) or not the version ``record`` describes.
        """
        path = self._dir / record.file
        files = [(path, record.checksum)]
        if record.index:
            files.append((self._dir / record.index, record.index_checksum))
        identities = [_identity(name) for name, _ in files]
        if not self._was_verified(record, identities):
            for name, expected in files:
                found = checksum(name)
                if found != expected:
                    self._set_aside(record)
                    log.error("snapshot %s is damaged (checksum %s, published %s): set aside; "
                              "the next load rebuilds it from the source", name, found, expected)
                    raise ValueError(f"{name} is damaged: its checksum does not match")
            self._record_verified(record, identities)
        with pa.memory_map(str(path), "r") as source:
            table = pa.ipc.open_file(source).read_all()
        metadata = dict(table.schema.metadata or {})
        written = metadata.pop(META_KEY, None)
        # The load time may have moved on since the file was written (confirm()).
        if written is None or replace(StoredSnapshot.from_json(written), loaded_at=0.0) != (
                replace(as_embedded(record), loaded_at=0.0)):
            raise ValueError(f"{path} is not the version {record}")
        index = map_arrays(self._dir / record.index) if record.index else None
        # Our record stays in the file; the table served carries the source's metadata only.
        return Mapped(table.replace_schema_metadata(metadata or None), index)

    def read_latest(self) -> tuple[StoredSnapshot, pa.Table] | None:
        """The published version and its mapped table, or None when there is none (or
        it cannot be read: logged, and the next publish replaces it)."""
        found = self.open_latest()
        return None if found is None else (found[0], found[1].table)

    def open_latest(self) -> tuple[StoredSnapshot, Mapped] | None:
        """The published version and its mapped files (see `open`), or None when
        there is none (or it cannot be read: logged, and the next publish replaces it)."""
        for _ in range(_READ_ATTEMPTS):
            record = self.latest()
            if record is None:
                return None
            try:
                return record, self.open(record)
            except FileNotFoundError:
                continue  # deleted after we read the pointer: a newer version is published
            except (OSError, pa.ArrowInvalid, ValueError) as exc:
                self._warn_once(f"{self._dir / record.file} is unreadable and ignored: {exc}")
                return None
        return None

    def _set_aside(self, record: StoredSnapshot) -> None:
        for name in (record.file, record.index):
            if name:
                with contextlib.suppress(OSError):  # another reader may have moved it first
                    os.replace(self._dir / name, self._dir / f"{DAMAGED_PREFIX}{name}")

    def _was_verified(self, record: StoredSnapshot, identities: list[list[int]]) -> bool:
        try:
            raw = json.loads((self._dir / _VERIFIED).read_bytes())
        except (FileNotFoundError, ValueError):
            return False
        return bool(raw == _verified_entry(record, identities))

    def _record_verified(self, record: StoredSnapshot, identities: list[list[int]]) -> None:
        try:
            entry = json.dumps(_verified_entry(record, identities)).encode()
            self._writer.write_small(_VERIFIED, entry, durable=False)
        except OSError as exc:  # only a saving: the next reader checks again
            log.debug("could not record the check of %s: %s", record.file, exc)

    def last_failure(self) -> tuple[float, str] | None:
        """(epoch seconds, error text) of the latest failed load, if any."""
        try:
            raw = json.loads((self._dir / _FAILED).read_bytes())
            return float(raw["at"]), str(raw["error"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    # --- the lock, and writing (the files themselves: `SnapshotWriter`)

    @contextlib.contextmanager
    def try_lock(self) -> Iterator[bool]:
        """Try to become the one process that loads and publishes (non-blocking).

        Yields True while this process holds the exclusive ``lock`` file lock, False when
        another process holds it. The lock is released on exit, and by the kernel if the
        process dies, so a crashed loader never blocks the others.
        """
        self._ensure_dir()
        fd = os.open(self._dir / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if not try_flock(fd):
                yield False
                return
            self._lock_fd = fd
            try:
                yield True
            finally:
                self._lock_fd = None
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def spool(self, schema: pa.Schema) -> ColumnSpool:
        """A spool for the columns of the next version, in the store's directory: a
        load appends its batches to it as they arrive, and `publish` writes the
        spooled table from its files. Spools left by a dead loader are deleted first.

        Call inside ``with store.try_lock() as locked`` when ``locked`` is True; the
        caller discards the spool once published (or abandoned).

        Raises
        ------
        RuntimeError
            When this store does not hold the lock.
        """
        if self._lock_fd is None:
            raise RuntimeError(f"{self!r}: spool() needs the lock (use try_lock())")
        return self._writer.spool(schema)

    def publish(
        self, table: pa.Table, *, version: int, loaded_at: float, unique: bool,
        source_version: str = "",
        index: tuple[Mapping[str, Any], Mapping[str, np.ndarray | ComputedArray]] | None = None,
        spool: ColumnSpool | None = None,
    ) -> StoredSnapshot:
        """Write ``table`` (and its key ``index``: header and arrays, see
        `cache.full.index_file`) as ``version`` and make it the published one,
        crash-safely; then delete every other version and any temporary file left by a
        dead writer.

        Call inside ``with store.try_lock() as locked`` when ``locked`` is True.
        ``table`` must be what readers index directly (sorted by key, no null key).
        With ``spool``, ``table`` is the one it finished (see `spool`): its
        batches were validated in full as they arrived, and its mapped buffers are
        copied from the spool's files, never read through the map.

        Raises
        ------
        RuntimeError
            When this store does not hold the lock.
        OSError
            When writing fails (disk full...): nothing is published, the temporary files
            are removed.
        """
        if self._lock_fd is None:
            raise RuntimeError(f"{self!r}: publish() needs the lock (use try_lock())")
        record = self._writer.publish(table, version=version, loaded_at=loaded_at,
                                      unique=unique, source_version=source_version,
                                      index=index, spool=spool)
        # Just checked while writing: readers need not read every byte again.
        self._record_verified(record, [_identity(self._dir / name)
                                       for name in (record.file, record.index) if name])
        return record

    def confirm(self, record: StoredSnapshot, loaded_at: float) -> StoredSnapshot:
        """Record that the published version ``record`` was found current at
        ``loaded_at`` (its source had not changed): the pointer is rewritten with that
        load time, and nothing else. No data file is written; readers serving the
        version keep their table and index and only count its age from ``loaded_at``.

        Call inside ``with store.try_lock() as locked`` when ``locked`` is True.

        Raises
        ------
        RuntimeError
            When this store does not hold the lock.
        ValueError
            When ``record`` is no longer the published version.
        """
        if self._lock_fd is None:
            raise RuntimeError(f"{self!r}: confirm() needs the lock (use try_lock())")
        current = self.latest()
        if current is None or replace(current, loaded_at=0.0) != replace(record, loaded_at=0.0):
            raise ValueError(f"{self!r}: {record} is not the published version")
        confirmed = replace(record, loaded_at=max(loaded_at, record.loaded_at))
        self._writer.point(confirmed)
        return confirmed

    def record_failure(self, at: float, error: str) -> None:
        """Remember that the load started at ``at`` failed (for processes waiting on it)."""
        body = json.dumps({"format": FORMAT_VERSION, "at": at, "error": error[:2000]})
        self._writer.write_small(_FAILED, body.encode(), durable=False)

    def _wrote_batch(self, path: Path, batches: int) -> None:
        """Called by the writer after each record batch written to a version's temporary file
        (a test hook)."""

    # --- helpers

    def _ensure_dir(self) -> None:
        for path in (self._dir.parent, self._dir):
            # parents: a configured root may not exist yet; both levels we own end 0700.
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            _check_private(path)
        marker = self._dir / _MARKER
        if not marker.exists():
            marker.write_bytes(b"a spark-lookup snapshot store: swept when unused\n")

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)




def _check_private(path: Path) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"snapshot directory {path} is not a directory (a symbolic link?)")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise ConfigError(
            f"snapshot directory {path} is owned by uid {st.st_uid} or writable by others "
            f"(mode {stat.filemode(st.st_mode)}): snapshots found there cannot be trusted; "
            "give snapshot_dir= a directory of this user's own"
        )


def _identity(path: Path) -> list[int]:
    """What changes whenever a file is written through the file system."""
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _verified_entry(record: StoredSnapshot, identities: list[list[int]]) -> dict[str, Any]:
    return {"format": FORMAT_VERSION, "file": record.file, "checksum": record.checksum,
            "index": record.index, "index_checksum": record.index_checksum,
            "identities": identities}


def sweep(root: Path, *, keep: Path | None = None, retention: timedelta = DEFAULT_RETENTION,
          now: float | None = None) -> list[Path]:
    """Delete the stores under ``root`` that nobody uses and nobody attached for
    ``retention``; return their paths. Only directories carrying the store's marker file
    are considered: nothing else under ``root`` is ever deleted.

    "Nobody uses" is checked by taking the ``users`` lock exclusively (non-blocking),
    and the store is renamed away while that lock is held, so a process attaching at the
    same moment either keeps it or builds a new one, never uses a half-deleted one.
    """
    now = time.time() if now is None else now

    def considered(path: Path) -> bool:
        # Not a store of ours (whatever files it holds): never deleted.
        return path != keep and (path / _MARKER).is_file()

    def set_aside(path: Path) -> Path | None:
        try:
            fd = os.open(path / _USERS, os.O_RDWR)
        except FileNotFoundError:
            return None  # being created, or not a store
        try:
            try:
                free = try_flock(fd)
            except OSError:
                free = False  # cannot tell: kept
            if not free or now - os.fstat(fd).st_mtime < retention.total_seconds():
                return None  # in use, or attached lately
            trash = trash_path(path, _TRASH_PREFIX)
            os.rename(path, trash)
            return trash
        finally:
            os.close(fd)

    return sweep_directories(root, set_aside, trash_prefix=_TRASH_PREFIX,
                             considered=considered, log=log, what="the snapshot store",
                             unused_for=retention)
