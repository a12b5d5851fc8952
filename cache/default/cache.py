"""DefaultLookupCache: Flink's partial lookup cache (size and TTL eviction), columnar.

Entries live in Arrow and numpy, not in Python objects: a batch of keys is hashed and
probed in bulk (`cache.hash_table`), hits are gathered with ``take`` from the
rows' Arrow segments (`cache.default.segments`), expiry is a comparison of timestamp
arrays, and size eviction picks the least recently used entries of a batch with one
``argpartition``. The per-key API (``get_if_present`` / ``put``) runs on the same store.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cache.base import (
    CachedAnswers,
    Key,
    LookupCache,
    Row,
    Rows,
    check_key,
    freeze_rows,
    row_ranges,
    rows_to_table,
)
from cache.default.segments import Segments
from cache.hash_table import HashTable
from cache.key_hash import hash_keys, is_exact
from cache.keys import CacheKeys, matchable
from cache.metrics import CacheMetrics
from connectors.rows import python_values
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError, KeyKindError
from spark_lookup.options import check_bool, check_callable, check_int
from spark_lookup.shown import shown

__all__ = ["DefaultLookupCache", "DefaultLookupCacheBuilder"]

Timer = Callable[[], float]

_NEVER = math.inf
_SEQ_LIMIT = 0xFFFF_FFF0  # access numbers are uint32; renumbered before they wrap
_COMPACT_MIN_DEAD = 1024
_INT32_MAX = 2**31 - 1
_MASK64 = 2**64 - 1
# Reads in a row, with no put between, after which the rows' segments are merged into
# one (a copy of the rows), so that reads answer in place: the steady state of a warm cache.
_READS_BEFORE_MERGE = 4
# When full, evict this fraction of the bound beyond what must go, so that the next
# eviction (one argpartition over the live entries) is that many insertions away.
_SLACK = 64


def _inferred_key_type(values: list[Any]) -> pa.DataType:
    """The Arrow type of a key column known only from Python values (an unbound cache)."""
    inferred = pa.array(values).type
    if pa.types.is_decimal(inferred):
        return pa.decimal128(38, 18)  # one type for every later key, whatever its digits
    return inferred


class DefaultLookupCache(LookupCache):
    """A size- and time-bounded in-process cache of lookup results (Flink's DefaultLookupCache).

    Build it with [`new_builder`][] (or [`from_options`][]) on the driver; it pickles
    as its configuration only and starts empty wherever it is unpickled. Thread-safe: one
    lock guards the store, so a Python worker's tasks can share one instance.

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
    - after a batch the cache holds at most ``maximum_size`` keys and at most
      ``maximum_bytes`` bytes (``num_cached_bytes``). Expired entries go first, then
      the least recently used: recency is counted in batches, so the entries of one
      batch are equally recent, and among them the earlier put goes first. When it must
      evict, it evicts ``1/64`` of the bound more than needed, so that evictions come in
      rounds rather than on every batch (Flink's cache, on Guava, is approximate too).

    ``num_cached_bytes`` is exact: the bytes of the Arrow buffers and numpy arrays the
    store holds, including rows of evicted entries until the store compacts them away
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
        timer: Timer = time.monotonic,
    ) -> None:
        if (maximum_size is None and maximum_bytes is None and expire_after_write is None
                and expire_after_access is None):
            raise ConfigError(
                "DefaultLookupCache needs at least one of maximum_size, maximum_bytes, "
                "expire_after_write or expire_after_access (an unbounded cache would grow "
                "without limit)"
            )
        # The builder checks these too; checked here for a cache built directly.
        self._maximum_size = _bound(maximum_size, "maximum_size")
        self._maximum_bytes = _bound(maximum_bytes, "maximum_bytes")
        self._expire_after_write = _duration(expire_after_write, "expire_after_write")
        self._expire_after_access = _duration(expire_after_access, "expire_after_access")
        check_bool(cache_missing_key, "cache_missing_key")
        check_callable(timer, "timer")
        self._write_ttl = _seconds(self._expire_after_write)
        self._access_ttl = _seconds(self._expire_after_access)
        self._timed = self._write_ttl != _NEVER or self._access_ttl != _NEVER
        self._cache_missing_key = cache_missing_key
        self._timer = timer
        self._lock = threading.Lock()
        self._metrics = CacheMetrics()
        self._key_types: list[pa.DataType] | None = None
        self._key_names: list[str] = []
        self._schema: pa.Schema | None = None
        self._bound_by_caller = False
        self._reset()

    # --- construction

    @staticmethod
    def new_builder() -> DefaultLookupCacheBuilder:
        """A builder: set at least one of the limits, then call ``build()``."""
        return DefaultLookupCacheBuilder()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> DefaultLookupCache:
        """Build from Flink option keys (``lookup.cache`` must be ``PARTIAL``).

        Reads ``lookup.partial-cache.max-rows``, ``.max-bytes`` (beyond Flink),
        ``.expire-after-write``, ``.expire-after-access`` and ``.cache-missing-key``, and
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
        known = [o.key for o in limits.values()] + [missing_key.key]
        opts.check_known_keys(options, known, "lookup.partial-cache.")
        values: dict[str, Any] = {name: option.get(options) for name, option in limits.items()}
        if all(value is None for value in values.values()):
            raise ConfigError(
                "a PARTIAL lookup cache needs at least one of 'lookup.partial-cache.max-rows', "
                "'lookup.partial-cache.max-bytes', 'lookup.partial-cache.expire-after-write' "
                "or 'lookup.partial-cache.expire-after-access'"
            )
        return cls(**values, cache_missing_key=missing_key.get(options) is not False)

    def __getstate__(self) -> dict[str, Any]:
        # Configuration only: a cache shipped to executors starts empty there.
        return {
            "maximum_size": self._maximum_size,
            "maximum_bytes": self._maximum_bytes,
            "expire_after_write": self._expire_after_write,
            "expire_after_access": self._expire_after_access,
            "cache_missing_key": self._cache_missing_key,
            "timer": self._timer,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    # --- the store

    def _reset(self) -> None:
        """Forget every entry and free the arrays (types stay as bound or inferred)."""
        self._count = 0  # slots used, live or dead
        self._reads_since_put = 0
        self._live = 0
        self._seq = 0
        self._next_deadline = _NEVER
        self._hashes = np.zeros(0, dtype=np.uint64)
        # Slot i's rows are starts[i]:starts[i+1]; int32 until the rows held need more.
        self._starts = np.zeros(1, dtype=np.int32)
        self._touched = np.zeros(0, dtype=np.uint32)  # last batch number; 0 = dead
        self._deadline = np.zeros(0, dtype=np.float64) if self._timed else None
        both = self._write_ttl != _NEVER and self._access_ttl != _NEVER
        self._written = np.zeros(0, dtype=np.float64) if both else None
        self._table = HashTable()
        self._rows: Segments | None = Segments(self._schema) if self._schema is not None else None
        self._exact = self._key_types is not None and is_exact(self._key_types)
        self._converter = (None if self._key_types is None
                           else CacheKeys(self._key_names, self._key_types))
        self._keys: Segments | None = None
        if self._key_types is not None and not self._exact:
            self._keys = Segments(pa.schema(
                [(f"k{i}", t) for i, t in enumerate(self._key_types)]))

    def bind(self, schema: pa.Schema, key_columns: Sequence[str]) -> None:
        """Store rows of ``schema`` and keys of the types of its ``key_columns``."""
        super().bind(schema, key_columns)
        key_types = [schema.field(name).type for name in key_columns]
        CacheKeys(key_columns, key_types)  # a key type no key can have: refused here
        with self._lock:
            self._schema = schema.remove_metadata()
            self._key_types = key_types
            self._key_names = list(key_columns)
            self._bound_by_caller = True
            self._reset()

    def _grow(self, extra: int) -> None:
        needed = self._count + extra
        capacity = len(self._hashes)
        if needed <= capacity:
            return
        # Steps of a quarter: these arrays are most of what a cached key costs.
        capacity = max(needed, capacity + capacity // 4, 16)
        self._hashes = _resized(self._hashes, capacity)
        self._starts = _resized(self._starts, capacity + 1)
        self._touched = _resized(self._touched, capacity)
        if self._deadline is not None:
            self._deadline = _resized(self._deadline, capacity)
        if self._written is not None:
            self._written = _resized(self._written, capacity)

    def _nbytes(self) -> int:
        if not self._count:
            return 0
        arrays: list[np.ndarray | None] = [
            self._hashes, self._starts, self._touched, self._deadline, self._written]
        total = sum(int(a.nbytes) for a in arrays if a is not None) + self._table.nbytes
        if self._rows is not None:
            total += self._rows.nbytes
        if self._keys is not None:
            total += self._keys.nbytes
        return total

    def _next_seq(self) -> int:
        if self._seq >= _SEQ_LIMIT:
            # Renumber the live entries' batch numbers by rank: order kept, room made.
            touched = self._touched[: self._count]
            live = touched > 0
            ranks, inverse = np.unique(touched[live], return_inverse=True)
            touched[live] = (inverse + 1).astype(np.uint32)
            self._seq = len(ranks)
        self._seq += 1
        return self._seq

    def _find(self, arrays: Sequence[pa.Array], hashes: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slot holding each key's hash or -1, its bucket, whether that slot's key is
        the key itself: always, for exact hashes)."""
        slots, positions = self._table.find(hashes, self._hashes)
        same = slots >= 0
        if not self._exact and same.any():
            assert self._keys is not None
            found = np.flatnonzero(same)
            stored = self._keys.take(slots[found])
            take = pa.array(found, type=pa.int64())
            equal: Any = None
            for column, probe in zip(stored.columns, arrays, strict=True):
                part = pc.equal(column, probe.take(take))
                equal = part if equal is None else pc.and_(equal, part)
            same[found] = np.asarray(equal.to_numpy(zero_copy_only=False), dtype=bool)
        return slots, positions, same

    def _kill(self, slots: np.ndarray) -> None:
        """Mark live ``slots`` dead (their rows stay until compaction)."""
        if len(slots):
            self._touched[slots] = 0
            if self._deadline is not None:
                self._deadline[slots] = -_NEVER  # dead is expired: one test on reads
            self._live -= len(slots)

    def _expire(self, now: float) -> None:
        """Kill every expired entry, if any can have expired by ``now``."""
        if self._deadline is None or now < self._next_deadline or not self._count:
            return
        touched = self._touched[: self._count]
        deadline = self._deadline[: self._count]
        live = touched > 0
        self._kill(np.flatnonzero(live & (deadline <= now)))
        remaining = deadline[touched > 0]
        self._next_deadline = float(remaining.min()) if len(remaining) else _NEVER
        self._maybe_compact()

    def _renew(self, slots: np.ndarray, now: float) -> None:
        """Entries read at ``now``: renew expire-after-access."""
        if self._access_ttl == _NEVER or not len(slots):
            return
        assert self._deadline is not None
        renewed = np.full(len(slots), now + self._access_ttl)
        if self._written is not None:
            renewed = np.minimum(renewed, self._written[slots] + self._write_ttl)
        self._deadline[slots] = renewed

    def _probe(self, arrays: Sequence[pa.Array], now: float, gather: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Table | None]:
        """(hit, groups, offsets, rows) of distinct keys of the key types, in the form
        of [`LookupCache.get_arrow`][]. With ``gather``, or when the rows lie in
        several segments, ``rows`` holds the hits' rows only; else it is the one
        segment, and ``offsets`` the slots' row starts (no row copied)."""
        n = len(arrays[0]) if arrays else 0
        hit = np.zeros(n, dtype=bool)
        if not n or not self._live:
            return hit, np.full(n, -1, dtype=np.int64), np.zeros(1, dtype=np.int64), None
        slots, _, same = self._find(arrays, hash_keys(arrays))
        candidates = np.flatnonzero(same)
        found = slots[candidates]
        if self._deadline is not None:
            deadline = self._deadline[found]
            alive = deadline > now
            expired = ~alive & (deadline != -_NEVER)
            if expired.any():
                self._kill(found[expired])
        else:
            alive = self._touched[found] > 0
        hits = candidates[alive]
        hit[hits] = True
        hit_slots = found[alive]
        self._touched[hit_slots] = self._next_seq()
        self._renew(hit_slots, now)
        starts = self._starts
        counts = starts[hit_slots + 1] - starts[hit_slots]
        rows = self._rows
        groups = np.full(n, -1, dtype=np.int64)
        if rows is None or not rows.segments:
            return hit, groups, np.zeros(1, dtype=np.int64), None
        filled = counts > 0
        if not gather and len(rows.segments) == 1:
            groups[hits[filled]] = hit_slots[filled]
            return hit, groups, starts, rows.segments[0]
        groups[hits[filled]] = np.arange(int(filled.sum()), dtype=np.int64)
        kept = counts[filled]
        offsets = np.zeros(len(kept) + 1, dtype=np.int64)
        np.cumsum(kept, out=offsets[1:])
        return hit, groups, offsets, rows.take(row_ranges(starts[hit_slots[filled]], kept))

    def _put(self, arrays: list[pa.Array], index: np.ndarray, rows: pa.Table | None,
             now: float) -> None:
        """Store the answers of keys (of the key types): row ``j`` of ``rows`` belongs
        to key ``index[j]``."""
        n = len(arrays[0]) if arrays else 0
        if not n:
            return
        self._expire(now)
        counts = np.bincount(index, minlength=n).astype(np.int64) if len(index) else \
            np.zeros(n, dtype=np.int64)
        hashes = hash_keys(arrays)
        keep = np.ones(n, dtype=bool)
        if len(np.unique(hashes)) != n:
            # The same key twice (1 and 1.0, say), or two keys of one hash: the last put
            # of a hash wins, the others stay uncached.
            _, last = np.unique(hashes[::-1], return_index=True)
            keep[:] = False
            keep[n - 1 - last] = True
        slots, positions, same = self._find(arrays, hashes)
        present = slots >= 0
        old_live = present & (self._touched[np.maximum(slots, 0)] > 0) if self._count else \
            np.zeros(n, dtype=bool)
        # A live entry of the same key is replaced; a live entry of another key with
        # this hash keeps it, and this key stays uncached.
        self._kill(slots[keep & same & old_live])
        keep &= ~(present & ~same & old_live)
        if not self._cache_missing_key:
            keep &= counts > 0
        accepted = np.flatnonzero(keep)
        k = len(accepted)
        if not k:
            self._maybe_compact()
            return
        self._grow(k)
        first = self._count
        new_slots = np.arange(first, first + k, dtype=np.int64)
        rows_end = int(self._starts[first])
        accepted_counts = counts[accepted]
        ends = rows_end + np.cumsum(accepted_counts)
        if self._starts.dtype == np.int32 and int(ends[-1]) > _INT32_MAX:
            self._starts = self._starts.astype(np.int64)
        self._starts[first + 1 : first + k + 1] = ends
        if rows is not None and int(accepted_counts.sum()):
            order = np.argsort(index, kind="stable")
            wanted = np.zeros(n, dtype=bool)
            wanted[accepted] = True
            order = order[wanted[index[order]]]
            assert self._rows is not None
            self._rows.append(rows.take(pa.array(order, type=pa.int64())))
        if self._keys is not None:
            take = pa.array(accepted, type=pa.int64())
            self._keys.append(pa.Table.from_arrays(
                [array.take(take) for array in arrays], schema=self._keys.schema))
        self._hashes[first : first + k] = hashes[accepted]
        self._touched[first : first + k] = self._next_seq()
        if self._deadline is not None:
            deadline = min(now + self._write_ttl, now + self._access_ttl)
            self._deadline[first : first + k] = deadline
            self._next_deadline = min(self._next_deadline, deadline)
        if self._written is not None:
            self._written[first : first + k] = now
        self._count += k
        self._live += k
        reuse = present[accepted]
        self._table.repoint(positions[accepted[reuse]], new_slots[reuse])
        fresh = accepted[~reuse]
        self._table.insert(hashes[fresh], new_slots[~reuse], self._hashes)
        self._evict()
        self._maybe_compact()

    def _evict_oldest(self, count: int) -> None:
        live = np.flatnonzero(self._touched[: self._count] > 0)
        if count >= len(live):
            self._kill(live)
            return
        # Least recent batch first; within a batch, the earlier slot.
        order = (self._touched[live].astype(np.uint64) << np.uint64(32)) | live.astype(np.uint64)
        self._kill(live[np.argpartition(order, count - 1)[:count]])

    def _evict(self) -> None:
        bound = self._maximum_size
        if bound is not None and self._live > bound:
            self._evict_oldest(self._live - bound + bound // _SLACK)
        limit = self._maximum_bytes
        if limit is None:
            return
        held = self._nbytes()
        while held > limit and self._live:
            self._compact()
            held = self._nbytes()
            if held <= limit:
                break
            per_entry = held / self._live
            excess = held - limit + limit // _SLACK
            self._evict_oldest(max(1, math.ceil(excess / per_entry)))
            self._compact()
            held = self._nbytes()

    def _maybe_compact(self) -> None:
        dead = self._count - self._live
        if dead and (not self._live or (dead > self._live and dead >= _COMPACT_MIN_DEAD)):
            self._compact()
            self._evict()  # the copy, like a merge, may hold more bytes than its parts

    def _compact(self) -> None:
        """Keep only live entries: their rows in one segment, slots renumbered in order."""
        if not self._live:
            self._reset()
            return
        if self._live == self._count:
            return
        live = np.flatnonzero(self._touched[: self._count] > 0)
        counts = self._starts[live + 1] - self._starts[live]
        if self._rows is not None:
            self._rows.replace(self._rows.take(row_ranges(self._starts[live], counts)))
        if self._keys is not None:
            self._keys.replace(self._keys.take(live))
        n = len(live)
        self._hashes = self._hashes[live]
        self._touched = self._touched[live]
        if self._deadline is not None:
            self._deadline = self._deadline[live]
        if self._written is not None:
            self._written = self._written[live]
        total = int(counts.sum())
        self._starts = np.zeros(n + 1, dtype=np.int32 if total <= _INT32_MAX else np.int64)
        self._starts[1:] = np.cumsum(counts)
        self._count = n
        self._table.rebuild(self._hashes)

    # --- types of an unbound cache, and Python values to Arrow

    def _infer(self, keys: list[Key], rows: list[Row]) -> None:
        """Types from the first put of an unbound cache (keys first, rows when some)."""
        if self._key_types is None and keys:
            columns = list(zip(*keys, strict=True))
            types = [_inferred_key_type(list(column)) for column in columns]
            names = [f"k{i}" for i in range(len(types))]
            try:
                CacheKeys(names, types)
            except ConfigError as exc:
                raise KeyKindError(f"keys {shown(keys[0])} cannot be cached: {exc}") from None
            self._key_types, self._key_names = types, names
            self._reset()
        if self._schema is None and rows:
            columns = list(zip(*rows, strict=True))
            self._schema = pa.schema([(f"f{i}", pa.array(list(c)).type)
                                      for i, c in enumerate(columns)])
            self._rows = Segments(self._schema)

    def _rows_table(self, rows: list[Row]) -> pa.Table | None:
        if not rows:
            return None
        schema = self._schema
        assert schema is not None
        widths = set(map(len, rows))
        if widths != {len(schema)}:
            raise TypeError(
                f"rows of {len(schema)} value(s) expected (the cache's schema), got rows "
                f"of {sorted(widths)}"
            )
        if not self._bound_by_caller and any(pa.types.is_null(f.type) for f in schema):
            # A column seen only as None so far takes its type from the first value.
            columns = list(zip(*rows, strict=True))
            fields = [
                pa.field(f.name, pa.array(list(columns[i])).type)
                if pa.types.is_null(f.type) else f
                for i, f in enumerate(schema)
            ]
            widened = pa.schema(fields)
            if widened != schema:
                assert self._rows is not None
                self._rows.cast(widened)
                self._schema = schema = widened
        return rows_to_table(rows, schema)

    def _key_arrays(self, keys: Sequence[Key], strict: bool
                    ) -> tuple[list[pa.Array], np.ndarray]:
        """The distinct keys of ``keys`` as arrays of the key types, and where each key
        went (-1: it never matches); see `CacheKeys.arrays`."""
        assert self._converter is not None
        return self._converter.arrays(keys, strict=strict)

    # --- LookupCache

    def open(self, metrics: CacheMetrics | None = None) -> None:
        """Report into ``metrics`` (a fresh [`CacheMetrics`][] when None)."""
        super().open(metrics)
        self._metrics.register_gauges(self._gauges)

    def _now(self) -> float:
        return self._timer() if self._timed else 0.0

    def _gauges(self) -> tuple[int, int]:
        with self._lock:
            self._expire(self._now())
            return self._live, self._nbytes()

    def get_arrow(self, keys: Sequence[pa.Array]) -> CachedAnswers:
        """The cached answers of distinct keys given as arrays of the key types, found
        in bulk (see [`LookupCache.get_arrow`][]). While no put comes between reads,
        the rows are merged into one segment and answered in place: no row is copied."""
        schema, _ = self._bound_schema()
        arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in keys]
        with self._lock:
            self._reads_since_put += 1
            rows = self._rows
            if (rows is not None and len(rows.segments) > 1
                    and self._reads_since_put >= _READS_BEFORE_MERGE):
                rows.merge()
                # A merged copy may take more bytes than its parts (a validity bitmap
                # for every row once one part has a null): the bound holds on reads too.
                self._evict()
            hit, groups, offsets, table = self._probe(arrays, self._now(), gather=False)
        hits = int(hit.sum())
        self._metrics.inc_hits(hits)
        self._metrics.inc_misses(len(hit) - hits)
        return CachedAnswers(hit, groups, offsets,
                             table if table is not None else schema.empty_table())

    def put_arrow(self, keys: Sequence[pa.Array], index: pa.Array,
                  rows: pa.Table | pa.RecordBatch) -> None:
        """Cache the answers of distinct keys in bulk (see [`LookupCache.put_arrow`][])."""
        self._bound_schema()
        arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in keys]
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        positions = index.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        with self._lock:
            self._reads_since_put = 0
            assert self._schema is not None
            if table.schema != self._schema:
                table = table.cast(self._schema)
            self._put(arrays, positions, table if table.num_rows else None, self._now())

    def get_if_present(self, key: Key) -> Rows | None:
        """The cached rows of ``key`` (empty tuple for a cached miss), or None."""
        check_key(key)
        hash_value = self._scalar_hash(key)
        if hash_value is None:
            return self.get_all([key]).get(key)
        with self._lock:
            rows = self._get_one(hash_value)
        return self._counted(rows)

    def _scalar_hash(self, key: Key) -> int | None:
        """The hash of a one-integer key of an integer key column, computed in Python
        (the hash of such a key is its own bits); None for every other key, which goes
        the batch way."""
        types = self._key_types
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

    def _get_one(self, hash_value: int) -> Rows | None:
        if not self._live:
            return None
        slot = self._table.find_one(hash_value, self._hashes)
        if slot < 0 or self._touched[slot] == 0:
            return None
        now = self._now()
        if self._deadline is not None and self._deadline[slot] <= now:
            self._kill(np.array([slot]))
            return None
        self._touched[slot] = self._next_seq()
        if self._access_ttl != _NEVER:
            self._renew(np.array([slot]), now)
        start, stop = int(self._starts[slot]), int(self._starts[slot + 1])
        if start == stop or self._rows is None:
            return ()
        table = self._rows.slice(start, stop)
        columns = [python_values(column) for column in table.columns]
        return tuple(zip(*columns, strict=True))

    def get_all(self, keys: Iterable[Key]) -> dict[Key, Rows]:
        """Present keys of ``keys`` with their rows, in one batch."""
        asked = [check_key(key) for key in keys]
        found: dict[Key, Rows] = {}
        hits = 0
        with self._lock:
            if self._key_types is not None and asked and self._live:
                arrays, positions = self._key_arrays(asked, strict=False)
                if len(arrays[0]):
                    hit, groups, offsets, rows = self._probe(arrays, self._now(), gather=True)
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
            self._infer([k for k in keys if matchable(k)], flat)
            if self._key_types is None:
                return  # only keys holding nulls: never cached
            arrays, index_of = self._key_arrays(keys, strict=True)
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
            table = self._rows_table([r for r, ok in zip(flat, kept_rows, strict=True) if ok])
            self._put(arrays, owner[kept_rows], table, self._now())

    def invalidate(self, key: Key) -> None:
        """Remove ``key`` if present."""
        check_key(key)
        with self._lock:
            if self._key_types is None or not self._live:
                return
            arrays, positions = self._key_arrays([key], strict=False)
            if positions[0] < 0:
                return
            slots, _, same = self._find(arrays, hash_keys(arrays))
            if same[0] and self._touched[slots[0]] > 0:
                self._kill(slots[:1])
                self._maybe_compact()

    def invalidate_arrow(self, keys: Sequence[pa.Array]) -> int:
        """Remove the entries of keys given as arrays of the key types, found in bulk;
        returns how many live entries were removed."""
        arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in keys]
        with self._lock:
            if self._key_types is None or not self._live or not len(arrays[0]):
                return 0
            slots, _, same = self._find(arrays, hash_keys(arrays))
            found = np.unique(slots[same])
            live = found[self._touched[found] > 0]
            self._kill(live)
            self._maybe_compact()
            return len(live)

    def invalidate_all(self) -> None:
        """Drop every entry (the bound types stay)."""
        with self._lock:
            self._reset()

    def size(self) -> int:
        """Number of cached keys (expired entries are not counted)."""
        with self._lock:
            self._expire(self._now())
            return self._live

    def close(self) -> None:
        """Drop all entries."""
        with self._lock:
            self._reset()

    def __repr__(self) -> str:
        bytes_part = (f"maximum_bytes={self._maximum_bytes}, "
                      if self._maximum_bytes is not None else "")
        return (
            f"DefaultLookupCache(maximum_size={self._maximum_size}, {bytes_part}"
            f"expire_after_write={self._expire_after_write}, "
            f"expire_after_access={self._expire_after_access}, "
            f"cache_missing_key={self._cache_missing_key})"
        )


