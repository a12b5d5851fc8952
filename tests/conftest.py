"""Shared fixtures: one local SparkSession of each kind (classic, Spark Connect) per test
session, and isolated Redis, PostgreSQL and MySQL access.

Service fixtures read ``REDIS_URL`` / ``POSTGRES_DSN`` / ``MYSQL_URL`` (defaults: the
loopback servers of the development machine). An unreachable server skips the test with the
reason, except
under ``CI=true``, where it fails: CI must never pass by skipping.
"""

from __future__ import annotations

import os
import sys
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.env import JVM_FAST_START

# Fixtures of more than one folder (a test finds them wherever it lives).
pytest_plugins = ["tests.fixtures.refresh", "tests.fixtures.scan"]

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip (locally) or fail (under CI=true) a test whose server cannot be reached."""
    if IN_CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


# --- Spark ---------------------------------------------------------------------------

SPARK_KINDS = ("classic", "connect")
"""Every test that takes the ``spark`` fixture runs once per kind of session, unless
marked ``classic_only`` (it inspects what only a classic session has: the JVM, RDDs)."""

# Runtime settings of both kinds of session. The static ones (UI, memory) go to the
# classic builder; a Connect session gets them through the local server's start.
_CONFIG = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
}
_STATIC_CONFIG = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": JVM_FAST_START,
}


MATRIX_LINE = os.environ.get("SPARK_LOOKUP_MATRIX_LINE") == "1"
"""Set by the test matrix (noxfile.py) on the PySpark lines other than the one the whole
suite runs on (``.ci/run`` must end within 35 minutes on 2 CPUs, so each line runs what
can differ there):

- On 3.5, the LTS line (pandas-based conversions, no data source API, no Connect server):
  every Spark test, on classic sessions; the demo and the local-cluster job too.
