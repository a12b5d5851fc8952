"""DefaultLookupCache: Flink's partial lookup cache (size, bytes and TTL eviction), columnar.

Entries live in Arrow and numpy, not in Python objects: a batch of keys is hashed and
probed in bulk (`cache.hash_table`), hits are gathered with ``take`` from the
rows' Arrow segments (`cache.default.segments`), expiry is a comparison of timestamp
arrays, and size eviction picks the least recently used entries of a batch with one
``argpartition``. The per-key API (``get_if_present`` / ``put``) runs on the same
entries. This module holds the API, its lock and its configuration; the entries are
`cache.default.entries`, and what goes when is `cache.default.eviction`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from cache._missing import check_missing_life, refuse_idle_missing_life
from cache.answers import Answers
from cache.base import Key, LookupCache, Rows, check_key, freeze_rows
from cache.default.entries import NEVER, Entries
from cache.default.eviction import Eviction
from cache.keys import CacheKeys, matchable
from cache.metrics import CacheMetrics
from connectors.rows import python_values
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError
from spark_lookup.options import check_bool, check_callable, check_int

__all__ = ["DefaultLookupCache", "DefaultLookupCacheBuilder"]

Timer = Callable[[], float]

_MASK64 = 2**64 - 1

# The one check of each keyword argument of DefaultLookupCache: __init__ applies them,
# and the builder applies each as its value is set, so that a bad value fails there.
_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "maximum_size": check_int,
    "maximum_bytes": check_int,
    "expire_after_write": opts.as_timedelta,
    "expire_after_access": opts.as_timedelta,
    "cache_missing_key": check_bool,
    "expire_missing_after": check_missing_life,
    "timer": check_callable,
}


def _checked(name: str, value: Any) -> Any:
    """``value`` for the keyword argument ``name``, checked."""
    return _CHECKS[name](value, name)


def _checked_unless_none(name: str, value: Any) -> Any:
    """A bound or duration: None is not set."""
    return None if value is None else _checked(name, value)


class DefaultLookupCache(LookupCache):
    """A size- and time-bounded in-process cache of lookup results (Flink's DefaultLookupCache).

    Build it with [`new_builder`][] (or [`from_options`][]) on the driver; it pickles
    as its configuration only and starts empty wherever it is unpickled. Thread-safe: one
    lock guards the entries, so a Python worker's tasks can share one instance.

    Keys and rows are stored as Arrow columns of the types [`bind`][] gives (the lookup
    runtime binds the dimension schema); an unbound cache infers them from its first
    ``put``. Keys are values of those types, converted by the connectors' exact rules
    ([`connectors.keys.KeyCodec`][]): a key that is no value of its column's type is
    never present and ``put`` refuses it (``True`` is no key of a text column, ``1.5``
    none of an integer column, a ``datetime`` none of a date column), ``1`` and ``1.0``
    are one key of a numeric column, a FLOAT key is its value as a float (``0.1`` is the
    FLOAT ``0.1``), and a key holding a null or NaN is never cached.

    Eviction, checked a batch at a time (each ``get_all``/``put_all``/Arrow call is one
    batch, each per-key call too):

    - an entry expires ``expire_after_write`` after it was put and ``expire_after_access``
      after it was last read or put, whichever comes first; time is read from ``timer``
      once per batch;
    - a missing key (an empty answer, cached with ``cache_missing_key``) expires
      ``expire_missing_after`` after it was put, or sooner by the two above: a row that
      arrives late in the dimension is found once its key's miss expires, while rows
      keep their longer life;
    - after a batch the cache holds at most ``maximum_size`` keys (for a provider
      with a ``Validity``, ``maximum_size`` rows: each version of a key is a row, a
      missing key counts as one, and whole keys go; the lookup runtime switches this
      on with [`count_rows`][]) and at most ``maximum_bytes`` bytes
      (``num_cached_bytes``). Expired entries go first, then
      the least recently used: recency is counted in batches, so the entries of one
      batch are equally recent, and among them the earlier put goes first. When it must
      evict, it evicts ``1/64`` of the bound more than needed, so that evictions come in
      rounds rather than on every batch (Flink's cache, on Guava, is approximate too).

    ``num_cached_bytes`` is exact: the bytes of the Arrow buffers and numpy arrays the
    entries hold, including rows of evicted entries until they are compacted away
    (when they outnumber the live ones).

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
        maximum_bytes: int | None = None,
        expire_after_write: timedelta | None = None,
        expire_after_access: timedelta | None = None,
        cache_missing_key: bool = True,
        expire_missing_after: timedelta | None = None,
        timer: Timer = time.monotonic,
    ) -> None:
        if (maximum_size is None and maximum_bytes is None and expire_after_write is None
                and expire_after_access is None):
            raise ConfigError(
                "DefaultLookupCache needs at least one of maximum_size, maximum_bytes, "
                "expire_after_write or expire_after_access (an unbounded cache would grow "
                "without limit)"
            )
        self._maximum_size = _checked_unless_none("maximum_size", maximum_size)
        self._maximum_bytes = _checked_unless_none("maximum_bytes", maximum_bytes)
        self._expire_after_write = _checked_unless_none("expire_after_write", expire_after_write)
        self._expire_after_access = _checked_unless_none(
            "expire_after_access", expire_after_access)
        self._cache_missing_key = _checked("cache_missing_key", cache_missing_key)
        self._expire_missing_after: timedelta | None = _checked_unless_none(
            "expire_missing_after", expire_missing_after)
        self._timer = _checked("timer", timer)
        refuse_idle_missing_life(self._expire_missing_after, self._cache_missing_key,
                                 self._expire_after_write, _ARGUMENT_NAMES)
        write_ttl = _seconds(self._expire_after_write)
        access_ttl = _seconds(self._expire_after_access)
        missing_ttl = _seconds(self._expire_missing_after)
        self._timed = min(write_ttl, access_ttl, missing_ttl) != NEVER
        self._lock = threading.Lock()
        self._metrics = CacheMetrics()
        self._entries = Entries(write_ttl, access_ttl, self._cache_missing_key, missing_ttl)
        self._eviction = Eviction(self._maximum_size, self._maximum_bytes)

    # --- construction

    @staticmethod
    def new_builder() -> DefaultLookupCacheBuilder:
        """A builder: set at least one of the limits, then call ``build()``."""
        return DefaultLookupCacheBuilder()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> DefaultLookupCache:
        """Build from Flink option keys (``lookup.cache`` must be ``PARTIAL``).

        Reads ``lookup.partial-cache.max-rows``, ``.max-bytes`` (beyond Flink),
        ``.expire-after-write``, ``.expire-after-access`` and ``.cache-missing-key``, the
        library's ``spark.lookup.partial-cache.expire-missing-after`` (no Flink key), and
        Flink's deprecated ``lookup.cache.max-rows``, ``lookup.cache.ttl`` and
        ``lookup.cache.caching-missing-key`` in their place (with a ``FutureWarning``).

        Raises
        ------
        ConfigError
            (a ``ValueError``) naming the key that is missing, unknown or invalid.
        """
        options = opts.with_current_keys(options)
        cache_type = opts.CACHE.get(options)
        if cache_type != "PARTIAL":
            raise ConfigError(
                f"option 'lookup.cache' must be PARTIAL for DefaultLookupCache, got {cache_type}"
            )
        limits: dict[str, opts.ConfigOption[Any]] = {
            "maximum_size": opts.PARTIAL_CACHE_MAX_ROWS,
            "maximum_bytes": opts.PARTIAL_CACHE_MAX_BYTES,
            "expire_after_write": opts.PARTIAL_CACHE_EXPIRE_AFTER_WRITE,
            "expire_after_access": opts.PARTIAL_CACHE_EXPIRE_AFTER_ACCESS,
        }
        missing_key = opts.PARTIAL_CACHE_CACHE_MISSING_KEY
        missing_life = opts.PARTIAL_CACHE_EXPIRE_MISSING_AFTER
        known = [o.key for o in limits.values()] + [missing_key.key, missing_life.key]
        for prefix in ("lookup.partial-cache.", f"{opts.LIBRARY_PREFIX}partial-cache."):
            opts.check_known_keys(options, known, prefix)
        values: dict[str, Any] = {name: option.get(options) for name, option in limits.items()}
        # __init__ refuses this too, but by its argument names: here the keys are named.
        if all(value is None for value in values.values()):
            raise ConfigError(
                "a PARTIAL lookup cache needs at least one of 'lookup.partial-cache.max-rows', "
                "'lookup.partial-cache.max-bytes', 'lookup.partial-cache.expire-after-write' "
                "or 'lookup.partial-cache.expire-after-access'"
            )
        cache_missing_key = missing_key.get(options) is not False
        expire_missing_after = missing_life.get(options)
        # As __init__ will, but naming the keys the user wrote.
        refuse_idle_missing_life(expire_missing_after, cache_missing_key,
                                 values["expire_after_write"], _OPTION_KEYS)
        return cls(**values, cache_missing_key=cache_missing_key,
                   expire_missing_after=expire_missing_after)

    def __getstate__(self) -> dict[str, Any]:
        # Configuration only: a cache shipped to executors starts empty there.
        return {
            "maximum_size": self._maximum_size,
            "maximum_bytes": self._maximum_bytes,
            "expire_after_write": self._expire_after_write,
            "expire_after_access": self._expire_after_access,
            "cache_missing_key": self._cache_missing_key,
            "expire_missing_after": self._expire_missing_after,
            "timer": self._timer,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def bind(self, schema: pa.Schema, key_columns: Sequence[str]) -> None:
        """Store rows of ``schema`` and keys of the types of its ``key_columns``."""
        super().bind(schema, key_columns)
        key_types = [schema.field(name).type for name in key_columns]
        CacheKeys(key_columns, key_types)  # a key type no key can have: refused here
        with self._lock:
            self._entries.bind(schema.remove_metadata(), list(key_columns), key_types)

    def count_rows(self) -> None:
        """Bound ``maximum_size`` on rows rather than keys, from now on: the lookup
        runtime calls it when it opens a provider with a ``Validity``, whose entries
        hold a key's versions. A missing key counts as one row; whole entries go, least
        recently used first. Not pickled: the runtime calls it where the cache runs."""
        with self._lock:
            self._eviction.count_rows = True
            self._eviction.evict(self._entries)

    @property
    def expire_missing_after(self) -> timedelta | None:
        """How long a missing key stays cached from its put (None: as long as a row)."""
        return self._expire_missing_after

    # --- LookupCache

    def open(self, metrics: CacheMetrics | None = None) -> None:
        """Report into ``metrics`` (a fresh [`CacheMetrics`][] when None)."""
        super().open(metrics)
        self._metrics.register_gauges(self._gauges)

    def _now(self) -> float:
        return self._timer() if self._timed else 0.0

    def _gauges(self) -> tuple[int, int]:
        with self._lock:
            self._eviction.expire(self._entries, self._now())
            return self._entries.live, self._entries.nbytes()

    def get_arrow(self, keys: Sequence[pa.Array]) -> Answers:
        """The cached answers of distinct keys given as arrays of the key types, found
        in bulk (see [`LookupCache.get_arrow`][]). While no put comes between reads,
        the rows are merged into one segment and answered in place: no row is copied."""
        schema, _ = self._bound_schema()
        arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in keys]
        with self._lock:
            if self._entries.merge_when_warm():
                # A merged copy may take more bytes than its parts (a validity bitmap
                # for every row once one part has a null): the bound holds on reads too.
                self._eviction.evict(self._entries)
            hit, groups, offsets, table, key_rows = self._entries.probe(
                arrays, self._now(), gather=False)
            views = self._entries.current_views()
        hits = int(hit.sum())
        self._metrics.inc_hits(hits)
        self._metrics.inc_misses(len(hit) - hits)
        return Answers(hit, groups, offsets,
                       table if table is not None else schema.empty_table(),
                       views=views, key_rows=key_rows)

    def put_arrow(self, keys: Sequence[pa.Array], index: pa.Array,
                  rows: pa.Table | pa.RecordBatch) -> None:
        """Cache the answers of distinct keys in bulk (see [`LookupCache.put_arrow`][])."""
        self._put_arrow(keys, index, rows, None)

    def put_arrow_aged(self, keys: Sequence[pa.Array], index: pa.Array,
                       rows: pa.Table | pa.RecordBatch, ages: np.ndarray) -> None:
        """`put_arrow` of answers loaded ``ages`` seconds ago (a host tier's), whose
        lives count from their load: a row never outlives its TTL by passing through."""
        self._put_arrow(keys, index, rows, np.asarray(ages, dtype=np.float64))

    def _put_arrow(self, keys: Sequence[pa.Array], index: pa.Array,
                   rows: pa.Table | pa.RecordBatch, ages: np.ndarray | None) -> None:
        self._bound_schema()
        arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in keys]
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        positions = index.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        with self._lock:
            entries = self._entries
            entries.reads_since_put = 0
            assert entries.schema is not None
            if table.schema != entries.schema:
                table = table.cast(entries.schema)
            now = self._now()
            self._put(arrays, positions, table if table.num_rows else None, now,
                      None if ages is None else now - ages)

    def host_tier_bounds(self) -> dict[str, Any]:
        """The bounds a host tier behind this cache keeps: ``maximum_size``, and the
        lives (seconds, None: none) of a row and of a missing key; an entry read is not
        written, so a host tier's rows live ``expire_after_access`` from their load."""
        write = _seconds(self._expire_after_write)
        access = _seconds(self._expire_after_access)
        life = min(write, access)
        missing = _seconds(self._expire_missing_after)
        return {"maximum_size": self._maximum_size,
                "write_ttl": None if life == NEVER else life,
                "missing_ttl": None if missing == NEVER else missing,
                "cache_missing_key": self._cache_missing_key}

    def _put(self, arrays: list[pa.Array], index: np.ndarray, rows: pa.Table | None,
             now: float, written: np.ndarray | None = None) -> None:
        """Store answers (see `Entries.put`) within the bounds: the expired entries go
        before, the least recently used after."""
        if not arrays or not len(arrays[0]):
            return
        self._eviction.expire(self._entries, now)
        self._entries.put(arrays, index, rows, now, written)
        self._eviction.evict(self._entries)
        self._eviction.compact(self._entries)

    def get_if_present(self, key: Key) -> Rows | None:
        """The cached rows of ``key`` (empty tuple for a cached miss), or None."""
        check_key(key)
        hash_value = self._scalar_hash(key)
        if hash_value is None:
            return self.get_all([key]).get(key)
        with self._lock:
            rows = self._entries.get_one(hash_value, self._now())
        return self._counted(rows)

    def _scalar_hash(self, key: Key) -> int | None:
        """The hash of a one-integer key of an integer key column, computed in Python
        (the hash of such a key is its own bits); None for every other key, which goes
        the batch way."""
        types = self._entries.key_types
        if types is None or len(key) != 1 or len(types) != 1:
            return None
        value = key[0]
        kind = types[0]
        if type(value) is not int or not pa.types.is_signed_integer(kind):
            return None
        bound = 1 << (kind.bit_width - 1)
        if not -bound <= value < bound:
            return None  # the batch way says why it never matches
        return value & _MASK64

    def get_all(self, keys: Iterable[Key]) -> dict[Key, Rows]:
        """Present keys of ``keys`` with their rows, in one batch."""
        asked = [check_key(key) for key in keys]
        found: dict[Key, Rows] = {}
        hits = 0
        with self._lock:
            entries = self._entries
            if entries.key_types is not None and asked and entries.live:
                arrays, positions = entries.key_arrays(asked, strict=False)
                if len(arrays[0]):
                    hit, groups, offsets, rows, _ = entries.probe(arrays, self._now(), gather=True)
                    columns = [python_values(c) for c in rows.columns] if rows is not None else []
                    flat = list(zip(*columns, strict=True)) if columns else []
                    bounds = offsets.tolist()
                    answers = {j: tuple(flat[bounds[g] : bounds[g + 1]]) if g >= 0 else ()
                               for j, g in zip(np.flatnonzero(hit).tolist(),
                                               groups[hit].tolist(), strict=True)}
                    # Counted per key asked: a key asked twice is answered twice.
                    answered = np.flatnonzero(positions >= 0)
                    answered = answered[hit[positions[answered]]]
                    for i in answered.tolist():
                        found[asked[i]] = answers[int(positions[i])]
                    hits = len(answered)
        self._metrics.inc_hits(hits)
        self._metrics.inc_misses(len(asked) - hits)
        return found

    def put(self, key: Key, rows: Rows) -> None:
        """Cache ``rows`` for ``key``; empty ``rows`` only if missing keys are cached."""
        self.put_all({check_key(key): rows})

    def put_all(self, entries: Mapping[Key, Rows]) -> None:
        """[`put`][] every entry, in one batch.

        Raises
        ------
        KeyKindError
            For a key that is not a tuple or does not convert to the key types.
        TypeError
            For rows that do not convert to the row types (naming the column).
        """
        frozen = [(check_key(key), freeze_rows(key, rows)) for key, rows in entries.items()]
        if not frozen:
            return
        keys = [key for key, _ in frozen]
        flat = [row for _, rows in frozen for row in rows]
        with self._lock:
            held = self._entries
            held.infer([k for k in keys if matchable(k)], flat)
            if held.key_types is None:
                return  # only keys holding nulls: never cached
            arrays, index_of = held.key_arrays(keys, strict=True)
            # Two keys that are one key of the key types (1 and 1.0): the last one's
            # rows are its rows, as a second put would make them.
            given = np.flatnonzero(index_of >= 0)
            _, last = np.unique(index_of[given][::-1], return_index=True)
            winners = np.zeros(len(keys), dtype=bool)
            winners[given[len(given) - 1 - last]] = True
            index_of = np.where(winners, index_of, -1)
            counts = np.fromiter((len(rows) for _, rows in frozen), dtype=np.int64,
                                 count=len(frozen))
            owner = np.repeat(index_of, counts)
            kept_rows = owner >= 0
            table = held.rows_table([r for r, ok in zip(flat, kept_rows, strict=True) if ok])
            self._put(arrays, owner[kept_rows], table, self._now())

    def invalidate(self, key: Key) -> None:
        """Remove ``key`` if present."""
        check_key(key)
        with self._lock:
            entries = self._entries
            if entries.key_types is None or not entries.live:
                return
            arrays, positions = entries.key_arrays([key], strict=False)
            if positions[0] >= 0 and entries.remove(arrays):
                self._eviction.compact(entries)

    def invalidate_arrow(self, keys: Sequence[pa.Array]) -> int:
        """Remove the entries of keys given as arrays of the key types, found in bulk;
        returns how many live entries were removed."""
        arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in keys]
        with self._lock:
            entries = self._entries
            if entries.key_types is None or not entries.live or not len(arrays[0]):
                return 0
            removed = entries.remove(arrays)
            self._eviction.compact(entries)
            return removed

    def invalidate_all(self) -> None:
        """Drop every entry (the bound types stay)."""
        with self._lock:
            self._entries.reset()

    def size(self) -> int:
        """Number of cached keys (expired entries are not counted)."""
        with self._lock:
            self._eviction.expire(self._entries, self._now())
            return self._entries.live

    def close(self) -> None:
        """Drop all entries."""
        with self._lock:
            self._entries.reset()

    def __repr__(self) -> str:
        bytes_part = (f"maximum_bytes={self._maximum_bytes}, "
                      if self._maximum_bytes is not None else "")
        missing_part = (f", expire_missing_after={self._expire_missing_after}"
                        if self._expire_missing_after is not None else "")
        return (
            f"DefaultLookupCache(maximum_size={self._maximum_size}, {bytes_part}"
            f"expire_after_write={self._expire_after_write}, "
            f"expire_after_access={self._expire_after_access}, "
            f"cache_missing_key={self._cache_missing_key}{missing_part})"
        )


