"""The versions of a dimension's keys, and which one holds at a given time: the engine
of point-in-time lookups (issue 45), in numpy and pyarrow only.

Two steps, both vectorized over all rows and keys:

- `version_index` reads a table of versions (each row's key group, its ``valid_from``
  and ``valid_to``) under the source's bad-value policy into *pieces*: per key, disjoint
  half-open intervals ``[start, end)`` in ``start`` order, each pointing at the row that
  answers in it. A key whose versions overlap (bad history, rare) takes a slower path,
  a Python loop over its own versions only.
- `pick` finds, for each stream row (its key's group and its ``as_of`` time), the one
  row valid then, or -1: a binary search of each row's own key's pieces, all rows at
  once (``log2`` of a key's versions numpy steps).

Times are int64 microseconds (`instants`): a TIMESTAMP's since the epoch in UTC, a
TIMESTAMP_NTZ's since the epoch on the wall clock, a DATE's midnight on that clock.
Which of them may be compared is decided on the driver (`comparable`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from connectors.policy import BadValuePolicy
from spark_lookup.errors import BadValueError

__all__ = ["OPEN", "TableTimes", "VersionIndex", "comparable", "describer", "instants",
           "load_cutoff", "now_micros", "pick", "pick_in_place", "policy_of", "retained",
           "row_groups", "version_index"]

OPEN = np.iinfo(np.int64).max
"""The end of a version still valid (no ``valid_to``, or a NULL one)."""

_DAY_MICROS = 86_400_000_000
_TO_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}
_SHOWN_VERSIONS = 5  # versions a FAILFAST error lists


def comparable(as_of: T.DataType, version: T.DataType) -> bool:
    """Whether ``as_of`` values compare with a version column's without a time zone:
    instants with instants; wall-clock times and dates (at midnight) with each other."""
    if isinstance(as_of, T.TimestampType) or isinstance(version, T.TimestampType):
        return isinstance(as_of, T.TimestampType) and isinstance(version, T.TimestampType)
    wall = (T.TimestampNTZType, T.DateType)
    return isinstance(as_of, wall) and isinstance(version, wall)


def instants(array: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A TIMESTAMP, TIMESTAMP_NTZ or DATE column as int64 microseconds (0 where null)
    and whether each value is there.

    Raises
    ------
    TypeError
        For a column of another type.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if pa.types.is_timestamp(kind):
        raw = pc.cast(array, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        # Floor: a time before 1970 rounds down, as Spark's microseconds do.
        values = (np.floor_divide(raw, 1_000) if kind.unit == "ns"
                  else raw * _TO_MICROS[kind.unit])
    elif pa.types.is_date32(kind):
        days = pc.cast(array, pa.int32()).fill_null(0).to_numpy(zero_copy_only=False)
        values = days.astype(np.int64) * _DAY_MICROS
    elif pa.types.is_date64(kind):
        values = pc.cast(array, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False) * 1_000
    else:
        raise TypeError(f"a version time is a timestamp or a date, got {kind}")
    valid = (np.ones(len(array), dtype=bool) if not array.null_count
             else array.is_valid().to_numpy(zero_copy_only=False))
    return values.astype(np.int64, copy=False), valid


def now_micros(clock: Callable[[], float], wall_clock_zone: str | None) -> int:
    """The time ``clock`` reads (epoch seconds) as microseconds comparable with version
    columns: since the epoch in UTC (``wall_clock_zone`` None: TIMESTAMP columns), or on
    the wall clock of that zone (TIMESTAMP_NTZ and DATE columns)."""
    seconds = clock()
    if wall_clock_zone is None:
        return int(seconds * 1_000_000)
    wall = dt.datetime.fromtimestamp(seconds, ZoneInfo(wall_clock_zone)).replace(tzinfo=None)
    return (wall - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


def load_cutoff(clock: Callable[[], float], retention: dt.timedelta, instants: bool) -> int:
    """The time (microseconds, as `instants` reads version columns) before which a
    version that ended may be dropped at load under ``retention``.

    Against wall-clock versions (TIMESTAMP_NTZ, DATE) a load knows no session time zone,
    so it reads UTC's wall clock a day early: earlier than any zone's, so a join's cutoff
    (on its session's wall clock, `PointInTime`) is never before the load's and a row
    in retention never misses a version the load dropped."""
    slack = 0 if instants else _DAY_MICROS
    return int(clock() * 1_000_000) - retention // dt.timedelta(microseconds=1) - slack


def retained(group: np.ndarray | None, valid_from: pa.Array | pa.ChunkedArray,
             valid_to: pa.Array | pa.ChunkedArray | None, cutoff: int) -> np.ndarray:
    """Which rows of a table of versions to keep under a retention: all but the
    versions that ended before ``cutoff`` (their own ``valid_to``, or without one the
    next version of their key by ``group``, each row's key group, -1: none). A version
    still valid never ended; a NULL ``valid_from`` or an inverted interval is kept for
    the source's bad-value policy to judge."""
    start, has_start = instants(valid_from)
    if valid_to is not None:
        end, has_end = instants(valid_to)
        ended: np.ndarray = has_start & has_end & (end > start) & (end < cutoff)
        return ~ended
    if group is None:
        raise ValueError("without valid_to, a version's end is its key's next start: "
                         "give each row's key group")
    rows = np.flatnonzero((group >= 0) & has_start)
    order = rows[np.lexsort((start[rows], group[rows]))]
    g, s = group[order], start[order]
    drop = np.zeros(len(group), dtype=bool)
    if len(order) > 1:
        # Runs of equal (key, start) end together, where the key's next later version
        # starts; the key's last run never ends.
        first = np.ones(len(order), dtype=bool)
        first[1:] = (g[1:] != g[:-1]) | (s[1:] != s[:-1])
        run = np.cumsum(first) - 1
        run_g, run_s = g[first], s[first]
        ended = np.zeros(len(run_g), dtype=bool)
        ended[:-1] = (run_g[1:] == run_g[:-1]) & (run_s[1:] < cutoff)
        drop[order[ended[run]]] = True
    return ~drop


def policy_of(reader: object) -> BadValuePolicy:
    """The bad-value policy of a lookup function or source (``bad_value_mode``: the
    connectors'); PERMISSIVE for one that has none."""
    mode = getattr(reader, "bad_value_mode", None)
    return mode if isinstance(mode, BadValuePolicy) else BadValuePolicy.PERMISSIVE


def group_rows(offsets: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the groups named in ``groups`` (an answer's, per key; -1: none) and
    each one's group, in group order: what a point-in-time join searches, however many
    other rows the answer's table holds (a partial cache answers from all of its own)."""
    if not len(offsets):  # one row a group: row g is group g
        used = np.unique(groups[groups >= 0])
        return used, used
    # The groups used, sorted: marked in a flag per group (a cache's slots), a tenth of
    # what np.unique's hashing costs for the ten thousand keys of a batch.
    marked = np.zeros(len(offsets), dtype=bool)
    marked[groups[groups >= 0]] = True
    used = np.flatnonzero(marked)
    starts = offsets[used].astype(np.int64)
    counts = offsets[used + 1].astype(np.int64) - starts
    rows = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
        starts - np.cumsum(counts) + counts, counts)
    return rows, np.repeat(used, counts)


def row_groups(offsets: np.ndarray, num_rows: int, groups: np.ndarray | None = None
               ) -> np.ndarray:
    """The group of each of ``num_rows`` rows of an answer in the form of
    `cache.answers.Answers` (-1: a row of no group); empty ``offsets``: row ``i`` is
    group ``i`` (one row a group). With ``groups`` (the answer's, per key), only the
    groups named there: a cache's ``offsets`` may run past its last group."""
    if not len(offsets):
        return np.arange(num_rows, dtype=np.int64)
    found = np.full(num_rows, -1, dtype=np.int64)
    if groups is None:
        first, last = int(offsets[0]), int(offsets[-1])
        found[first:last] = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64),
                                      np.diff(offsets))
        return found
    # The groups used, sorted: marked in a flag per group (a cache's slots), a tenth of
    # what np.unique's hashing costs for the ten thousand keys of a batch.
    marked = np.zeros(len(offsets), dtype=bool)
    marked[groups[groups >= 0]] = True
    used = np.flatnonzero(marked)
    starts = offsets[used].astype(np.int64)
    counts = offsets[used + 1].astype(np.int64) - starts
    # Row numbers of each used group's range, end to end.
    rows = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
        starts - np.cumsum(counts) + counts, counts)
    found[rows] = np.repeat(used, counts)
    return found


