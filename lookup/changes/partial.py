"""A change feed applied to a partial cache: the changed keys dropped, and no load that
raced a change left in the cache.

`CacheInvalidation` is the runtime's subscriber (``lookup.changes.listener``): the keys
of each batch of changes are read as values of the key columns' types (JSON values
through `connectors.json_keys.decode_json_keys`, then the provider's
[`KeyCodec`][], exactly as lookup keys are) and removed from the
cache in bulk; a key never cached costs its probe only.

The race: a load reads a row, the row changes and its notification arrives, then the
load puts the old row into the cache, where no later notification would remove it. So
every load takes a token (`begin`) before it reads, and puts through
`put_arrow`/`put_all`, which leave out every key notified since the token
(by their 64-bit hashes: a collision leaves a key uncached, never a stale one), or the
whole load after an "everything". Puts and invalidations hold one lock, so nothing
falls between the check and the put; lookups never take it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from cache.base import Key, LookupCache, Row
from cache.key_hash import hash_keys
from cache.metrics import CacheMetrics
from connectors.keys import KeyCodec
from lookup.changes.feed import Change, ChangeFeed
from lookup.changes.keys import ChangedKeys

__all__ = ["CacheInvalidation"]

log = logging.getLogger("lookup")

_MAX_REMEMBERED = 1 << 20
"""Most key hashes remembered for loads in flight (8 MiB); beyond, the notes collapse
into one "everything": those loads are not cached at all (safe, rarely reached)."""

_EVERYTHING = None


class CacheInvalidation:
    """Applies ``feed``'s changes to ``cache`` (a `ChangeSink`)
    and guards the runtime's puts. Thread-safe."""

    def __init__(self, cache: LookupCache, codec: KeyCodec, feed: ChangeFeed,
                 key_columns: Sequence[str], key_types: Sequence[Any],
                 metrics: CacheMetrics, describe: str) -> None:
        self._cache = cache
        self._codec = codec
        self._keys = ChangedKeys(feed, key_columns, key_types, codec)
        self._metrics = metrics
        self._describe = describe
        self._lock = threading.Lock()
        self._sequence = 0
        self._notes: deque[tuple[int, np.ndarray | None]] = deque()
        self._noted = 0
        self._loading: dict[int, int] = {}
        self._closed = False

    def close(self) -> None:
        """Apply nothing more (the runtime closes)."""
        with self._lock:
            self._closed = True
            self._notes.clear()

    # --- the listener's side

    def changes(self, changes: Sequence[Change]) -> None:
        """Drop the changed keys (flush on an "everything")."""
        try:
            self._apply(changes)
        finally:
            # Counted once applied: whoever reads the count sees those keys dropped.
            self._metrics.inc_notifications(len(changes))

    def _apply(self, changes: Sequence[Change]) -> None:
        everything = next((c for c in changes if c.everything), None)
        if everything is not None:
            self._flush()
            return
        keys = [key for change in changes for key in change.keys]
        try:
            arrays = self._keys.arrays(keys)
        except (ValueError, TypeError) as exc:  # ConfigError is a ValueError
            # A key the provider cannot read: which entry it means is unknown.
            log.warning("%s: a change notification holds a key that is no key of the "
                        "provider (%s); flushing the cache", self._describe, exc)
            self._flush()
            return
        if arrays is None:
            return
        with self._lock:
            if self._closed:
                return
            self._note(hash_keys(arrays))
            removed = self._cache.invalidate_arrow(arrays)
        self._metrics.inc_keys_invalidated(removed)

    def connected(self, reconnected: bool) -> None:
        """The feed listens (again): what happened before may have been missed."""
        self._flush()
        if reconnected:
            self._metrics.inc_reconnect_flushes()

    def disconnected(self) -> None:
        """Nothing to do yet: the flush comes once the feed listens again."""

    def _flush(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._note(_EVERYTHING)
            self._cache.invalidate_all()

    def _note(self, hashes: np.ndarray | None) -> None:
        """Remember a change for the loads in flight (under the lock)."""
        self._sequence += 1
        if not self._loading:
            return  # no load can race it
        self._notes.append((self._sequence, hashes))
        self._noted += 0 if hashes is None else len(hashes)
        if self._noted > _MAX_REMEMBERED:
            self._notes.clear()
            self._notes.append((self._sequence, _EVERYTHING))
            self._noted = 0

    # --- the loads' side

    def begin(self) -> int:
        """A load is about to read: its token for `put_arrow`/`put_all`,
        to give back with `end` however it ends."""
        with self._lock:
            token = self._sequence
            self._loading[token] = self._loading.get(token, 0) + 1
            return token

    def end(self, token: int) -> None:
        """The load of ``token`` is over; forget what no load in flight needs."""
        with self._lock:
            left = self._loading[token] - 1
            if left:
                self._loading[token] = left
            else:
                del self._loading[token]
            oldest = min(self._loading, default=self._sequence)
            while self._notes and self._notes[0][0] <= oldest:
                _, hashes = self._notes.popleft()
                self._noted -= 0 if hashes is None else len(hashes)

    def _stale(self, token: int, arrays: Sequence[pa.Array]) -> np.ndarray | None:
        """Which of the keys (distinct, of the key types) changed since ``token``
        (None: none did); all of them after an "everything"."""
        later = [hashes for sequence, hashes in self._notes if sequence > token]
        if not later:
            return None
        count = len(arrays[0]) if arrays else 0
        if any(hashes is None for hashes in later):
            return np.ones(count, dtype=bool)
        notified = np.concatenate([h for h in later if h is not None])
        return np.isin(hash_keys(arrays), notified)

    def put_arrow(self, token: int, keys: Sequence[pa.Array], index: pa.Array,
                  rows: Any) -> None:
        """``cache.put_arrow`` of what a load read since ``token``, without the keys that
        changed meanwhile."""
        with self._lock:
            if self._closed:
                return
            stale = self._stale(token, keys)
            if stale is None:
                self._cache.put_arrow(keys, index, rows)
                return
            keep = ~stale
            if not keep.any():
                return
            kept = np.flatnonzero(keep)
            renumber = np.full(len(keep), -1, dtype=np.int64)
            renumber[kept] = np.arange(len(kept), dtype=np.int64)
            owners = index.to_numpy(zero_copy_only=False)
            rows_kept = keep[owners]
            take = pa.array(kept, type=pa.int64())
            self._cache.put_arrow([array.take(take) for array in keys],
                                  pa.array(renumber[owners[rows_kept]], type=pa.int64()),
                                  rows.filter(pa.array(rows_kept)))

    def put_all(self, token: int, loaded: Mapping[Key, Sequence[Row]]) -> None:
        """``cache.put_all`` of what a load read since ``token`` (keys of the key types),
        without the keys that changed meanwhile."""
        with self._lock:
            if self._closed or not loaded:
                return
            if not any(sequence > token for sequence, _ in self._notes):
                self._cache.put_all(loaded)
                return
            keys = list(loaded)
            encoded = self._codec.encode(keys, shapes_checked=True)
            stale = self._stale(token, encoded.arrays)
            assert stale is not None
            fresh = {key: loaded[key] for key, position in zip(keys, encoded.positions,
                                                                 strict=True)
                     if position >= 0 and not stale[position]}
            if fresh:
                self._cache.put_all(fresh)
