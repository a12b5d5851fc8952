"""The full cache: a whole dimension table as one immutable, indexed Arrow snapshot.

A :class:`FullSnapshot` holds the table sorted by key (rows with a null key dropped:
they can never match), the distinct keys in a hashed ``pandas.Index``, and the row
range of each key, so a batch of probe keys is matched with one vectorized
``get_indexer`` call. :class:`LookupFullCache` serves lookups from the current snapshot
and swaps in a new one atomically: a lookup sees the old table or the new one, never a
half-loaded one. Loading (which scan, which trigger) is the lookup runtime's business.
Python keys are read as values of the key columns' types by the connectors' rules
(:mod:`cache._keys`), so a key that is no such value (``1.5`` for an integer column)
matches nothing.
"""

from __future__ import annotations

import copy
import datetime as dt
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from cache._dense_keys import DenseKeys
from cache._hash_table import HashTable
from cache._key_hash import hash_keys
from cache._keys import CacheKeys
from cache.base import Key, LookupCache, Row, Rows, check_key, expand
from cache.metrics import CacheMetrics
from connectors.rows import python_values
from spark_lookup._load_priority import loading, lookup_turn
from spark_lookup._per_process import PerProcess
from spark_lookup.errors import ConfigError, SnapshotUnavailableError

__all__ = ["FullSnapshot", "LookupFullCache"]

_EMPTY: tuple[Row, ...] = ()


def _hashed_in_numpy(arrow_type: pa.DataType) -> bool:
    """Whether keys of this type hash to their own bits (integers, dates, timestamps)."""
    return bool(pa.types.is_integer(arrow_type) or pa.types.is_temporal(arrow_type))