- On the other 4.x lines: the Spark tests marked ``every_line`` (each entry point, in each
  cache mode, on each engine: the join, point in time, SQL functions, the table function,
  refreshed views, the data source, the contract's types) and those marked
  ``connect_on_every_line`` (the join and its metrics, on Spark Connect too), plus the
  version gates (``matrix``). The rest test the library's own mechanisms through the
  same calls, on the whole suite's line and 3.5.
- On none of them: the tests marked ``whole_suite_only`` (connection budgets, outages,
  change feeds: the library's own machinery behind a join every line runs).

The contract runs on one backend there (what a backend hands over is Arrow whatever the
line; what the line changes is Spark's side)."""

LTS_LINE = "3.5."
"""The matrix line that runs every Spark test (see `MATRIX_LINE`)."""

MATRIX_CONTRACT = "TestPostgresPsycopg"
"""The contract's backend on the matrix's other lines: the one with the most types."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spark" in metafunc.fixturenames:
        definition = metafunc.definition
        classic = definition.get_closest_marker("classic_only") is not None or (
            MATRIX_LINE and definition.get_closest_marker("connect_on_every_line") is None)
        kinds = ["classic"] if classic else list(SPARK_KINDS)
        # Session scope: pytest runs every test of one kind before any of the other, so
        # one session of each kind serves the whole run, one after the other.
        metafunc.parametrize("spark", kinds, indirect=True, scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `make test` runs two pytest-xdist workers (`-n 2 --dist loadgroup`). A process can
    # hold one kind of session at a time and switching costs a JVM restart, so every test
    # of one kind goes to one worker (its group); a test that changes server-wide state
    # runs in the group of the tests that depend on it (`xdist_group` on the module).
    for item in items:
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("spark") if callspec is not None else None
        if kind is not None:
            item.add_marker(pytest.mark.xdist_group(f"spark-{kind}"))
        reason = _not_on_this_pyspark(item, kind) or _not_on_this_matrix_line(item)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def _not_on_this_matrix_line(item: pytest.Item) -> str | None:
    if not MATRIX_LINE:
        return None
    if item.get_closest_marker("whole_suite_only") is not None:
        return ("the library's own mechanism, through the same Spark calls on every line: "
                "the whole suite's line only (tests/conftest.py: MATRIX_LINE)")
    import pyspark

    if (not pyspark.__version__.startswith(LTS_LINE)
            and item.get_closest_marker("spark") is not None
            and not any(item.get_closest_marker(name) is not None
                        for name in ("every_line", "connect_on_every_line", "matrix"))):
        return (f"not marked every_line: on PySpark {pyspark.__version__}, the matrix runs "
                "each entry point's tests only (tests/conftest.py: MATRIX_LINE)")
    cls = getattr(item, "cls", None)
    if (MATRIX_LINE and cls is not None and item.module is not None
            and item.module.__name__.endswith("test_contract")
            and cls.__name__ != MATRIX_CONTRACT):
        return (f"the matrix runs the contract on {MATRIX_CONTRACT} only "
                "(tests/conftest.py: MATRIX_LINE)")
    return None


def _not_on_this_pyspark(item: pytest.Item, kind: str | None) -> str | None:
    """Why ``item`` cannot run on the installed PySpark, or None (the test matrix runs
    the suite on every supported line: noxfile.py). A test marked
    ``needs("CAPABILITY", ...)`` tests a mechanism gated in ``spark_lookup.compat``;
    where the line lacks it, ``tests/spark_lookup/test_compat.py`` checks the entry point's refusal
    instead."""
    from spark_lookup import compat as _compat

    if kind == "connect" or item.get_closest_marker("connect_server") is not None:
        missing = connect_server_missing()
        if missing is not None:
            return missing
    for marker in item.iter_markers("needs"):
        for name in marker.args:
            capability = getattr(_compat, name)
            if not capability.available(connect=kind == "connect"):
                return (f"PySpark {_compat.pyspark_version()} lacks {capability.mechanism} "
                        f"({capability.first_line(connect=kind == 'connect')}+); "
                        "tests/spark_lookup/test_compat.py checks the refusal")
    return None


def connect_server_missing() -> str | None:
    """Why no local Spark Connect server can start with the installed PySpark, or None.

    PySpark 4 ships the server (``jars/spark-connect_*.jar``); PySpark 3.5 does not (it
    comes from Maven Central, with ``--packages``, which the test machines cannot reach),
    so its Connect tests are skipped with this reason."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    if any(jars.glob("spark-connect_*.jar")):
        return None
    return (f"PySpark {pyspark.__version__} ships no Spark Connect server (spark-connect jar: "
            "Maven Central, unreachable here), so no local Connect session can start")


def _connect_missing() -> str | None:
    try:
        import grpc  # noqa: F401
        import pyspark.sql.connect.session  # noqa: F401
    except ImportError as exc:
        return f"the Spark Connect client is not installed ({exc}): pip install -e '.[dev]'"
    return None


def _local_connect_session(builder: Any) -> Any:
    """``builder.remote("local[2]")``: a local Connect server in this process, and a
    session of it, on an ephemeral port.

    A local server listens on 15002 unless ``SPARK_TESTING`` is set, which PySpark reads
    (in this process, while the session is created) to bind an ephemeral port and find
    it, so that test runs side by side do not collide. The JVM must not see it (it would
    run Spark in its own test mode): it is started first, without it, by a classic
    context, which the Connect server's start then replaces.
    """
    from pyspark.sql import SparkSession

    starter = SparkSession.builder.master("local[1]")
    for key, value in _STATIC_CONFIG.items():  # the JVM's own settings: memory, JIT
        starter = starter.config(key, value)
    starter.getOrCreate().stop()
    os.environ["SPARK_TESTING"] = "1"
    try:
        with warnings.catch_warnings():
            # The static settings reach the local server's start; setting them again on
            # the Connect session afterwards is refused with a warning.
            warnings.filterwarnings("ignore", "Failed to set spark", UserWarning)
            return builder.remote("local[2]").getOrCreate()
    finally:
        del os.environ["SPARK_TESTING"]


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The local[2] SparkSession of the test session, classic or Spark Connect (a local
    Connect server in this process, started by ``builder.remote("local[2]")``).

    The two kinds cannot be open at once in one process: once a Connect session exists,
    PySpark builds Connect columns and functions everywhere in the process
    (``SPARK_CONNECT_MODE_ENABLED``), and a local Connect server needs the process's
    SparkContext for itself. So the classic session is stopped before the Connect one
    starts (pytest orders the tests so); stopping the Connect session stops its server
    and restores classic mode.
    """
    kind = request.param
    # Python workers must run the driver's interpreter (and see this checkout).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Tests pass classes of the `tests` package (pickled by reference) to the workers.
    # A classic worker finds it from its working directory, the JVM's; a Connect worker
    # runs in a directory of its session. The JVM, started by the first session of the
    # run, hands its PYTHONPATH on to every worker.
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(f"spark-lookup-tests-{kind}")
    for key, value in {**_CONFIG, **_STATIC_CONFIG}.items():
        builder = builder.config(key, value)
    if kind == "classic":
        session = builder.master("local[2]").getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
    else:
        missing = _connect_missing()
        if missing is not None:
            # A dev extra: CI must not pass by skipping the Connect half of the suite.
            unavailable(missing)
        session = _local_connect_session(builder)
    try:
        yield session
    finally:
        from lookup.spark.metrics import stop_metrics_listener

        stop_metrics_listener(session)  # spares the Connect server's log an error
        session.stop()


@pytest.fixture
def spark_kind(request: pytest.FixtureRequest, spark: Any) -> str:
    """``"classic"`` or ``"connect"``: the kind of the ``spark`` session."""
    return str(request.node.callspec.params["spark"])


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


@contextmanager
def own_redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of the caller's own; every key under it is deleted on exit."""
    import redis

    prefix = f"sltest:{uuid.uuid4().hex[:12]}:"
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(redis_url)
        try:
            keys = list(client.scan_iter(match=prefix + "*", count=1000))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    with own_redis_prefix(redis_url) as prefix:
        yield prefix


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


@contextmanager
def own_pg_schema(postgres_dsn: str) -> Iterator[str]:
    """A schema of the caller's own, dropped with everything in it on exit."""
    import psycopg

    schema = f"sltest_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def pg_schema(postgres_dsn: str) -> Iterator[str]:
    """A schema of this test's own (dropped with everything in it afterwards)."""
    with own_pg_schema(postgres_dsn) as schema:
        yield schema


def mysql_params(url: str, database: str | None = None) -> dict[str, Any]:
    """Connection keywords (pymysql's and mysql-connector's alike) of a ``mysql://`` URL."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "database": database or parts.path.lstrip("/") or "test",
    }


@pytest.fixture(scope="session")
def mysql_url() -> str:
    """URL of a reachable MySQL or MariaDB server (MYSQL_URL)."""
    try:
        import pymysql
    except ImportError:
        unavailable("pymysql is not installed (pip install 'spark-lookup[mysql]')")
        raise
    try:
        pymysql.connect(**mysql_params(MYSQL_URL), connect_timeout=3).close()
    except pymysql.Error as exc:
        unavailable(f"MySQL at {MYSQL_URL} is unreachable: {exc}")
    return MYSQL_URL


@contextmanager
def own_mysql_db(mysql_url: str) -> Iterator[str]:
    """A database of the caller's own, dropped with everything in it on exit."""
    import pymysql

    database = f"sltest_{uuid.uuid4().hex[:12]}"
    with pymysql.connect(**mysql_params(mysql_url)) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
    try:
        yield database
    finally:
        with pymysql.connect(**mysql_params(mysql_url)) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{database}`")


@pytest.fixture
def mysql_db(mysql_url: str) -> Iterator[str]:
    """A database of this test's own (dropped with everything in it afterwards)."""
    with own_mysql_db(mysql_url) as database:
        yield database
