"""A full cache whose snapshots are shared by every process of the host.

`SharedFullCache` is a `LookupFullCache` that serves the
version published in a `SnapshotStore`: the table and its
key index are memory maps of the store's files (one copy of the pages for all
processes), so a process that opens a published version builds nothing proportional to
the table. A version published without an index (an older format) is indexed here. The
process that loads writes the new version into the store as it is read
(`SharedFullCache.stage`, then `SharedFullCache.publish`). Who loads and
when is the caller's business (the full caching runtime); this class switches to a
newer published version, at most one ``stat`` of the pointer per ``check_interval``, at
the next lookup.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

import pyarrow as pa

from cache.full.index import KeyIndex
from cache.full.snapshot import FullSnapshot, LookupFullCache
from cache.full.spool import ColumnSpool
from cache.full.store import Mapped, SnapshotStore, StoredSnapshot
from cache.full.string_views import StringViews
from cache.metrics import CacheMetrics
from spark_lookup import options as opts

__all__ = ["DEFAULT_CHECK_INTERVAL", "SharedFullCache"]

log = logging.getLogger("cache")

DEFAULT_CHECK_INTERVAL = dt.timedelta(milliseconds=100)
"""How often a lookup may look for a newer published version (one ``stat``)."""


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
        (one that may lack a change this process never heard: see lookup/full_caching)."""

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
    ) -> FullSnapshot:
        """Build a snapshot of the rows of ``batches`` (of ``schema``), written into the
        store's directory as they arrive (`SnapshotStore.spool`,
        `FullSnapshot.stream`): the load holds a few batches and the key index,
        never the table. `publish` it next; a staged snapshot not published is
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
                                           source_version=source_version)
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
