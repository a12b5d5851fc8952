"""Executor side of a lookup join: one Arrow record batch in, the joined batch out.

Per batch: the distinct keys of the stream rows are found with one vectorized
factorization; only the distinct keys go to the runtime's `probe`
(the one path for every provider: a partial cache plus one batched load of the misses,
or no cache); a full cache's index is probed with every row's key instead
(``probes_rows``); the output is assembled with Arrow ``take`` on both sides. No Python
loop runs per stream row.

Pure pyarrow/numpy/pandas: it is unit-tested without a JVM.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from cache.answers import Answers
from cache.base import expand
from lookup.runtime.base import LookupRuntime
from lookup.versions import instants, now_micros

__all__ = ["JoinShape", "PointInTime", "factorize", "join_batch", "known_range",
           "pick_versions"]

RowTimes = tuple[np.ndarray, np.ndarray | None]
"""Each row's time (microseconds) and where it is known (None: everywhere)."""


@dataclass(frozen=True)
class PointInTime:
    """Which version of a key a row joins (the provider has a validity): the one valid
    at the row's ``as_of`` column, or (None) at the time the batch is joined."""

    as_of: str | None
    wall_clock_zone: str | None = None
    """For "now" against TIMESTAMP_NTZ or DATE versions: the zone whose wall clock they
    are on (the session's); None: TIMESTAMP versions, instants."""
    retention_micros: int | None = None
    """The provider's ``Validity.retention``: an ``as_of`` older than now minus it gets
    no version (loads may have dropped the one it should get)."""

    def times(self, batch: pa.RecordBatch, clock: Callable[[], float]) -> RowTimes:
        """Each row's time as microseconds (`lookup.versions.instants`), and where it
        is there (None: everywhere)."""
        if self.as_of is None:
            return np.full(batch.num_rows, now_micros(clock, self.wall_clock_zone),
                           dtype=np.int64), None
        column = batch.column(self.as_of)
        values, valid = instants(column)
        return values, valid if column.null_count else None

    def out_of_retention(self, as_of: np.ndarray, known: np.ndarray | None,
                         clock: Callable[[], float]) -> np.ndarray | None:
        """Which rows' times are older than now minus the retention (None: none can
        be: no retention, or "now" itself)."""
        if self.retention_micros is None or self.as_of is None:
            return None
        # On the same clock as the loads' cutoff (`lookup.versions.load_cutoff`), and
        # never earlier than it: a row kept here finds every version it may need.
        cutoff = now_micros(clock, self.wall_clock_zone) - self.retention_micros
        old = as_of < cutoff
        return old if known is None else old & known


@dataclass(frozen=True)
class JoinShape:
    """What the driver decided about a join, shipped to executors (small, picklable)."""

    stream_keys: tuple[str, ...]  # stream columns holding the key, in the provider's order
    dim_columns: tuple[str, ...]  # to output, in schema order (never the key columns)
    out_names: tuple[str, ...]  # of ``dim_columns``, after ``prefix``
    dim_types: tuple[pa.DataType, ...]  # Arrow types of ``dim_columns``
    how: str  # "left" or "inner"
    point_in_time: PointInTime | None = None  # the provider has a validity


