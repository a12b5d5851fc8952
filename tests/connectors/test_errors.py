"""Over-limit refusals are their own transient kind (`SourceBusyError`): PostgreSQL's
SQLSTATE 53300, MySQL's and MariaDB's 1040, 1203 and 1226 for max_user_connections,
Redis's maxclients; nothing else is."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from connectors.errors import is_over_limit, is_source_busy, is_transient, translate
from spark_lookup.errors import ConnectorError, SourceBusyError, TransientConnectorError


def test_driver_refusals_over_a_connection_limit_are_busy() -> None:
    import psycopg
    import pymysql
    import redis

    refusals: list[BaseException] = [
        psycopg.OperationalError('connection failed: FATAL:  too many connections for role "r"'),
        psycopg.OperationalError("FATAL:  sorry, too many clients already"),
        psycopg.OperationalError(
            "FATAL:  remaining connection slots are reserved for roles with the SUPERUSER "
            "attribute"),
        pymysql.err.OperationalError(1040, "Too many connections"),
        pymysql.err.OperationalError(
            1203, "User u already has more than 'max_user_connections' active connections"),
        pymysql.err.OperationalError(
            1226, "User 'u' has exceeded the 'max_user_connections' resource (current value: 1)"),
        redis.ConnectionError("max number of clients reached"),
    ]
    for refusal in refusals:
        assert is_over_limit(refusal), refusal
        assert is_transient(refusal), refusal
        assert is_source_busy(refusal), refusal
        assert isinstance(translate(refusal, "connecting"), SourceBusyError), refusal
    others: list[BaseException] = [
        psycopg.OperationalError("connection failed: Connection refused"),
        pymysql.err.OperationalError(2003, "Can't connect to MySQL server"),
        pymysql.err.OperationalError(1045, "Access denied for user"),
        pymysql.err.OperationalError(
            1226, "User 'u' has exceeded the 'max_queries_per_hour' resource (current value: 9)"),
        redis.ConnectionError("Error 111 connecting"),
    ]
    for other in others:
        assert not is_over_limit(other), other
        assert type(translate(other, "connecting")) in (ConnectorError,
                                                        TransientConnectorError), other
    assert is_source_busy(SourceBusyError("x"))
    assert not is_source_busy(TransientConnectorError("x"))
    assert not is_source_busy(RuntimeError("too many connections"))  # a user's own error


@pytest.mark.postgres
def test_a_postgres_role_over_its_limit_is_refused_as_busy(postgres_dsn: str) -> None:
    import psycopg

    role = f"sltest_role_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 1')
    held: Any = None
    try:
        held = psycopg.connect(postgres_dsn, user=role)
        with pytest.raises(psycopg.Error) as refused:
            psycopg.connect(postgres_dsn, user=role).close()
        assert is_over_limit(refused.value)
        assert isinstance(translate(refused.value, "connecting"), SourceBusyError)
    finally:
        if held is not None:
            held.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE usename = %s", (role,))
            admin.execute(f'DROP ROLE "{role}"')
