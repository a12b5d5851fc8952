"""Full caches applying a change feed key by key (``lookup.changes.overlay``): changed
keys read from a SQLite ``SqlTableSource`` by key into an overlay in front of the
snapshot, with no reload; the races with reloads and with newer changes; what still
reloads; and the join's probe answering exactly as a fresh full load would."""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cache.answers import Answers
from cache.base import Key, expand
from cache.full.overlay import Overlay
from cache.full.snapshot import FullSnapshot
from cache.full.store import SnapshotStore
from lookup import FullCachingLookupProvider, LookupFunction, open_lookup
from lookup.runtime.full import FullCachingRuntime
from scan import CollectionSource, SqlTableSource, read_arrow
from spark_lookup.errors import ConfigError
from tests.integration.processes import (
    SCHEMA,
    CountingSqlSource,
    ManualTrigger,
    count_lines,
    make_db,
)
from tests.lookup.changes.in_process_changes import InProcessChanges
from tests.lookup.changes.test_feed import TIMEOUT, set_name
from tests.polling import wait_until


def execute(db: Path, sql: str, *params: Any) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(sql, params)
    conn.close()


def settled(runtime: Any, notifications: int) -> None:
    """Wait until ``notifications`` arrived and no change waits to be read, nor a
    reload for changes to run."""
    changes = runtime._change_overlay
    reloads = runtime._change_reloads
    assert changes is not None
    assert reloads is not None
    wait_until(lambda: runtime.metrics.num_notifications >= notifications
               and changes.idle() and reloads.idle(), "the changes to be applied")


class Rows(LookupFunction):
    """A change lookup answering from a dict (rows other than the table's, so a test
    sees which side served); can hold a read after it read, until ``hold`` is set."""

    schema = SCHEMA
    key_columns = ["id"]

    def __init__(self, rows: Mapping[int, str]) -> None:
        self.rows = dict(rows)
        self.reads: list[list[Key]] = []
        self.hold: threading.Event | None = None
        self.reading = threading.Event()

    def lookup(self, key: Key) -> list[tuple[Any, ...]]:
        return [(key[0], self.rows[key[0]], "v1")] if key[0] in self.rows else []

    def lookup_batch(self, keys: Sequence[Key]) -> dict[Key, list[tuple[Any, ...]]]:
        self.reads.append(list(keys))
        found = {key: self.lookup(key) for key in keys}
        hold = self.hold
        if hold is not None:
            self.reading.set()
            assert hold.wait(TIMEOUT)
        return found


def keyed(db: Path, counter: Path, feed: InProcessChanges, gate: Path | None = None,
          **kw: Any) -> FullCachingLookupProvider:
    kw.setdefault("share_across_workers", False)
    return FullCachingLookupProvider.of(CountingSqlSource(db, counter, gate=gate),
                                        ManualTrigger(), ["id"], parallelism=2, changes=feed,
                                        **kw)


def name_of(handle: Any, key: int) -> str | None:
    rows = handle.lookup((key,))
    return rows[0][1] if rows else None


# --- served from the overlay, without a reload


