"""What every lookup runtime is: the base class the partial and full caching runtimes
extend, and the Arrow answer to a batch of keys (:class:`Probe`) joins assemble from.

A module of its own so that the runtimes (``lookup.runtime``, ``lookup.full_caching``)
and the registry that builds them all import it, and none imports another's module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cache.base import Key, Row, answers_to_arrow, key_tuples, row_ranges
from cache.metrics import CacheMetrics
from connectors.keys import has_null
from connectors.rows import python_rows
from lookup.providers import LookupProvider
from spark_lookup._shown import shown
from spark_lookup.errors import LookupLoadError
from spark_lookup.schema import to_arrow_schema

__all__ = ["EMPTY", "LookupRuntime", "Probe", "counting_bad_values", "has_null",
           "place_rows", "python_answers"]

EMPTY: tuple[Row, ...] = ()


@contextmanager
def counting_bad_values(reader: object, count: Callable[[int], object]) -> Iterator[None]:
    """Pass ``count`` how much ``reader.bad_value_count`` grew during the block (a
    connector's count only grows; a reader without one counts nothing)."""
    before = getattr(reader, "bad_value_count", 0)
    try:
        yield
    finally:
        grown = getattr(reader, "bad_value_count", 0) - before
        if grown > 0:
            count(grown)


def python_answers(groups: np.ndarray, offsets: np.ndarray, rows: pa.Table
                   ) -> list[tuple[Row, ...]]:
    """The answer of a probe as Python rows: for each key ``i``, the tuple of its rows
    (``EMPTY`` for none), in the form of :class:`Probe` (``groups``, ``offsets``,
    ``rows``), and one ``EMPTY`` more at the end, so that position -1 (a key that never
    matches) reads as no rows. Only the matched rows are taken out of ``rows`` and
    turned into Python values, a column at a time."""
    answers: list[tuple[Row, ...]] = [EMPTY] * (len(groups) + 1)
    matched = np.flatnonzero(groups >= 0)
    if not len(matched):
        return answers
    found = groups[matched]
    starts = offsets[found]
    counts = offsets[found + 1] - starts
    take = row_ranges(starts, counts)
    if len(take) != rows.num_rows or not np.array_equal(take, np.arange(len(take))):
        rows = rows.take(pa.array(take, type=pa.int64()))
    values = python_rows(rows)
    one_each = len(values) == len(matched) and bool((counts == 1).all())
    if one_each and len(matched) == len(groups):  # a row for every key, the usual case
        answers = list(zip(values))
        answers.append(EMPTY)
        return answers
    places = matched.tolist()
    if one_each:
        for place, row in zip(places, values, strict=True):
            answers[place] = (row,)
        return answers
    start = 0
    for place, end in zip(places, np.cumsum(counts).tolist(), strict=True):
        answers[place] = tuple(values[start:end])
        start = end
    return answers


def place_rows(answers: list[tuple[Row, ...]], places: np.ndarray, rows: list[Row]) -> None:
    """Set ``answers[p]`` to the rows of ``rows`` whose place is ``p``, in their order
    (``places`` and ``rows`` parallel; every place's answer was empty)."""
    spots = places.tolist()
    if len(np.unique(places)) == len(spots):  # a row per key, the usual case
        for spot, row in zip(spots, rows, strict=True):
            answers[spot] = (row,)
        return
    grouped: dict[int, list[Row]] = {}
    for spot, row in zip(spots, rows, strict=True):
        grouped.setdefault(spot, []).append(row)
    for spot, several in grouped.items():
        answers[spot] = tuple(several)


@dataclass(frozen=True)
class Probe:
    """The answer to a batch of distinct keys, as Arrow: key ``i``'s rows are
    ``rows[offsets[groups[i]] : offsets[groups[i] + 1]]``; ``groups[i]`` is -1 when it
    has none."""

    groups: np.ndarray
    offsets: np.ndarray
    rows: pa.Table
    """The dimension rows, every column of the schema."""
    one_row_each: bool = False
    """Every group has one row and group ``g``'s row is ``rows[g]`` (``offsets`` is
    ``0, 1, ..., len(rows)``): a join may take ``groups`` as row numbers."""


class LookupRuntime:
    """The per-worker runtime of one provider. Use :func:`lookup.open_lookup` to get one.

    Thread-safe: the tasks of a worker may call it concurrently.
    """

    def __init__(self, provider: LookupProvider) -> None:
        self.provider = provider
        self.metrics = CacheMetrics()
        self._arity = len(provider.key_columns)
        self._width = len(provider.schema.fields)

    def open(self) -> None:
        """Open the function, cache or trigger; called once, by :func:`lookup.open_lookup`."""

    def close(self) -> None:
        """Release everything opened; called when the last handle closes."""

    def lookup_batch(self, keys: Iterable[Key]) -> dict[Key, tuple[Row, ...]]:
        """Rows of each distinct key in ``keys`` (null keys and unmatched keys: empty)."""
        return self._lookup_unique(self._unique(keys))

    def _lookup_unique(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        """Rows of each of ``keys`` (distinct as Python objects, checked tuples). This
        default sets null keys apart and answers the others by :meth:`_lookup_distinct`."""
        valid: list[Key] = []
        nulls: list[Key] = []
        for key in keys:
            (nulls if has_null(key) else valid).append(key)
        found = self._lookup_distinct(valid)
        found.update(dict.fromkeys(nulls, EMPTY))
        return found

    def _lookup_distinct(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        """Rows of distinct, null-free keys."""
        raise NotImplementedError

    def probe(self, keys: Sequence[pa.Array], describe: str = "lookup") -> Probe:
        """The rows of a batch of distinct keys, one Arrow array per key column (a key
        holding a null never matches): the one path of joins and SQL functions, for
        every kind of provider.

        This default answers through :meth:`lookup_batch` (a Python tuple per key and
        row); a full cache answers from its snapshot's index.

        Raises
        ------
        LookupLoadError
            If rows do not convert to the schema's types (naming ``describe`` and the
            column), or a load failed.
        """
        tuples = key_tuples(keys)
        found = self.lookup_batch(tuples)
        schema = to_arrow_schema(self.provider.schema).remove_metadata()
        try:
            _, groups, offsets, rows = answers_to_arrow(tuples, found, schema)
        except TypeError as exc:
            raise LookupLoadError(f"{describe}: {exc}") from exc
        return Probe(groups, offsets, rows)

    def lookup(self, key: Key) -> tuple[Row, ...]:
        """Rows of one key."""
        key = self._check_key(key)
        return self.lookup_batch([key])[key]

    def _check_key(self, key: object) -> Key:
        if type(key) is not tuple or len(key) != self._arity:
            names = ", ".join(self.provider.key_columns)
            raise TypeError(f"a lookup key is a tuple of {self._arity} value(s) ({names}), "
                            f"got {type(key).__name__}: {shown(key)}")
        return key

    def _unique(self, keys: Iterable[Key]) -> list[Key]:
        """The distinct keys of ``keys`` in first-seen order (as Python objects: ``(1,)``
        and ``(1.0,)`` are one), each checked to be a tuple of one value per key column;
        the checks and the deduplication run in C loops."""
        given = keys if isinstance(keys, list) else list(keys)
        if given and set(map(type, given)) != {tuple}:
            for key in given:
                self._check_key(key)
        if given and set(map(len, given)) != {self._arity}:
            for key in given:
                self._check_key(key)
        try:
            return list(dict.fromkeys(given))
        except TypeError:
            for key in given:
                try:
                    hash(key)
                except TypeError as exc:
                    raise TypeError(f"lookup keys must be hashable tuples of scalars, got "
                                    f"{shown(key)}: {exc}") from None
            raise
