"""The full cache: a whole dimension table as one immutable, indexed Arrow snapshot.

A `FullSnapshot` holds the table (rows with a null key dropped: they can never
match; sorted by key when a key has several rows) and its key index
(`cache.full.index`: flat numpy arrays, built here or mapped from a published
snapshot), so a batch of probe keys is matched in a few vectorized passes.
`LookupFullCache` serves lookups from the current snapshot and swaps in a new
one atomically: a lookup sees the old table or the new one, never a half-loaded one.
Loading (which scan, which trigger) is the lookup runtime's business. Python keys are
read as values of the key columns' types by the connectors' rules (`cache.keys`),
so a key that is no such value (``1.5`` for an integer column) matches nothing.
"""

from __future__ import annotations

import copy
import datetime as dt
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cache.base import Key, LookupCache, Row, Rows, check_key, expand
from cache.full.combine import combine_releasing
from cache.full.index import KeyIndex, key_starts
from cache.full.index_file import ComputedArray
from cache.full.release import give_back
from cache.full.spool import ArraySpool, ColumnSpool
from cache.keys import CacheKeys
from cache.metrics import CacheMetrics
from cache.string_views import StringViews
from connectors.rows import python_values
from spark_lookup.errors import ConfigError, SnapshotUnavailableError
from spark_lookup.load_priority import loading, lookup_turn
from spark_lookup.per_process import PerProcess

__all__ = ["FullSnapshot", "LookupFullCache"]

_EMPTY: tuple[Row, ...] = ()
_Rows = TypeVar("_Rows", pa.Table, pa.RecordBatch)
_NO_OFFSETS = np.zeros(0, dtype=np.int64)
_NO_OFFSETS.flags.writeable = False
_VIEWS_LOCK = threading.Lock()  # views are built once per snapshot, rarely: one lock


