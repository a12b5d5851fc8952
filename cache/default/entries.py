"""The default cache's entries: one table of keys, rows and times, in Arrow and numpy.

Slot ``i`` is one entry: its key's hash, its rows (``starts[i]:starts[i+1]`` of the rows'
segments), the batch that last touched it and, for a cache with a time-to-live, its
deadline (a missing key's may be sooner than a row's: ``missing_ttl``). Killed entries
stay in their slots, dead, until compaction renumbers the live ones; the bounds on size
and bytes are `cache.default.eviction.Eviction`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cache.base import Key, Row, Rows, row_ranges, rows_to_table
from cache.default.segments import Segments
from cache.dense_table import DenseTable, suits
from cache.hash_table import HashTable
from cache.key_hash import hash_keys, is_exact
from cache.keys import CacheKeys
from cache.string_views import StringViews
from connectors.rows import python_values
from spark_lookup.errors import ConfigError, KeyKindError
from spark_lookup.shown import shown

__all__ = ["NEVER", "Entries"]

NEVER = math.inf
_SEQ_LIMIT = 0xFFFF_FFF0  # access numbers are uint32; renumbered before they wrap
_COMPACT_MIN_DEAD = 1024
_INT32_MAX = 2**31 - 1
# Reads in a row, with no put between, after which the rows' segments are merged into
# one (a copy of the rows), so that reads answer in place: the steady state of a warm cache.
_READS_BEFORE_MERGE = 4
# Rows from which a warm segment's short strings are gathered through views: in a
# smaller one the column's offsets and bytes stay in the CPU's caches, and Arrow's take
# is the faster (benchmarks/README.md, "One partial cache per host").
_VIEWS_MIN_ROWS = 1 << 16


def _inferred_key_type(values: list[Any]) -> pa.DataType:
    """The Arrow type of a key column known only from Python values (an unbound cache)."""
    inferred = pa.array(values).type
    if pa.types.is_decimal(inferred):
        return pa.decimal128(38, 18)  # one type for every later key, whatever its digits
    return inferred


def _resized(array: np.ndarray, size: int) -> np.ndarray:
    grown = np.zeros(size, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


class Entries:
    """The entries of one `DefaultLookupCache`, and their types.

    Not thread-safe: the cache calls it under its lock. Times are seconds of the cache's
    timer; ``write_ttl``, ``access_ttl`` and ``missing_ttl`` (the life of a missing key
    from its put) are `NEVER` when unset.
    """

    def __init__(self, write_ttl: float, access_ttl: float, cache_missing_key: bool,
                 missing_ttl: float = NEVER) -> None:
        self.write_ttl = write_ttl
        self.access_ttl = access_ttl
        self.cache_missing_key = cache_missing_key
        self.missing_ttl = missing_ttl
        self.key_types: list[pa.DataType] | None = None
        self.key_names: list[str] = []
        self.schema: pa.Schema | None = None
        self.bound_by_caller = False
        self.reset()

    def reset(self) -> None:
        """Forget every entry and free the arrays (types stay as bound or inferred)."""
        self.count = 0  # slots used, live or dead
        self.reads_since_put = 0
        self.live = 0
        # The rows of the live entries, a missing key (no rows) counting as one: what
        # a cache bounding versions (`Eviction.count_rows`) holds within its bound.
        self.live_rows = 0
        self.seq = 0
        self.next_deadline = NEVER
        self.hashes = np.zeros(0, dtype=np.uint64)
        # Slot i's rows are starts[i]:starts[i+1]; int32 until the rows held need more.
        self.starts = np.zeros(1, dtype=np.int32)
        self.touched = np.zeros(0, dtype=np.uint32)  # last batch number; 0 = dead
        timed = min(self.write_ttl, self.access_ttl, self.missing_ttl) != NEVER
        self.deadline = np.zeros(0, dtype=np.float64) if timed else None
        # A read renews expire-after-access up to this: the put time plus the entry's
        # life from its put (a row's or a missing key's), when one is set.
        capped = self.access_ttl != NEVER and (
            self.write_ttl != NEVER or self.missing_ttl != NEVER)
        self.cap = np.zeros(0, dtype=np.float64) if capped else None
        self.rows: Segments | None = Segments(self.schema) if self.schema is not None else None
        self.exact = self.key_types is not None and is_exact(self.key_types)
        # Integer keys start in a dense table, and move to a hash table if they spread
        # (and back, checked whenever the keys have doubled since).
        self.dense_keys = bool(self.exact and self.key_types
                               and not pa.types.is_floating(self.key_types[0]))
        self.table: HashTable | DenseTable = DenseTable() if self.dense_keys else HashTable()
        self.density_checked_at = 0
        self.converter = (None if self.key_types is None
                          else CacheKeys(self.key_names, self.key_types))
        # The views of the one warm segment's short strings, and that segment.
        self.views: tuple[pa.Table, StringViews] | None = None
        self.keys: Segments | None = None
        if self.key_types is not None and not self.exact:
            self.keys = Segments(pa.schema(
                [(f"k{i}", t) for i, t in enumerate(self.key_types)]))

    def bind(self, schema: pa.Schema, key_names: list[str], key_types: list[pa.DataType]
             ) -> None:
        """Hold rows of ``schema`` and keys of ``key_types``, from now on empty."""
        self.schema = schema
        self.key_types = key_types
        self.key_names = key_names
        self.bound_by_caller = True
        self.reset()

    def grow(self, extra: int) -> None:
        """Make room for ``extra`` more slots."""
        needed = self.count + extra
        capacity = len(self.hashes)
        if needed <= capacity:
            return
        # Steps of a quarter: these arrays are most of what a cached key costs.
        capacity = max(needed, capacity + capacity // 4, 16)
        self.hashes = _resized(self.hashes, capacity)
        self.starts = _resized(self.starts, capacity + 1)
        self.touched = _resized(self.touched, capacity)
        if self.deadline is not None:
            self.deadline = _resized(self.deadline, capacity)
        if self.cap is not None:
            self.cap = _resized(self.cap, capacity)

    def nbytes(self) -> int:
        """The bytes of every buffer held, dead entries' rows included."""
        if not self.count:
            return 0
        arrays: list[np.ndarray | None] = [
            self.hashes, self.starts, self.touched, self.deadline, self.cap]
        total = sum(int(a.nbytes) for a in arrays if a is not None) + self.table.nbytes
        if self.rows is not None:
            total += self.rows.nbytes
        views = self.current_views()
        if views is not None:
            total += views.nbytes
        if self.keys is not None:
            total += self.keys.nbytes
        return total

    def next_seq(self) -> int:
        """The number of a new batch (recency is counted in batches)."""
        if self.seq >= _SEQ_LIMIT:
            # Renumber the live entries' batch numbers by rank: order kept, room made.
            touched = self.touched[: self.count]
            live = touched > 0
            ranks, inverse = np.unique(touched[live], return_inverse=True)
            touched[live] = (inverse + 1).astype(np.uint32)
            self.seq = len(ranks)
        self.seq += 1
        return self.seq

    def find(self, arrays: Sequence[pa.Array], hashes: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slot holding each key's hash or -1, its bucket, whether that slot's key is
        the key itself: always, for exact hashes)."""
        slots, positions = self.table.find(hashes, self.hashes)
        same = slots >= 0
        if not self.exact and same.any():
            assert self.keys is not None
            found = np.flatnonzero(same)
            stored = self.keys.take(slots[found])
            take = pa.array(found, type=pa.int64())
            equal: Any = None
            for column, probe in zip(stored.columns, arrays, strict=True):
                part = pc.equal(column, probe.take(take))
                equal = part if equal is None else pc.and_(equal, part)
            same[found] = np.asarray(equal.to_numpy(zero_copy_only=False), dtype=bool)
        return slots, positions, same

    def kill(self, slots: np.ndarray) -> None:
        """Mark live ``slots`` dead (their rows stay until compaction)."""
        if len(slots):
            starts = self.starts
            self.live_rows -= int(np.maximum(starts[slots + 1] - starts[slots], 1).sum())
            self.touched[slots] = 0
            if self.deadline is not None:
                self.deadline[slots] = -NEVER  # dead is expired: one test on reads
            self.live -= len(slots)

    def renew(self, slots: np.ndarray, now: float) -> None:
        """Entries read at ``now``: renew expire-after-access."""
        if self.access_ttl == NEVER or not len(slots):
            return
        assert self.deadline is not None
        renewed = np.full(len(slots), now + self.access_ttl)
        if self.cap is not None:
            renewed = np.minimum(renewed, self.cap[slots])
        self.deadline[slots] = renewed

    def merge_when_warm(self) -> bool:
        """Count a read; once reads come in a row, merge the rows into one segment, and
        give a large one views of its short strings. True when it did either (more
        bytes: a merged copy may hold more than its parts)."""
        self.reads_since_put += 1
        rows = self.rows
        if rows is None or self.reads_since_put < _READS_BEFORE_MERGE:
            return False
        grew = False
        if len(rows.segments) > 1:
            rows.merge()
            grew = True
        if (len(rows.segments) == 1 and rows.segments[0].num_rows >= _VIEWS_MIN_ROWS
                and self.current_views() is None):
            segment = rows.segments[0]
            self.views = (segment, StringViews.of(segment, self.key_names))
            grew = True
        return grew

    def current_views(self) -> StringViews | None:
        """The views of the rows' one segment, if built for it (any put or compaction
        makes another segment, and leaves them behind)."""
        views, rows = self.views, self.rows
        if views is None:
            return None
        if rows is None or len(rows.segments) != 1 or rows.segments[0] is not views[0]:
            self.views = None  # nor keep that segment alive
            return None
        return views[1]

    def probe(self, arrays: Sequence[pa.Array], now: float, gather: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Table | None,
                         np.ndarray | None]:
        """(hit, groups, offsets, rows, key_rows) of distinct keys of the key types, in
        the form of `LookupCache.get_arrow`. With ``gather``, or
        when the rows lie in several segments, ``rows`` holds the hits' rows only; else
        it is the one segment, ``offsets`` the slots' row starts (no row copied) and,
        when no key has more than one row, ``key_rows`` each key's row (-1: none)."""
        n = len(arrays[0]) if arrays else 0
        hit = np.zeros(n, dtype=bool)
        if not n or not self.live:
            return (hit, np.full(n, -1, dtype=np.int64), np.zeros(1, dtype=np.int64), None,
                    None)
        slots, _, same = self.find(arrays, hash_keys(arrays))
        candidates = np.flatnonzero(same)
        found = slots[candidates]
        if self.deadline is not None and now >= self.next_deadline:
            # Some entry may have expired: read the deadlines (dead ones are expired).
            deadline = self.deadline[found]
            alive = deadline > now
            expired = ~alive & (deadline != -NEVER)
            if expired.any():
                self.kill(found[expired])
        else:
            alive = self.touched[found] > 0
        hits = candidates[alive]
        hit[hits] = True
        hit_slots = found[alive]
        self.touched[hit_slots] = self.next_seq()
        self.renew(hit_slots, now)
        starts = self.starts
        first = starts[hit_slots]
        counts = starts[hit_slots + 1] - first
        rows = self.rows
        groups = np.full(n, -1, dtype=np.int64)
        if rows is None or not rows.segments:
            return hit, groups, np.zeros(1, dtype=np.int64), None, None
        filled = counts > 0
        if not gather and len(rows.segments) == 1:
            filled_hits = hits[filled]
            groups[filled_hits] = hit_slots[filled]
            key_rows = None
            if not len(counts) or int(counts.max()) <= 1:
                # One row a key (the common case): its row number, which spares a join
                # the expansion of groups into rows, a pass over the slots' starts.
                key_rows = np.full(n, -1, dtype=np.int64)
                key_rows[filled_hits] = first[filled]
            return hit, groups, starts, rows.segments[0], key_rows
        groups[hits[filled]] = np.arange(int(filled.sum()), dtype=np.int64)
        kept = counts[filled]
        offsets = np.zeros(len(kept) + 1, dtype=np.int64)
        np.cumsum(kept, out=offsets[1:])
        return (hit, groups, offsets, rows.take(row_ranges(first[filled], kept)), None)

    def get_one(self, hash_value: int, now: float) -> Rows | None:
        """The rows of the live entry of an exact ``hash_value`` as Python tuples, or None."""
        if not self.live:
            return None
        slot = self.table.find_one(hash_value, self.hashes)
        if slot < 0 or self.touched[slot] == 0:
            return None
        if self.deadline is not None and self.deadline[slot] <= now:
            self.kill(np.array([slot]))
            return None
        self.touched[slot] = self.next_seq()
        if self.access_ttl != NEVER:
            self.renew(np.array([slot]), now)
        start, stop = int(self.starts[slot]), int(self.starts[slot + 1])
        if start == stop or self.rows is None:
            return ()
        table = self.rows.slice(start, stop)
        columns = [python_values(column) for column in table.columns]
        return tuple(zip(*columns, strict=True))

    def put(self, arrays: list[pa.Array], index: np.ndarray, rows: pa.Table | None,
            now: float, written: np.ndarray | None = None) -> None:
        """Store the answers of keys (of the key types): row ``j`` of ``rows`` belongs
        to key ``index[j]``; ``written``, when given, is when each answer was loaded (by
        the ``now`` clock), so its life counts from then. Neither expires nor evicts:
        the caller does, around it."""
        self.views = None  # the rows change: views are built anew once reads are warm
        n = len(arrays[0]) if arrays else 0
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
        slots, positions, same = self.find(arrays, hashes)
        present = slots >= 0
        old_live = present & (self.touched[np.maximum(slots, 0)] > 0) if self.count else \
            np.zeros(n, dtype=bool)
        # A live entry of the same key is replaced; a live entry of another key with
        # this hash keeps it, and this key stays uncached.
        self.kill(slots[keep & same & old_live])
        keep &= ~(present & ~same & old_live)
        if not self.cache_missing_key:
            keep &= counts > 0
        accepted = np.flatnonzero(keep)
        k = len(accepted)
        if not k:
            return
        self.grow(k)
        first = self.count
        new_slots = np.arange(first, first + k, dtype=np.int64)
        rows_end = int(self.starts[first])
        accepted_counts = counts[accepted]
        ends = rows_end + np.cumsum(accepted_counts)
        if self.starts.dtype == np.int32 and int(ends[-1]) > _INT32_MAX:
            self.starts = self.starts.astype(np.int64)
        self.starts[first + 1 : first + k + 1] = ends
        if rows is not None and int(accepted_counts.sum()):
            order = np.argsort(index, kind="stable")
            wanted = np.zeros(n, dtype=bool)
            wanted[accepted] = True
            order = order[wanted[index[order]]]
            assert self.rows is not None
            self.rows.append(rows.take(pa.array(order, type=pa.int64())))
        if self.keys is not None:
            take = pa.array(accepted, type=pa.int64())
            self.keys.append(pa.Table.from_arrays(
                [array.take(take) for array in arrays], schema=self.keys.schema))
        self.hashes[first : first + k] = hashes[accepted]
        self.touched[first : first + k] = self.next_seq()
        if self.deadline is not None:
            # For the whole batch at once: a missing key (no rows) lives the shorter of
            # a row's life and ``missing_ttl``.
            life = np.full(k, self.write_ttl)
            if self.missing_ttl != NEVER:
                life[accepted_counts == 0] = min(self.write_ttl, self.missing_ttl)
            cap = (now if written is None else written[accepted]) + life
            deadline = np.minimum(cap, now + self.access_ttl)
            self.deadline[first : first + k] = deadline
            self.next_deadline = min(self.next_deadline, float(deadline.min()))
            if self.cap is not None:
                self.cap[first : first + k] = cap
        self.count += k
        self.live += k
        self.live_rows += int(np.maximum(accepted_counts, 1).sum())
        reuse = present[accepted]
        self.table.repoint(positions[accepted[reuse]], new_slots[reuse])
        fresh = accepted[~reuse]
        self._suit_table(hashes[fresh])
        self.table.insert(hashes[fresh], new_slots[~reuse], self.hashes)

    def _suit_table(self, fresh: np.ndarray) -> None:
        """Move the keys to the kind of table that suits them with ``fresh`` added: a
        hash table once a dense one's keys spread, a dense one once they fill a range."""
        table = self.table
        if not self.dense_keys or not len(fresh):
            return
        signed = fresh.view(np.int64)
        low, high = int(signed.min()), int(signed.max())
        count = table.count + len(fresh)
        if isinstance(table, DenseTable):
            if table.count:
                first, last = table.span
                low, high = min(low, first), max(high, last)
            if not suits(low, high, count):
                hashes, slots = table.entered()
                self.table = HashTable()
                self.table.insert(hashes, slots, self.hashes)
                self.density_checked_at = count
            return
        if count < 2 * max(self.density_checked_at, 1024):
            return
        self.density_checked_at = count
        occupied = table.buckets[table.buckets >= 0].astype(np.int64)
        occupied = occupied[self.touched[occupied] > 0]  # a dead key need not be found
        entered = self.hashes[occupied].view(np.int64)
        if len(entered):
            low, high = min(low, int(entered.min())), max(high, int(entered.max()))
        if suits(low, high, len(entered) + len(fresh)):
            dense = DenseTable()
            dense.insert(entered.view(np.uint64), occupied, self.hashes)
            self.table = dense

    def remove(self, arrays: Sequence[pa.Array]) -> int:
        """Kill the live entries of distinct keys of the key types; how many there were."""
        slots, _, same = self.find(arrays, hash_keys(arrays))
        found = np.unique(slots[same])
        live = found[self.touched[found] > 0]
        self.kill(live)
        return len(live)

    def compact_when_dead(self) -> bool:
        """Compact when dead entries outnumber the live ones (and are many, or all);
        True when it did."""
        dead = self.count - self.live
        if dead and (not self.live or (dead > self.live and dead >= _COMPACT_MIN_DEAD)):
            self.compact()
            return True
        return False

    def compact(self) -> None:
        """Keep only live entries: their rows in one segment, slots renumbered in order."""
        if not self.live:
            self.reset()
            return
        if self.live == self.count:
            return
        live = np.flatnonzero(self.touched[: self.count] > 0)
        counts = self.starts[live + 1] - self.starts[live]
        if self.rows is not None:
            self.views = None
            self.rows.replace(self.rows.take(row_ranges(self.starts[live], counts)))
        if self.keys is not None:
            self.keys.replace(self.keys.take(live))
        n = len(live)
        self.hashes = self.hashes[live]
        self.touched = self.touched[live]
        if self.deadline is not None:
            self.deadline = self.deadline[live]
        if self.cap is not None:
            self.cap = self.cap[live]
        total = int(counts.sum())
        self.starts = np.zeros(n + 1, dtype=np.int32 if total <= _INT32_MAX else np.int64)
        self.starts[1:] = np.cumsum(counts)
        self.count = n
        if self.dense_keys and n:
            signed = self.hashes.view(np.int64)
            dense = suits(int(signed.min()), int(signed.max()), n)
            self.table = DenseTable() if dense else HashTable()
            self.density_checked_at = n
        self.table.rebuild(self.hashes)

    # --- types of an unbound cache, and Python values to Arrow

    def infer(self, keys: list[Key], rows: list[Row]) -> None:
        """Types from the first put of an unbound cache (keys first, rows when some)."""
        if self.key_types is None and keys:
            columns = list(zip(*keys, strict=True))
            types = [_inferred_key_type(list(column)) for column in columns]
            names = [f"k{i}" for i in range(len(types))]
            try:
                CacheKeys(names, types)
            except ConfigError as exc:
                raise KeyKindError(f"keys {shown(keys[0])} cannot be cached: {exc}") from None
            self.key_types, self.key_names = types, names
            self.reset()
        if self.schema is None and rows:
            columns = list(zip(*rows, strict=True))
            self.schema = pa.schema([(f"f{i}", pa.array(list(c)).type)
                                     for i, c in enumerate(columns)])
            self.rows = Segments(self.schema)

    def rows_table(self, rows: list[Row]) -> pa.Table | None:
        """``rows`` as a table of the rows' schema (None for no rows)."""
        if not rows:
            return None
        schema = self.schema
        assert schema is not None
        widths = set(map(len, rows))
        if widths != {len(schema)}:
            raise TypeError(
                f"rows of {len(schema)} value(s) expected (the cache's schema), got rows "
                f"of {sorted(widths)}"
            )
        if not self.bound_by_caller and any(pa.types.is_null(f.type) for f in schema):
            # A column seen only as None so far takes its type from the first value.
            columns = list(zip(*rows, strict=True))
            fields = [
                pa.field(f.name, pa.array(list(columns[i])).type)
                if pa.types.is_null(f.type) else f
                for i, f in enumerate(schema)
            ]
            widened = pa.schema(fields)
            if widened != schema:
                assert self.rows is not None
                self.rows.cast(widened)
                self.schema = schema = widened
        return rows_to_table(rows, schema)

    def key_arrays(self, keys: Sequence[Key], strict: bool
                   ) -> tuple[list[pa.Array], np.ndarray]:
        """The distinct keys of ``keys`` as arrays of the key types, and where each key
        went (-1: it never matches); see `CacheKeys.arrays`."""
        assert self.converter is not None
        return self.converter.arrays(keys, strict=strict)
