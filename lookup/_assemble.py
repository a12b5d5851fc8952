"""Executor side of a lookup join: one Arrow record batch in, the joined batch out.

Per batch: the distinct keys of the stream rows are found with one vectorized
factorization; only the distinct keys go to the runtime (a full cache's hashed index,
or a partial cache plus one batched load of the misses); the output is assembled with
Arrow ``take`` on both sides. No Python loop runs per stream row; the partial-cache
path loops once per distinct key to turn cached tuples into columns.

Pure pyarrow/numpy/pandas: it is unit-tested without a JVM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from cache.base import Key, Row
from lookup.full_caching import FullCachingRuntime
from lookup.runtime import LookupRuntime
from spark_lookup.errors import LookupLoadError

__all__ = ["JoinShape", "expand", "factorize", "join_batch"]


@dataclass(frozen=True)
class JoinShape:
    """What the driver decided about a join, shipped to executors (small, picklable).

    Attributes
    ----------
    stream_keys
        Stream columns holding the key, in the provider's key order.
    dim_columns
        Dimension columns to output, in schema order (never the key columns).
    out_names
        Output names of ``dim_columns`` (after ``prefix``).
    dim_types
        Arrow types of ``dim_columns``.
    dim_positions
        Index of each of ``dim_columns`` in the dimension schema (rows are tuples).
    how
        ``"left"`` or ``"inner"``.
    """

    stream_keys: tuple[str, ...]
    dim_columns: tuple[str, ...]
    out_names: tuple[str, ...]
    dim_types: tuple[pa.DataType, ...]
    dim_positions: tuple[int, ...]
    how: str


def factorize(arrays: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[np.ndarray, list[pa.Array]]:
    """Codes per row (``-1`` where any key value is null or NaN) and the distinct keys
    as one Arrow array per key column."""
    if len(arrays) == 1:
        column = arrays[0]
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
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
    if not len(codes):
        return codes, [a.slice(0, 0) for a in arrays]
    # The first row of each group carries its key values.
    seen = codes >= 0
    order = np.flatnonzero(seen)
    first_rows = order[np.unique(codes[order], return_index=True)[1]]
    take = pa.array(first_rows, type=pa.int64())
    uniques = [(a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a).take(take)
               for a in arrays]
    return codes, uniques


def expand(groups: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-probe group numbers (-1: no match) and group row ranges ``offsets`` ->
    parallel (probe position, row index) arrays, one pair per matching row."""
    matched = np.flatnonzero(groups >= 0)
    found = groups[matched]
    starts = offsets[found]
    counts = offsets[found + 1] - starts
    if len(counts) and int(counts.max()) == 1 and int(counts.min()) == 1:
        return matched.astype(np.int64), starts.astype(np.int64)
    positions = np.repeat(matched, counts)
    shifts = np.repeat(starts - np.cumsum(counts) + counts, counts)
    rows = np.arange(int(counts.sum()), dtype=np.int64) + shifts
    return positions.astype(np.int64), rows


def _key_tuples(uniques: list[pa.Array]) -> list[Key]:
    columns = [u.to_pylist() for u in uniques]
    return list(zip(*columns, strict=True)) if len(columns) > 1 else [(v,) for v in columns[0]]


def _probe_full(
    runtime: FullCachingRuntime, uniques: list[pa.Array], shape: JoinShape
) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """Groups of the distinct keys in the snapshot, its offsets and output columns."""
    snapshot = runtime.cache.snapshot()
    if len(uniques) == 1:
        values: Any = uniques[0].to_pandas()
    else:
        values = pd.MultiIndex.from_arrays([u.to_pandas() for u in uniques])
    groups = np.asarray(snapshot.index.get_indexer(values), dtype=np.int64)
    hits = int((groups >= 0).sum())
    runtime.metrics.inc_hits(hits)
    runtime.metrics.inc_misses(len(groups) - hits)
    return groups, snapshot.offsets, snapshot.table.select(list(shape.dim_columns))


def _probe_loaded(
    runtime: LookupRuntime, uniques: list[pa.Array], shape: JoinShape, describe: str
) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """Rows of the distinct keys from a partial-cache or uncached runtime, as columns."""
    keys = _key_tuples(uniques)
    found = runtime.lookup_batch(keys)
    per_key = [found[key] for key in keys]
    counts = np.fromiter(map(len, per_key), dtype=np.int64, count=len(keys))
    flat: list[Row] = list(chain.from_iterable(per_key))
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    groups = np.where(counts > 0, np.arange(len(keys), dtype=np.int64), -1)
    # One transposition of all rows, then one Arrow conversion per output column.
    transposed = list(zip(*flat, strict=True)) if flat else None
    columns = []
    for position, name, arrow_type in zip(
        shape.dim_positions, shape.dim_columns, shape.dim_types, strict=True
    ):
        values = transposed[position] if transposed is not None else ()
        try:
            columns.append(pa.array(values, type=arrow_type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            sample = next((v for v in values if v is not None), None)
            raise LookupLoadError(
                f"{describe}: column {name!r} holds {type(sample).__name__} values "
                f"(e.g. {sample!r:.60}) that do not convert to {arrow_type}: {exc}"
            ) from exc
    return groups, offsets, pa.Table.from_arrays(columns, names=list(shape.dim_columns))


def join_batch(batch: pa.RecordBatch, shape: JoinShape, runtime: LookupRuntime,
               describe: str = "lookup") -> pa.RecordBatch:
    """Join one stream batch with the dimension through ``runtime``."""
    codes, uniques = factorize([batch.column(name) for name in shape.stream_keys])
    if isinstance(runtime, FullCachingRuntime):
        unique_groups, offsets, dim = _probe_full(runtime, uniques, shape)
    else:
        unique_groups, offsets, dim = _probe_loaded(runtime, uniques, shape, describe)
    groups = np.where(codes >= 0, unique_groups[np.maximum(codes, 0)], -1) if len(
        unique_groups
    ) else np.full(len(codes), -1, dtype=np.int64)
    positions, rows = expand(groups, offsets)
    if shape.how == "left":
        unmatched = np.flatnonzero(groups < 0)
        if len(unmatched):
            positions = np.concatenate((positions, unmatched))
            rows = np.concatenate((rows, np.full(len(unmatched), -1, dtype=np.int64)))
            order = np.argsort(positions, kind="stable")
            positions, rows = positions[order], rows[order]
    n = batch.num_rows
    if len(positions) == n and (n == 0 or (positions[0] == 0 and positions[-1] == n - 1
                                           and bool(np.all(np.diff(positions) == 1)))):
        stream_part = batch
    else:
        stream_part = batch.take(pa.array(positions, type=pa.int64()))
    take_rows = pa.array(rows, type=pa.int64(), mask=rows < 0)
    dim_columns = [dim.column(i).take(take_rows) for i in range(dim.num_columns)]
    arrays = list(stream_part.columns) + [
        c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in dim_columns
    ]
    names = list(batch.schema.names) + list(shape.out_names)
    return pa.RecordBatch.from_arrays(arrays, names=names)