@dataclass(frozen=True)
class VersionIndex:
    """Disjoint validity pieces per key group, sorted by (group, start): piece ``j``
    answers ``row[j]`` for times in ``[start[j], end[j])`` of group ``group[j]``."""

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    row: np.ndarray
    first: np.ndarray
    """``first[g]``: the first piece of group ``g``, for ``g`` from 0 to ``G``, one past
    the largest group (``first[G] == first[G + 1]``, the number of pieces: a group past
    the largest has none). Where `pick` searches."""
    depth: int
    """The most pieces of one group: how many halvings a search takes."""
    row_is_piece: bool
    """Whether ``row[j] == j`` (a full snapshot of good history): no lookup of rows."""
    bad: int = 0
    """Versions the policy found bad (counted once, where the index is built)."""

    @classmethod
    def of(cls, group: np.ndarray, start: np.ndarray, end: np.ndarray, row: np.ndarray,
           bad: int = 0) -> VersionIndex:
        """Index pieces given sorted by (group, start)."""
        counts = np.bincount(group) if len(group) else np.zeros(0, dtype=np.int64)
        first = np.zeros(len(counts) + 2, dtype=np.int64)
        np.cumsum(counts, out=first[1:-1])
        first[-1] = first[-2]
        depth = int(counts.max()) if len(counts) else 0
        row_is_piece = bool(np.array_equal(row, np.arange(len(row))))
        return cls(group, start, end, row, first, depth, row_is_piece, bad)


