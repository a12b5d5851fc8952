"""PostgresChanges on a real PostgreSQL, in a schema of the test's own: the triggers and
their payloads, partial and full caches kept fresh, a listener whose connection is
killed, and lookups racing updates."""

from __future__ import annotations

import functools
import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from cache import DefaultLookupCache
from connectors.sql.postgres_changes import parse_payload
from lookup import (
    FullCachingLookupProvider,
    LookupFunction,
    PartialCachingLookupProvider,
    PostgresChanges,
    SqlLookupFunction,
    open_lookup,
)
from lookup.changes.feed import Change
from scan import SqlTableSource
from spark_lookup.errors import ConfigError, ConnectorError
from tests.connectors.conftest import PgFactory, pg_exec
from tests.polling import wait_until
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.postgres

TIMEOUT = 10.0
HOUR = timedelta(hours=1)


class Connect:
    """psycopg connections to the test's schema under an application name of their own
    (to find the listener's backend); ``gate`` cleared holds new connections back."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.application_name = f"sltest_listen_{uuid.uuid4().hex[:8]}"
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()
        self.opened = 0

    def __call__(self) -> Any:
        if not self.gate.is_set():
            self.waiting.set()
            assert self.gate.wait(TIMEOUT), "the test never let the listener reconnect"
        self.opened += 1
        return psycopg.connect(self.dsn, application_name=self.application_name,
                               options=f"-c search_path={self.schema}")

    def backends(self) -> list[int]:
        rows = pg_exec(self.dsn, self.schema,
                       "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                       self.application_name)
        return [row[0] for row in rows]


@pytest.fixture
def dim(pg: PgFactory) -> PgFactory:
    pg_exec(pg.dsn, pg.schema, """
        CREATE TABLE dim (id bigint PRIMARY KEY, name text NOT NULL);
        INSERT INTO dim SELECT g, 'v0' FROM generate_series(1, 50) AS g;
    """)
    return pg


def changes(pg: PgFactory, **kw: Any) -> tuple[PostgresChanges, Connect]:
    connect = Connect(pg.dsn, pg.schema)
    kw.setdefault("connect_timeout", TIMEOUT)
    feed = PostgresChanges(connect, f"{pg.schema}.dim", **kw)
    feed.install()
    return feed, connect


def execute(pg: PgFactory, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return pg_exec(pg.dsn, pg.schema, sql, *params)


def receive_all(connection: Any, until: Callable[[list[Change]], bool]) -> list[Change]:
    received: list[Change] = []
    deadline = time.monotonic() + TIMEOUT
    while not until(received):
        assert time.monotonic() < deadline, f"only received {received}"
        received += connection.receive(0.1)
    return received


# --- the triggers and their payloads


def update_names(dim: Any, updates: int, seed: int) -> None:
    """``updates`` committed UPDATEs, each renaming one of ids 1-20 (chosen by ``seed``)
    to ``v<n>``, one statement and transaction each."""
    with psycopg.connect(dim.dsn, autocommit=True,
                         options=f"-c search_path={dim.schema}") as writer:
        chooser = random.Random(seed)
        for version in range(1, updates + 1):
            writer.execute("UPDATE dim SET name = %s WHERE id = %s",
                           (f"v{version}", chooser.randint(1, 20)))

def test_the_primary_key_is_read_from_the_catalog(dim: PgFactory) -> None:
    feed = PostgresChanges(Connect(dim.dsn, dim.schema), f"{dim.schema}.dim")
    assert feed.key_columns == ("id",)
    execute(dim, "CREATE TABLE nokey (a int)")
    with pytest.raises(ConfigError, match="no primary key"):
        PostgresChanges(Connect(dim.dsn, dim.schema), "nokey")
    with pytest.raises(ConnectorError, match="'missing' does not exist"):
        PostgresChanges(Connect(dim.dsn, dim.schema), "missing")
    with pytest.raises(ConfigError, match="invalid table name"):
        PostgresChanges(Connect(dim.dsn, dim.schema), 'dim"; DROP TABLE dim; --')


def test_install_is_idempotent_and_uninstall_removes_everything(dim: PgFactory) -> None:
    feed, _ = changes(dim)
    feed.install()  # again: replaced, not doubled
    count = ("SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass(%s) "
             "AND NOT tgisinternal")
    assert execute(dim, count, f"{dim.schema}.dim") == [(4,)]
    feed.uninstall()
    feed.uninstall()
    assert execute(dim, count, f"{dim.schema}.dim") == [(0,)]
    assert execute(dim, "SELECT count(*) FROM pg_proc WHERE proname = %s",
                   f"{feed.channel}_notify") == [(0,)]


def test_every_kind_of_change_is_notified(dim: PgFactory) -> None:
    feed, _ = changes(dim)
    connection = feed.connect()
    try:
        execute(dim, "INSERT INTO dim VALUES (100, 'new')")
        execute(dim, "UPDATE dim SET name = 'x' WHERE id IN (1, 2)")
        execute(dim, "UPDATE dim SET id = 200 WHERE id = 3")  # old and new key
        execute(dim, "DELETE FROM dim WHERE id = 4")
        execute(dim, "UPDATE dim SET name = 'y' WHERE id = -1")  # no row: nothing
        execute(dim, "TRUNCATE dim")
        received = receive_all(connection, lambda got: any(c.everything for c in got))
    finally:
        connection.close()
    assert [sorted(c.keys) for c in received if not c.everything] == [
        [(100,)], [(1,), (2,)], [(3,), (200,)], [(4,)]]
    assert received[-1] == Change(everything=True, reason="TRUNCATE")


def test_a_rolled_back_change_is_not_notified(dim: PgFactory) -> None:
    feed, _ = changes(dim)
    connection = feed.connect()
    try:
        with psycopg.connect(dim.dsn, options=f"-c search_path={dim.schema}") as conn:
            conn.execute("UPDATE dim SET name = 'x' WHERE id = 1")
            conn.rollback()
        execute(dim, "UPDATE dim SET name = 'x' WHERE id = 2")
        received = receive_all(connection, bool)
    finally:
        connection.close()
    assert received == [Change(((2,),))]


def test_many_keys_travel_in_payloads_under_8000_bytes(dim: PgFactory) -> None:
    execute(dim, """CREATE TABLE wide (k text PRIMARY KEY, v int);
                    INSERT INTO wide SELECT repeat('k', 90) || g, 0
                    FROM generate_series(1, 3000) AS g""")
    feed = PostgresChanges(Connect(dim.dsn, dim.schema), f"{dim.schema}.wide")
    feed.install()
    sizes: list[int] = []
    listen = psycopg.connect(dim.dsn, autocommit=True)
    listen.execute(f'LISTEN "{feed.channel}"')
    try:
        execute(dim, "UPDATE wide SET v = 1")  # 3000 keys of ~95 bytes in one statement
        keys: set[str] = set()
        for notify in listen.notifies(timeout=TIMEOUT):
            sizes.append(len(notify.payload.encode()))
            change = parse_payload(notify.payload, 1)
            keys.update(key[0] for key in change.keys)
            if len(keys) == 3000:
                break
    finally:
        listen.close()
    assert len(keys) == 3000
    assert len(sizes) > 30
    assert max(sizes) < 8000


def test_a_statement_over_max_rows_notifies_everything(dim: PgFactory) -> None:
    feed, _ = changes(dim, max_rows=10)
    connection = feed.connect()
    try:
        execute(dim, "UPDATE dim SET name = 'x' WHERE id <= 11")
        received = receive_all(connection, bool)
    finally:
        connection.close()
    assert received == [Change(everything=True, reason="UPDATE of more than 10 rows")]


def test_key_values_arrive_as_exact_json(pg: PgFactory) -> None:
    execute(pg, """CREATE TABLE typed (big bigint, d date, ts timestamptz, n numeric(12, 2),
                                       b bytea, name text, PRIMARY KEY (big, d, ts, n, b));
                   INSERT INTO typed VALUES
                   (9007199254740993, '2024-02-29', '2024-01-01 10:00+00', 1.50, '\\x01ff', 'a')""")
    feed = PostgresChanges(Connect(pg.dsn, pg.schema), f"{pg.schema}.typed")
    feed.install()
    connection = feed.connect()
    try:
        pg_exec(pg.dsn, pg.schema, "SET TIME ZONE 'Asia/Kolkata'; UPDATE typed SET name = 'b'")
        (change,) = receive_all(connection, bool)
    finally:
        connection.close()
    ((big, day, ts, n, b),) = change.keys
    assert (big, day, n, b) == (9007199254740993, "2024-02-29", 1.5, "\\x01ff")
    assert type(big) is int  # not a float: 2**53 + 1 stays exact
    assert ts in ("2024-01-01T15:30:00+05:30", "2024-01-01T10:00:00+00:00")


def test_an_unreadable_payload_means_everything() -> None:
    assert parse_payload("not json", 1).everything
    assert parse_payload('{"v":2,"k":[[1]]}', 1).everything
    assert parse_payload('{"v":1,"k":[[1,2]]}', 1).everything
    assert parse_payload(json.dumps({"v": 1, "k": [[1]]}), 1) == Change(((1,),))


def test_a_connection_that_is_not_psycopg_3_is_refused(dim: PgFactory) -> None:
    import sqlite3

    feed = PostgresChanges(functools.partial(sqlite3.connect, ":memory:"), "dim",
                           key_columns=["id"])
    with pytest.raises(ConfigError, match="psycopg 3"):
        feed.connect()


def test_the_heartbeat_keeps_a_quiet_connection(dim: PgFactory) -> None:
    feed, _ = changes(dim, heartbeat=0.05)
    connection = feed.connect()
    try:
        for _ in range(5):  # each waits at most a heartbeat, then checks the link
            assert connection.receive(1.0) == []
        execute(dim, "UPDATE dim SET name = 'x' WHERE id = 1")
        assert receive_all(connection, bool) == [Change(((1,),))]
    finally:
        connection.close()


# --- caches kept fresh


class TuplesOnly(LookupFunction):
    """The table through a connector's ``lookup_batch`` only: the runtime's tuple path."""

    schema = "id BIGINT, name STRING"
    key_columns = ["id"]

    def __init__(self, inner: SqlLookupFunction) -> None:
        self.inner = inner

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def lookup(self, key: tuple[Any, ...]) -> Any:
        return self.inner.lookup(key)

    def lookup_batch(self, keys: Any) -> Any:
        return self.inner.lookup_batch(keys)


def partial(pg: PgFactory, feed: PostgresChanges, engine: str = "arrow"
            ) -> PartialCachingLookupProvider:
    cache = DefaultLookupCache.new_builder().expire_after_write(HOUR).build()
    function: LookupFunction = SqlLookupFunction(pg, "dim", "id")
    if engine == "python":
        function = TuplesOnly(function)  # type: ignore[arg-type]
    return PartialCachingLookupProvider.of(function, cache, changes=feed)


def test_a_partial_cache_sees_an_update_and_reloads_only_that_key(dim: PgFactory) -> None:
    feed, _ = changes(dim)
    with open_lookup(partial(dim, feed)) as handle:
        assert handle.lookup_batch([(1,), (2,)]) == {(1,): ((1, "v0"),), (2,): ((2, "v0"),)}
        queries = len(dim.lookups())
        execute(dim, "UPDATE dim SET name = 'v1' WHERE id = 2")
        wait_until(lambda: handle.metrics.num_keys_invalidated == 1, "the invalidation")
        assert handle.lookup_batch([(1,), (2,)]) == {(1,): ((1, "v0"),), (2,): ((2, "v1"),)}
        assert len(dim.lookups()) == queries + 1
        execute(dim, "UPDATE dim SET id = 1000 WHERE id = 1")  # the key itself changed
        wait_until(lambda: handle.metrics.num_keys_invalidated == 2, "the invalidation")
        assert handle.lookup_batch([(1,), (1000,)]) == {(1,): (), (1000,): ((1000, "v0"),)}


def full(dim: PgFactory, feed: PostgresChanges) -> FullCachingLookupProvider:
    source = SqlTableSource(dim, "dim", schema="id BIGINT, name STRING")
    return FullCachingLookupProvider.of(source, PeriodicCacheReloadTrigger(HOUR), ["id"],
                                        changes=feed, share_across_workers=False)


def test_a_full_cache_reads_changed_keys_by_key_and_reloads_after_truncate(
        dim: PgFactory) -> None:
    feed, _ = changes(dim, min_interval=0)
    with open_lookup(full(dim, feed)) as handle:
        assert handle.lookup((5,)) == ((5, "v0"),)
        execute(dim, "UPDATE dim SET name = 'v1' WHERE id = 5")
        wait_until(lambda: handle.lookup((5,)) == ((5, "v1"),), "the change")
        execute(dim, "INSERT INTO dim VALUES (500, 'new')")
        execute(dim, "DELETE FROM dim WHERE id = 6")
        execute(dim, "UPDATE dim SET id = 1000 WHERE id = 7")  # the key itself changed
        wait_until(lambda: handle.lookup((1000,)) == ((1000, "v0"),), "the changes")
        assert handle.lookup_batch([(500,), (6,), (7,), (8,)]) == {
            (500,): ((500, "new"),), (6,): (), (7,): (), (8,): ((8, "v0"),)}
        assert handle.metrics.load_count == 1  # no reload: 5 keys read by key
        assert handle.metrics.num_change_reads == 5
        execute(dim, "TRUNCATE dim")
        wait_until(lambda: handle.lookup((5,)) == (), "the reload")
        assert handle.metrics.load_count == 2


def test_full_cache_lookups_racing_updates_end_with_the_database_s_rows(
        dim: PgFactory) -> None:
    """Join-style probes hammer 20 keys while a writer updates them; once every
    update's notification is applied, every key answers the database's row."""
    feed, _ = changes(dim, min_interval=0)
    updates = 300
    with open_lookup(full(dim, feed)) as handle:
        runtime = handle.runtime
        keys = [pa.array([*range(1, 21), None, 3], pa.int64())]
        runtime.probe(keys)
        stop = threading.Event()
        errors: list[BaseException] = []

        def look() -> None:
            try:
                while not stop.is_set():
                    runtime.probe(keys)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=look, daemon=True) for _ in range(2)]
        for thread in threads:
            thread.start()
        try:
            update_names(dim, updates, seed=11)
            overlay = runtime._change_overlay  # type: ignore[attr-defined]
            wait_until(lambda: handle.metrics.num_notifications >= updates
                       and overlay.idle(),
                       "the changes")
        finally:
            stop.set()
            for thread in threads:
                thread.join(TIMEOUT)
        assert not errors
        truth = dict(execute(dim, "SELECT id, name FROM dim WHERE id <= 20"))
        probe = runtime.probe(keys)
        names = probe.rows.column("name").to_pylist()
        found = [names[group] if group >= 0 else None for group in probe.groups.tolist()]
        assert found == [truth[key] for key in range(1, 21)] + [None, truth[3]]
        assert handle.metrics.load_count == 1


def test_a_change_committed_while_the_listener_is_killed_is_seen_after_reconnecting(
        dim: PgFactory) -> None:
    feed, connect = changes(dim)
    with open_lookup(partial(dim, feed)) as handle:
        assert handle.lookup((7,)) == ((7, "v0"),)
        (backend,) = connect.backends()
        opened = connect.opened
        connect.gate.clear()  # the listener's reconnection waits for the test
        execute(dim, "SELECT pg_terminate_backend(%s)", backend)
        assert connect.waiting.wait(TIMEOUT)  # it noticed, and is reconnecting
        execute(dim, "UPDATE dim SET name = 'v1' WHERE id = 7")  # nobody listens
        assert handle.lookup((7,)) == ((7, "v0"),)  # the cache cannot know yet
        reconnected = time.monotonic()
        connect.gate.set()
        wait_until(lambda: handle.lookup((7,)) == ((7, "v1"),), "the flush", timeout=5.0)
        assert time.monotonic() - reconnected < 5.0
        assert handle.metrics.num_reconnect_flushes == 1
        assert connect.opened == opened + 1
        # And listening again: the next change is notified as before.
        execute(dim, "UPDATE dim SET name = 'v2' WHERE id = 7")
        wait_until(lambda: handle.lookup((7,)) == ((7, "v2"),), "the invalidation")


@pytest.mark.parametrize("engine", ["arrow", "python"])
def test_lookups_racing_updates_leave_no_stale_entry(dim: PgFactory, engine: str) -> None:
    """Lookup threads hammer 20 keys while a writer updates them; once every update's
    notification has arrived, every cached entry is the database's row."""
    feed, _ = changes(dim)
    updates = 300
    with open_lookup(partial(dim, feed, engine)) as handle:
        stop = threading.Event()
        errors: list[BaseException] = []

        def look() -> None:
            chooser = random.Random()
            try:
                while not stop.is_set():
                    handle.lookup_batch([(chooser.randint(1, 20),)
                                         for _ in range(chooser.randint(1, 5))])
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=look, daemon=True) for _ in range(4)]
        for thread in threads:
            thread.start()
        try:
            update_names(dim, updates, seed=7)
            wait_until(lambda: handle.metrics.num_notifications >= updates, "the notifications")
        finally:
            stop.set()
            for thread in threads:
                thread.join(TIMEOUT)
        assert not errors
        truth = dict(execute(dim, "SELECT id, name FROM dim WHERE id <= 20"))
        found = handle.lookup_batch([(key,) for key in truth])
        assert {key[0]: rows[0][1] for key, rows in found.items()} == truth
        assert handle.metrics.num_keys_invalidated > 0