def test_updates_inserts_and_deletes_are_read_by_key(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    with open_lookup(keyed(db, counter, feed)) as handle:
        assert name_of(handle, 3) == "n3"
        set_name(db, 3, "changed")
        execute(db, "INSERT INTO customers VALUES (100, 'new', 'v1')")
        execute(db, "DELETE FROM customers WHERE id = 5")
        feed.publish([(3,), (100,), (5,), (6,)])  # 6 did not change: read, the same
        wait_until(lambda: name_of(handle, 3) == "changed", "the change")
        assert handle.lookup_batch([(3,), (100,), (5,), (6,), (7,)]) == {
            (3,): ((3, "changed", "v1"),), (100,): ((100, "new", "v1"),), (5,): (),
            (6,): ((6, "n6", "v1"),), (7,): ((7, "n7", "v1"),)}
        assert count_lines(counter) == 1  # no reload
        # The listener counts a notification once queued, and the reader may apply it first.
        wait_until(lambda: handle.metrics.num_notifications == 1, "the notification's count")
        metrics = handle.metrics
        assert (metrics.load_count, metrics.num_change_reads, metrics.num_notifications) == (
            1, 4, 1)


def test_a_feed_ordering_composite_keys_otherwise_is_read_by_key(tmp_path: Path) -> None:
    db = tmp_path / "pairs.db"
    execute(db, "CREATE TABLE pairs (a INTEGER, b TEXT, name TEXT, PRIMARY KEY (a, b))")
    execute(db, "INSERT INTO pairs VALUES (1, 'x', 'old'), (1, 'y', 'other')")
    feed = InProcessChanges(["b", "a"], min_interval=0)
    source = SqlTableSource(functools.partial(sqlite3.connect, str(db)), "pairs",
                            split_column="a")
    provider = FullCachingLookupProvider.of(source, ManualTrigger(), ["a", "b"], changes=feed,
                                            share_across_workers=False)
    with open_lookup(provider) as handle:
        assert handle.lookup((1, "x")) == ((1, "x", "old"),)
        execute(db, "UPDATE pairs SET name = 'new' WHERE a = 1 AND b = 'x'")
        feed.publish([("x", 1)])
        wait_until(lambda: handle.lookup((1, "x")) == ((1, "x", "new"),), "the change")
        assert handle.lookup((1, "y")) == ((1, "y", "other"),)
        assert handle.metrics.load_count == 1


def test_rows_the_source_filters_out_are_no_rows(tmp_path: Path) -> None:
    from connectors import Predicate

    db = make_db(tmp_path / "dim.db", rows=20)
    feed = InProcessChanges(["id"], min_interval=0)
    source = SqlTableSource(functools.partial(sqlite3.connect, str(db)), "customers",
                            schema=SCHEMA, filters=[Predicate("tier", "=", "v1")])
    provider = FullCachingLookupProvider.of(source, ManualTrigger(), ["id"], changes=feed,
                                            share_across_workers=False)
    with open_lookup(provider) as handle:
        assert name_of(handle, 4) == "n4"
        execute(db, "UPDATE customers SET tier = 'v2' WHERE id = 4")
        feed.publish([(4,)])
        wait_until(lambda: handle.lookup((4,)) == (), "the change")


# --- one key, several rows; the join's probe


def items_db(path: Path) -> Path:
    execute(path, "CREATE TABLE items (id INTEGER PRIMARY KEY, cid INTEGER, name TEXT)")
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO items VALUES (?, ?, ?)",
                         [(i, i % 10, f"item{i}") for i in range(1, 41)])
    conn.close()
    return path


def by_position(probe: Answers, count: int) -> list[list[dict[str, Any]]]:
    """Each probe key's rows, as dicts, in the probe's order."""
    if probe.one_row_each:
        positions = np.flatnonzero(probe.groups >= 0)
        row_numbers = probe.groups[positions]
    else:
        positions, row_numbers = expand(probe.groups, probe.offsets)
    rows = probe.rows.take(pa.array(row_numbers, type=pa.int64())).to_pylist()
    found: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for position, row in zip(positions.tolist(), rows, strict=True):
        found[position].append(row)
    return found


def fresh(source: SqlTableSource, key_columns: list[str], keys: list[pa.Array]) -> Answers:
    """What a full load of the table now answers."""
    snapshot = FullSnapshot.build(read_arrow(source, 1), key_columns, loaded_at=0.0)
    return Answers(None, snapshot.groups(keys), snapshot.offsets, snapshot.table,
                 one_row_each=snapshot.unique)