def pick(index: VersionIndex, groups: np.ndarray, as_of: np.ndarray,
         as_of_valid: np.ndarray | None = None) -> np.ndarray:
    """The row valid at ``as_of[i]`` among group ``groups[i]``'s, or -1 (a group of -1,
    a null ``as_of``, a time before the key's first version or in a gap of its history).

    Vectorized: each row searches only its own group's pieces (from ``first``), all
    rows at once, in ``log2(depth)`` halvings (four for ten versions a key). A binary
    search of the whole index instead (a million pieces) went to main memory at each
    of its twenty steps, for every row: fourteen times a plain full-cache join's time.
    """
    count = len(groups)
    if not len(index.group) or not count:
        return np.full(count, -1, dtype=np.int64)
    pieces = len(index.group)
    # np.maximum and np.minimum: np.clip reads the dtype's limits on every call.
    at_group = np.minimum(np.maximum(groups, 0), len(index.first) - 2)
    low = index.first[at_group]
    high = index.first[at_group + 1]
    # low plus the number of the group's pieces starting at or before as_of (starts
    # increase within a group): the largest step first, each taken where it stays in
    # the group and the last piece it passes starts at or before as_of.
    found = low.copy()
    starts = index.start
    for shift in range(index.depth.bit_length() - 1, -1, -1):
        candidate = found + (1 << shift)
        take = candidate <= high
        take &= starts[np.minimum(candidate - 1, pieces - 1)] <= as_of
        # Adding the step where taken: a third of what assigning through a mask costs.
        found += take.astype(np.int64) << shift
    at = np.maximum(found - 1, 0)
    ok = (groups >= 0) & (found > low) & (as_of < index.end[at])
    if as_of_valid is not None:
        ok &= as_of_valid
    return np.where(ok, at if index.row_is_piece else index.row[at], -1)


@dataclass(frozen=True)
class TableTimes:
    """The version times of a table whose groups are ranges of rows, each sorted by
    valid_from (a partial cache's, a loaded answer's), read once: starts, own ends
    (`OPEN`: none), and running counts of the rows that make a group's history need
    the index (a NULL or inverted version, or one sharing time with the next row)."""

    start: np.ndarray
    end: np.ndarray | None  # None: no valid_to (a version ends where the next starts)
    bad: np.ndarray  # bool: a NULL or inverted version
    odd: np.ndarray  # int32 prefix: rows before row r bad or sharing time with the one before

    @classmethod
    def of(cls, valid_from: pa.Array | pa.ChunkedArray,
           valid_to: pa.Array | pa.ChunkedArray | None) -> TableTimes:
        start, has_start = instants(valid_from)
        bad = ~has_start
        end: np.ndarray | None = None
        if valid_to is not None:
            to, has_to = instants(valid_to)
            end = np.where(has_to, to, OPEN)
            bad |= has_to & (to <= start)
        flag = bad.copy()
        if len(start) > 1:
            # Sharing time with the row before: an equal start, or (with valid_to) an
            # overlap. Across two groups a false alarm, left out by the group's bounds.
            shared = start[1:] == start[:-1]
            if end is not None:
                shared |= start[1:] < end[:-1]
            flag[1:] |= shared
        odd = np.zeros(len(start) + 1, dtype=np.int32)
        np.cumsum(flag, out=odd[1:])
        return cls(start, end, bad, odd)