# --- partitions and inheritance children (issue 40, defect 6) ----------------------------


@pytest.fixture
def partitioned(pg: PgFactory) -> PgFactory:
    """``dim`` partitioned by range of id (a sub-partitioned member), and ``family``, a
    table with an inheritance child."""
    pg_exec(pg.dsn, pg.schema, """
        CREATE TABLE dim (id bigint PRIMARY KEY, name text NOT NULL) PARTITION BY RANGE (id);
        CREATE TABLE dim_low PARTITION OF dim FOR VALUES FROM (0) TO (100);
        CREATE TABLE dim_mid PARTITION OF dim FOR VALUES FROM (100) TO (200)
            PARTITION BY RANGE (id);
        CREATE TABLE dim_mid_a PARTITION OF dim_mid FOR VALUES FROM (100) TO (200);
        INSERT INTO dim VALUES (1, 'v0'), (150, 'v0');
        CREATE TABLE family (id bigint PRIMARY KEY, name text NOT NULL);
        CREATE TABLE family_child () INHERITS (family);
        INSERT INTO family VALUES (1, 'v0');
        INSERT INTO family_child VALUES (2, 'v0');
    """)
    return pg


def _partial(pg: PgFactory, table: str, **kw: Any) -> tuple[Any, PostgresChanges]:
    connect = Connect(pg.dsn, pg.schema)
    feed = PostgresChanges(connect, f"{pg.schema}.{table}", key_columns=["id"],
                           connect_timeout=TIMEOUT, min_interval=0, **kw)
    feed.install()
    reader = functools.partial(psycopg.connect, pg.dsn, options=f"-c search_path={pg.schema}")
    function = SqlLookupFunction(reader, table, "id", schema="id BIGINT, name STRING")
    cache = DefaultLookupCache.new_builder().maximum_size(100).build()
    return PartialCachingLookupProvider.of(function, cache, changes=feed), feed


