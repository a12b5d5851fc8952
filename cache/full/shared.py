"""A full cache whose snapshots are shared by every process of the host.

`SharedFullCache` is a `LookupFullCache` that serves the
version published in a `SnapshotStore`: the table and its
key index are memory maps of the store's files (one copy of the pages for all
processes), so a process that opens a published version builds nothing proportional to
the table. A version published without an index (an older format) is indexed here. The
process that loads writes the new version into the store as it is read
(`SharedFullCache.stage`, then `SharedFullCache.publish`). When to reload is the
caller's business (the full caching runtime); who loads is this class's
(`SharedFullCache.reload`: the store's lock, then adopt, confirm or publish). It switches
to a newer published version, at most one ``stat`` of the pointer per ``check_interval``,
at the next lookup.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NoReturn

import pyarrow as pa

from cache.full.index import KeyIndex
from cache.full.snapshot import FullSnapshot, LookupFullCache
from cache.full.spool import ColumnSpool
from cache.full.store import Mapped, SnapshotStore, StoredSnapshot
from cache.metrics import CacheMetrics
from cache.string_views import StringViews
from spark_lookup import options as opts
from spark_lookup.errors import LookupLoadError

__all__ = ["DEFAULT_CHECK_INTERVAL", "Install", "Loader", "SharedFullCache", "Unchanged"]

log = logging.getLogger("cache")

DEFAULT_CHECK_INTERVAL = dt.timedelta(milliseconds=100)
"""How often a lookup may look for a newer published version (one ``stat``)."""

_LOCK_POLL_SECONDS = 0.05
"""How often a process waiting for another's load looks for its publication."""

Install = Callable[[FullSnapshot], object]
"""Serves a snapshot just loaded (publishes it, here)."""

Unchanged = tuple[str, Callable[[float], object]]
"""The source version of what is served, and what to run (with the time of the check)
when the source is still at it."""


@dataclass(frozen=True)
class Loader:
    """What `SharedFullCache.reload` needs of the runtime that loads for it."""

    describe: str
    """The table, for messages."""
    load: Callable[[int, Install, Unchanged | None, Callable[[BaseException], object]], None]
    """Load the source as version N and install it, or run the unchanged action; on a
    failure after every retry, run the last argument with the error, then raise it."""
    due: Callable[[float], float | None]
    """When a version loaded at a time comes due on the schedule (None: never)."""
    record: Callable[..., bool]
    """Run actions that record a reload's outcome unless the runtime is closed (atomic
    with its close); whether they ran."""
    closed: threading.Event
    """Set when the runtime closes: nothing is waited for, adopted or loaded after it."""
    min_interval: float | None = None
    """The change feed's least interval between reloads, in seconds (None: no feed)."""