@dataclass(eq=False, repr=False, slots=True)  # both would compare or print the table
class FullSnapshot:
    """One loaded version of a dimension table, immutable once served.

    Build it with `load` or `build`. When every key has one row
    (``unique``), the ``i``-th group (distinct key) is row ``i`` and the table is in the
    order it was loaded in (``offsets`` is empty); otherwise ``table`` is sorted by the
    key columns (a key's rows by their other columns) and the rows of the ``i``-th
    group are ``table[offsets[i]:offsets[i + 1]]``. The key index
    (`cache.full.index.KeyIndex`) may be built here or mapped from a published
    snapshot: nothing else held per process grows with the table.

    Attributes
    ----------
    table : pyarrow.Table
    key_columns : tuple of str
    key_index : KeyIndex
    loaded_at : float
        Epoch seconds when the load that produced it started (staleness is measured
        from here).
    version : int
        Increases with every successful load.
    source_version : str or None
        The ``repr`` of the source's [`current_version`][scan.Source.current_version]
        read before the load (None: unknown); a reload finding the source still there
        reads nothing.
    """

    table: pa.Table
    key_columns: tuple[str, ...]
    key_index: KeyIndex
    loaded_at: float
    version: int
    source_version: str | None = None
    # None: built by the first join that probes this snapshot (see `views`); empty
    # StringViews: none wanted.
    _views: StringViews | None = None
    unique: bool = field(init=False)
    nbytes: int = field(init=False)
    _converter: CacheKeys | None = field(default=None, init=False)  # by the first per-key lookup

    def __post_init__(self) -> None:
        self.unique = self.key_index.offsets is None
        views = self._views
        self.nbytes = (int(self.table.nbytes) + self.key_index.nbytes
                       + (0 if views is None else views.nbytes))

    @property
    def views(self) -> StringViews:
        """The views of the table's short-string columns (`cache.string_views`),
        built by the first join that probes this snapshot: a snapshot only published
        from here (and served mapped) never builds them in memory."""
        views = self._views
        if views is None:
            with _VIEWS_LOCK:
                views = self._views
                if views is None:
                    views = StringViews.of(self.table, self.key_columns)
                    self.nbytes += views.nbytes
                    self._views = views
        return views

    @classmethod
    def build(
        cls,
        table: pa.Table,
        key_columns: Sequence[str],
        *,
        loaded_at: float,
        version: int = 1,
        source_version: str | None = None,
    ) -> FullSnapshot:
        """Index ``table`` by ``key_columns`` (see `load`, which also frees the
        loaded table's chunks as it goes; here the caller still holds them).

        Raises
        ------
        ConfigError
            When a key column is missing from the table.
        """
        return cls._build([table], key_columns, loaded_at=loaded_at, version=version,
                          source_version=source_version)

    @classmethod
    def load(
        cls,
        read: Callable[[], pa.Table],
        key_columns: Sequence[str],
        *,
        loaded_at: float,
        version: int = 1,
        source_version: str | None = None,
        order_by: Sequence[str] = (),
    ) -> FullSnapshot:
        """Read a table with ``read`` and index it by ``key_columns``.

        Rows whose key holds a null (or NaN) are dropped: they never match. When every
        key has one row the table keeps its order (group ``g`` is row ``g``); its
        columns are combined into one chunk each, releasing the loaded chunks as they
        are copied, so the build costs about one table and its index. When a key has
        several rows the table is sorted by key (and a key's rows by ``order_by``, then
        by their other columns, so that they come in the same order after every load),
        which costs a second copy of the table.

        Raises
        ------
        ConfigError
            When a key column is missing from the table.
        """
        return cls._build([read()], key_columns, loaded_at=loaded_at, version=version,
                          source_version=source_version, order_by=order_by)

    @classmethod
    @loading()  # lookups of this process take turns meanwhile (spark_lookup.load_priority)
    def stream(
        cls,
        batches: Iterable[pa.RecordBatch],
        key_columns: Sequence[str],
        *,
        spool: ColumnSpool,
        loaded_at: float,
        version: int = 1,
        source_version: str | None = None,
        order_by: Sequence[str] = (),
    ) -> FullSnapshot:
        """Index the rows of ``batches``, written into ``spool`` as they arrive.

        As `load` (null keys dropped, the load's order kept when every key has one
        row, else sorted by key and values), but the table is never in memory: each
        batch goes to the spool's files when it arrives, and the snapshot's table maps
        them (one chunk a column). What the build holds beside a few batches is the key
        index, and the pages of the key columns it reads. A table where a key has
        several rows is sorted by reordering the spool column by column: the mapped
        pages of the columns sorted by are read once more, no copy of the table is made.
        The caller owns ``spool`` (publishes from it, then discards it).

        Raises
        ------
        ConfigError
            When a key column is missing from the spool's schema.
        ValueError
            When a batch is not of the spool's schema or not valid Arrow data.
        cache.full.spool.SpoolError
            When the spool cannot be written.
        """
        keys = _key_columns_of(spool.schema, key_columns)
        # Keys that need hashing are hashed as they arrive: the index then never reads
        # the mapped key columns whole.
        hashing = KeyIndex.hashes_needed([spool.schema.field(name).type for name in keys])
        hashes = spool.array("hashes", np.uint64) if hashing else None
        _spool_rows(batches, keys, spool, hashes)
        table = spool.finish()
        give_back()  # what the read freed, before the index is built
        index = KeyIndex.of_unique(table, keys, None if hashes is None else hashes.finish())
        give_back()  # the index's temporaries
        if index is not None:
            return cls(table, keys, index, loaded_at, version, source_version)
        order = pc.sort_indices(table, sort_keys=_sort_keys(table.schema, keys, order_by))
        del table
        table = spool.reorder(order)
        del order
        give_back()
        return cls.from_sorted(table, keys, loaded_at=loaded_at, version=version, unique=False,
                               source_version=source_version)

    @classmethod
    @loading()  # lookups of this process take turns meanwhile (spark_lookup.load_priority)
    def _build(
        cls,
        holder: list[pa.Table],
        key_columns: Sequence[str],
        *,
        loaded_at: float,
        version: int,
        source_version: str | None = None,
        order_by: Sequence[str] = (),
    ) -> FullSnapshot:
        # ``holder`` is the only reference to the loaded table (when built by load()).
        keys = _key_columns_of(holder[0].schema, key_columns)
        holder.append(_without_null_keys(holder.pop(), keys))
        table = combine_releasing(holder)
        index = KeyIndex.of_unique(table, keys)
        give_back()  # the index's temporaries
        if index is not None:
            return cls(table, keys, index, loaded_at, version, source_version)
        table = table.sort_by(_sort_keys(table.schema, keys, order_by))
        return cls.from_sorted(table, keys, loaded_at=loaded_at, version=version, unique=False,
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
        build_views: bool = True,
    ) -> FullSnapshot:
        """Index a table sorted by ``key_columns``, with no null key (what `build`
        makes of a table where a key has several rows; a table of one row a key, in any
        order, is indexed by `cache.full.index.KeyIndex.of_unique`).

        Nothing is copied or sorted, so a memory-mapped table stays shared with the other
        processes mapping it; the key index is built here (a published snapshot comes
        with its own: see `cache.full.shared.SharedFullCache`).

        Parameters
        ----------
        unique
            Whether every key has one row, when known (the store records it): True skips
            the pass that finds where each key's rows start. None: find out.
        build_views
            Whether to build the views of short-string columns (16 bytes a row each) that
            make a join's gathers faster (`cache.string_views`).

        Raises
        ------
        ConfigError
            When a key column is missing from the table.
        """
        keys = _key_columns_of(table.schema, key_columns)
        if unique is None:
            unique = len(key_starts(table, keys)) == table.num_rows
        return cls(table, keys, KeyIndex.build(table, keys, unique), loaded_at, version,
                   source_version, None if build_views else StringViews())

    def confirmed(self, at: float) -> FullSnapshot:
        """This snapshot as loaded at ``at``: the source was found still at its version
        then, so staleness and the next due reload count from ``at``. Shares the table
        and the index (nothing is copied or built, but the views once: both serve them)."""
        self.views  # noqa: B018 -- built before the copy, so the twins share them
        twin = copy.copy(self)
        twin.loaded_at = at
        return twin

    def payload(self) -> tuple[dict[str, Any], dict[str, np.ndarray | ComputedArray]]:
        """What is published beside the table (its sibling file): the key index's header
        and arrays, and the views of short-string columns."""
        header, arrays = self.key_index.payload()
        if self._views is not None:
            return header, {**arrays, **self._views.payload()}
        # Computed as the file is written: the loading process never holds them.
        return header, {**arrays, **StringViews.computed(self.table, self.key_columns)}

    def hand_over(self, mapped: FullSnapshot) -> None:
        """Point this snapshot, built here and never served, at ``mapped``: the same
        version read back from where it was published. Its own table and index are
        released (its holders, a load still finishing, keep only the mapped copy)."""
        if mapped.num_rows != self.num_rows or mapped.num_keys != self.num_keys:
            raise ValueError("hand_over() takes the same version, mapped")
        self.table = mapped.table
        self.key_index = mapped.key_index
        self._views = mapped._views
        self.nbytes = mapped.nbytes
        give_back()

    @property
    def num_rows(self) -> int:
        """Rows in the snapshot."""
        return int(self.table.num_rows)

    @property
    def num_keys(self) -> int:
        """Distinct keys in the snapshot."""
        return self.key_index.num_keys

    @property
    def offsets(self) -> np.ndarray:
        """Row offsets of the groups (``num_keys + 1``); empty when ``unique``."""
        offsets = self.key_index.offsets
        return _NO_OFFSETS if offsets is None else offsets

    def groups(self, keys: Sequence[pa.Array]) -> np.ndarray:
        """The group (distinct key) of each key given as one array per key column, or
        -1: one vectorized probe."""
        return self.key_index.groups(keys)

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
            return matched.astype(np.int64), groups[matched].astype(np.int64)
        return expand(groups, self.offsets)

    def rows(self, row_indices: np.ndarray) -> list[Row]:
        """Table rows as Python tuples in schema order (only those rows are converted)."""
        if not len(row_indices):
            return []
        taken = self.table.take(pa.array(row_indices, type=pa.int64()))
        return list(zip(*(python_values(column) for column in taken.columns), strict=True))


