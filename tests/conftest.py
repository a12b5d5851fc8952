"""Shared fixtures: one local SparkSession per test session, and isolated Redis and
PostgreSQL access.

Service fixtures read ``REDIS_URL`` / ``POSTGRES_DSN`` (defaults: the loopback servers of
the development machine). An unreachable server skips the test with the reason, except
under ``CI=true``, where it fails: CI must never pass by skipping.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip (locally) or fail (under CI=true) a test whose server cannot be reached."""
    if IN_CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


# --- Spark ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one local[2] SparkSession of the test session (UI off, 2 shuffle partitions)."""
    # Python workers must run the driver's interpreter (and see this checkout).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-lookup-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


# --- Redis ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of a reachable Redis server (REDIS_URL)."""
    try:
        import redis
    except ImportError:
        unavailable("redis-py is not installed (pip install 'spark-lookup[redis]')")
        raise
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        client.ping()
        client.close()
    except redis.RedisError as exc:
        unavailable(f"Redis at {REDIS_URL} is unreachable: {exc}")
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    import redis

    prefix = f"sltest:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Any]:
    """A redis-py client (bytes responses) for seeding and checking data."""
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


# --- PostgreSQL ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """DSN of a reachable PostgreSQL server (POSTGRES_DSN)."""
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install 'spark-lookup[postgres]')")
        raise
    try:
        with psycopg.connect(POSTGRES_DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {POSTGRES_DSN} is unreachable: {exc}")
    return POSTGRES_DSN


@pytest.fixture
def pg_schema(postgres_dsn: str) -> Iterator[str]:
    """A schema of this test's own (dropped with everything in it afterwards)."""
    import psycopg

    schema = f"sltest_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