class SharedFullCache(LookupFullCache):
    """Serves lookups from the snapshot published in a host-level store.

    Built where it is used (a Python worker), not pickled. Thread-safe: lookups stay
    lock-free; switching versions takes a lock, and a lookup that finds another thread
    switching keeps the current version instead of waiting (unless it has none yet).

    Parameters
    ----------
    key_columns
        Columns lookups match on.
    store
        Where the snapshots are published; attached by `open`, detached by
        `close`.
    check_interval
        Lookups look for a newer version at most this often (default 100 ms).
    on_swap
        Called with every snapshot this cache starts serving (its own loads and the
        versions it switches to), after the swap.
    initial_load_timeout, max_staleness, clock
        As `LookupFullCache`; staleness is measured from the load time
        recorded in the store, whichever process loaded it.
    timer
        Monotonic seconds for ``check_interval`` (tests inject a fake).
    """

    def __init__(
        self,
        key_columns: Sequence[str],
        store: SnapshotStore,
        *,
        check_interval: dt.timedelta | float = DEFAULT_CHECK_INTERVAL,
        on_swap: Callable[[FullSnapshot], None] | None = None,
        initial_load_timeout: dt.timedelta = dt.timedelta(minutes=5),
        max_staleness: dt.timedelta | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(key_columns, initial_load_timeout=initial_load_timeout,
                         max_staleness=max_staleness, clock=clock)
        opts.check_instance(store, SnapshotStore, "store")
        self.store = store
        interval = opts.as_timedelta(check_interval, "check_interval", allow_zero=True)
        self.check_interval = interval.total_seconds()
        self._on_swap = on_swap
        self._timer = timer
        self._switch_lock = threading.Lock()
        self._last_check = -float("inf")
        self._seen: tuple[int, int] | None = None
        self._served: StoredSnapshot | None = None
        # A snapshot staged by this process and not yet published, with its spool.
        self._staged: tuple[FullSnapshot, ColumnSpool] | None = None
        self._staging_lock = threading.Lock()
        self._closed = False
        self.serve_from = -float("inf")
        """Published versions whose load started before this time are not switched to
        (one that may lack a change this process never heard: see lookup/runtime/full.py)."""

    def __reduce__(self) -> NoReturn:
        raise TypeError("a SharedFullCache holds open files and is built where it is used; "
                        "ship the provider, not the cache")

    # --- lifecycle

    def open(self, metrics: CacheMetrics | None = None) -> None:
        """Report into ``metrics`` and attach the store (creating its directory)."""
        super().open(metrics)
        with self._staging_lock:
            self._closed = False
        self.store.attach()

    def close(self) -> None:
        """Drop the snapshot (the map closes with its last user), delete what was
        staged and not published, and detach the store."""
        super().close()
        self._served = None
        with self._staging_lock:
            self._closed = True
            staged, self._staged = self._staged, None
        if staged is not None:
            staged[1].discard()
        self.store.detach()

    # --- versions

    def swap(self, snapshot: FullSnapshot) -> None:
        """Serve ``snapshot`` from now on (atomic), then tell ``on_swap``."""
        super().swap(snapshot)
        if self._on_swap is not None:
            self._on_swap(snapshot)

    def snapshot(self) -> FullSnapshot:
        """The snapshot to use now: switches first to a newer published version, if the
        pointer changed since the last look (at most one ``stat`` per ``check_interval``),
        then as `LookupFullCache.snapshot`."""
        self.poll()
        return super().snapshot()

    def poll(self) -> bool:
        """Switch to a newer published version if the pointer changed; rate-limited.

        Returns whether this call switched.
        """
        now = self._timer()
        has_one = self._snapshot is not None
        if has_one and now - self._last_check < self.check_interval:
            return False
        self._last_check = now
        key = self.store.pointer_key()
        if key is None or key == self._seen:
            return False
        return self._switch(blocking=not has_one) is not None

    def adopt(self) -> FullSnapshot | None:
        """Switch to the published version now if it is newer than the one served.

        Returns the snapshot switched to, or None (nothing published, nothing newer, or
        unreadable). Waits for a switch another thread is making.
        """
        return self._switch(blocking=True)

    def stage(
        self,
        batches: Iterable[pa.RecordBatch],
        schema: pa.Schema,
        *,
        loaded_at: float,
        version: int,
        source_version: str | None = None,
        order_by: Sequence[str] = (),
    ) -> FullSnapshot:
        """Build a snapshot of the rows of ``batches`` (of ``schema``), written into the
        store's directory as they arrive (`SnapshotStore.spool`,
        `FullSnapshot.stream`): the load holds a few batches and the key index,
        never the table; a key's rows ordered by ``order_by`` first. `publish` it
        next; a staged snapshot not published is
        deleted by the next stage or by `close` (served meanwhile, it stays valid:
        its files are mapped).

        The caller holds the store's lock (``with cache.store.try_lock()``).

        Raises
        ------
        cache.full.spool.SpoolError
            When the store's directory cannot take the table (a full disk): the source
            was read fine, the caller may load it in memory instead.
        """
        spool = self.store.spool(schema)
        try:
            snapshot = FullSnapshot.stream(batches, self.key_columns, spool=spool,
                                           loaded_at=loaded_at, version=version,
                                           source_version=source_version, order_by=order_by)
        except BaseException:
            spool.discard()
            raise
        with self._staging_lock:
            closed = self._closed
            previous, self._staged = self._staged, None if closed else (snapshot, spool)
        if previous is not None:
            previous[1].discard()
        if closed:  # closed during the load: nobody will publish it
            spool.discard()
        return snapshot

    def publish(self, snapshot: FullSnapshot) -> FullSnapshot:
        """Publish a snapshot this process built (or staged), and serve the mapped copy
        of it.

        The caller holds the store's lock (``with cache.store.try_lock()``). The table
        served afterwards is the memory map of the published file, not ``snapshot``'s
        own table, so this process shares the pages with the others too; the key index
        is written with it, and served mapped as well. A staged snapshot's files are
        deleted whether publishing succeeds or not (if it fails, the snapshot can still
        be served: its files stay mapped).
        """
        with self._staging_lock:
            staged = self._staged
            if staged is not None and staged[0] is snapshot:
                self._staged = None
            else:
                staged = None
        try:
            record = self.store.publish(snapshot.table, version=snapshot.version,
                                        loaded_at=snapshot.loaded_at, unique=snapshot.unique,
                                        source_version=snapshot.source_version or "",
                                        index=snapshot.payload(),
                                        spool=None if staged is None else staged[1])
        finally:
            if staged is not None:
                staged[1].discard()
        mapped = self._snapshot_of(record, self.store.open(record))
        with self._switch_lock:
            self.swap(mapped)
            self._served = record
            self._seen = self.store.pointer_key()
        snapshot.hand_over(mapped)  # the loaded copy goes: one table in memory, the file's
        return mapped

    def published(self) -> StoredSnapshot | None:
        """The store's record of the version served, if it is still the published one
        (None: nothing served, or a newer version was published since)."""
        served = self._served
        latest = self.store.latest()
        if served is None or latest is None or latest.file != served.file or (
                latest.version != served.version):
            return None
        return latest

    def newest_load(self) -> float | None:
        """When the load of the newest version known here started: the one served, or
        a newer one published (None: neither)."""
        current = self.current()
        since = None if current is None else current.loaded_at
        try:
            latest = self.store.latest()
        except (OSError, ValueError):  # unreadable now: what is served is known
            latest = None
        if latest is not None and (since is None or latest.loaded_at > since):
            since = latest.loaded_at
        return since

    # --- reloading: one load per host

    def reload(self, loader: Loader, fired_at: float, *, strict: bool = False) -> None:
        """Serve a version that is good for a firing at ``fired_at`` (``strict``: loaded
        after it), loading it only if no process of the host has, and only in the one
        process holding the store's lock; the others wait for its publication.

        Raises
        ------
        LookupLoadError
            When the process that loaded for this firing failed after its retries.
        Exception
            The error of this process's own load (see `Loader.load`).
        """
        waited = False
        while not loader.closed.is_set():
            if self._serve(loader, self.store.latest(), fired_at, strict):
                return
            if waited:
                failure = self.store.last_failure()
                if failure is not None and failure[0] >= fired_at:
                    # The process that loaded for this firing failed after its retries:
                    # this firing failed too (trying again here would multiply the load).
                    error = LookupLoadError(
                        f"{loader.describe}: the reload another process of this "
                        f"host ran for this firing failed: {failure[1]}"
                    )
                    if not loader.record(partial(self.record_failure, error)):
                        return
                    raise error
            with self.store.try_lock() as locked:
                if locked:
                    self._reload_locked(loader, fired_at, strict)
                    return
            waited = True
            # Another process is loading; keep serving the current version meanwhile.
            loader.closed.wait(_LOCK_POLL_SECONDS)

    def _reload_locked(self, loader: Loader, fired_at: float, strict: bool) -> None:
        # The process that held the lock before us may have just published.
        record = self.store.latest()
        if strict and self.current() is not None and self._loaded_lately(
                loader, record, fired_at):
            return  # the next reload for changes covers this one
        if not self._serve(loader, record, fired_at, strict):
            current = self.current()
            version = max(0 if record is None else record.version,
                          0 if current is None else current.version)
            loader.load(version + 1, partial(self._install, loader.describe),
                        self._unchanged(loader.describe), self._failed)

    def _serve(self, loader: Loader, record: StoredSnapshot | None, fired_at: float,
               strict: bool) -> bool:
        """Serve the published ``record`` (or a newer version) if it satisfies a firing at
        ``fired_at``: loaded after the firing, or (unless ``strict``) not yet due on the
        schedule. False when it does not, or cannot be read."""
        if record is None:
            return False
        if record.loaded_at < fired_at:
            if strict:
                return False
            due = loader.due(record.loaded_at)
            if due is None or due <= fired_at:
                return False
        # A no-op when it is the version served already; never once closed.
        if not loader.record(self.adopt):
            return False
        current = self.current()
        return current is not None and (current.loaded_at, current.version) >= (
            record.loaded_at, record.version)

    def _loaded_lately(self, loader: Loader, record: StoredSnapshot | None,
                       since: float) -> bool:
        """Whether ``record`` was loaded before ``since`` but less than the change
        feed's ``min_interval`` ago: a reload for changes waits for the next round."""
        if record is None or loader.min_interval is None or record.loaded_at >= since:
            return False
        return record.loaded_at + loader.min_interval > self.clock()

    def _unchanged(self, describe: str) -> Unchanged | None:
        """For the holder of the store's lock: the source version of the published
        snapshot, if this process serves it (it read it whole), and how to confirm it
        without publishing anything (the pointer's load time moves on; the others see it
        at their next look and keep their table and index)."""
        latest = self.store.latest()
        if latest is None or not latest.source_version:
            return None
        if self.published() is None:
            self.adopt()  # serve it first (a map, no scan): only what is served is confirmed
        record = self.published()
        if record is None:
            return None

        def confirm(loaded_at: float) -> None:
            try:
                self.store.confirm(record, loaded_at)
            except (OSError, ValueError) as exc:  # the store cannot take it: load next time
                log.warning("full cache of %s: could not confirm version %d in %s: %s",
                            describe, record.version, self.store.directory, exc)
                return
            self.adopt()

        return record.source_version, confirm

    def _install(self, describe: str, snapshot: FullSnapshot) -> None:
        try:
            self.publish(snapshot)
        except OSError as exc:
            # The store cannot take it (disk full, read-only...): serve what was loaded
            # here anyway; the other processes then load for themselves.
            log.warning(
                "full cache of %s: could not publish version %d to %s (%s); serving it "
                "in this process only", describe, snapshot.version, self.store.directory, exc,
            )
            self.swap(snapshot)

    def _failed(self, error: BaseException) -> None:
        # For the processes waiting on this load: their firing failed too.
        self.store.record_failure(self.clock(), repr(error))

    def _switch(self, *, blocking: bool) -> FullSnapshot | None:
        if not self._switch_lock.acquire(blocking=blocking):
            return None  # another thread is switching; keep serving the current version
        try:
            key = self.store.pointer_key()
            current = self._snapshot
            served = self._served
            record = self.store.latest()
            if (current is not None and served is not None and record is not None
                    and (record.file, record.version) == (served.file, served.version)):
                # The version served, confirmed current at a later time (a reload that
                # found the source unchanged): nothing to read, only its age changes.
                self._seen = key
                if record.loaded_at <= current.loaded_at:
                    return None
                confirmed = current.confirmed(record.loaded_at)
                self._served = record
                self.swap(confirmed)
                return confirmed
            if record is not None and record.loaded_at < self.serve_from:
                return None
            found = self.store.open_latest()
            if found is None:
                return None
            record, mapped = found
            if record.loaded_at < self.serve_from:
                return None
            self._seen = key
            if current is not None and not _is_newer(record, current):
                return None
            snapshot = self._snapshot_of(record, mapped)
            self._served = record
            self.swap(snapshot)
            return snapshot
        finally:
            self._switch_lock.release()

    def _snapshot_of(self, record: StoredSnapshot, mapped: Mapped) -> FullSnapshot:
        """The snapshot of a published version: its mapped index, or one built here for
        a version without a usable one (an older format, another hash version)."""
        if mapped.key_index is not None:
            try:
                index = KeyIndex.from_payload(*mapped.key_index, mapped.table, self.key_columns)
            except ValueError as exc:
                log.warning("the key index of %s is not usable (%s): indexing it in this "
                            "process", record.file, exc)
            else:
                views = StringViews.from_payload(mapped.key_index[1], mapped.table)
                return FullSnapshot(mapped.table, self.key_columns, index, record.loaded_at,
                                    record.version, record.source_version or None, views)
        # A table of one row a key may be in any order (this version keeps the load's);
        # one with several rows a key is sorted by key (every version sorts it).
        built = KeyIndex.of_unique(mapped.table, self.key_columns) if record.unique else None
        if built is not None:
            return FullSnapshot(mapped.table, self.key_columns, built, record.loaded_at,
                                record.version, record.source_version or None)
        return FullSnapshot.from_sorted(mapped.table, self.key_columns, loaded_at=record.loaded_at,
                                        version=record.version, unique=False,
                                        source_version=record.source_version or None,
                                        build_views=False)


def _is_newer(record: StoredSnapshot, current: FullSnapshot) -> bool:
    # Load time first: a store that was swept and started again from version 1 still
    # moves forward; the version breaks ties.
    return (record.loaded_at, record.version) > (current.loaded_at, current.version)