def factorize(arrays: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[np.ndarray, list[pa.Array]]:
    """Codes per row (``-1`` where any key value is null or NaN) and the distinct keys
    as one Arrow array per key column."""
    if len(arrays) == 1:
        column = arrays[0]
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if pa.types.is_integer(column.type) and not column.null_count:
            # pandas' hash factorization of a numpy view: about 3x Arrow's dictionary
            # encoding for the integer keys of most dimensions.
            codes, uniques = pd.factorize(column.to_numpy(), sort=False)
            return codes.astype(np.int64, copy=False), [pa.array(uniques, type=column.type)]
        encoded = column.dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        if encoded.indices.null_count:
            codes = np.where(np.isnan(codes), -1, codes)
        codes = codes.astype(np.int64)
        dictionary = encoded.dictionary
        if pa.types.is_floating(dictionary.type):
            # NaN is a value to Arrow, a null to SQL: it never matches.
            nan = np.isnan(dictionary.to_numpy(zero_copy_only=False))
            if nan.any():
                codes = np.where(nan[np.maximum(codes, 0)] & (codes >= 0), -1, codes)
        return codes, [dictionary]
    frame = pd.DataFrame({str(i): a.to_pandas() for i, a in enumerate(arrays)})
    groups = frame.groupby(list(frame.columns), dropna=True, sort=False).ngroup()
    codes = groups.fillna(-1).to_numpy().astype(np.int64)
    # The first row of each group carries its key values.
    order = np.flatnonzero(codes >= 0)
    first_rows = order[np.unique(codes[order], return_index=True)[1]]
    take = pa.array(first_rows, type=pa.int64())
    uniques = [(a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a).take(take)
               for a in arrays]
    return codes, uniques


def known_range(times: RowTimes) -> tuple[int, int] | None:
    """The earliest and latest of the known times (None: none is): what a no-cache
    load may bound the versions it reads by (`LookupRuntime.probe`)."""
    as_of, known = times
    values = as_of if known is None else as_of[known]
    if not len(values):
        return None
    return int(values.min()), int(values.max())


def pick_versions(point_in_time: PointInTime, batch: pa.RecordBatch, runtime: LookupRuntime,
                  probe: Answers, groups: np.ndarray, clock: Callable[[], float],
                  times: RowTimes | None = None) -> np.ndarray:
    """The row of each stream row's version (``groups``: each row's group of ``probe``)
    valid at its time in ``batch`` (``times``, if read already), or -1; rows older than
    the retention get -1 and are counted. Shared by joins and the SQL functions, so
    that all answer alike."""
    as_of, known = point_in_time.times(batch, clock) if times is None else times
    picked = runtime.pick_at(probe, groups, as_of, known)
    old = point_in_time.out_of_retention(as_of, known, clock)
    if old is not None and old.any():
        picked = np.where(old, -1, picked)
        runtime.metrics.inc_out_of_retention(int(np.count_nonzero(old)))
    return picked


def join_batch(batch: pa.RecordBatch, shape: JoinShape, runtime: LookupRuntime,
               describe: str = "lookup", clock: Callable[[], float] = time.time
               ) -> pa.RecordBatch:
    """Join one stream batch with the dimension through ``runtime``.

    Point in time (``shape.point_in_time``), each row's key answers all its versions and
    the row takes the one valid at its time (``clock`` reads "now", epoch seconds):
    `lookup.versions.pick`, vectorized, after which the join has one row per match.
    """
    keys = [batch.column(name) for name in shape.stream_keys]
    point_in_time = shape.point_in_time
    times: RowTimes | None = None
    as_of_range = None
    if point_in_time is not None and point_in_time.as_of is not None:
        # Read before the probe: a load without a cache reads only the versions the
        # rows' times may need. ("Now" is read after it, as the retention's cutoff is:
        # never before a load's.)
        times = point_in_time.times(batch, clock)
        as_of_range = known_range(times)
    if runtime.probes_rows:
        # One probe per stream row costs what one per distinct key would: the
        # factorization would be pure overhead (a third of a full-cache join's work).
        probe = runtime.probe(keys, describe, as_of_range)
        groups = probe.groups
    else:
        codes, uniques = factorize(keys)
        probe = runtime.probe(uniques, describe, as_of_range)
        groups = np.append(probe.groups, -1)[codes]  # code -1 (a null key) takes the -1
    dim = probe.rows.select(list(shape.dim_columns))
    n = batch.num_rows
    stream_part = batch
    if point_in_time is not None:
        groups = pick_versions(point_in_time, batch, runtime, probe, groups, clock, times)
    if probe.one_row_each or point_in_time is not None:
        # A group (a picked version) is its row: no ranges to expand, and a left join
        # keeps the batch whole.
        rows = groups
        if shape.how != "left":
            keep = np.flatnonzero(rows >= 0)
            if len(keep) < n:
                stream_part = batch.take(pa.array(keep, type=pa.int64()))
                rows = rows[keep]
    else:
        positions, rows = expand(groups, probe.offsets)
        if shape.how == "left":
            unmatched = np.flatnonzero(groups < 0)
            if len(unmatched):
                positions = np.concatenate((positions, unmatched))
                rows = np.concatenate((rows, np.full(len(unmatched), -1, dtype=np.int64)))
                order = np.argsort(positions, kind="stable")
                positions, rows = positions[order], rows[order]
        if not np.array_equal(positions, np.arange(n)):
            stream_part = batch.take(pa.array(positions, type=pa.int64()))
    missing = rows < 0
    any_missing = missing if missing.any() else None
    take_rows = pa.array(rows, type=pa.int64(), mask=any_missing)
    # Arrow's own bounds check of a gather costs a third of it; one numpy pass proves
    # the same (rows are -1, masked, or row numbers of the probe's answer).
    if len(rows) and int(rows.max()) >= dim.num_rows:
        raise IndexError(f"{describe}: a row number past the dimension's {dim.num_rows} rows")
    dim_columns = []
    for i, name in enumerate(shape.dim_columns):
        # Short strings of a large snapshot come from its views: one memory access a row.
        viewed = (None if probe.views is None
                  else probe.views.take(name, dim.column(i), rows, any_missing))
        dim_columns.append(viewed if viewed is not None
                           else pc.take(dim.column(i), take_rows, boundscheck=False))
    arrays = list(stream_part.columns) + [_one_array(c) for c in dim_columns]
    names = list(batch.schema.names) + list(shape.out_names)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _one_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        # One chunk is the array itself; combining would copy it.
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column
