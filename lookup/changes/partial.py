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

Behind a host tier (`cache.host.tier`), the same changes are noted there for the
workers of the host: each changed key's note refuses the puts of loads begun before
it, whichever worker's feed is behind; an "everything" flushes the tier. A worker
shares a load only if its feed listened since before the load began
(`listened_since`): every change the load could have missed is then noted by it. A
feed that (re)connects flushes the tier too, unless another process of the host
listens now (`lookup.changes.host_listeners` marks): since the tier's last flush some
worker has then always listened, and noted every change.
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
from cache.default.cache import DefaultLookupCache
from cache.host.tier import HostTier
from cache.key_hash import hash_keys
from cache.metrics import CacheMetrics
from connectors.keys import KeyCodec
from lookup.changes.feed import Change, ChangeFeed
from lookup.changes.host_listeners import HostListeners
from lookup.changes.keys import ChangedKeys
from lookup.changes.listener import Subscription

__all__ = ["CacheInvalidation", "put_answers"]

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
        self._host: HostTier | None = None
        self._marks: HostListeners | None = None
        self._host_lock = threading.Lock()
        self._listening_since: int | None = None

    def share_through(self, host: HostTier) -> None:
        """Note changes in ``host`` too (an instance of the runtime's host tier for the
        listener's thread alone); before `subscribe`."""
        self._host = host
        self._marks = HostListeners(host.directory)

    def listened_since(self, began: int) -> bool:
        """Whether the feed has listened without a break since ``began`` (ms, the host
        tier's clock): a load begun then may be shared."""
        since = self._listening_since
        return since is not None and since <= began

    def close(self) -> None:
        """Apply nothing more (the runtime closes)."""
        with self._lock:
            self._closed = True
            self._notes.clear()
        with self._host_lock:
            if self._marks is not None:
                self._marks.stopped()
            if self._host is not None:
                self._host.close()
                self._host = None

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
        # The host tier first: a batch that takes its token after the note below must
        # find the tier's rows of these keys gone already.
        self._in_host(lambda host: host.changed(arrays, host.now_ms()))
        with self._lock:
            if self._closed:
                return
            self._note(hash_keys(arrays))
            removed = self._cache.invalidate_arrow(arrays)
        self._metrics.inc_keys_invalidated(removed)

    def connected(self, reconnected: bool) -> None:
        """The feed listens (again): what happened before may have been missed."""
        self._listens()
        if reconnected:
            self._metrics.inc_reconnect_flushes()

    def subscribed(self, subscription: Subscription) -> None:
        """The runtime subscribed, perhaps to a listener connected before (then no
        `connected` comes): the host tier is flushed and shared from now, as a
        connection would have it."""
        if (self._host is None or self._listening_since is not None
                or not subscription.connected):
            return  # not shared, or told by `connected` already
        self._listens(subscription)

    def _listens(self, subscription: Subscription | None = None) -> None:
        """Flush what may have been missed: the in-process cache, and the host tier
        unless another process listens now; then share loads begun from now."""
        marks, host = self._marks, self._host
        if marks is None or host is None:
            self._flush()
            return
        now = host.now_ms()
        self._flush(host=not marks.covered(now / 1000))
        with self._host_lock:
            # Checked under the lock a disconnection takes: never "listening since" a
            # time the feed did not listen.
            if self._host is None or (subscription is not None
                                      and not subscription.connected):
                return
            self._listening_since = now
            marks.listening(now / 1000)

    def disconnected(self) -> None:
        """No load shares its rows until the feed listens again; the flush comes then."""
        with self._host_lock:
            self._listening_since = None
            if self._marks is not None:
                self._marks.stopped()

    def _flush(self, host: bool = True) -> None:
        if host:  # first, as in `_apply`
            self._in_host(lambda tier: tier.flush(tier.now_ms()))
        with self._lock:
            if self._closed:
                return
            self._note(_EVERYTHING)
            self._cache.invalidate_all()

    def _in_host(self, note: Any) -> None:
        """Note a change in the host tier; one it cannot note, no worker may be served
        from it: the tier is abandoned (every worker misses until a new generation,
        which refuses older loads)."""
        with self._host_lock:
            host = self._host
            if host is None:
                return
            try:
                note(host)
            except Exception as exc:
                self._metrics.inc_cache_errors()
                log.warning("%s: could not note a change in the host tier (%s); abandoning "
                            "its rows", self._describe, exc)
                try:
                    host.abandon()
                except OSError as again:
                    log.error("%s: could not abandon the host tier either (%s): other "
                              "workers may serve rows of changed keys until they expire",
                              self._describe, again)

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
                  rows: Any, age: np.ndarray | None = None) -> None:
        """``cache.put_arrow`` of what a load read since ``token``, without the keys that
        changed meanwhile; with ``age`` (seconds a key's rows have lived, read from the
        host tier), ``put_arrow_aged``."""
        with self._lock:
            if self._closed:
                return
            stale = self._stale(token, keys)
            if stale is None:
                put_answers(self._cache, keys, index, rows, age)
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
            put_answers(self._cache, [array.take(take) for array in keys],
                        pa.array(renumber[owners[rows_kept]], type=pa.int64()),
                        rows.filter(pa.array(rows_kept)), None if age is None else age[kept])

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


def put_answers(cache: LookupCache, keys: Sequence[pa.Array], index: pa.Array, rows: Any,
                age: np.ndarray | None = None) -> None:
    """``cache.put_arrow``, or with ``age`` (seconds each key's rows have lived, as a host
    tier answers them) ``put_arrow_aged`` of a [`DefaultLookupCache`][]."""
    if age is None:
        cache.put_arrow(keys, index, rows)
    else:
        assert isinstance(cache, DefaultLookupCache)
        cache.put_arrow_aged(keys, index, rows, age)