def _seconds(delta: timedelta | None) -> float:
    return _NEVER if delta is None else delta.total_seconds()


def _resized(array: np.ndarray, size: int) -> np.ndarray:
    grown = np.zeros(size, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def _bound(value: int | None, name: str) -> int | None:
    return None if value is None else check_int(value, name)


def _duration(value: timedelta | float | None, name: str) -> timedelta | None:
    return None if value is None else opts.as_timedelta(value, name)


class DefaultLookupCacheBuilder:
    """Builder of [`DefaultLookupCache`][] (Flink's ``DefaultLookupCache.Builder``)."""

    def __init__(self) -> None:
        self._arguments: dict[str, Any] = {}  # of DefaultLookupCache, checked

    def maximum_size(self, n: int) -> DefaultLookupCacheBuilder:
        """Keep at most ``n`` keys (least recently used evicted first); ``n >= 1``."""
        self._arguments["maximum_size"] = check_int(n, "maximum_size")
        return self

    def maximum_bytes(self, n: int) -> DefaultLookupCacheBuilder:
        """Hold at most ``n`` bytes (``num_cached_bytes``; least recently used evicted
        first); beyond Flink, which bounds rows only."""
        self._arguments["maximum_bytes"] = check_int(n, "maximum_bytes")
        return self

    def expire_after_write(self, duration: timedelta | float) -> DefaultLookupCacheBuilder:
        """Expire entries this long (a ``timedelta`` or seconds) after they were put."""
        self._arguments["expire_after_write"] = opts.as_timedelta(duration, "expire_after_write")
        return self

    def expire_after_access(self, duration: timedelta | float) -> DefaultLookupCacheBuilder:
        """Expire entries this long (a ``timedelta`` or seconds) after their last read or put."""
        self._arguments["expire_after_access"] = opts.as_timedelta(
            duration, "expire_after_access")
        return self

    def cache_missing_key(self, enabled: bool) -> DefaultLookupCacheBuilder:
        """Whether a key with no rows is cached as an empty result (default True)."""
        self._arguments["cache_missing_key"] = check_bool(enabled, "cache_missing_key")
        return self

    def timer(self, timer: Timer) -> DefaultLookupCacheBuilder:
        """The monotonic clock in seconds (default ``time.monotonic``); tests pass a fake.

        It must be picklable (a module-level function or an object) when the cache is
        shipped to Spark executors.
        """
        self._arguments["timer"] = check_callable(timer, "timer")
        return self

    def build(self) -> DefaultLookupCache:
        """The configured cache.

        Raises
        ------
        ConfigError
            (a ``ValueError``) when none of the limits is set.
        """
        return DefaultLookupCache(**self._arguments)