def pick_in_place(times: TableTimes, offsets: np.ndarray, groups: np.ndarray,
                  as_of: np.ndarray, as_of_valid: np.ndarray | None,
                  index_of: Callable[[np.ndarray], VersionIndex]) -> np.ndarray:
    """`pick` over a table's own rows (group ``g``: rows ``offsets[g]`` to
    ``offsets[g + 1]``, sorted by valid_from), with no index: a search within each
    row's group. Groups whose history is odd (see `TableTimes`) are picked from
    ``index_of(their rows)`` instead, as PERMISSIVE reads them."""
    count = len(groups)
    member = groups >= 0
    if not member.any() or not len(times.start):
        return np.full(count, -1, dtype=np.int64)
    at = np.where(member, groups, 0)
    low = offsets.take(at).astype(np.int64, copy=False)
    high = np.where(member, offsets.take(at + 1), low).astype(np.int64, copy=False)
    # Odd: its first row bad, or any later row bad or sharing time with the one before
    # (the first row's relation to the row before is another group's).
    odd = ((times.odd.take(high) - times.odd.take(np.minimum(low + 1, high)) > 0)
           | times.bad.take(low, mode="clip"))
    found = low.copy()
    start = times.start
    depth = int((high - low).max()) if count else 0
    for shift in range(depth.bit_length() - 1, -1, -1):
        candidate = found + (1 << shift)
        take = candidate <= high
        take &= start.take(candidate - 1, mode="clip") <= as_of
        found += take.astype(np.int64) << shift
    row = np.maximum(found - 1, 0)
    if times.end is not None:
        end = times.end.take(row, mode="clip")
    else:
        end = np.where(row + 1 < high, start.take(row + 1, mode="clip"), OPEN)
    ok = member & (found > low) & (as_of < end)
    if as_of_valid is not None:
        ok &= as_of_valid
    picked = np.where(ok, row, -1)
    if odd.any():
        rows_odd = np.flatnonzero(odd & member)
        index = index_of(np.unique(groups[rows_odd]))
        picked[rows_odd] = pick(index, groups[rows_odd], as_of[rows_odd],
                                None if as_of_valid is None else as_of_valid[rows_odd])
    return picked


@dataclass(frozen=True)
class _Sorted:
    """The usable versions (a valid_from, not inverted) sorted by (group, valid_from):
    their row numbers, groups, starts and own ends (valid_to, `OPEN` without one)."""

    rows: np.ndarray
    group: np.ndarray
    start: np.ndarray
    own_end: np.ndarray | None  # None: no valid_to column (ends at the next version)


def _sorted_versions(group: np.ndarray, start: np.ndarray, usable: np.ndarray,
                     own_end: np.ndarray | None) -> _Sorted:
    rows = np.flatnonzero(usable)
    g, s = group[rows], start[rows]
    # A full snapshot and a partial cache keep each key's versions in order: no sort.
    # (Ties of valid_from are sorted below, so that their order never depends on the
    # rows'.)
    in_order = bool(np.all((g[1:] > g[:-1]) | ((g[1:] == g[:-1]) & (s[1:] > s[:-1]))))
    if not in_order:
        # Ties of valid_from: by valid_to (the longer last), then by row (stable).
        keys = (s, g) if own_end is None else (own_end[rows], s, g)
        order = np.lexsort(keys)
        rows, g, s = rows[order], g[order], s[order]
    return _Sorted(rows, g, s, None if own_end is None else own_end[rows])