class FullSnapshot:
    """One loaded version of a dimension table, immutable once built.

    Build it with :meth:`build`. ``table`` is sorted by the key columns (a key's rows by
    their other columns); the rows of the ``i``-th distinct key are
    ``table[offsets[i]:offsets[i + 1]]``.

    Attributes
    ----------
    table : pyarrow.Table
    key_columns : tuple of str
    loaded_at : float
        Epoch seconds when the load that produced it started (staleness is measured
        from here).
    version : int
        Increases with every successful load.
    source_version : str or None
        The ``repr`` of the source's :meth:`~scan.Source.current_version` read before the
        load (None: unknown); a reload finding the source still there reads nothing.
    """

    __slots__ = (
        "_columns_cache",
        "_converter",
        "_dense",
        "_index_lock",
        "_index_ready",
        "_key_hashes",
        "_table",
        "index",
        "key_columns",
        "loaded_at",
        "nbytes",
        "offsets",
        "source_version",
        "table",
        "unique",
        "version",
    )

    def __init__(
        self,
        table: pa.Table,
        key_columns: tuple[str, ...],
        index: pd.Index,
        offsets: np.ndarray,
        loaded_at: float,
        version: int,
        source_version: str | None = None,
    ) -> None:
        self.table = table
        self.key_columns = key_columns
        self.index = index
        self.offsets = offsets
        self.loaded_at = loaded_at
        self.version = version
        self.source_version = source_version
        self.unique = len(index) == table.num_rows
        self._converter: CacheKeys | None = None  # made by the first per-key lookup
        self._columns_cache: list[list[Any]] | None = None
        # Hash tables are built now, during the load, so that the first lookup after a
        # swap does not pay for them. A key of one integer-like column is probed in the
        # numpy table of the partial cache (5x faster than pandas, 12 bytes a key
        # instead of 34); pandas' own is then built only if a Python-keyed call needs it.
        self._table: HashTable | None = None
        self._key_hashes: np.ndarray | None = None
        self._dense: DenseKeys | None = None
        self._index_lock = threading.Lock()
        self._index_ready = False
        extra = 0
        if len(key_columns) == 1 and _hashed_in_numpy(table.schema.field(key_columns[0]).type):
            column = table.column(key_columns[0]).combine_chunks()
            firsts = column if self.unique else column.take(pa.array(offsets[:-1]))
            # Sorted surrogate keys filling most of their range need no hashing at all.
            self._dense = DenseKeys.of(firsts)
            if self._dense is not None:
                extra = self._dense.nbytes
            else:
                self._key_hashes = hash_keys([firsts])
                self._table = HashTable()
                self._table.rebuild(self._key_hashes)
                extra = int(self._key_hashes.nbytes) + self._table.nbytes
        else:
            self._indexed()
        self.nbytes = int(table.nbytes + offsets.nbytes + index.memory_usage(deep=True)) + extra

    @classmethod
    @loading()  # lookups of this process take turns meanwhile (spark_lookup._load_priority)
    def build(
        cls,
        table: pa.Table,
        key_columns: Sequence[str],
        *,
        loaded_at: float,
        version: int = 1,
        source_version: str | None = None,
    ) -> FullSnapshot:
        """Index ``table`` by ``key_columns``.

        Rows whose key holds a null (or NaN) are dropped: they never match.

        Raises
        ------
        ConfigError
            When a key column is missing from the table.
        """
        keys = _key_columns_of(table, key_columns)
        table = table.combine_chunks() if table.num_rows else table
        valid: Any = None
        for name in keys:
            column = table.column(name)
            ok = pc.is_valid(column)
            if pa.types.is_floating(column.type):
                ok = pc.and_(ok, pc.invert(pc.is_nan(column)))
            valid = ok if valid is None else pc.and_(valid, ok)
        if valid is not None and table.num_rows and not pc.all(valid).as_py():
            table = table.filter(valid)
        unique: bool | None = None
        if table.num_rows > 1:
            order = [(name, "ascending") for name in keys]
            if not _is_sorted(table, keys):
                # A source read in key order (a SQL table by its primary key, in one
                # split) is not copied again: sorting is a take of every column.
                table = table.sort_by(order)
            unique = len(_key_starts(table, keys)) == table.num_rows
            if not unique:
                # Parallel splits arrive in any order: order a key's rows by their values
                # too, so that its rows (and "the first match" of the SQL function) are
                # the same after every load. Only paid when a key has several rows.
                ties = [(field.name, "ascending") for field in table.schema
                        if field.name not in keys and _orderable(field.type)]
                if ties:
                    table = table.sort_by(order + ties)
        return cls.from_sorted(table, keys, loaded_at=loaded_at, version=version, unique=unique,
                               source_version=source_version)

    @classmethod
    def from_sorted(
        cls,
        table: pa.Table,
        key_columns: Sequence[str],
        *,
        loaded_at: float,
        version: int = 1,
        unique: bool | None = None,
        source_version: str | None = None,
    ) -> FullSnapshot:
        """Index a table that is already what :meth:`build` makes: sorted by
        ``key_columns``, with no null key.

        Nothing is copied or sorted, so a memory-mapped table stays shared with the other
        processes mapping it: only the key index is built, in this process. For a table
        written by another process from a built snapshot (the host snapshot store).

        Parameters
        ----------
        unique
            Whether every key has one row, when known (the store records it): True skips
            the pass that finds where each key's rows start. None: find out.

        Raises
        ------
        ConfigError
            When a key column is missing from the table.
        """
        keys = _key_columns_of(table, key_columns)
        n = table.num_rows
        if unique:
            # Every row starts its key: the distinct keys are the key columns themselves.
            starts = np.arange(n, dtype=np.int64)
            firsts = table.select(list(keys))
        else:
            starts = _key_starts(table, keys)
            firsts = table.select(list(keys)).take(pa.array(starts))
        offsets = np.append(starts, np.int64(n))
        arrays = [firsts.column(i).to_pandas() for i in range(len(keys))]
        index: pd.Index
        if len(keys) == 1:
            index = pd.Index(arrays[0], copy=False)
        else:
            index = pd.MultiIndex.from_arrays(arrays)
        return cls(table, keys, index, offsets, loaded_at, version, source_version)

    def confirmed(self, at: float) -> FullSnapshot:
        """This snapshot as loaded at ``at``: the source was found still at its version
        then, so staleness and the next due reload count from ``at``. Shares the table
        and the index (nothing is copied or built)."""
        twin = copy.copy(self)
        twin.loaded_at = at
        return twin

    @property
    def num_rows(self) -> int:
        """Rows in the snapshot."""
        return int(self.table.num_rows)

    @property
    def num_keys(self) -> int:
        """Distinct keys in the snapshot."""
        return len(self.index)

    def _indexed(self) -> pd.Index:
        """The pandas index, its hash table built: once, under a lock (pandas builds it
        lazily, and two threads building it at once see a non-unique index)."""
        if not self._index_ready:
            with self._index_lock:
                if not self._index_ready:
                    self.index.get_indexer(self.index[:1])
                    self._index_ready = True
        return self.index

    def groups(self, keys: Sequence[pa.Array]) -> np.ndarray:
        """The group (distinct key) of each key given as one array per key column, or
        -1: one vectorized probe."""
        same_type = len(keys) == 1 and keys[0].type == self.table.schema.field(
            self.key_columns[0]).type
        if same_type and self._dense is not None:
            return self._dense.groups(keys[0])
        table, hashes = self._table, self._key_hashes
        if same_type and table is not None and hashes is not None:
            slots, _ = table.find(hash_keys(keys), hashes)
            return slots
        if len(keys) == 1:
            values: Any = keys[0].to_pandas()
        else:
            values = pd.MultiIndex.from_arrays([k.to_pandas() for k in keys])
        return np.asarray(self._indexed().get_indexer(values), dtype=np.int64)

    def locate(self, probes: Sequence[Key]) -> tuple[np.ndarray, np.ndarray]:
        """Match probe keys (tuples) against the snapshot, vectorized.

        Returns
        -------
        (probe_positions, row_indices)
            Parallel ``int64`` arrays: probe ``probe_positions[j]`` matches table row
            ``row_indices[j]``; a probe with several rows appears once per row, in
            table order; unmatched probes do not appear.
        """
        if not len(probes) or not self.num_keys:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        converter = self._converter
        if converter is None:
            schema = self.table.schema
            converter = self._converter = CacheKeys(
                self.key_columns, [schema.field(name).type for name in self.key_columns])
        # Exact values of the key types (1.5 is no BIGINT, a datetime no DATE), probed
        # as the Arrow path probes them.
        arrays, positions = converter.arrays(probes, strict=False)
        groups = np.full(len(probes), -1, dtype=np.int64)
        if len(arrays[0]):
            usable = positions >= 0
            groups[usable] = self.groups(arrays)[positions[usable]]
        return self.expand(groups)

    def expand(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Turn per-probe group numbers (-1: no match) into (probe, row) index pairs."""
        if self.unique:
            matched = np.flatnonzero(groups >= 0)
            return matched.astype(np.int64), self.offsets[groups[matched]]
        return expand(groups, self.offsets)

    def rows(self, row_indices: np.ndarray) -> list[Row]:
        """Table rows as Python tuples in schema order."""
        columns = self._columns()
        return [tuple(column[i] for column in columns) for i in row_indices.tolist()]

    def _columns(self) -> list[list[Any]]:
        # Python values of every column, converted once per snapshot on first use by the
        # tuple-returning API (the Arrow path used by Spark joins never needs them).
        if self._columns_cache is None:
            self._columns_cache = [python_values(column) for column in self.table.columns]
        return self._columns_cache


class LookupFullCache(PerProcess, LookupCache):
    """Serves lookups from the latest :class:`FullSnapshot` (Flink's LookupFullCache).

    Thread-safe and lock-free on the read path: the current snapshot is one reference,
    replaced atomically by :meth:`swap`. ``put`` and ``invalidate`` are not supported
    (the table changes only by reloading).

    Parameters
    ----------
    key_columns
        Columns lookups match on.
    initial_load_timeout
        How long a lookup waits for the first snapshot before raising
        :class:`~spark_lookup.SnapshotUnavailableError`.
    max_staleness
        When set, a lookup raises ``SnapshotUnavailableError`` once the current snapshot's
        ``loaded_at`` is older than this: reloads have been failing too long.
    clock
        Wall clock in epoch seconds (``time.time``); tests inject a fake.
    """

    def __init__(
        self,
        key_columns: Sequence[str],
        *,
        initial_load_timeout: dt.timedelta = dt.timedelta(minutes=5),
        max_staleness: dt.timedelta | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.key_columns = tuple(key_columns)
        self.initial_load_timeout = initial_load_timeout
        self.max_staleness = max_staleness
        self.clock = clock
        self._init_runtime()

    _PER_PROCESS = ("_snapshot", "_settled", "_metrics", "last_error")

    def _init_runtime(self) -> None:
        self._snapshot: FullSnapshot | None = None
        self._settled = threading.Event()
        self._metrics = CacheMetrics()
        self.last_error: BaseException | None = None

    # --- snapshot management

    def swap(self, snapshot: FullSnapshot) -> None:
        """Make ``snapshot`` the one lookups see (atomic), and wake waiting lookups."""
        if snapshot.key_columns != self.key_columns:
            raise ConfigError(
                f"snapshot is keyed by {snapshot.key_columns}, the cache by {self.key_columns}"
            )
        self._snapshot = snapshot
        self.last_error = None
        self._settled.set()

    def current(self) -> FullSnapshot | None:
        """The current snapshot, or None before the first load (never waits)."""
        return self._snapshot

    def snapshot(self) -> FullSnapshot:
        """The snapshot lookups use now: waits for the first load (bounded) and checks
        the maximum staleness.

        Raises
        ------
        SnapshotUnavailableError
            No snapshot within ``initial_load_timeout``, or the snapshot is too old.
        """
        snapshot = self._snapshot
        if snapshot is None:
            # Settled: a snapshot arrived, or the first load failed after its retries
            # (then there is nothing left to wait for: the lookup learns why at once).
            settled = self._settled.wait(self.initial_load_timeout.total_seconds())
            snapshot = self._snapshot
            if snapshot is None:
                error = self.last_error
                cause = f": {error!r}" if error is not None else ""
                if settled and error is not None:
                    raise SnapshotUnavailableError(
                        f"the full cache keyed by {list(self.key_columns)} has no snapshot: "
                        f"the first load failed{cause}"
                    ) from error
                raise SnapshotUnavailableError(
                    f"the full cache keyed by {list(self.key_columns)} has no snapshot after "
                    f"waiting {self.initial_load_timeout} for the first load"
                    + (f"; last error{cause}" if error is not None else "")
                ) from error
        if self.max_staleness is not None:
            age = self.clock() - snapshot.loaded_at
            if age > self.max_staleness.total_seconds():
                cause = f"; last error: {self.last_error!r}" if self.last_error else ""
                raise SnapshotUnavailableError(
                    f"the full cache snapshot (version {snapshot.version}) is "
                    f"{dt.timedelta(seconds=round(age))} old, more than max_staleness "
                    f"{self.max_staleness}: reloads are failing{cause}"
                )
        return snapshot

    def record_failure(self, error: BaseException) -> None:
        """Remember the latest reload error (reported by ``snapshot()`` errors). Before
        the first snapshot, lookups waiting for it fail at once with it."""
        self.last_error = error
        if self._snapshot is None:
            self._settled.set()

    def expect_load(self) -> None:
        """A load starts for a cache with no snapshot: lookups wait for it again."""
        if self._snapshot is None:
            self._settled.clear()

    # --- LookupCache

    def open(self, metrics: CacheMetrics | None = None) -> None:
        """Report into ``metrics``: records are rows, bytes the snapshot's memory."""
        super().open(metrics)
        self._metrics.register_gauges(self._gauges)

    def _gauges(self) -> tuple[int, int]:
        snapshot = self._snapshot
        return (0, 0) if snapshot is None else (snapshot.num_rows, snapshot.nbytes)

    def get_if_present(self, key: Key) -> Rows:
        """The rows of ``key``: empty when the table has none (a counted miss)."""
        return self.get_all([key])[key]

    def get_all(self, keys: Iterable[Key]) -> dict[Key, Rows]:
        """Rows of every key (empty for absent ones); one vectorized probe."""
        probes = [check_key(key) for key in keys]
        with lookup_turn():
            snapshot = self.snapshot()
            probe_positions, row_indices = snapshot.locate(probes)
            rows = snapshot.rows(row_indices)
        found: dict[Key, list[Row]] = {}
        answered_by: dict[Key, int] = {}
        for position, row in zip(probe_positions.tolist(), rows, strict=True):
            key = probes[position]
            # A key asked twice (or 1 and 1.0) gets its rows once, from its first probe.
            if answered_by.setdefault(key, position) == position:
                found.setdefault(key, []).append(row)
        result: dict[Key, Rows] = dict.fromkeys(probes, _EMPTY)
        for key, key_rows in found.items():
            result[key] = tuple(key_rows)
        # Counted per key asked: a key asked twice is answered twice.
        hits = len(np.unique(probe_positions))
        self._metrics.inc_hits(hits)
        self._metrics.inc_misses(len(probes) - hits)
        return result

    def put(self, key: Key, rows: Rows) -> None:
        """Not supported: a full cache changes only by reloading the whole table."""
        raise NotImplementedError("LookupFullCache does not support put(); it reloads whole")

    def put_all(self, entries: Mapping[Key, Rows]) -> None:
        """Not supported (see :meth:`put`)."""
        raise NotImplementedError("LookupFullCache does not support put_all(); it reloads whole")

    def invalidate(self, key: Key) -> None:
        """Not supported: a full cache changes only by reloading the whole table."""
        raise NotImplementedError("LookupFullCache does not support invalidate()")

    def size(self) -> int:
        """Distinct keys in the current snapshot (0 before the first load)."""
        snapshot = self._snapshot
        return 0 if snapshot is None else snapshot.num_keys

    def close(self) -> None:
        """Drop the snapshot."""
        self._snapshot = None
        self._settled.clear()


def _is_sorted(table: pa.Table, keys: Sequence[str]) -> bool:
    """Whether the rows are in ascending order of a single key column (checked in one
    vectorized pass; composite keys are always sorted)."""
    if len(keys) != 1:
        return False
    column = table.column(keys[0])
    if not (pa.types.is_integer(column.type) or pa.types.is_string(column.type)
            or pa.types.is_date(column.type) or pa.types.is_timestamp(column.type)):
        return False
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(column)
    return bool(pc.all(pc.less_equal(column.slice(0, n - 1), column.slice(1))).as_py())


def _key_starts(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """Where each key's rows start in ``table`` (sorted by ``keys``, no null key)."""
    n = table.num_rows
    if not n:
        return np.zeros(0, dtype=np.int64)
    changed = np.zeros(n - 1, dtype=bool)
    for name in keys:
        column = table.column(name)
        diff = pc.not_equal(column.slice(1), column.slice(0, n - 1))
        changed |= np.asarray(diff.to_numpy(zero_copy_only=False), dtype=bool)
    return np.concatenate(([0], np.flatnonzero(changed) + 1)).astype(np.int64)


def _orderable(type_: pa.DataType) -> bool:
    """Whether Arrow can sort by a column of this type (nested types it cannot)."""
    return not (pa.types.is_nested(type_) or pa.types.is_dictionary(type_)
                or pa.types.is_null(type_))


def _key_columns_of(table: pa.Table, key_columns: Sequence[str]) -> tuple[str, ...]:
    keys = tuple(key_columns)
    for name in keys:
        if name not in table.column_names:
            raise ConfigError(f"key column {name!r} is not in the table {table.column_names}")
    return keys
