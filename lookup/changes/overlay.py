"""A change feed applied to a full cache key by key: the changed keys read from the
source by key, into an overlay served in front of the snapshot.

Design notes: DESIGN.md, lookup/ ``lookup/changes/overlay.py``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from cache.full.overlay import Overlay
from cache.key_hash import hash_keys
from connectors.keys import KeyCodec
from lookup.changes.feed import Change, ChangeFeed
from lookup.changes.keys import ChangedKeys
from lookup.changes.reload import ChangeReloads
from lookup.function import LookupFunction
from lookup.providers import FullCachingLookupProvider
from lookup.runtime.base import counting_bad_values
from spark_lookup.errors import LookupLoadError

__all__ = ["ChangeOverlay"]

log = logging.getLogger("lookup")

_Queued = tuple[list[pa.Array], np.ndarray]
"""Keys of the key types (distinct within the entry), and when each was notified."""


class ChangeOverlay:
    """Applies a feed's key changes to a full cache through ``function`` (a
    `ChangeSink`). Thread-safe.

    Parameters
    ----------
    function
        Reads the rows of keys from the cache's source (``lookup_arrow``), exactly as a
        load reads them; opened and used on this object's reader thread only.
    feed
        The change feed whose key changes are applied.
    provider
        The full cache's provider: its key columns and types, retry policy and bound on
        the overlay's keys (``max_overlay_keys``) apply.
    schema
        The provider's schema, in Arrow.
    reloads
        The debounced full reloads of the runtime, for what cannot be applied by key.
        The metrics, clock, description and host listening marks are its (both serve
        one full cache).
    served_at
        When the load of the snapshot served started (None: no snapshot yet).
    """

    def __init__(self, *, function: LookupFunction, feed: ChangeFeed,
                 provider: FullCachingLookupProvider, schema: pa.Schema,
                 reloads: ChangeReloads, served_at: Callable[[], float | None]) -> None:
        key_columns, key_types = provider.key_columns, provider.key_types
        self._function = function
        self._keys = ChangedKeys(feed, key_columns, key_types,
                                 KeyCodec(list(key_columns), list(key_types), reloads.describe))
        self._names = self._keys.names
        self._schema = schema
        self._reloads = reloads
        self._served_at = served_at
        self._policy = provider.retry_policy
        self._max_keys = provider.max_overlay_keys
        self._lock = threading.Lock()
        self._queued: list[_Queued] = []
        self._reading = False
        self._closed = threading.Event()
        self._opened = False
        self._asked_at: float | None = None  # when the bound last asked for a reload
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="lookup-change-reads")
        self.current: Overlay | None = None
        """The overlay as last published (None: empty); probes use `serving`."""
        self.trimmed_to = -math.inf
        """The newest snapshot load start the overlay was trimmed for: a probe holding an
        older snapshot must take the newer one (the entries it lacks are gone)."""

    def close(self) -> None:
        """Apply nothing more; the function is closed on the reader thread once the
        read in flight, if any, ends (it is not waited for)."""
        with self._lock:
            self._closed.set()
            self._queued.clear()
            self.current = None
        try:
            self._executor.submit(self._close_function)
        except RuntimeError:  # closed twice: shut down already
            return
        self._executor.shutdown(wait=False)

    def _close_function(self) -> None:
        if self._opened:
            self._opened = False
            try:
                self._function.close()
            except Exception:
                log.exception("closing the change lookup of %s failed", self._reloads.describe)

    def idle(self) -> bool:
        """Whether no change waits to be read or is being read (for tests)."""
        with self._lock:
            return not self._queued and not self._reading

    # --- the probes' side

    def serving(self, loaded_at: float) -> Overlay | None:
        """The overlay to serve in front of a snapshot whose load started at
        ``loaded_at``: without the entries it holds (trimmed once per new snapshot)."""
        overlay = self.current
        if overlay is None or overlay.base >= loaded_at:
            return overlay
        with self._lock:
            overlay = self.current
            if overlay is not None and overlay.base < loaded_at:
                overlay = self.current = overlay.since(loaded_at)
                self.trimmed_to = max(self.trimmed_to, loaded_at)
        return overlay

    # --- the listener's side

    def changes(self, changes: Sequence[Change]) -> None:
        """Queue the changed keys for a keyed read ("everything": a full reload)."""
        try:
            self._take(changes)
        finally:
            # Counted once queued: whoever sees the count sees the read pending too.
            self._reloads.metrics.inc_notifications(len(changes))

    def _take(self, changes: Sequence[Change]) -> None:
        if any(change.everything for change in changes):
            self._reloads.reload_soon()
            return
        now = self._reloads.clock()
        try:
            arrays = self._keys.arrays([key for change in changes for key in change.keys])
        except (ValueError, TypeError) as exc:  # ConfigError is a ValueError
            log.warning("%s: a change notification holds a key that is no key of the "
                        "provider (%s); reloading the table", self._reloads.describe, exc)
            self._reloads.reload_soon()
            return
        if arrays is None:
            return
        if self._reloads.host is not None:
            self._reloads.host.leave_pending(now)  # not in the host's snapshot: see the module
        self._queue((arrays, np.full(len(arrays[0]), now)))

    def connected(self, reconnected: bool) -> None:
        """The feed listens (again): what was missed meanwhile takes a full reload."""
        self._reloads.connected(reconnected)

    def disconnected(self) -> None:
        """The feed stopped listening (as `ChangeReloads` handles it)."""
        self._reloads.disconnected()

    def _queue(self, queued: _Queued) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._queued.append(queued)
            if self._reading:
                return
            self._reading = True
        try:
            self._executor.submit(self._drain)
        except RuntimeError:  # shut down by close() meanwhile
            with self._lock:
                self._reading = False

    # --- the reader thread

    def _drain(self) -> None:
        """Read what is queued, round after round, until nothing is."""
        try:
            while True:
                with self._lock:
                    taken, self._queued = self._queued, []
                    if not taken or self._closed.is_set():
                        self._reading = False
                        return
                self._apply(*_distinct(taken, self._names))
        except Exception:  # a bug here must not leave changes unapplied and unreloaded
            with self._lock:
                self._reading = False
            log.exception("applying changes to the full cache of %s failed", self._reloads.describe)
            self._reloads.reload_soon()

    def _apply(self, keys: list[pa.Array], noted: np.ndarray) -> None:
        read = self._read(keys)
        if read is None:
            self._reloads.reload_soon()  # the keys are lost to the overlay: reload them all
            return
        row_keys, rows = read
        self._reloads.metrics.inc_change_reads(len(noted))
        with self._lock:
            if self._closed.is_set():
                return
            again = self._queued_again(keys)
            if again is not None:
                # Notified again while read: what was read may predate that change. Read
                # anew (a key whose hash only met another's costs one more read).
                take = pa.array(np.flatnonzero(again), type=pa.int64())
                self._queued.append(([array.take(take) for array in keys], noted[again]))
                keys, noted, row_keys, rows = _without(again, keys, noted, row_keys, rows)
            served = self._served_at()
            self.current = Overlay.of(self.current, keys, noted, row_keys, rows,
                                      -np.inf if served is None else served, self._names)
            size = 0 if self.current is None else self.current.num_keys
        if size > self._max_keys:
            self._bounded(size)

    def _queued_again(self, keys: Sequence[pa.Array]) -> np.ndarray | None:
        """Which of ``keys`` were queued since their read began (None: none), by hash."""
        if not self._queued:
            return None
        queued = np.concatenate([hash_keys(arrays) for arrays, _ in self._queued])
        again = np.isin(hash_keys(keys), queued)
        return again if again.any() else None

    def _read(self, keys: list[pa.Array]) -> tuple[np.ndarray, pa.Table] | None:
        """The rows of ``keys`` (the key of each row, and the rows as the cache's
        schema), retried with backoff; None when every try failed (logged, counted)."""
        function = self._function
        count = len(keys[0])
        tries = self._policy.retries(
            f"keyed read of {count} changed key(s) of {self._reloads.describe}",
            on_retry=self._reloads.metrics.inc_retries, wait=self._closed.wait)
        for _ in tries:
            if self._closed.is_set():
                return None
            try:
                if not self._opened:
                    function.open()
                    self._opened = True
                with counting_bad_values(function, self._reloads.metrics.inc_bad_values):
                    index, rows = function.lookup_arrow(keys)
                return self._checked(index, rows, count)
            except Exception as exc:
                if not tries.failed(exc):
                    break
        if tries.error is not None and not self._closed.is_set():
            self._reloads.metrics.inc_load_failures()
            log.error("%s: reading %d changed key(s) failed after %d attempt(s): %r; "
                      "reloading the table instead", self._reloads.describe, count, tries.tries,
                      tries.error)
        return None

    def _checked(self, index: Any, rows: Any, count: int) -> tuple[np.ndarray, pa.Table]:
        """The function's answer as the key of each row and a table of the cache's
        schema (the types a load gives).

        Raises
        ------
        LookupLoadError
            When it is no answer to ``count`` keys in the cache's schema.
        """
        table = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
        if not isinstance(table, pa.Table) or table.schema.names != self._schema.names:
            found = getattr(getattr(table, "schema", None), "names", type(table).__name__)
            raise LookupLoadError(f"{self._reloads.describe}: the change lookup answered columns "
                                  f"{found}, the cache holds {self._schema.names}")
        if table.schema != self._schema:
            try:
                table = table.cast(self._schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
                raise LookupLoadError(f"{self._reloads.describe}: the change lookup's rows are not "
                                      f"of the cache's types: {exc}") from exc
        positions = np.asarray(pa.array(index, type=pa.int64()).to_numpy(zero_copy_only=False),
                               dtype=np.int64)
        if len(positions) != table.num_rows or (
                len(positions) and (positions.min() < 0 or positions.max() >= count)):
            raise LookupLoadError(f"{self._reloads.describe}: the change lookup's key positions do "
                                  f"not fit its {count} key(s) and {table.num_rows} row(s)")
        return positions, table

    def _bounded(self, size: int) -> None:
        """Past ``max_keys``: ask for a full reload (once per reload served since)."""
        served = self._served_at()
        asked = self._asked_at
        if asked is not None and (served is None or served < asked):
            return
        self._asked_at = self._reloads.clock()
        log.info("%s: %d changed keys in the overlay, more than %d; reloading the table",
                 self._reloads.describe, size, self._max_keys)
        self._reloads.reload_soon()


def _distinct(queued: list[_Queued], names: Sequence[str]) -> tuple[list[pa.Array], np.ndarray]:
    """The distinct keys of everything queued, each with its latest notification."""
    if len(queued) == 1:
        return queued[0]
    columns = [pa.concat_arrays([arrays[i] for arrays, _ in queued]) for i in range(len(names))]
    labels = [f"k{i}" for i in range(len(names))]
    table = pa.table([*columns, np.concatenate([noted for _, noted in queued])],
                     names=[*labels, "noted"])
    grouped = table.group_by(labels, use_threads=False).aggregate([("noted", "max")])
    return ([grouped.column(label).combine_chunks() for label in labels],
            grouped.column("noted_max").to_numpy())


def _without(drop: np.ndarray, keys: list[pa.Array], noted: np.ndarray, row_keys: np.ndarray,
             rows: pa.Table) -> tuple[list[pa.Array], np.ndarray, np.ndarray, pa.Table]:
    """The read without the keys ``drop`` marks (and their rows), keys renumbered."""
    keep = ~drop
    renumber = np.cumsum(keep) - 1
    row_kept = keep[row_keys]
    take = pa.array(np.flatnonzero(keep), type=pa.int64())
    return ([array.take(take) for array in keys], noted[keep],
            renumber[row_keys[row_kept]], rows.filter(pa.array(row_kept)))
