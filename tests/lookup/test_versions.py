"""lookup.versions against a plain Python reference: which version of a key holds at a
time, under each bad-value policy (issue 45)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from connectors.policy import BadValuePolicy
from lookup.versions import (
    comparable,
    describer,
    instants,
    load_cutoff,
    pick,
    retained,
    row_groups,
    version_index,
)
from spark_lookup.errors import BadValueError

Version = tuple[int, int | None, int | None]  # (group, valid_from, valid_to)
INF = float("inf")


def _ends(versions: list[Version], rows: list[int], with_to: bool) -> dict[int, float]:
    """Each usable row's end: its valid_to (None: open), or without the column the next
    strictly later valid_from of its key among ``rows``."""
    ends: dict[int, float] = {}
    for i in rows:
        g, start, to = versions[i]
        if with_to:
            ends[i] = INF if to is None else to
        else:
            later = [versions[j][1] for j in rows if versions[j][0] == g
                     and versions[j][1] > start]  # type: ignore[operator]
            ends[i] = min(later, default=INF)  # type: ignore[type-var]
    return ends


def reference(versions: list[Version], with_to: bool, policy: BadValuePolicy,
              queries: list[tuple[int, int | None]]) -> tuple[list[int], int]:
    """The row answering each (group, time) query, or -1; and the bad versions."""
    usable = [i for i, (_, s, t) in enumerate(versions)
              if s is not None and not (with_to and t is not None and t <= s)]
    bad = len(versions) - len(usable)
    ends = _ends(versions, usable, with_to)
    overlapping = {i for i in usable for j in usable if i != j
                   and versions[i][0] == versions[j][0]
                   and max(versions[i][1], versions[j][1])  # type: ignore[type-var]
                   < min(ends[i], ends[j])}
    bad += len(overlapping)
    if bad and policy is BadValuePolicy.FAILFAST:
        raise BadValueError("bad")
    if policy is BadValuePolicy.DROPMALFORMED:
        usable = [i for i in usable if i not in overlapping]
        ends = _ends(versions, usable, with_to)
    answers = []
    for g, t in queries:
        live = [i for i in usable if t is not None and versions[i][0] == g
                and versions[i][1] <= t < ends[i]]  # type: ignore[operator]
        # The latest valid_from wins; ties by the later valid_to, then the later row.
        answers.append(max(live, key=lambda i: (versions[i][1], ends[i] if with_to else 0, i))
                       if live else -1)
    return answers, bad


def run(versions: list[Version], with_to: bool, policy: BadValuePolicy,
        queries: list[tuple[int, int | None]]) -> tuple[list[int], int]:
    ts = pa.timestamp("us", tz="UTC")
    group = np.array([g for g, _, _ in versions], dtype=np.int64)
    starts = pa.array([s for _, s, _ in versions], ts)
    tos = pa.array([t for _, _, t in versions], ts) if with_to else None
    index = version_index(group, starts, tos, policy)
    as_of, valid = instants(pa.array([t for _, t in queries], ts))
    found = pick(index, np.array([g for g, _ in queries], dtype=np.int64), as_of, valid)
    return found.tolist(), index.bad


def _queries(groups: int) -> list[tuple[int, int | None]]:
    return [(g, t) for g in range(-1, groups + 1) for t in [*range(-1, 13), None]]


def _check(versions: list[Version], with_to: bool, policy: BadValuePolicy) -> None:
    queries = _queries(4)
    try:
        expected = reference(versions, with_to, policy, queries)
    except BadValueError:
        with pytest.raises(BadValueError):
            run(versions, with_to, policy, queries)
        return
    assert run(versions, with_to, policy, queries) == expected


times = st.one_of(st.none(), st.integers(0, 10))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), times, times), max_size=12), st.booleans(),
       st.sampled_from(list(BadValuePolicy)))
def test_pick_matches_the_reference(versions: list[Version], with_to: bool,
                                    policy: BadValuePolicy) -> None:
    _check(versions, with_to, policy)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10)), max_size=12,
                unique=True), st.booleans(), st.sampled_from(list(BadValuePolicy)))
def test_clean_histories_match_the_reference(starts: list[tuple[int, int]], chained: bool,
                                             policy: BadValuePolicy) -> None:
    # SCD2 as written by a warehouse: each version ends where the next starts, the last open.
    by_key = sorted(starts)
    versions: list[Version] = []
    for i, (g, s) in enumerate(by_key):
        following = by_key[i + 1] if i + 1 < len(by_key) else None
        to = following[1] if following is not None and following[0] == g else None
        versions.append((g, s, to if chained else None))
    versions.reverse()  # rows in any order
    _check(versions, chained, policy)
    assert run(versions, chained, policy, [])[1] == 0


def test_boundaries_open_ends_and_gaps() -> None:
    versions: list[Version] = [(0, 2, 5), (0, 5, 8), (0, 10, None), (1, 3, None)]
    queries = [(0, 1), (0, 2), (0, 4), (0, 5), (0, 8), (0, 9), (0, 10), (0, 10**6),
               (1, 2), (1, 3), (0, None), (-1, 5)]
    found, bad = run(versions, True, BadValuePolicy.PERMISSIVE, queries)
    # Before the first version: none; at valid_from: it; at valid_to: the next or none.
    assert found == [-1, 0, 0, 1, -1, -1, 2, 2, -1, 3, -1, -1]
    assert bad == 0


def test_overlaps_latest_valid_from_wins_under_permissive() -> None:
    versions: list[Version] = [(0, 0, 10), (0, 2, 5)]
    found, bad = run(versions, True, BadValuePolicy.PERMISSIVE,
                     [(0, 1), (0, 2), (0, 4), (0, 5), (0, 9), (0, 10)])
    assert found == [0, 1, 1, 0, 0, -1]  # the long version holds again after the short
    assert bad == 2
    found, bad = run(versions, True, BadValuePolicy.DROPMALFORMED, [(0, 1), (0, 4)])
    assert (found, bad) == ([-1, -1], 2)


def test_inverted_and_null_versions_match_nothing() -> None:
    versions: list[Version] = [(0, 5, 5), (0, None, 9), (0, 6, 3), (0, 1, 4)]
    for policy in (BadValuePolicy.PERMISSIVE, BadValuePolicy.DROPMALFORMED):
        found, bad = run(versions, True, policy, [(0, 1), (0, 5), (0, 6)])
        assert (found, bad) == ([3, -1, -1], 3)


def test_failfast_names_table_key_and_versions() -> None:
    ts = pa.timestamp("us", tz="UTC")
    rows = pa.table({
        "country": ["NL", "NL", "FR"], "code": [1, 1, 1],
        "valid_from": pa.array([0, 5_000_000, 0], ts),
        "valid_to": pa.array([10_000_000, None, None], ts)})
    groups = np.array([0, 0, 1], dtype=np.int64)
    name = describer("rates", rows, ["country", "code"], "valid_from", "valid_to")
    with pytest.raises(BadValueError, match=r"table 'rates', key \('NL', 1\): versions "
                                            r"overlapping; its versions \[1970"):
        version_index(groups, rows.column("valid_from"), rows.column("valid_to"),
                      BadValuePolicy.FAILFAST, name)
    clean = version_index(groups[2:], rows.column("valid_from").slice(2),
                          rows.column("valid_to").slice(2), BadValuePolicy.FAILFAST)
    assert clean.bad == 0


def test_instants_of_dates_and_wall_clock_times() -> None:
    day = dt.date(2024, 3, 1)
    midnight = dt.datetime(2024, 3, 1)
    dates, dates_ok = instants(pa.array([day, None], pa.date32()))
    wall, _ = instants(pa.array([midnight], pa.timestamp("us")))
    nanos, _ = instants(pa.array([-1], pa.timestamp("ns")))
    assert dates[0] == wall[0]
    assert dates_ok.tolist() == [True, False]
    assert nanos[0] == -1  # floored, as Spark's microseconds are


@pytest.mark.parametrize(("as_of", "version", "ok"), [
    (T.TimestampType(), T.TimestampType(), True),
    (T.TimestampNTZType(), T.TimestampNTZType(), True),
    (T.TimestampNTZType(), T.DateType(), True),
    (T.DateType(), T.DateType(), True),
    (T.DateType(), T.TimestampNTZType(), True),
    (T.TimestampType(), T.TimestampNTZType(), False),
    (T.TimestampType(), T.DateType(), False),
    (T.DateType(), T.TimestampType(), False),
    (T.StringType(), T.DateType(), False),
])
def test_comparable_without_guessing_a_zone(as_of: T.DataType, version: T.DataType,
                                            ok: bool) -> None:
    assert comparable(as_of, version) is ok


def test_row_groups_of_an_answer() -> None:
    assert row_groups(np.array([1, 3, 3, 4]), 6).tolist() == [-1, 0, 0, 2, -1, -1]
    assert row_groups(np.zeros(0, dtype=np.int64), 3).tolist() == [0, 1, 2]
    # A cache's offsets may run on past its last group: only the groups named count.
    offsets = np.array([0, 2, 3, 5, 0, 0])
    assert row_groups(offsets, 5, np.array([2, -1, 0])).tolist() == [0, 0, -1, 2, 2]


def _micros_array(values: list[int | None]) -> pa.Array:
    return pa.array(values, pa.timestamp("us", tz="UTC"))


@given(st.lists(st.tuples(st.integers(0, 2), st.one_of(st.none(), st.integers(0, 30)),
                          st.one_of(st.none(), st.integers(0, 30))), max_size=12),
       st.integers(0, 30), st.booleans())
@settings(max_examples=200, deadline=None)
def test_retention_drops_only_versions_that_ended_before_the_cutoff(
        versions: list[Version], cutoff: int, with_to: bool) -> None:
    group = np.array([g for g, _, _ in versions], dtype=np.int64)
    starts = _micros_array([s for _, s, _ in versions])
    ends = _micros_array([e for _, _, e in versions]) if with_to else None
    keep = retained(group, starts, ends, cutoff)
    rows = [i for i, (_, s, e) in enumerate(versions)
            if s is not None and not (with_to and e is not None and e <= s)]
    end_of = _ends(versions, rows, with_to)
    for i in range(len(versions)):
        dropped = i in end_of and end_of[i] < cutoff
        assert keep[i] == (not dropped), (i, versions, cutoff)
    # What a time at or after the cutoff picks is the same with the dropped versions gone.
    times = np.arange(cutoff, 32, dtype=np.int64)
    for g in range(3):
        groups = np.full(len(times), g, dtype=np.int64)
        full = version_index(group, starts, ends)
        kept = np.flatnonzero(keep)
        take = pa.array(kept, type=pa.int64())
        part = version_index(group[kept], starts.take(take),
                             None if ends is None else ends.take(take))
        before = pick(full, groups, times)
        after = pick(part, groups, times)
        assert [kept[r] if r >= 0 else -1 for r in after.tolist()] == before.tolist()


def test_the_load_cutoff_of_wall_clock_versions_is_a_day_early() -> None:
    clock = lambda: 1_000.0  # noqa: E731
    week = dt.timedelta(days=7)
    assert load_cutoff(clock, week, True) == 1_000_000_000 - week // dt.timedelta(
        microseconds=1)
    assert load_cutoff(clock, week, False) == load_cutoff(clock, week, True) - 86_400_000_000


def test_retention_without_groups_needs_valid_to() -> None:
    with pytest.raises(ValueError, match="key group"):
        retained(None, _micros_array([1]), None, 5)
    assert retained(None, _micros_array([1, 1, 1]), _micros_array([3, None, 9]), 5).tolist() == [
        False, True, True]


def test_deep_histories_and_rows_of_no_group_against_a_direct_search() -> None:
    # Keys of 1 to 1,000 versions (the search halves each key's own versions: depths
    # that are and are not powers of two), a key with none, gaps, rows of no group (-1:
    # a partial cache's rows of keys not probed), all in shuffled order.
    rng = np.random.default_rng(45)
    counts = [1, 2, 3, 7, 8, 9, 300, 1000, 0, 5]
    versions: list[Version] = []
    for g, n in enumerate(counts):
        starts = np.sort(rng.choice(10**7, n, replace=False)).tolist()
        for i, start in enumerate(starts):
            following = starts[i + 1] if i + 1 < n else None
            gap = following is not None and rng.random() < 0.2
            end = None if following is None else (
                start + (following - start) // 2 + 1 if gap else following)
            versions.append((g, start, end))
    versions += [(-1, int(s), None) for s in rng.integers(0, 10**7, 200)]
    order = rng.permutation(len(versions))
    versions = [versions[i] for i in order]
    times = [t for _, s, e in versions if s is not None
             for t in (s, e, s - 1) if t is not None]
    picked = zip(rng.integers(-1, len(counts) + 2, 4000), rng.choice(times, 4000), strict=True)
    queries: list[tuple[int, int | None]] = [(int(g), int(t)) for g, t in picked]
    queries += [(0, None), (7, None)]
    expected = []
    for g, t in queries:
        live = [i for i, (vg, s, e) in enumerate(versions) if g >= 0 and vg == g
                and t is not None and s <= t and (e is None or t < e)]  # type: ignore[operator]
        assert len(live) <= 1
        expected.append(live[0] if live else -1)
    found, bad = run(versions, True, BadValuePolicy.PERMISSIVE, queries)
    assert found == expected
    assert bad == 0
    assert sum(f >= 0 for f in found) > 1000


def test_a_snapshot_in_order_answers_its_own_rows() -> None:
    # A full snapshot's good history: piece j is row j, answered with no lookup of rows.
    ts = pa.timestamp("us", tz="UTC")
    group = np.array([0, 0, 0, 1, 2, 2], dtype=np.int64)
    starts = pa.array([1, 5, 9, 2, 3, 4], ts)
    index = version_index(group, starts, None)
    assert index.row_is_piece
    assert index.first.tolist() == [0, 3, 4, 6, 6]
    assert index.depth == 3
    found = pick(index, np.array([0, 0, 0, 0, 1, 2, 2, 3, -1], dtype=np.int64),
                 np.array([0, 1, 8, 100, 2, 3, 10, 5, 5], dtype=np.int64))
    assert found.tolist() == [-1, 0, 1, 2, 3, 4, 5, -1, -1]
    # Rows of no group before them (a partial cache's other keys): their own row numbers.
    after = version_index(np.concatenate(([-1, -1], group)),
                          pa.concat_arrays([pa.array([7, 8], ts), starts]), None)
    assert not after.row_is_piece
    assert pick(after, np.array([0, 2], dtype=np.int64),
                np.array([6, 3], dtype=np.int64)).tolist() == [3, 6]
    shuffled = version_index(group[::-1].copy(), starts[::-1], None)
    assert not shuffled.row_is_piece
    assert pick(shuffled, np.array([0, 2], dtype=np.int64),
                np.array([6, 3], dtype=np.int64)).tolist() == [4, 1]


@given(st.lists(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 40)),
                                   st.one_of(st.none(), st.integers(0, 40))),
                         max_size=6), max_size=8),
       st.booleans(), st.lists(st.tuples(st.integers(-1, 8), st.integers(-2, 44)),
                               min_size=1, max_size=40))
@settings(max_examples=300, deadline=None)
def test_a_search_in_place_picks_what_the_index_picks(
        groups_versions: list[list[tuple[int | None, int | None]]], with_to: bool,
        queries: list[tuple[int, int]]) -> None:
    from lookup.versions import TableTimes, index_of_times, instants, pick_in_place

    # A partial cache's table: each group's versions a range of rows, sorted by
    # valid_from as loads leave them (NULL starts first), some histories bad.
    rows: list[tuple[int, int | None, int | None]] = []
    offsets = [0]
    for g, versions in enumerate(groups_versions):
        ordered = sorted(versions, key=lambda v: (-1 if v[0] is None else v[0]))
        rows += [(g, s, e) for s, e in ordered]
        offsets.append(len(rows))
    starts = pa.array([s for _, s, _ in rows], pa.timestamp("us", tz="UTC"))
    ends = pa.array([e for _, _, e in rows], pa.timestamp("us", tz="UTC")) if with_to else None
    table_offsets = np.array(offsets, dtype=np.int64)
    groups = np.array([g if g < len(groups_versions) else -1 for g, _ in queries],
                      dtype=np.int64)
    times = np.array([t for _, t in queries], dtype=np.int64)
    known = np.array([t >= -1 for _, t in queries], dtype=bool)
    group_of_row = np.array([g for g, _, _ in rows], dtype=np.int64)
    start, has_start = instants(starts)
    full = index_of_times(group_of_row, start, has_start,
                          None if ends is None else instants(ends))

    def index_of(used: np.ndarray) -> object:
        return full  # the whole table's index answers any of its groups

    expected = pick(full, groups, times, known)
    got = pick_in_place(TableTimes.of(starts, ends), table_offsets, groups, times, known,
                        index_of)  # type: ignore[arg-type]
    assert got.tolist() == expected.tolist()
