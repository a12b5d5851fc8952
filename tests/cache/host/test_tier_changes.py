"""A host tier that tracks a change feed's changes: a load begun before a key's noted
change never puts that key, an older load never replaces a newer one, an "everything"
refuses every load begun before it, and none of it is lost when the index is rewritten."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from cache.host.tier import HostTier
from tests.cache.host.test_tier import SCHEMA, Clock, rows_of


def tracking(directory: Path, clock: Clock, maximum_size: int | None = 10_000) -> HostTier:
    t = HostTier(directory, SCHEMA, ["id"], maximum_size=maximum_size, write_ttl=None,
                 missing_ttl=None, cache_missing_key=True, tracks_changes=True, clock=clock)
    t.open()
    if not (directory / "CURRENT").exists():
        t.flush(t.now_ms() - 1000)  # as a feed's first connection does, a second ago
    return t


def put(t: HostTier, keys: list[int], began: int, version: int) -> None:
    ids = np.asarray(keys, dtype=np.int64)
    index, rows = rows_of(ids, version)
    t.put([pa.array(ids)], index, rows, began)


def names(t: HostTier, keys: list[int]) -> list[str | None]:
    """Each key's row name as the tier answers it (None: a miss)."""
    found = t.get([pa.array(keys, pa.int64())])
    column = found.rows.column("name").to_pylist()
    starts = np.concatenate(([0], np.cumsum(found.counts)))
    return [column[starts[i]] if found.hit[i] and found.counts[i] else None
            for i in range(len(keys))]


def test_a_load_begun_before_a_noted_change_does_not_put_that_key(tmp_path: Path) -> None:
    clock = Clock()
    t = tracking(tmp_path / "p", clock)
    try:
        now = t.now_ms()
        t.changed([pa.array([1], pa.int64())], now)
        put(t, [1, 2], now - 5, 1)  # read before the change was noted: 1 may be old
        assert names(t, [1, 2]) == [None, "2-v1"]
        put(t, [1], now, 1)  # began the same millisecond: not known to be after it
        assert names(t, [1]) == [None]
        put(t, [1], now + 1, 2)
        assert names(t, [1]) == ["1-v2"]
    finally:
        t.close()


def test_a_change_drops_the_key_and_a_racing_put_after_it_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    t, other = tracking(tmp_path / "p", clock), tracking(tmp_path / "p", clock)
    try:
        now = t.now_ms()
        put(t, [1, 2], now - 100, 1)
        assert names(other, [1, 2]) == ["1-v1", "2-v1"]
        # One worker heard of the change; another's load, begun before it, puts after.
        other.changed([pa.array([1], pa.int64())], now)
        assert names(t, [1, 2]) == [None, "2-v1"]
        put(t, [1], now - 50, 1)
        assert names(other, [1]) == [None]
        put(t, [1], now + 10, 2)
        assert names(other, [1]) == ["1-v2"]
        # The change heard late by a worker whose listener lags drops the newer rows too:
        # a load more, never an old row.
        t.changed([pa.array([1], pa.int64())], now + 20)
        assert names(other, [1]) == [None]
    finally:
        t.close()
        other.close()


def test_an_older_load_never_replaces_a_newer_ones_rows(tmp_path: Path) -> None:
    clock = Clock()
    t = tracking(tmp_path / "p", clock)
    try:
        now = t.now_ms()
        put(t, [1, 2], now - 10, 2)
        put(t, [1, 3], now - 20, 1)  # a slower load that began earlier
        assert names(t, [1, 2, 3]) == ["1-v2", "2-v2", "3-v1"]
    finally:
        t.close()


def test_everything_refuses_every_load_begun_before_it(tmp_path: Path) -> None:
    clock = Clock()
    t = tracking(tmp_path / "p", clock)
    try:
        now = t.now_ms()
        put(t, [1, 2], now - 100, 1)
        t.flush(now)
        assert names(t, [1, 2]) == [None, None]
        put(t, [1, 2], now - 10, 1)
        assert names(t, [1, 2]) == [None, None]
        put(t, [1], now + 1, 2)
        assert names(t, [1, 2]) == ["1-v2", None]
    finally:
        t.close()


def test_a_claim_keeps_a_change_note(tmp_path: Path) -> None:
    clock = Clock()
    t, other = tracking(tmp_path / "p", clock), tracking(tmp_path / "p", clock)
    try:
        now = t.now_ms()
        t.changed([pa.array([1], pa.int64())], now)
        mine, others = other.claim([pa.array([1, 2], pa.int64())])
        assert mine.tolist() == [True, True]
        assert not others.any()
        # 2 is claimed; 1 is loaded unclaimed (another worker loads it too, not waits).
        assert t.get([pa.array([1, 2], pa.int64())]).claimed.tolist() == [False, True]
        put(t, [1], now - 1, 1)  # the note outlived the claim
        assert names(other, [1]) == [None]
    finally:
        t.close()
        other.close()


def test_the_notes_survive_a_rewrite_as_its_floor(tmp_path: Path) -> None:
    clock = Clock()
    t = tracking(tmp_path / "p", clock, maximum_size=200)
    try:
        now = t.now_ms()
        put(t, list(range(100)), now - 100, 1)
        t.changed([pa.array([1], pa.int64())], now)
        # Over the size bound: the next generation keeps the newest keys, not the notes.
        put(t, list(range(1000, 1300)), now + 5, 1)
        put(t, [1], now - 50, 1)
        assert names(t, [1, 1000]) == [None, "1000-v1"]
        put(t, [2], now - 50, 1)  # every load begun before the notes dropped: refused
        assert names(t, [2]) == [None]
        put(t, [1, 2], now + 6, 2)
        assert names(t, [1, 2]) == ["1-v2", "2-v2"]
    finally:
        t.close()


def test_notes_that_fill_the_index_become_the_floor(tmp_path: Path) -> None:
    clock = Clock()
    t = tracking(tmp_path / "p", clock, maximum_size=None)
    try:
        now = t.now_ms()
        put(t, [1, 2], now - 100, 1)
        # More changed keys than the first generation has room for.
        t.changed([pa.array(np.arange(10, 40_010, dtype=np.int64))], now)
        assert names(t, [1, 2, 10]) == ["1-v1", "2-v1", None]
        put(t, [10, 3], now - 1, 1)
        assert names(t, [10, 3]) == [None, None]
        put(t, [10], now + 1, 2)
        assert names(t, [10, 1]) == ["10-v2", "1-v1"]
    finally:
        t.close()


def test_an_abandoned_tier_serves_nothing_and_refuses_older_loads(tmp_path: Path) -> None:
    clock = Clock()
    t, other = tracking(tmp_path / "p", clock), tracking(tmp_path / "p", clock)
    try:
        now = t.now_ms()
        put(t, [1], now - 100, 1)
        t.abandon()
        assert names(other, [1]) == [None]
        clock.now += 1
        put(other, [1], now - 50, 1)  # began before the tier started again
        assert names(t, [1]) == [None]
        put(other, [1], now + 2000, 2)
        assert names(t, [1]) == ["1-v2"]
    finally:
        t.close()
        other.close()


def test_a_tier_without_a_feed_takes_every_put(tmp_path: Path) -> None:
    t = HostTier(tmp_path / "p", SCHEMA, ["id"], maximum_size=None, write_ttl=None,
                 missing_ttl=None, cache_missing_key=True)
    t.open()
    try:
        put(t, [1], t.now_ms(), 2)
        put(t, [1], t.now_ms() - 1000, 1)  # no changes tracked: the last put wins
        assert names(t, [1]) == ["1-v1"]
    finally:
        t.close()
