"""An overlay of changed keys in front of a full snapshot: each key's current rows (none
for a deleted key), read by key after a change feed named it, so that a change is
served without reloading the table.

An `Overlay` is immutable (copy-on-write: each batch of changes makes a new one)
and small next to the snapshot. Its distinct keys are indexed by a
`cache.full.index.KeyIndex` of their own, so they match exactly as the
snapshot's keys do (as values of the key types; a null never matches); key ``j``'s rows
are ``rows[offsets[j]:offsets[j + 1]]``, ordered as a snapshot orders a key's rows, and
each key carries when its latest change was notified (the cache's clock). A snapshot
whose load started at ``L`` holds every change notified before ``L``: those entries go
(`Overlay.since`), later ones stay in front of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from cache.base import expand, row_ranges
from cache.full.index import KeyIndex
from cache.full.snapshot import FullSnapshot, _orderable

__all__ = ["Answer", "Overlay"]

_NO_OFFSETS = np.zeros(0, dtype=np.int64)
_NO_OFFSETS.flags.writeable = False

Answer = tuple[np.ndarray, np.ndarray, pa.Table, bool]
"""``(groups, offsets, rows, one_row_each)``, as `cache.answers.Answers` holds them."""


@dataclass(eq=False, repr=False, slots=True)  # both would compare or print whole tables
class Overlay:
    """Changed keys and their current rows (see the module's docstring). Build it with
    `of`; thread-safe (immutable).

    Attributes
    ----------
    keys : pyarrow.Table
        The distinct keys (the key columns, one chunk each).
    noted : numpy.ndarray
        ``float64``, when each key's latest change was notified.
    rows : pyarrow.Table
        Every key's rows, key after key.
    offsets : numpy.ndarray
        ``int64``, ``num_keys + 1`` row offsets (a deleted key: an empty range).
    base : float
        No entry was notified before it: the load start of the snapshot it was last
        trimmed for (``-inf``: none).
    """

    keys: pa.Table
    noted: np.ndarray
    rows: pa.Table
    offsets: np.ndarray
    base: float
    index: KeyIndex = field(init=False)
    _present: np.ndarray = field(init=False)
    _first: np.ndarray | None = field(init=False)

    def __post_init__(self) -> None:
        index = KeyIndex.of_unique(self.keys, self.keys.column_names)
        if index is None:
            raise ValueError("the keys of an overlay must be distinct")
        self.index = index
        counts = np.diff(self.offsets)
        self._present = counts > 0
        # One row or none a key: the row of key j is rows[_first[j]] (-1: deleted).
        self._first = (np.where(self._present, self.offsets[:-1], -1)
                       if int(counts.max(initial=0)) <= 1 else None)

    @property
    def num_keys(self) -> int:
        """Keys in the overlay (deleted ones included)."""
        return int(self.keys.num_rows)

    @classmethod
    def of(cls, previous: Overlay | None, keys: Sequence[pa.Array], noted: np.ndarray,
           row_keys: np.ndarray, rows: pa.Table, base: float,
           key_columns: Sequence[str]) -> Overlay | None:
        """``previous`` (None: nothing yet) with ``keys`` (distinct, of the key types,
        changes notified at ``noted``) now holding ``rows`` (row ``i`` is one of
        ``keys[row_keys[i]]``; a key without rows was deleted), and without entries
        notified before ``base``. None when nothing is left."""
        names = list(key_columns)
        if previous is not None:
            base = max(base, previous.base)
        count = len(keys[0]) if keys else 0
        fresh = noted >= base
        if not fresh.all():
            renumber = np.cumsum(fresh) - 1
            row_kept = fresh[row_keys]
            rows = rows.filter(pa.array(row_kept))
            row_keys = renumber[row_keys[row_kept]]
            take = pa.array(np.flatnonzero(fresh), type=pa.int64())
            keys = [array.take(take) for array in keys]
            noted = noted[fresh]
            count = len(noted)
        counts = np.bincount(row_keys, minlength=count).astype(np.int64)
        rows = _key_ordered(rows, row_keys, counts, names)
        new_keys = pa.table(list(keys), names=names)
        if previous is None:
            return cls._made(new_keys, noted, rows, counts, base)
        kept = previous.noted >= base
        if count:
            replaced = previous.index.groups(list(keys))
            kept[replaced[replaced >= 0]] = False
        at = np.flatnonzero(kept)
        old_counts = np.diff(previous.offsets)[at]
        old_rows = previous.rows.take(pa.array(
            row_ranges(previous.offsets[:-1][at], old_counts), type=pa.int64()))
        old_keys = previous.keys.take(pa.array(at, type=pa.int64()))
        return cls._made(
            pa.concat_tables([old_keys, new_keys.cast(old_keys.schema)]),
            np.concatenate((previous.noted[at], noted)),
            pa.concat_tables([old_rows, rows.cast(old_rows.schema)]),
            np.concatenate((old_counts, counts)), base)

    @classmethod
    def _made(cls, keys: pa.Table, noted: np.ndarray, rows: pa.Table, counts: np.ndarray,
              base: float) -> Overlay | None:
        if not keys.num_rows:
            return None
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(keys.combine_chunks(), noted, rows.combine_chunks(), offsets, base)

    def since(self, base: float) -> Overlay | None:
        """This overlay without the entries notified before ``base`` (the load start of
        a snapshot now served, which holds them). None when nothing is left."""
        if base <= self.base:
            return self
        empty = [column.chunk(0).slice(0, 0) if column.num_chunks else
                 pa.array([], column.type) for column in self.keys.columns]
        return Overlay.of(self, empty, np.zeros(0), np.zeros(0, dtype=np.int64),
                          self.rows.slice(0, 0), base, self.keys.column_names)

    def answer(self, snapshot: FullSnapshot, groups: np.ndarray, keys: Sequence[pa.Array]
               ) -> Answer | None:
        """The rows of ``keys`` (one array per key column; repeats and nulls welcome),
        given their ``groups`` in ``snapshot``: a key of the overlay takes the overlay's
        rows, any other the snapshot's. None when no key is in the overlay (the
        snapshot's own answer stands, untouched).

        Only the rows the keys match are taken (a copy of the batch's rows, never of
        the snapshot): the answer's rows are the snapshot's part, then the overlay's.
        """
        mine = self.index.groups(keys)
        hit = mine >= 0
        if not hit.any():
            return None
        n = len(mine)
        theirs = np.where(hit, -1, groups)
        mine = np.where(hit & self._present[np.maximum(mine, 0)], mine, -1)
        target = snapshot.table.schema
        if snapshot.unique and self._first is not None:
            # One row a key on both sides: a group is its row, as in the snapshot's answer.
            from_snapshot = np.flatnonzero(theirs >= 0)
            from_overlay = np.flatnonzero(mine >= 0)
            rows = _joined(snapshot.table, theirs[from_snapshot],
                           self.rows, self._first[mine[from_overlay]], target)
            found = np.full(n, -1, dtype=np.int64)
            found[from_snapshot] = np.arange(len(from_snapshot), dtype=np.int64)
            found[from_overlay] = np.arange(len(from_snapshot), rows.num_rows, dtype=np.int64)
            return found, np.arange(rows.num_rows + 1, dtype=np.int64), rows, True
        positions_s, rows_s = snapshot.expand(theirs)
        positions_o, rows_o = expand(mine, self.offsets)
        rows = _joined(snapshot.table, rows_s, self.rows, rows_o, target)
        positions = np.concatenate((positions_s, positions_o))
        if not len(positions):
            return np.full(n, -1, dtype=np.int64), np.zeros(1, dtype=np.int64), rows, False
        # A key's rows are one run in either part, and no key is in both parts: each run
        # is a group of the answer.
        starts = np.flatnonzero(np.concatenate(([True], positions[1:] != positions[:-1])))
        found = np.full(n, -1, dtype=np.int64)
        found[positions[starts]] = np.arange(len(starts), dtype=np.int64)
        return found, np.append(starts, len(positions)).astype(np.int64), rows, False


def _key_ordered(rows: pa.Table, row_keys: np.ndarray, counts: np.ndarray,
                 names: Sequence[str]) -> pa.Table:
    """``rows`` key after key (by ``row_keys``); a key's rows ordered by their other
    columns, as `FullSnapshot.load` orders them, so that both give a key's rows
    (and its "first match") in the same order."""
    if not rows.num_rows:
        return rows
    if int(counts.max()) <= 1:
        return rows.take(pa.array(np.argsort(row_keys, kind="stable"), type=pa.int64()))
    ties = [(field.name, "ascending") for field in rows.schema
            if field.name not in names and _orderable(field.type)]
    position = "__overlay_key"
    ordered = rows.append_column(position, pa.array(row_keys, type=pa.int64())).sort_by(
        [(position, "ascending"), *ties])
    return ordered.drop_columns([position])


def _joined(snapshot_rows: pa.Table, take_snapshot: np.ndarray, overlay_rows: pa.Table,
            take_overlay: np.ndarray, schema: pa.Schema) -> pa.Table:
    """The rows taken from the snapshot, then those taken from the overlay (as the
    snapshot's schema: the same types, perhaps other metadata)."""
    first = snapshot_rows.take(pa.array(take_snapshot, type=pa.int64()))
    second = overlay_rows.take(pa.array(take_overlay, type=pa.int64()))
    if second.schema != schema:
        second = second.cast(schema)
    if first.schema != schema:
        first = first.cast(schema)
    return pa.concat_tables([first, second])