def _seconds(delta: timedelta | None) -> float:
    return NEVER if delta is None else delta.total_seconds()


_ARGUMENT_NAMES = ("expire_missing_after", "cache_missing_key", "expire_after_write")
_OPTION_KEYS = (f"option {opts.PARTIAL_CACHE_EXPIRE_MISSING_AFTER.key!r}",
                repr(opts.PARTIAL_CACHE_CACHE_MISSING_KEY.key),
                repr(opts.PARTIAL_CACHE_EXPIRE_AFTER_WRITE.key))


class DefaultLookupCacheBuilder:
    """Builder of [`DefaultLookupCache`][] (Flink's ``DefaultLookupCache.Builder``).

    Each setter checks its value as [`DefaultLookupCache`][]'s keyword argument of the
    same name; [`build`][cache.DefaultLookupCacheBuilder.build] passes them all to it.
    """

    def __init__(self) -> None:
        self._arguments: dict[str, Any] = {}  # of DefaultLookupCache, checked

    def _set(self, name: str, value: Any) -> DefaultLookupCacheBuilder:
        self._arguments[name] = _checked(name, value)
        return self

    def maximum_size(self, n: int) -> DefaultLookupCacheBuilder:
        """Keep at most ``n`` keys (least recently used evicted first); ``n >= 1``. For
        a provider with a ``Validity``, at most ``n`` rows: versions, a missing key
        counting as one (see [`DefaultLookupCache`][])."""
        return self._set("maximum_size", n)

    def maximum_bytes(self, n: int) -> DefaultLookupCacheBuilder:
        """Hold at most ``n`` bytes (``num_cached_bytes``; least recently used evicted
        first); beyond Flink, which bounds rows only."""
        return self._set("maximum_bytes", n)

    def expire_after_write(self, duration: timedelta | float) -> DefaultLookupCacheBuilder:
        """Expire entries this long (a ``timedelta`` or seconds) after they were put."""
        return self._set("expire_after_write", duration)

    def expire_after_access(self, duration: timedelta | float) -> DefaultLookupCacheBuilder:
        """Expire entries this long (a ``timedelta`` or seconds) after their last read or put."""
        return self._set("expire_after_access", duration)

    def cache_missing_key(self, enabled: bool) -> DefaultLookupCacheBuilder:
        """Whether a key with no rows is cached as an empty result (default True)."""
        return self._set("cache_missing_key", enabled)

    def expire_missing_after(self, duration: timedelta | float) -> DefaultLookupCacheBuilder:
        """Expire a cached missing key this long (a ``timedelta`` or seconds) after it was
        put, sooner than rows: a dimension row that arrives late is then found; beyond Flink."""
        return self._set("expire_missing_after", duration)

    def timer(self, timer: Timer) -> DefaultLookupCacheBuilder:
        """The monotonic clock in seconds (default ``time.monotonic``); tests pass a fake.

        It must be picklable (a module-level function or an object) when the cache is
        shipped to Spark executors.
        """
        return self._set("timer", timer)

    def build(self) -> DefaultLookupCache:
        """The configured cache.

        Raises
        ------
        ConfigError
            (a ``ValueError``) when none of the limits is set, or ``expire_missing_after``
            is set with ``cache_missing_key(False)`` or beyond ``expire_after_write``.
        """
        return DefaultLookupCache(**self._arguments)
