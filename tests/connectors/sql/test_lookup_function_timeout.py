"""``timeout`` of SqlLookupFunction: a lookup stuck behind a lock ends at its timeout as
a transient failure, counted and retried by the runtime's policy, instead of stalling
the task for as long as the lock is held."""

from __future__ import annotations

import functools
import sqlite3
import time
from pathlib import Path

import pytest

from cache import DefaultLookupCache
from lookup import PartialCachingLookupProvider, RetryPolicy, SqlLookupFunction, open_lookup
from spark_lookup.errors import ConfigError, LookupLoadError, TransientConnectorError
from tests.connectors.conftest import PgFactory, pg_exec, sqlite_exec

SCHEMA = "id BIGINT, name STRING"


@pytest.mark.postgres
def test_a_postgresql_lookup_behind_a_lock_ends_at_its_timeout(pg: PgFactory) -> None:
    import psycopg

    pg_exec(pg.dsn, pg.schema, "CREATE TABLE customers (id bigint PRIMARY KEY, name text);"
            "INSERT INTO customers VALUES (1, 'Ada');")
    fn = SqlLookupFunction(pg, "customers", "id", schema=SCHEMA, timeout=0.3)
    holder = psycopg.connect(pg.dsn, options=f"-c search_path={pg.schema}")
    try:
        holder.execute("LOCK TABLE customers IN ACCESS EXCLUSIVE MODE")  # until rollback
        started = time.monotonic()
        with pytest.raises(TransientConnectorError, match="customers"):
            fn.lookup((1,))
        assert time.monotonic() - started < 3  # 0.3 s, maybe twice: not the lock's time
    finally:
        holder.rollback()
        holder.close()
    assert fn.lookup((1,)) == [(1, "Ada")]  # the lock gone, the same function answers
    fn.close()


@pytest.mark.postgres
def test_the_runtime_counts_and_retries_a_timed_out_lookup(pg: PgFactory) -> None:
    import psycopg

    pg_exec(pg.dsn, pg.schema, "CREATE TABLE customers (id bigint PRIMARY KEY, name text);"
            "INSERT INTO customers VALUES (1, 'Ada');")
    waits: list[float] = []
    provider = PartialCachingLookupProvider.of(
        SqlLookupFunction(pg, "customers", "id", schema=SCHEMA, timeout=0.2),
        DefaultLookupCache.new_builder().maximum_size(10).build(),
        retry_policy=RetryPolicy(max_retries=2, initial_backoff=0.01, sleep=waits.append))
    holder = psycopg.connect(pg.dsn, options=f"-c search_path={pg.schema}")
    try:
        holder.execute("LOCK TABLE customers IN ACCESS EXCLUSIVE MODE")
        with open_lookup(provider) as handle:
            with pytest.raises(LookupLoadError, match=r"3 attempt.*customers.*statement timeout"):
                handle.lookup((1,))
            metrics = handle.metrics
            assert waits == [0.01, 0.02]  # two retries by the policy, then the failure
            assert metrics.num_load_failures == 1
            assert metrics.num_retries == 2
    finally:
        holder.rollback()
        holder.close()


def test_a_sqlite_lookup_behind_a_write_lock_ends_at_its_timeout(tmp_path: Path) -> None:
    path = tmp_path / "dim.db"
    sqlite_exec(path, "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);",
                {"customers": [(1, "Ada")]})
    # The factory's own busy timeout (60 s) would hold the lookup that long.
    fn = SqlLookupFunction(functools.partial(sqlite3.connect, str(path), timeout=60),
                           "customers", "id", schema=SCHEMA, timeout=0.3)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # readers wait (rollback journal)
        started = time.monotonic()
        with pytest.raises(TransientConnectorError, match="customers"):
            fn.lookup((1,))
        assert time.monotonic() - started < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert fn.lookup((1,)) == [(1, "Ada")]
    fn.close()


def test_a_long_sqlite_statement_is_interrupted(tmp_path: Path) -> None:
    from connectors.sql.connection import open_connection

    connection = open_connection(lambda: sqlite3.connect(":memory:"), "table 'x'", timeout=0.2)
    endless = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
               "SELECT count(*) FROM n")
    started = time.monotonic()
    with pytest.raises(TransientConnectorError, match="interrupted"):
        connection.rows(endless)
    assert time.monotonic() - started < 5
    connection.close()


@pytest.mark.parametrize("timeout", [0, -1, "1s", float("nan")])
def test_a_timeout_must_be_positive_seconds(timeout: object) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        SqlLookupFunction(sqlite3.connect, "customers", "id", schema=SCHEMA,
                          timeout=timeout)  # type: ignore[arg-type]
