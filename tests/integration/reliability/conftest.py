"""Fixtures of the reliability tests: a PostgreSQL login role whose outage the test
controls, the private redis-server of the connector tests, streaming inboxes, and
queries that are always stopped.

Every server is real; only the faults are ours: a role refused at login and its
sessions terminated (PostgreSQL), a redis-server process killed and restarted.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import unavailable
from tests.connectors.conftest import (  # noqa: F401  (fixtures re-exported here)
    PgFactory,
    RedisServer,
    pg,
    pg_exec,
    redis_server,
)
from tests.integration.reliability.helpers import FileRecordingSleep, Inbox


class PgRole:
    """A login role of the test's own, reading the test's schema through connections
    tagged with its own ``application_name``.

    ``outage()`` is what a client sees of a database going down: new logins are
    refused and the open sessions are terminated; ``allow_logins()`` ends it. Nobody
    else's sessions are touched.
    """

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.name = f"sltest_{uuid.uuid4().hex[:12]}"
        self.application_name = f"{self.name}_lookup"

    def admin(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return pg_exec(self.dsn, self.schema, sql, *params)

    def factory(self) -> Callable[[], Any]:
        """The lookup's connection factory (picklable): psycopg as this role."""
        import psycopg

        return functools.partial(
            psycopg.connect, self.dsn, user=self.name, application_name=self.application_name,
            options=f"-c search_path={self.schema}", connect_timeout=5,
        )

    def grant_read(self) -> None:
        """Let the role read every table now in the schema."""
        self.admin(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{self.schema}" TO "{self.name}"')

    def terminate(self) -> int:
        """Terminate the role's lookup sessions; how many there were."""
        rows = self.admin(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s", self.application_name,
        )
        return int(rows[0][0])

    def sessions(self) -> int:
        rows = self.admin(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            self.application_name,
        )
        return int(rows[0][0])

    def outage(self) -> int:
        """Refuse the role's logins, then terminate its sessions (how many)."""
        self.admin(f'ALTER ROLE "{self.name}" NOLOGIN')
        return self.terminate()

    def allow_logins(self) -> None:
        self.admin(f'ALTER ROLE "{self.name}" LOGIN')



@pytest.fixture
def pg_role(postgres_dsn: str, pg_schema: str) -> Iterator[PgRole]:
    """A login role reading this test's schema; dropped (sessions first) afterwards."""
    import psycopg

    role = PgRole(postgres_dsn, pg_schema)
    try:
        role.admin(f'CREATE ROLE "{role.name}" LOGIN')
    except psycopg.Error as exc:
        unavailable(f"cannot create a PostgreSQL role for the outage tests: {exc}")
    try:
        role.admin(f'GRANT USAGE ON SCHEMA "{pg_schema}" TO "{role.name}"')
        yield role
    finally:
        role.admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
            role.name,
        )
        role.admin(f'DROP OWNED BY "{role.name}"')
        role.admin(f'DROP ROLE "{role.name}"')


@pytest.fixture
def recording_sleep(tmp_path: Path) -> FileRecordingSleep:
    """A retry sleep that records its waits where the test can read them."""
    return FileRecordingSleep(tmp_path / "retry-waits.txt")


@pytest.fixture
def inbox(tmp_path: Path) -> Inbox:
    return Inbox(tmp_path / "stream")


@pytest.fixture
def queries() -> Iterator[list[Any]]:
    """Streaming queries the test starts; every one is stopped afterwards."""
    started: list[Any] = []
    yield started
    for query in started:
        with contextlib.suppress(Exception):  # a failed query has stopped already
            query.stop()


@pytest.fixture
def arrow_batch_rows(spark: Any) -> Iterator[Callable[[int], None]]:
    """Set ``spark.sql.execution.arrow.maxRecordsPerBatch`` for this test (restored)."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)

    def set_rows(rows: int) -> None:
        spark.conf.set(key, str(rows))

    yield set_rows
    spark.conf.set(key, before)
