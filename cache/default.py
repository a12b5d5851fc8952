"""DefaultLookupCache: Flink's partial lookup cache (size and TTL eviction) on cachetools."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from cachetools import LRUCache, TLRUCache, TTLCache

from cache._size import estimate_entry_bytes
from cache.base import Key, LookupCache, Rows, check_key, freeze_rows
from cache.metrics import CacheMetrics
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError

__all__ = ["DefaultLookupCache", "DefaultLookupCacheBuilder"]

Timer = Callable[[], float]


class _Entry:
    __slots__ = ("nbytes", "rows", "written")

    def __init__(self, rows: tuple[tuple[Any, ...], ...], nbytes: int, written: float) -> None:
        self.rows = rows
        self.nbytes = nbytes
        self.written = written


class _CountsEvictions:
    """Mixin for a cachetools store: keeps ``nbytes``, the byte total of its entries,
    through the evictions the store makes on its own when full."""

    nbytes = 0

    def popitem(self) -> tuple[Key, _Entry]:
        key, entry = super().popitem()  # type: ignore[misc]
        self.nbytes -= entry.nbytes
        return key, entry


class _CountsExpiry(_CountsEvictions):
    """... and through the expiry a timed store runs lazily on most operations."""

    def expire(self, time: float | None = None) -> list[tuple[Key, _Entry]]:
        expired = super().expire(time)  # type: ignore[misc]
        for _, entry in expired:
            self.nbytes -= entry.nbytes
        return list(expired)


class _CountingLRU(_CountsEvictions, LRUCache[Key, _Entry]):
    """Size-bounded LRU store (no expiry)."""


class _CountingTTL(_CountsExpiry, TTLCache[Key, _Entry]):
    """LRU store with one time-to-live from the write (expire-after-write only); cheaper
    than the heap of TLRUCache."""


class _CountingTLRU(_CountsExpiry, TLRUCache[Key, _Entry]):
    """Time-aware LRU store: per-entry expiry, renewed on access."""


_Store = _CountingLRU | _CountingTTL | _CountingTLRU


class DefaultLookupCache(LookupCache):
    """A size- and time-bounded in-process cache of lookup results (Flink's DefaultLookupCache).

    Build it with :meth:`new_builder` (or :meth:`from_options`) on the driver; it pickles
    as its configuration only and starts empty wherever it is unpickled. Thread-safe: one
    lock guards the store, so a Python worker's tasks can share one instance.

    Eviction: least recently used beyond ``maximum_size`` keys; an entry also expires
    ``expire_after_write`` after it was put, and ``expire_after_access`` after it was
    last read or put, whichever comes first. Time is read from ``timer`` (monotonic
    seconds), once per operation.

    Examples
    --------
    >>> from datetime import timedelta
    >>> cache = (DefaultLookupCache.new_builder().maximum_size(2)
    ...          .expire_after_write(timedelta(minutes=10)).build())
    >>> cache.open()
    >>> cache.put((1,), [(1, "a")])
    >>> cache.get_if_present((1,))
    ((1, 'a'),)
    >>> cache.get_if_present((2,)) is None
    True
    """

    def __init__(
        self,
        *,
        maximum_size: int | None = None,
        expire_after_write: timedelta | None = None,
        expire_after_access: timedelta | None = None,
        cache_missing_key: bool = True,
        timer: Timer = time.monotonic,
    ) -> None:
        if maximum_size is None and expire_after_write is None and expire_after_access is None:
            raise ConfigError(
                "DefaultLookupCache needs at least one of maximum_size, expire_after_write "
                "or expire_after_access (an unbounded cache would grow without limit)"
            )
        self._maximum_size = maximum_size
        self._expire_after_write = expire_after_write
        self._expire_after_access = expire_after_access
        self._cache_missing_key = cache_missing_key
        self._timer = timer
        self._lock = threading.Lock()
        self._metrics = CacheMetrics()
        self._store = self._new_store()
        # cachetools' timer context reads the clock once for nested operations.
        store = self._store
        self._clock: Any = _NO_TIMER if isinstance(store, _CountingLRU) else store.timer

    # --- construction

    @staticmethod
    def new_builder() -> DefaultLookupCacheBuilder:
        """A builder: set at least one of the three limits, then call ``build()``."""
        return DefaultLookupCacheBuilder()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> DefaultLookupCache:
        """Build from Flink option keys (``lookup.cache`` must be ``PARTIAL``).

        Reads ``lookup.partial-cache.max-rows``, ``.expire-after-write``,
        ``.expire-after-access`` and ``.cache-missing-key``.

        Raises
        ------
        ConfigError
            (a ``ValueError``) naming the key that is missing, unknown or invalid.
        """
        cache_type = opts.CACHE.get(options)
        if cache_type != "PARTIAL":
            raise ConfigError(
                f"option 'lookup.cache' must be PARTIAL for DefaultLookupCache, got {cache_type}"
            )
        partial_keys: list[opts.ConfigOption[Any]] = [
            opts.PARTIAL_CACHE_MAX_ROWS,
            opts.PARTIAL_CACHE_EXPIRE_AFTER_WRITE,
            opts.PARTIAL_CACHE_EXPIRE_AFTER_ACCESS,
            opts.PARTIAL_CACHE_CACHE_MISSING_KEY,
        ]
        opts.check_known_keys(options, [o.key for o in partial_keys], "lookup.partial-cache.")
        builder = cls.new_builder()
        max_rows = opts.PARTIAL_CACHE_MAX_ROWS.get(options)
        write = opts.PARTIAL_CACHE_EXPIRE_AFTER_WRITE.get(options)
        access = opts.PARTIAL_CACHE_EXPIRE_AFTER_ACCESS.get(options)
        if max_rows is None and write is None and access is None:
            raise ConfigError(
                "a PARTIAL lookup cache needs at least one of 'lookup.partial-cache.max-rows', "
                "'lookup.partial-cache.expire-after-write' or "
                "'lookup.partial-cache.expire-after-access'"
            )
        if max_rows is not None:
            builder.maximum_size(max_rows)
        if write is not None:
            builder.expire_after_write(write)
        if access is not None:
            builder.expire_after_access(access)
        missing = opts.PARTIAL_CACHE_CACHE_MISSING_KEY.get(options)
        builder.cache_missing_key(True if missing is None else missing)
        return builder.build()

    def _new_store(self) -> _Store:
        maxsize: float = self._maximum_size if self._maximum_size is not None else math.inf
        write = self._seconds(self._expire_after_write)
        access = self._seconds(self._expire_after_access)
        if write == math.inf and access == math.inf:
            return _CountingLRU(maxsize)
        if access == math.inf:
            return _CountingTTL(maxsize, write, timer=self._timer)

        def time_to_use(key: Key, entry: _Entry, now: float) -> float:
            # Recomputed whenever the entry is (re)set, which is how access renews it.
            return min(entry.written + write, now + access)

        return _CountingTLRU(maxsize, time_to_use, timer=self._timer)

    @staticmethod
    def _seconds(delta: timedelta | None) -> float:
        return math.inf if delta is None else delta.total_seconds()

    def __getstate__(self) -> dict[str, Any]:
        # Configuration only: a cache shipped to executors starts empty there.
        return {
            "maximum_size": self._maximum_size,
            "expire_after_write": self._expire_after_write,
            "expire_after_access": self._expire_after_access,
            "cache_missing_key": self._cache_missing_key,
            "timer": self._timer,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    # --- LookupCache

    def open(self, metrics: CacheMetrics | None = None) -> None:
        """Report into ``metrics`` (a fresh :class:`CacheMetrics` when None)."""
        self._metrics = metrics if metrics is not None else CacheMetrics()
        self._metrics.register_gauges(self._gauges)

    @property
    def metrics(self) -> CacheMetrics:
        """The metrics this cache reports into."""
        return self._metrics

    def _gauges(self) -> tuple[int, int]:
        with self._lock:
            records = len(self._store)  # expires lazily, so the count is current
            return records, self._store.nbytes

    def _lookup(self, key: Key) -> Rows | None:
        store = self._store
        entry = store.get(key)
        if entry is None:
            return None
        if self._expire_after_access is not None:
            store[key] = entry  # re-set: renews expire-after-access and the LRU position
        return entry.rows

    def get_if_present(self, key: Key) -> Rows | None:
        """The cached rows of ``key`` (empty tuple for a cached miss), or None."""
        check_key(key)
        with self._lock, self._timer_frozen():
            rows = self._lookup(key)
        if rows is None:
            self._metrics.inc_misses()
        else:
            self._metrics.inc_hits()
        return rows

    def get_all(self, keys: Iterable[Key]) -> dict[Key, Rows]:
        """Present keys of ``keys`` with their rows, under one lock and one clock reading."""
        found: dict[Key, Rows] = {}
        asked = 0
        with self._lock, self._timer_frozen():
            for key in keys:
                asked += 1
                rows = self._lookup(check_key(key))
                if rows is not None:
                    found[key] = rows
        self._metrics.inc_hits(len(found))
        self._metrics.inc_misses(asked - len(found))
        return found

    def _put_locked(self, key: Key, rows: tuple[tuple[Any, ...], ...]) -> None:
        store = self._store
        if not rows and not self._cache_missing_key:
            old = store.pop(key, None)  # an empty result is not cached: drop stale rows
            if old is not None:
                store.nbytes -= old.nbytes
            return
        # A live old entry is replaced in place (its bytes leave here); an expired one
        # is removed by the store's own expiry, which accounts for it.
        old = store.get(key)
        entry = _Entry(rows, estimate_entry_bytes(key, rows), self._now(store))
        store[key] = entry  # may evict (counted by the store); never expires at once
        store.nbytes += entry.nbytes - (old.nbytes if old is not None else 0)

    def put(self, key: Key, rows: Rows) -> None:
        """Cache ``rows`` for ``key``; empty ``rows`` only if missing keys are cached."""
        frozen = freeze_rows(check_key(key), rows)
        with self._lock, self._timer_frozen():
            self._put_locked(key, frozen)

    def put_all(self, entries: Mapping[Key, Rows]) -> None:
        """:meth:`put` every entry, under one lock and one clock reading."""
        frozen = [(key, freeze_rows(check_key(key), rows)) for key, rows in entries.items()]
        with self._lock, self._timer_frozen():
            for key, rows in frozen:
                self._put_locked(key, rows)

    def invalidate(self, key: Key) -> None:
        """Remove ``key`` if present."""
        check_key(key)
        with self._lock:
            old = self._store.pop(key, None)
            if old is not None:
                self._store.nbytes -= old.nbytes

    def size(self) -> int:
        """Number of cached keys (expired entries are not counted)."""
        with self._lock:
            return len(self._store)

    def close(self) -> None:
        """Drop all entries."""
        with self._lock:
            self._store.clear()
            self._store.nbytes = 0

    def _timer_frozen(self) -> Any:
        return self._clock

    @staticmethod
    def _now(store: _Store) -> float:
        return store.timer() if type(store) is _CountingTLRU else 0.0

    def __repr__(self) -> str:
        return (
            f"DefaultLookupCache(maximum_size={self._maximum_size}, "
            f"expire_after_write={self._expire_after_write}, "
            f"expire_after_access={self._expire_after_access}, "
            f"cache_missing_key={self._cache_missing_key})"
        )


class _NoTimer:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_TIMER = _NoTimer()


class DefaultLookupCacheBuilder:
    """Builder of :class:`DefaultLookupCache` (Flink's ``DefaultLookupCache.Builder``)."""

    def __init__(self) -> None:
        self._maximum_size: int | None = None
        self._expire_after_write: timedelta | None = None
        self._expire_after_access: timedelta | None = None
        self._cache_missing_key = True
        self._timer: Timer = time.monotonic

    def maximum_size(self, n: int) -> DefaultLookupCacheBuilder:
        """Keep at most ``n`` keys (least recently used evicted first); ``n >= 1``."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"maximum_size must be a positive int, got {n!r}")
        self._maximum_size = n
        return self

    def expire_after_write(self, duration: timedelta | float) -> DefaultLookupCacheBuilder:
        """Expire entries this long (a ``timedelta`` or seconds) after they were put."""
        self._expire_after_write = opts.as_timedelta(duration, "expire_after_write")
        return self

    def expire_after_access(self, duration: timedelta | float) -> DefaultLookupCacheBuilder:
        """Expire entries this long (a ``timedelta`` or seconds) after their last read or put."""
        self._expire_after_access = opts.as_timedelta(duration, "expire_after_access")
        return self

    def cache_missing_key(self, enabled: bool) -> DefaultLookupCacheBuilder:
        """Whether a key with no rows is cached as an empty result (default True)."""
        if not isinstance(enabled, bool):
            raise ConfigError(f"cache_missing_key must be a bool, got {enabled!r}")
        self._cache_missing_key = enabled
        return self

    def timer(self, timer: Timer) -> DefaultLookupCacheBuilder:
        """The monotonic clock in seconds (default ``time.monotonic``); tests pass a fake.

        It must be picklable (a module-level function or an object) when the cache is
        shipped to Spark executors.
        """
        if not callable(timer):
            raise ConfigError(f"timer must be a zero-argument callable, got {timer!r}")
        self._timer = timer
        return self

    def build(self) -> DefaultLookupCache:
        """The configured cache.

        Raises
        ------
        ConfigError
            (a ``ValueError``) when none of maximum_size, expire_after_write and
            expire_after_access is set.
        """
        return DefaultLookupCache(
            maximum_size=self._maximum_size,
            expire_after_write=self._expire_after_write,
            expire_after_access=self._expire_after_access,
            cache_missing_key=self._cache_missing_key,
            timer=self._timer,
        )
