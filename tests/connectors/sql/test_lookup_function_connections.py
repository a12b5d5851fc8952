"""A SQL lookup function's connections under a connection budget and a database's own
limits: a PostgreSQL role with CONNECTION LIMIT, a MariaDB user with
MAX_USER_CONNECTIONS. Real servers; roles and users of the test's own, dropped after."""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cache import DefaultLookupCache
from lookup import PartialCachingLookupProvider, SqlLookupFunction, open_lookup
from tests.pg_roles import role_reading_dim


def _cache() -> DefaultLookupCache:
    return DefaultLookupCache.new_builder().maximum_size(10).build()


@pytest.fixture
def limited_role(postgres_dsn: str, pg_schema: str) -> Iterator[str]:
    """A login role of the test's own with CONNECTION LIMIT 1, reading ``pg_schema.dim``
    (ids 1-200); dropped afterwards, its sessions first."""
    with role_reading_dim(postgres_dsn, pg_schema, connection_limit=1, ids="g",
                          count=200) as role:
        yield role


def _sessions(dsn: str, role: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                            (role,)).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.postgres
def test_threads_share_the_budget_and_an_idle_connection_gives_its_slot_back(
        postgres_dsn: str, pg_schema: str, limited_role: str) -> None:
    import psycopg

    connect = functools.partial(psycopg.connect, postgres_dsn, user=limited_role,
                                options=f"-c search_path={pg_schema}")
    provider = PartialCachingLookupProvider.of(
        SqlLookupFunction(connect, "dim", "id", schema="id BIGINT, name STRING"), _cache(),
        max_source_connections=1, load_timeout=30)
    errors: list[BaseException] = []
    with open_lookup(provider) as handle:

        def look(first: int) -> None:
            try:
                for key in range(first, 201, 4):
                    assert handle.lookup((key,)) == ((key, f"n{key}"),)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=look, args=(first,)) for first in range(1, 5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        metrics = handle.metrics
        assert metrics.num_load_failures == 0
        assert metrics.num_retries == 0  # a refusal (a closing backend) is waited for
        # The idle connection goes back to the pool and closes, its slot with it.
        deadline = time.monotonic() + 10
        while _sessions(postgres_dsn, limited_role):
            assert time.monotonic() < deadline, "an idle connection stayed open"
            time.sleep(0.1)
        held = psycopg.connect(postgres_dsn, user=limited_role)  # the role's one connection
        try:
            threading.Timer(0.5, held.close).start()
            # Refused while the test holds it, waited for, then answered.
            assert handle.lookup((300,)) == ()
        finally:
            held.close()
        assert handle.metrics.num_connection_waits >= 1


@pytest.fixture
def limited_mysql_user(mysql_url: str, mysql_db: str) -> Iterator[dict[str, Any]]:
    """A MariaDB/MySQL user of the test's own with MAX_USER_CONNECTIONS 1, reading
    ``dim`` (ids 1-50) of ``mysql_db``; its connection keywords. Dropped afterwards."""
    import pymysql

    from tests.conftest import mysql_params

    params = mysql_params(mysql_url, mysql_db)
    name = f"sl_{uuid.uuid4().hex[:10]}"
    hosts = ("%", "localhost", "127.0.0.1")
    admin = pymysql.connect(**params, autocommit=True)
    try:
        with admin.cursor() as cursor:
            cursor.execute("CREATE TABLE dim (id BIGINT PRIMARY KEY, name TEXT)")
            cursor.executemany("INSERT INTO dim VALUES (%s, %s)",
                               [(i, f"n{i}") for i in range(1, 51)])
            for host in hosts:
                cursor.execute(f"CREATE USER '{name}'@'{host}' WITH MAX_USER_CONNECTIONS 1")
                cursor.execute(f"GRANT SELECT ON `{mysql_db}`.* TO '{name}'@'{host}'")
        yield {**params, "user": name, "password": ""}
    finally:
        with admin.cursor() as cursor:
            for host in hosts:
                cursor.execute(f"DROP USER IF EXISTS '{name}'@'{host}'")
        admin.close()


@pytest.mark.mysql
def test_a_mariadb_user_over_max_user_connections_is_waited_for(
        limited_mysql_user: dict[str, Any]) -> None:
    import pymysql

    connect = functools.partial(pymysql.connect, **limited_mysql_user)
    provider = PartialCachingLookupProvider.of(
        SqlLookupFunction(connect, "dim", "id", schema="id BIGINT, name STRING"), _cache(),
        max_source_connections=None, max_retries=0, load_timeout=30)
    held = pymysql.connect(**limited_mysql_user)  # the user's one connection

    def release() -> None:
        if held.open:
            held.close()

    try:
        # Released 3 s on: the open starts well before it even on a loaded machine.
        threading.Timer(3.0, release).start()
        with open_lookup(provider) as handle:  # opening waits: 1203 until the timer
            assert handle.lookup((7,)) == ((7, "n7"),)
            metrics = handle.metrics
            assert metrics.num_connection_waits >= 1
            assert metrics.connection_wait_ms >= 500
            assert (metrics.num_retries, metrics.num_load_failures) == (0, 0)
    finally:
        release()