class LookupFullCache(PerProcess, LookupCache):
    """Serves lookups from the latest `FullSnapshot` (Flink's LookupFullCache).

    Thread-safe and lock-free on the read path: the current snapshot is one reference,
    replaced atomically by `swap`. ``put`` and ``invalidate`` are not supported
    (the table changes only by reloading).

    Parameters
    ----------
    key_columns
        Columns lookups match on.
    initial_load_timeout
        How long a lookup waits for the first snapshot before raising
        [`SnapshotUnavailableError`][].
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
        self._init_per_process()

    _PER_PROCESS = ("_snapshot", "_settled", "_metrics", "last_error")

    def _init_per_process(self) -> None:
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
        """Not supported (see `put`)."""
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


def _orderable(type_: pa.DataType) -> bool:
    """Whether Arrow can sort by a column of this type (nested types it cannot)."""
    return not (pa.types.is_nested(type_) or pa.types.is_dictionary(type_)
                or pa.types.is_null(type_))


def _key_columns_of(schema: pa.Schema, key_columns: Sequence[str]) -> tuple[str, ...]:
    keys = tuple(key_columns)
    for name in keys:
        if name not in schema.names:
            raise ConfigError(f"key column {name!r} is not in the table {schema.names}")
    return keys


def _without_null_keys(rows: _Rows, keys: Sequence[str]) -> _Rows:
    """``rows`` less those whose key holds a null or a NaN: they never match."""
    valid: Any = None
    for name in keys:
        column = rows.column(name)
        ok = pc.is_valid(column)
        if pa.types.is_floating(column.type):
            # Kleene: a null's is_nan is null, and a null must not pass as a key (with
            # plain and_, the null reached pc.all, which skips nulls, and the row stayed
            # among the largest key's rows once sorted).
            ok = pc.and_kleene(ok, pc.invert(pc.is_nan(column)))
        valid = ok if valid is None else pc.and_(valid, ok)
    if valid is None or not rows.num_rows or pc.all(valid).as_py():
        return rows
    return rows.filter(valid)


def _spool_rows(batches: Iterable[pa.RecordBatch], keys: Sequence[str], spool: ColumnSpool,
                hashes: ArraySpool | None) -> None:
    """Append each batch's rows with a whole key to ``spool`` (and their key hashes
    to ``hashes``), holding no batch once it is written."""
    for batch in batches:
        kept = _without_null_keys(batch, keys)
        del batch
        spool.append(kept)
        if hashes is not None and kept.num_rows:
            hashes.append(KeyIndex.row_hashes([kept.column(name) for name in keys]))


def _sort_keys(schema: pa.Schema, keys: Sequence[str], order_by: Sequence[str] = ()
               ) -> list[tuple[str, str]]:
    """A table's order when a key has several rows: by key, so that a key's rows are
    one range, then by ``order_by`` (a key's versions by valid_from: a point-in-time
    probe then searches them in order), then by the other columns, so that they come in
    the same order after every load (parallel splits arrive in any order, and "the
    first match" of the SQL function must not change)."""
    first = [*keys, *(name for name in order_by if name not in keys)]
    order = [(name, "ascending") for name in first]
    return order + [(field.name, "ascending") for field in schema
                    if field.name not in first and _orderable(field.type)]