@pytest.mark.parametrize("shape", ["one row a key", "several rows a key"])
def test_the_probe_answers_as_a_fresh_full_load(tmp_path: Path, shape: str) -> None:
    """Keys with nulls and repeats (one per stream row, as a join probes) give the rows,
    row order and Arrow types a full load of the changed table gives."""
    feed = InProcessChanges(["cid" if shape != "one row a key" else "id"], min_interval=0)
    if shape == "one row a key":
        db = make_db(tmp_path / "dim.db", rows=40)
        source = SqlTableSource(functools.partial(sqlite3.connect, str(db)), "customers",
                                schema=SCHEMA)
        key = "id"
        changes = ["UPDATE customers SET name = 'x' WHERE id = 3",
                   "DELETE FROM customers WHERE id = 4",
                   "INSERT INTO customers VALUES (77, 'new', 'v2')"]
        notified = [(3,), (4,), (77,)]
    else:
        db = items_db(tmp_path / "items.db")
        source = SqlTableSource(functools.partial(sqlite3.connect, str(db)), "items",
                                schema="id BIGINT, cid BIGINT, name STRING")
        key = "cid"
        changes = ["INSERT INTO items VALUES (100, 2, 'added')",  # 2: five rows now
                   "DELETE FROM items WHERE cid = 3",  # 3: none
                   "UPDATE items SET name = 'renamed' WHERE id = 11",  # 1: one changed
                   "INSERT INTO items VALUES (101, 77, 'a'), (102, 77, 'b')"]  # a new key
        notified = [(2,), (3,), (1,), (77,)]
    provider = FullCachingLookupProvider.of(source, ManualTrigger(), [key], changes=feed,
                                            share_across_workers=False)
    probe_keys = [pa.array([1, None, 2, 2, 3, 4, 77, 99, 1, None, 5], pa.int64())]
    with open_lookup(provider) as handle:
        runtime = handle.runtime
        before = by_position(runtime.probe(probe_keys), 11)
        for sql in changes:
            execute(db, sql)
        feed.publish(notified)
        settled(runtime, 1)
        probe = runtime.probe(probe_keys)
        expected = fresh(source, [key], probe_keys)
        assert by_position(probe, 11) == by_position(expected, 11)
        assert by_position(probe, 11) != before
        assert probe.rows.schema.types == expected.rows.schema.types
        assert probe.one_row_each == (shape == "one row a key")
        assert runtime.metrics.load_count == 1
        # The per-key API answers the same.
        found = handle.lookup_batch([(k,) for k in (1, 2, 3, 4, 77, 99)])
        expected_rows = by_position(expected, 11)
        for position, k in ((0, 1), (2, 2), (4, 3), (5, 4), (6, 77), (7, 99)):
            assert [dict(zip(expected.rows.column_names, row, strict=True))
                    for row in found[(k,)]] == expected_rows[position]


