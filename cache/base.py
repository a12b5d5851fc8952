"""The LookupCache interface (Flink's ``LookupCache``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from cache.answers import Answers
from cache.metrics import CacheMetrics
from spark_lookup.errors import KeyKindError
from spark_lookup.shown import shown

__all__ = ["CachedAnswers", "Key", "LookupCache", "Row", "Rows", "answers_to_arrow", "expand",
           "key_tuples", "row_ranges", "rows_to_table"]

Key = tuple[Any, ...]
"""A lookup key: a tuple of scalars in the order of the key columns."""
Row = tuple[Any, ...]
"""A dimension row: a tuple in the order of the dimension schema."""
Rows = Sequence[Row]
"""The rows stored for one key: empty (a cached miss), one, or many."""


CachedAnswers = Answers
"""The former name of `cache.answers.Answers`, what [`LookupCache.get_arrow`][] returns."""


class LookupCache(ABC):
    """A cache of lookup results, keyed by lookup key; implementations are thread-safe.

    Built on the driver, pickled to executors as its configuration (never its contents),
    and opened where it runs. One opened instance is shared by all tasks of a Python
    worker, so every method may be called from several threads at once.
    """

    _metrics: CacheMetrics

    def open(self, metrics: CacheMetrics | None = None) -> None:
        """Prepare for use on the worker and report into ``metrics`` (a new one if None).
        An override calls this first."""
        self._metrics = metrics if metrics is not None else CacheMetrics()

    @property
    def metrics(self) -> CacheMetrics:
        """The metrics this cache reports into."""
        return self._metrics

    def _counted(self, rows: Rows | None) -> Rows | None:
        """``rows`` of one key asked for, counted as a hit, or a miss when None."""
        if rows is None:
            self._metrics.inc_misses()
        else:
            self._metrics.inc_hits()
        return rows

    @abstractmethod
    def get_if_present(self, key: Key) -> Rows | None:
        """The cached rows of ``key`` (possibly empty: a cached miss), or None if absent."""

    @abstractmethod
    def put(self, key: Key, rows: Rows) -> None:
        """Cache ``rows`` for ``key``; an empty ``rows`` is kept only if the cache keeps
        missing keys."""

    @abstractmethod
    def invalidate(self, key: Key) -> None:
        """Remove ``key`` if present."""

    def invalidate_all(self) -> None:
        """Remove every entry this cache can serve (a change feed lost its connection and
        cannot say what changed meanwhile). Caches that cannot raise
        ``NotImplementedError``, and a change feed refuses them."""
        raise NotImplementedError(f"{type(self).__name__} cannot drop all its entries")

    @abstractmethod
    def size(self) -> int:
        """Number of cached keys."""

    def close(self) -> None:  # noqa: B027  # optional hook
        """Release resources; the cache is not used afterwards."""

    def get_all(self, keys: Iterable[Key]) -> dict[Key, Rows]:
        """The cached rows of each key in ``keys`` that is present (absent keys omitted)."""
        found: dict[Key, Rows] = {}
        for key in keys:
            rows = self.get_if_present(key)
            if rows is not None:
                found[key] = rows
        return found

    def put_all(self, entries: Mapping[Key, Rows]) -> None:
        """[`put`][] every entry of ``entries``."""
        for key, rows in entries.items():
            self.put(key, rows)

    # --- the batch path of joins, in Arrow

    def bind(self, schema: pa.Schema, key_columns: Sequence[str]) -> None:
        """Learn the Arrow types of rows (the dimension schema) and which columns are
        the key; the lookup runtime calls it before [`open`][]. Rows of the Arrow
        methods below have ``schema``."""
        self._bound = (schema, list(key_columns))

    def _bound_schema(self) -> tuple[pa.Schema, list[str]]:
        bound = getattr(self, "_bound", None)
        if bound is None:
            raise RuntimeError(f"{type(self).__name__}.bind() must come before its Arrow methods")
        return bound  # type: ignore[no-any-return]

    def get_arrow(self, keys: Sequence[pa.Array]) -> Answers:
        """The cached answers of ``n`` distinct keys (one array per key column, no
        nulls), as `cache.answers.Answers`.

        This default goes through [`get_all`][] (a Python tuple per key and row);
        [`DefaultLookupCache`][] answers in Arrow, without them.
        """
        schema, _ = self._bound_schema()
        tuples = key_tuples(keys)
        return answers_to_arrow(tuples, self.get_all(tuples), schema)

    def put_arrow(self, keys: Sequence[pa.Array], index: pa.Array,
                  rows: pa.Table | pa.RecordBatch) -> None:
        """Cache the answers of ``n`` distinct keys: row ``j`` of ``rows`` (a table or
        record batch of the bound schema) belongs to key ``index[j]``; a key without
        rows is cached as a missing key, if the cache keeps those.

        This default goes through [`put_all`][].
        """
        tuples = key_tuples(keys)
        grouped: dict[Key, list[Row]] = {key: [] for key in tuples}
        table_columns = [column.to_pylist() for column in rows.columns]
        for position, row in zip(index.to_pylist(), zip(*table_columns, strict=True),
                                 strict=True):
            grouped[tuples[position]].append(row)
        self.put_all(grouped)

    def invalidate_arrow(self, keys: Sequence[pa.Array]) -> int:
        """Remove the entries of ``n`` keys given as one array per key column (of the
        bound key types, no nulls); returns how many were removed (a cache that cannot
        tell: how many keys were given). A key that is not cached costs nothing more
        than its probe.

        This default goes through [`invalidate`][], key by key;
        [`DefaultLookupCache`][] removes them in bulk.
        """
        tuples = key_tuples(keys)
        for key in tuples:
            self.invalidate(key)
        return len(tuples)

    def __enter__(self) -> LookupCache:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def key_tuples(keys: Sequence[pa.Array]) -> list[Key]:
    """Keys given as one array per key column, as Python tuples."""
    columns = [array.to_pylist() for array in keys]
    return list(zip(*columns, strict=True)) if columns else []


def answers_to_arrow(
    keys: Sequence[Key], found: Mapping[Key, Rows], schema: pa.Schema
) -> Answers:
    """The answers of [`LookupCache.get_all`][] in the form of ``get_arrow``.

    Raises
    ------
    TypeError
        If a row does not convert to ``schema`` (naming the column).
    """
    hit = np.fromiter((key in found for key in keys), dtype=bool, count=len(keys))
    counts = np.fromiter((len(found.get(key, ())) for key in keys), dtype=np.int64,
                         count=len(keys))
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    groups = np.where(counts > 0, np.arange(len(keys), dtype=np.int64), -1)
    rows = [row for key in keys for row in found.get(key, ())]
    return Answers(hit, groups, offsets, rows_to_table(rows, schema))


def expand(groups: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-probe group numbers (-1: no match) and group row ranges ``offsets`` ->
    parallel (probe position, row index) arrays, one pair per matching row."""
    matched = np.flatnonzero(groups >= 0)
    found = groups[matched]
    starts = offsets[found]
    counts = offsets[found + 1] - starts
    rows = row_ranges(starts, counts)
    positions = matched if len(rows) == len(matched) else np.repeat(matched, counts)
    return positions.astype(np.int64), rows