def _next_starts(group: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Each version's end when versions end where the next of their key starts."""
    end = np.full(len(start), OPEN, dtype=np.int64)
    if len(start) > 1:
        end[:-1] = np.where(group[1:] == group[:-1], start[1:], OPEN)
    return end


def _overlapping(versions: _Sorted, end: np.ndarray) -> np.ndarray:
    """Which versions share time with another of their key: a later one starting before
    they end, an earlier one ending after they start, or an equal start."""
    g, s = versions.group, versions.start
    over = np.zeros(len(s), dtype=bool)
    if len(s) < 2:
        return over
    same = g[1:] == g[:-1]
    ties = same & (s[1:] == s[:-1])
    over[1:] |= ties
    over[:-1] |= ties
    if versions.own_end is not None:
        after = same & (s[1:] < end[:-1])
        # Unless a version ends after the next of its key starts, a key's ends increase
        # (each after its start): the latest end before a version is the one before it,
        # checked already. Only then the latest end of the key's earlier versions.
        if after.any():
            over[:-1] |= after
            reach = pd.Series(end).groupby(g, sort=False).cummax().to_numpy()
            over[1:] |= same & (s[1:] < reach[:-1])
    return over


def _resolved(group: np.ndarray, start: np.ndarray, end: np.ndarray, rows: np.ndarray
              ) -> tuple[list[int], list[int], list[int], list[int]]:
    """Pieces of one key whose versions overlap, in order: at each time, of the versions
    valid then, the one with the latest valid_from (then the latest in sort order)."""
    bounds = sorted({*start.tolist(), *(e for e in end.tolist() if e != OPEN)})
    pieces: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
    starts, ends = start.tolist(), end.tolist()
    for i, low in enumerate(bounds):
        high = bounds[i + 1] if i + 1 < len(bounds) else OPEN
        winner = -1
        for j, (s, e) in enumerate(zip(starts, ends, strict=True)):
            if s <= low < e:
                winner = j  # sorted by start: a later j has the later (or equal) start
        if winner < 0:
            continue
        if pieces[3] and pieces[3][-1] == int(rows[winner]) and pieces[2][-1] == low:
            pieces[2][-1] = high  # the same version goes on: one piece
            continue
        pieces[0].append(int(group[0]))
        pieces[1].append(low)
        pieces[2].append(high)
        pieces[3].append(int(rows[winner]))
    return pieces


def version_index(group: np.ndarray, valid_from: pa.Array | pa.ChunkedArray,
                  valid_to: pa.Array | pa.ChunkedArray | None,
                  policy: BadValuePolicy = BadValuePolicy.PERMISSIVE,
                  describe: _Describer | None = None) -> VersionIndex:
    """The validity pieces of a table of versions under ``policy``.

    ``group`` is each row's key group (-1: a row to leave out); ``valid_from`` and
    ``valid_to`` (None: no such column; each version then ends where the next of its
    key starts) are the rows' version columns. Bad history is a NULL valid_from, a
    valid_to at or before valid_from, and versions of one key that overlap:

    - ``PERMISSIVE``: the first two match nothing; where versions overlap, the one with
      the latest valid_from wins. Each bad version is counted (``bad``).
    - ``DROPMALFORMED``: bad versions are left out (and counted); without valid_to the
      versions left end where the next one left starts.
    - ``FAILFAST``: `BadValueError` naming the table, key and versions (``describe``).

    Raises
    ------
    BadValueError
        Under ``FAILFAST``, for the first key with bad history.
    """
    member = group >= 0
    kept = np.flatnonzero(member)
    if len(kept) < len(group):
        # Rows of no group (a partial cache's rows of the keys not probed): the index of
        # the others, their row numbers mapped back.
        taken = pa.array(kept, type=pa.int64())
        index = version_index(
            group[kept], valid_from.take(taken),
            None if valid_to is None else valid_to.take(taken), policy,
            None if describe is None else describe.taken(taken))
        row = kept[index.row]
        return replace(index, row=row,
                       row_is_piece=bool(np.array_equal(row, np.arange(len(row)))))
    start, has_start = instants(valid_from)
    return index_of_times(group, start, has_start,
                          None if valid_to is None else instants(valid_to), policy, describe)


def index_of_times(group: np.ndarray, start: np.ndarray, has_start: np.ndarray,
                   to: tuple[np.ndarray, np.ndarray] | None,
                   policy: BadValuePolicy = BadValuePolicy.PERMISSIVE,
                   describe: _Describer | None = None) -> VersionIndex:
    """`version_index` of versions whose times are microseconds already (`instants`:
    values and presence; ``to`` None: no valid_to column); every row in a group."""
    member = group >= 0
    null_start = member & ~has_start
    own_end: np.ndarray | None = None
    inverted = np.zeros(len(group), dtype=bool)
    if to is not None:
        to_values, has_to = to
        own_end = np.where(has_to, to_values, OPEN)
        inverted = member & has_start & has_to & (to_values <= start)
    versions = _sorted_versions(group, start, member & has_start & ~inverted, own_end)
    end = versions.own_end if versions.own_end is not None else _next_starts(
        versions.group, versions.start)
    over = _overlapping(versions, end)
    bad_rows = np.flatnonzero(null_start | inverted)
    bad = len(bad_rows) + int(np.count_nonzero(over))
    if bad and policy is BadValuePolicy.FAILFAST:
        first = int(np.concatenate((bad_rows, versions.rows[over])).min())
        raise _failure(first, group, start, has_start, own_end, inverted, describe)
    if not over.any():
        return VersionIndex.of(versions.group, versions.start, end, versions.rows, bad)
    keep = ~over
    if policy is BadValuePolicy.DROPMALFORMED:
        g, s = versions.group[keep], versions.start[keep]
        e = end[keep] if versions.own_end is not None else _next_starts(g, s)
        return VersionIndex.of(g, s, e, versions.rows[keep], bad)
    # PERMISSIVE: keys without overlaps as they are; the others piece by piece.
    troubled = np.isin(versions.group, np.unique(versions.group[over]))
    clean = ~troubled
    parts = [[versions.group[clean]], [versions.start[clean]], [end[clean]],
             [versions.rows[clean]]]
    where = np.flatnonzero(troubled)
    cuts = np.flatnonzero(np.diff(versions.group[where])) + 1
    for span in np.split(where, cuts):
        resolved = _resolved(versions.group[span], versions.start[span], end[span],
                             versions.rows[span])
        for part, values in zip(parts, resolved, strict=True):
            part.append(np.asarray(values, dtype=np.int64))
    g, s, e, r = (np.concatenate(part) for part in parts)
    order = np.lexsort((s, g))
    return VersionIndex.of(g[order], s[order], e[order], r[order], bad)


class _Describer:
    """How a FAILFAST error names the table, a row's key and a version's times."""

    def __init__(self, table: str, keys: Sequence[pa.Array | pa.ChunkedArray],
                 valid_from: pa.Array | pa.ChunkedArray,
                 valid_to: pa.Array | pa.ChunkedArray | None) -> None:
        self.table = table
        self.keys = keys
        self.valid_from = valid_from
        self.valid_to = valid_to

    def taken(self, rows: pa.Array) -> _Describer:
        """The describer of ``rows`` only, in their order."""
        return _Describer(self.table, [column.take(rows) for column in self.keys],
                          self.valid_from.take(rows),
                          None if self.valid_to is None else self.valid_to.take(rows))

    def key(self, row: int) -> str:
        values = [column[row].as_py() for column in self.keys]
        return repr(values[0]) if len(values) == 1 else repr(tuple(values))

    def version(self, row: int) -> str:
        to = "" if self.valid_to is None else f", {self.valid_to[row].as_py()}"
        return f"[{self.valid_from[row].as_py()}{to})"


def describer(table: str, rows: pa.Table, key_columns: Sequence[str],
              valid_from: str, valid_to: str | None) -> _Describer:
    """What names a FAILFAST error's table, key and versions, from ``rows``."""
    return _Describer(table, [rows.column(name) for name in key_columns],
                      rows.column(valid_from),
                      None if valid_to is None else rows.column(valid_to))


def _failure(row: int, group: np.ndarray, start: np.ndarray, has_start: np.ndarray,
             own_end: np.ndarray | None, inverted: np.ndarray,
             describe: _Describer | None) -> BadValueError:
    if not has_start[row]:
        why = "a version with a NULL valid_from"
    elif inverted[row]:
        why = "a version ending at or before it starts"
    else:
        why = "versions overlapping" if own_end is not None else "versions starting together"
    if describe is None:
        return BadValueError(f"bad version history: {why} (mode FAILFAST)")
    mine = np.flatnonzero(group == group[row])
    mine = mine[np.argsort(start[mine], kind="stable")]
    shown = ", ".join(describe.version(int(i)) for i in mine[:_SHOWN_VERSIONS])
    more = f" and {len(mine) - _SHOWN_VERSIONS} more" if len(mine) > _SHOWN_VERSIONS else ""
    return BadValueError(
        f"table {describe.table!r}, key {describe.key(row)}: {why}; its versions "
        f"{shown}{more} (mode FAILFAST)")