@pytest.mark.parametrize("target", ["dim", "dim_low", "dim_mid", "dim_mid_a"])
def test_a_change_through_a_partition_is_heard(partitioned: PgFactory, target: str) -> None:
    provider, _ = _partial(partitioned, "dim")
    with open_lookup(provider) as handle:
        assert handle.lookup_batch([(1,), (150,)]) == {(1,): ((1, "v0"),),
                                                       (150,): ((150, "v0"),)}
        execute(partitioned, f"UPDATE {target} SET name = 'v1'")
        key = (150,) if target.startswith("dim_mid") else (1,)
        wait_until(lambda: handle.lookup(key) == ((key[0], "v1"),),
                   f"the change made through {target}")


@pytest.mark.parametrize("target", ["family", "family_child", "ONLY family"])
def test_a_change_through_an_inheritance_child_is_heard(partitioned: PgFactory,
                                                       target: str) -> None:
    provider, _ = _partial(partitioned, "family")
    with open_lookup(provider) as handle:
        assert handle.lookup_batch([(1,), (2,)]) == {(1,): ((1, "v0"),), (2,): ((2, "v0"),)}
        execute(partitioned, f"UPDATE {target} SET name = 'v1'")
        keys = [(1,)] if target == "ONLY family" else [(2,)]
        for key in keys:
            wait_until(lambda key=key: handle.lookup(key) == ((key[0], "v1"),),
                       f"the change made through {target}")