def row_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Row numbers of the ranges ``[starts[i], starts[i] + counts[i])``, end to end."""
    if not len(counts) or (int(counts.min()) == 1 and int(counts.max()) == 1):
        return np.asarray(starts, dtype=np.int64)
    starts = starts.astype(np.int64)
    counts = counts.astype(np.int64)
    shifts = np.repeat(starts - np.cumsum(counts) + counts, counts)
    rows: np.ndarray = np.arange(int(counts.sum()), dtype=np.int64) + shifts
    return rows


def rows_to_table(rows: Sequence[Row], schema: pa.Schema) -> pa.Table:
    """Python rows as a table of ``schema`` (one conversion per column).

    Raises
    ------
    TypeError
        If a value does not convert to its column's type (naming the column).
    """
    transposed = list(zip(*rows, strict=True)) if rows else None
    arrays = []
    for position, field in enumerate(schema):
        values = transposed[position] if transposed is not None else ()
        try:
            arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            sample = next((v for v in values if v is not None), None)
            raise TypeError(
                f"column {field.name!r} holds {type(sample).__name__} values "
                f"(e.g. {shown(sample, 60)}) that do not convert to {field.type}: {exc}"
            ) from exc
    return pa.Table.from_arrays(arrays, schema=schema)


def check_key(key: object) -> Key:
    """Validate a key argument: a tuple, so a scalar is never mistaken for a 1-tuple.

    Raises
    ------
    KeyKindError
        If ``key`` is not a tuple.
    """
    if not isinstance(key, tuple):
        raise KeyKindError(f"a lookup key must be a tuple, got {type(key).__name__}: {shown(key)}")
    return key


def freeze_rows(key: Key, rows: object) -> tuple[Row, ...]:
    """Validate ``rows`` for ``key`` and return them as an immutable tuple of tuples."""
    frozen: tuple[Any, ...]
    if type(rows) is tuple:
        frozen = rows
    elif type(rows) is list:
        frozen = tuple(rows)
    elif rows is None:
        raise TypeError(f"rows for key {shown(key)} must be a sequence of tuples, got None")
    elif isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
        raise TypeError(
            f"rows for key {shown(key)} must be a sequence of tuples, got {type(rows).__name__}"
        )
    else:
        frozen = tuple(rows)
    for row in frozen:
        if type(row) is not tuple:
            raise TypeError(
                f"each row for key {shown(key)} must be a tuple, got {type(row).__name__}"
            )
    return frozen