def test_without_changes_the_probe_is_the_snapshot_s_own(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    with open_lookup(keyed(db, counter, feed)) as handle:
        runtime = handle.runtime
        keys = [pa.array([1, 2, None], pa.int64())]
        probe = runtime.probe(keys)
        snapshot = runtime.cache.current()
        assert probe.rows is snapshot.table  # the snapshot's table itself, not a copy
        assert runtime._change_overlay.current is None
        feed.publish([(2,)])
        settled(runtime, 1)
        assert runtime.probe([pa.array([1, 3], pa.int64())]).rows is snapshot.table
        assert runtime.probe(keys).rows is not snapshot.table


# --- races


def test_a_change_notified_after_a_load_started_survives_its_swap(tmp_path: Path) -> None:
    db, counter, gate = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans", tmp_path / "g"
    gate.touch()
    feed = InProcessChanges(["id"], min_interval=0)
    rows = Rows({3: "from the overlay", 4: "from the overlay"})
    with open_lookup(keyed(db, counter, feed, gate=gate, change_lookup=rows)) as handle:
        runtime = handle.runtime
        assert name_of(handle, 3) == "n3"  # loaded: the changes below come after
        feed.publish([(3,)])  # before the load below starts: the load holds it
        wait_until(lambda: name_of(handle, 3) == "from the overlay", "the change")
        gate.unlink()
        reload = runtime.trigger_reload()
        wait_until(lambda: count_lines(counter) == 2, "the load to start")
        feed.publish([(4,)])  # after it started: it may not hold it
        wait_until(lambda: name_of(handle, 4) == "from the overlay", "the change")
        gate.touch()
        reload.result(TIMEOUT)
        assert name_of(handle, 3) == "n3"  # the snapshot's: the entry went with the swap
        assert name_of(handle, 4) == "from the overlay"  # kept in front of it
        overlay = runtime._change_overlay.current
        assert overlay is not None
        assert overlay.keys.column("id").to_pylist() == [4]


def test_a_read_racing_a_newer_change_installs_nothing(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    rows = Rows({3: "first"})
    with open_lookup(keyed(db, counter, feed, change_lookup=rows)) as handle:
        assert name_of(handle, 3) == "n3"
        first = rows.hold = threading.Event()
        try:
            feed.publish([(3,)])
            assert rows.reading.wait(TIMEOUT)  # read "first", and waits
            rows.rows[3] = "second"
            feed.publish([(3,)])  # a newer change while the read is in flight
            wait_until(lambda: handle.metrics.num_notifications == 2, "the notification")
            rows.reading.clear()
            second = rows.hold = threading.Event()
            first.set()
            assert rows.reading.wait(TIMEOUT)  # the next read began: the first is done
            assert name_of(handle, 3) == "n3"  # "first" was not installed
            second.set()
        finally:
            first.set()
            if rows.hold is not None:
                rows.hold.set()
        wait_until(lambda: name_of(handle, 3) == "second", "the second read")
        assert rows.reads == [[(3,)], [(3,)]]


# --- what still reloads


def test_everything_reloads_and_the_reload_empties_the_overlay(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    rows = Rows({3: "from the overlay"})
    with open_lookup(keyed(db, counter, feed, change_lookup=rows)) as handle:
        assert name_of(handle, 3) == "n3"
        feed.publish([(3,)])
        wait_until(lambda: name_of(handle, 3) == "from the overlay", "the change")
        set_name(db, 5, "truncated and refilled")
        feed.publish_everything("TRUNCATE")
        wait_until(lambda: name_of(handle, 5) == "truncated and refilled", "the reload")
        assert count_lines(counter) == 2
        assert name_of(handle, 3) == "n3"
        assert handle.runtime._change_overlay.current is None


def test_a_key_the_provider_cannot_read_reloads(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    with open_lookup(keyed(db, counter, feed)) as handle:
        assert name_of(handle, 5) == "n5"
        set_name(db, 5, "changed")
        feed.publish([("five",)])
        wait_until(lambda: name_of(handle, 5) == "changed", "the reload")
        assert count_lines(counter) == 2


def test_an_overlay_past_its_bound_reloads_and_serves_meanwhile(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    provider = keyed(db, counter, feed, max_overlay_keys=2)
    with open_lookup(provider) as handle:
        assert name_of(handle, 1) == "n1"
        for key in (1, 2, 3):
            set_name(db, key, f"changed {key}")
        feed.publish([(1,), (2,), (3,)])
        wait_until(lambda: count_lines(counter) == 2, "the reload")
        settled(handle.runtime, 1)
        assert [name_of(handle, key) for key in (1, 2, 3)] == ["changed 1", "changed 2",
                                                               "changed 3"]
        assert handle.runtime._change_overlay.current is None
        assert handle.metrics.num_change_reads == 3


def test_a_keyed_read_that_keeps_failing_reloads(tmp_path: Path) -> None:
    class Failing(Rows):
        def lookup_batch(self, keys: Sequence[Key]) -> dict[Key, list[tuple[Any, ...]]]:
            raise ValueError("the lookup is broken")

    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    with open_lookup(keyed(db, counter, feed, change_lookup=Failing({}))) as handle:
        assert name_of(handle, 5) == "n5"
        set_name(db, 5, "changed")
        feed.publish([(5,)])
        wait_until(lambda: name_of(handle, 5) == "changed", "the reload")
        assert handle.metrics.num_load_failures == 1


# --- a host's shared store


def test_a_shared_store_serves_the_overlays_by_the_published_load_start(
        tmp_path: Path) -> None:
    """Two runtimes (as two workers) on one store, each with its overlay: a version one
    of them loaded drops, in both, the entries notified before its load started, and
    keeps the later ones."""
    db, counter, gate = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans", tmp_path / "g"
    gate.touch()
    feed = InProcessChanges(["id"], min_interval=0)
    rows = Rows({3: "from the overlay", 4: "from the overlay"})
    provider = keyed(db, counter, feed, gate=gate, change_lookup=rows,
                     share_across_workers=True)
    runtimes = [FullCachingRuntime(provider, store=SnapshotStore(
        tmp_path / "store", fingerprint=provider.snapshot_fingerprint())) for _ in range(2)]
    try:
        for runtime in runtimes:
            runtime.open()
            runtime.trigger_reload().result(TIMEOUT)
        assert count_lines(counter) == 1
        feed.publish([(3,)])
        for runtime in runtimes:
            wait_until(lambda r=runtime: name_of(r, 3) == "from the overlay", "the change")
        assert count_lines(counter) == 1  # no load: each read the key
        gate.unlink()
        feed.publish_everything("a load for the host")
        wait_until(lambda: count_lines(counter) == 2, "the load to start")
        feed.publish([(4,)])  # after that load started
        for runtime in runtimes:
            wait_until(lambda r=runtime: name_of(r, 4) == "from the overlay", "the change")
        gate.touch()
        for runtime in runtimes:
            wait_until(lambda r=runtime: name_of(r, 3) == "n3", "the published version")
            assert name_of(runtime, 4) == "from the overlay"
            settled(runtime, 3)
        assert count_lines(counter) == 2  # one load for the host
    finally:
        for runtime in runtimes:
            runtime.close()


def test_a_worker_opening_after_changes_it_never_heard_serves_none_of_the_older_version(
        tmp_path: Path) -> None:
    """Its first lookup waits for a version loaded after it listened, whatever the
    feed's ``min_interval`` (here a minute since the host's last load): never the
    host's older version, which lacks the change the other worker holds."""
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=60)
    provider = keyed(db, counter, feed, share_across_workers=True)

    def runtime() -> FullCachingRuntime:
        return FullCachingRuntime(provider, store=SnapshotStore(
            tmp_path / "store", fingerprint=provider.snapshot_fingerprint()))

    first, second = runtime(), runtime()
    try:
        first.open()
        assert name_of(first, 3) == "n3"
        set_name(db, 3, "changed")
        feed.publish([(3,)])
        wait_until(lambda: name_of(first, 3) == "changed", "the change")
        second.open()
        assert name_of(second, 3) == "changed"  # the first lookup, no wait
        assert count_lines(counter) == 2
        settled(second, 0)
        assert count_lines(counter) == 2  # nothing more to reload for
    finally:
        first.close()
        second.close()


def test_a_worker_opening_with_nothing_changed_reloads_nothing(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    provider = keyed(db, counter, feed, share_across_workers=True)
    runtimes = [FullCachingRuntime(provider, store=SnapshotStore(
        tmp_path / "store", fingerprint=provider.snapshot_fingerprint())) for _ in range(2)]
    try:
        for runtime in runtimes:
            runtime.open()
            assert name_of(runtime, 3) == "n3"
            settled(runtime, 0)
        assert count_lines(counter) == 1  # the first listened since before its load
    finally:
        for runtime in runtimes:
            runtime.close()


# --- the overlay itself


def test_an_overlay_replaces_keys_and_trims_what_a_snapshot_holds() -> None:
    def rows(*names: str) -> pa.Table:
        return pa.table({"id": pa.array([int(n[1:]) for n in names], pa.int64()),
                         "name": pa.array(list(names))})

    keys = [pa.array([1, 2], pa.int64())]
    first = Overlay.of(None, keys, np.array([10.0, 20.0]), np.array([0, 1]), rows("a1", "b2"),
                       -np.inf, ["id"])
    assert first is not None
    second = Overlay.of(first, [pa.array([2, 3], pa.int64())], np.array([30.0, 30.0]),
                        np.array([0]), rows("c2"), -np.inf, ["id"])
    assert second is not None
    assert second.keys.column("id").to_pylist() == [1, 2, 3]
    assert second.rows.column("name").to_pylist() == ["a1", "c2"]
    assert second.offsets.tolist() == [0, 1, 2, 2]  # 3 was deleted
    trimmed = second.since(15.0)
    assert trimmed is not None
    assert trimmed.keys.column("id").to_pylist() == [2, 3]
    assert second.since(31.0) is None
    # A read whose key a newer snapshot holds installs nothing.
    assert Overlay.of(None, keys, np.array([10.0, 20.0]), np.array([0, 1]), rows("a1", "b2"),
                      25.0, ["id"]) is None


# --- where the provider is built


def test_change_lookup_needs_a_feed_and_the_source_s_shape(tmp_path: Path) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=2), tmp_path / "scans"
    source = CountingSqlSource(db, counter)
    with pytest.raises(ConfigError, match="give changes= too"):
        FullCachingLookupProvider.of(source, ManualTrigger(), ["id"], change_lookup=Rows({}))

    class Narrow(Rows):
        schema = "id BIGINT, name STRING"

    feed = InProcessChanges(["id"])
    with pytest.raises(ConfigError, match="column for column"):
        FullCachingLookupProvider.of(source, ManualTrigger(), ["id"], changes=feed,
                                     change_lookup=Narrow({}))

    class ByName(Rows):
        key_columns = ["name"]

    with pytest.raises(ConfigError, match="looks up by"):
        FullCachingLookupProvider.of(source, ManualTrigger(), ["id"], changes=feed,
                                     change_lookup=ByName({}))
    with pytest.raises(ConfigError, match="max_overlay_keys"):
        FullCachingLookupProvider.of(source, ManualTrigger(), ["id"], changes=feed,
                                     max_overlay_keys=0)
    provider = FullCachingLookupProvider.of(source, ManualTrigger(), ["id"], changes=feed)
    assert provider.change_lookup is not None  # the source's own
    assert FullCachingLookupProvider.of(source, ManualTrigger(), ["id"]).change_lookup is None


def test_any_source_may_offer_its_keyed_lookup() -> None:
    offered = Rows({1: "a"})

    class Offering(CollectionSource):
        def keyed_lookup(self, key_columns: Sequence[str]) -> LookupFunction:
            assert list(key_columns) == ["id"]
            return offered

    source = Offering([(1, "a", "v1")], schema=SCHEMA)
    feed = InProcessChanges(["id"])
    provider = FullCachingLookupProvider.of(source, ManualTrigger(), ["id"], changes=feed)
    assert provider.change_lookup is offered


def test_a_probe_holding_a_snapshot_older_than_the_trim_takes_the_newer_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, counter = make_db(tmp_path / "dim.db", rows=20), tmp_path / "scans"
    feed = InProcessChanges(["id"], min_interval=0)
    with open_lookup(keyed(db, counter, feed)) as handle:
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        assert name_of(handle, 3) == "n3"
        older = runtime.cache.snapshot()
        set_name(db, 3, "changed")
        feed.publish([(3,)])
        wait_until(lambda: name_of(handle, 3) == "changed", "the change")
        runtime.trigger_reload().result(TIMEOUT)
        assert name_of(handle, 3) == "changed"  # this probe trims the overlay for the load
        current = runtime.cache.snapshot
        handed = iter([older])
        # A thread that read the older snapshot just before another trimmed the overlay:
        monkeypatch.setattr(runtime.cache, "snapshot", lambda: next(handed, None) or current())
        probe = runtime.probe([pa.array([3], pa.int64())])
        rows = probe.rows.take(pa.array([probe.groups[0]])).column("name").to_pylist()
        assert rows == ["changed"]  # not the older snapshot's "n3"
