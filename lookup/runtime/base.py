"""What every lookup runtime is: the base class the partial and full caching runtimes
extend, and the Arrow answer to a batch of keys (`cache.answers.Answers`) joins assemble from.

A module of its own so that the runtimes (``lookup.runtime.partial``, ``lookup.runtime.full``)
and the registry that builds them all import it, and none imports another's module.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Protocol

import numpy as np
import pyarrow as pa

from cache.answers import Answers
from cache.base import Key, Row, answers_to_arrow, expand, key_tuples
from cache.metrics import CacheMetrics
from connectors.keys import EncodedKeys, KeyCodec, has_null
from connectors.rows import python_values
from lookup.providers import LookupProvider
from lookup.versions import (
    TableTimes,
    VersionIndex,
    group_rows,
    index_of_times,
    instants,
    pick,
    pick_in_place,
)
from spark_lookup.errors import KeyKindError, LookupLoadError
from spark_lookup.schema import to_arrow_schema
from spark_lookup.shown import shown

__all__ = ["EMPTY", "LookupRuntime", "add_rows", "close_each", "counting_bad_values",
           "has_null", "place_probe_answers", "probe_answers"]

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


class _Closeable(Protocol):
    def close(self) -> object: ...


def close_each(*parts: _Closeable | None) -> None:
    """Close each of ``parts`` that a runtime has (None: never made), in order; an error
    stops the sequence and propagates."""
    for part in parts:
        if part is not None:
            part.close()


def add_rows(answers: dict[int, tuple[Row, ...]] | list[tuple[Row, ...]],
             positions: np.ndarray, rows: pa.Table | pa.RecordBatch) -> None:
    """Add to ``answers`` the rows of ``rows`` as Python tuples: row ``j`` belongs to
    the key at ``positions[j]``, and a key's rows keep their order. ``answers`` is a
    dict by key position, or a list with a slot per key position. The values are made
    a column at a time (`connectors.rows.python_values`) and placed by C loops
    when each key has one row (the usual case); ``answers`` holds no key of
    ``positions`` yet."""
    if not len(positions):
        return
    columns = [python_values(column) for column in rows.columns]
    spots = positions.tolist()
    place = answers.__setitem__
    if int(np.bincount(positions).max()) == 1:
        deque(map(place, spots, zip(zip(*columns, strict=True))), maxlen=0)
        return
    grouped: dict[int, list[Row]] = {}
    for spot, row in zip(spots, zip(*columns, strict=True), strict=True):
        grouped.setdefault(spot, []).append(row)
    for spot, several in grouped.items():
        place(spot, tuple(several))


def probe_answers(groups: np.ndarray, offsets: np.ndarray, rows: pa.Table
                  ) -> dict[int, tuple[Row, ...]]:
    """The answer of a probe (in the form of `cache.answers.Answers`) as Python rows, by key
    position; keys without rows are left out (see `place_probe_answers`)."""
    answers: dict[int, tuple[Row, ...]] = {}
    place_probe_answers(answers, groups, offsets, rows)
    return answers


def place_probe_answers(answers: dict[int, tuple[Row, ...]] | list[tuple[Row, ...]],
                        groups: np.ndarray, offsets: np.ndarray, rows: pa.Table) -> None:
    """Add to ``answers`` (as `add_rows`) the answer of a probe (in the form of
    `cache.answers.Answers`) as Python rows. Only the matched rows are taken out of ``rows``
    (which may hold others) and turned into Python values."""
    positions, row_numbers = expand(groups, offsets)
    if len(positions):
        if len(row_numbers) != rows.num_rows or not np.array_equal(
                row_numbers, np.arange(len(row_numbers))):
            rows = rows.take(pa.array(row_numbers, type=pa.int64()))
        add_rows(answers, positions, rows)


class LookupRuntime:
    """The per-worker runtime of one provider. Use
    [`lookup.open_lookup`][lookup.open_lookup] to get one.

    Thread-safe: the tasks of a worker may call it concurrently.
    """

    probes_rows = False
    """`probe` takes repeated and null keys (one per stream row) as cheaply as
    distinct ones, counting a hit or miss per key given: a join skips factorizing."""

    def __init__(self, provider: LookupProvider) -> None:
        self.provider = provider
        self.metrics = CacheMetrics()
        self._arity = len(provider.key_columns)
        self._width = len(provider.schema.fields)
        self._codec = KeyCodec(list(provider.key_columns), provider.key_types,
                               provider.describe())
        # The version times of the table last answered (see pick_at).
        self._times: tuple[pa.Table, TableTimes] | None = None

    def open(self) -> None:
        """Open the function, cache or trigger; called once, by
        [`lookup.open_lookup`][lookup.open_lookup]."""

    def close(self) -> None:
        """Release everything opened; called when the last handle closes."""

    def lookup_batch(self, keys: Iterable[Key]) -> dict[Key, tuple[Row, ...]]:
        """Rows of each distinct key in ``keys`` (null keys and unmatched keys: empty)."""
        return self._lookup_keys(self._checked(keys))

    def _lookup_keys(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        """Rows of each of ``keys`` (checked tuples, repeats possible), in every kind of
        runtime alike: keys are values of their columns' types (``True`` is no key of a
        STRING column and is refused, ``1.0`` is the BIGINT 1), checked and made
        distinct as Arrow values by the provider's key codec, never by Python equality
        (``True == 1``); a key holding a null never matches.

        Raises
        ------
        KeyKindError
            For a value of a kind its column never holds, naming the key and column.
        """
        encoded = self._codec.encode(keys, skip_null_keys=True, shapes_checked=True)
        answers = self._answers(encoded) if len(encoded) else [EMPTY]
        # Every key given, in order, with its distinct key's rows, in C loops.
        return dict(zip(keys, map(answers.__getitem__, encoded.positions), strict=True))

    def _answers(self, encoded: EncodedKeys) -> list[tuple[Row, ...]]:
        """The rows of each distinct encoded key, in order, then none (for position
        -1): by `_lookup_distinct` of the keys as Python tuples."""
        distinct = encoded.distinct
        found = self._lookup_distinct(distinct)
        return [*map(found.__getitem__, distinct), EMPTY]

    def _lookup_distinct(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        """Rows of distinct, null-free keys."""
        raise NotImplementedError

    def probe(self, keys: Sequence[pa.Array], describe: str = "lookup",
              as_of_range: tuple[int, int] | None = None) -> Answers:
        """The rows of a batch of distinct keys, one Arrow array per key column (a key
        holding a null never matches): the one path of joins and SQL functions, for
        every kind of provider.

        This default answers through `lookup_batch` (a Python tuple per key and
        row); a full cache answers from its snapshot's index. ``as_of_range``: the
        range of a point-in-time batch's known times (microseconds), which a runtime
        without a cache may use to read fewer versions; ignored here.

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
        return Answers(None, groups, offsets, rows)

    def versions(self, answers: Answers) -> VersionIndex:
        """The validity pieces of the rows of ``answers`` (the provider has a validity):
        what a point-in-time join picks each row's version from.

        Bad history was handled where the rows were loaded (under the source's policy:
        dropped, counted or refused); what is left is read as PERMISSIVE reads it.
        """
        return self._index_of(answers, answers.groups)

    def _index_of(self, answers: Answers, groups: np.ndarray) -> VersionIndex:
        """The index of the rows of ``groups`` of ``answers`` only."""
        validity = self.provider.validity
        if validity is None:
            raise ValueError(f"{self.provider.describe()} has no validity")
        rows, group = group_rows(answers.offsets, groups)
        take = pa.array(rows, type=pa.int64())
        table = answers.rows
        start, has_start = instants(table.column(validity.valid_from).take(take))
        to = None if validity.valid_to is None else instants(
            table.column(validity.valid_to).take(take))
        index = index_of_times(group, start, has_start, to)
        return replace(index, row=rows[index.row], row_is_piece=False)

    def pick_at(self, answers: Answers, groups: np.ndarray, as_of: np.ndarray,
                known: np.ndarray | None) -> np.ndarray:
        """The row of ``answers`` each stream row takes (``groups``: its key's group),
        the version valid at ``as_of`` (microseconds; ``known``: where it is given), or
        -1. A group's versions are searched where they lie, sorted by valid_from as
        they were loaded, with no index: a warm partial cache answers from its own rows,
        whose times are read once."""
        validity = self.provider.validity
        if validity is None:
            raise ValueError(f"{self.provider.describe()} has no validity")
        table = answers.rows
        if not len(answers.offsets):
            return pick(self.versions(answers), groups, as_of, known)
        memo = self._times
        if memo is None or memo[0] is not table:
            times = TableTimes.of(table.column(validity.valid_from),
                                  None if validity.valid_to is None
                                  else table.column(validity.valid_to))
            memo = self._times = (table, times)
        return pick_in_place(memo[1], answers.offsets, groups, as_of, known,
                             lambda used: self._index_of(answers, used))

    def lookup(self, key: Key) -> tuple[Row, ...]:
        """Rows of one key."""
        key = self._check_key(key)
        return self.lookup_batch([key])[key]

    def _check_key(self, key: object) -> Key:
        if type(key) is not tuple or len(key) != self._arity:
            names = ", ".join(self.provider.key_columns)
            raise KeyKindError(f"a lookup key is a tuple of {self._arity} value(s) ({names}), "
                            f"got {type(key).__name__}: {shown(key)}")
        return key

    def _checked(self, keys: Iterable[Key]) -> list[Key]:
        """``keys`` as a list, each checked to be a hashable tuple of one value per key
        column (in C loops). Repeats stay: keys equal as Python objects may not be as
        keys (``True == 1``, and ``True`` is no key of an INT column)."""
        given = keys if isinstance(keys, list) else list(keys)
        if given and set(map(type, given)) != {tuple}:
            for key in given:
                self._check_key(key)
        if given and set(map(len, given)) != {self._arity}:
            for key in given:
                self._check_key(key)
        try:
            set(given)
        except TypeError:
            for key in given:
                try:
                    hash(key)
                except TypeError as exc:
                    raise KeyKindError(f"lookup keys must be hashable tuples of scalars, got "
                                    f"{shown(key)}: {exc}") from None
            raise
        return given