def test_a_partition_made_after_install_is_covered_by_flushes_until_installed_again(
        partitioned: PgFactory) -> None:
    """A partition created (or attached) later: its rows appear with no row trigger, so
    the listener's next check reports everything; until install() runs again, changes
    through it are flushed by every check; afterwards they are heard by key again."""
    provider, feed = _partial(partitioned, "dim", heartbeat=0.2)
    with open_lookup(provider) as handle:
        assert handle.lookup((250,)) == ()
        flushes = handle.metrics.num_keys_invalidated
        execute(partitioned, """
            CREATE TABLE dim_high (id bigint PRIMARY KEY, name text NOT NULL);
            INSERT INTO dim_high VALUES (250, 'v0');
            ALTER TABLE dim ATTACH PARTITION dim_high FOR VALUES FROM (200) TO (300);
        """)
        wait_until(lambda: handle.lookup((250,)) == ((250, "v0"),), "the attached rows")
        execute(partitioned, "UPDATE dim_high SET name = 'v1'")
        wait_until(lambda: handle.lookup((250,)) == ((250, "v1"),),
                   "a change through the uncovered partition (flushed at a check)")
        feed.install()
        notifications = handle.metrics.num_notifications
        execute(partitioned, "UPDATE dim_high SET name = 'v2'")
        wait_until(lambda: handle.lookup((250,)) == ((250, "v2"),), "the change, by key")
        assert handle.metrics.num_notifications > notifications
        assert handle.metrics.num_keys_invalidated > flushes
    feed.uninstall()
    left = execute(partitioned, "SELECT count(*) FROM pg_trigger WHERE tgname LIKE %s",
                   feed.channel + "%")
    assert left == [(0,)]
