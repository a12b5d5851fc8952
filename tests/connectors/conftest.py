"""Fixtures of the connector tests: private redis-server processes (started on a free
port, killed by the test or at teardown), sqlite files, and connection factories that
record the statements they run (real connections; only the bookkeeping is ours)."""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import unavailable


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """A redis-server of the test's own, without persistence."""

    def __init__(self, workdir: Path, password: str | None = None, tls: bool = False) -> None:
        self.workdir = workdir
        self.password = password
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.cert: Path | None = None
        if tls:
            # One self-signed certificate for 127.0.0.1: the server's, and the client's CA.
            self.cert, key = workdir / "cert.pem", workdir / "key.pem"
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                 "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                 str(self.cert)],
                check=True, capture_output=True,
            )

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.cert is not None:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.cert}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.workdir),
        ]
        if self.password:
            command += ["--requirepass", self.password]
        if self.cert is not None:
            command[1:3] = ["--port", "0", "--tls-port", str(self.port)]
            command += ["--tls-cert-file", str(self.cert), "--tls-key-file",
                        str(self.workdir / "key.pem"), "--tls-auth-clients", "no"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start on {self.port}") from None
                    time.sleep(0.01)
        finally:
            client.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)

    def reads_during(self, action: Any) -> tuple[int, dict[str, int]]:
        """How many socket reads the server made while ``action()`` ran, and the calls
        of each command. A pipelined batch sent in one write is read once: a batch that
        costs as many reads as a single command was one round trip."""
        client = self.client()
        try:
            client.ping()  # connected before counting
            before = client.info("stats")["total_reads_processed"]
            calls_before = client.info("commandstats")
            action()
            after = client.info("stats")["total_reads_processed"]
            calls_after = client.info("commandstats")
        finally:
            client.close()
        calls = {
            name.removeprefix("cmdstat_"): stat["calls"]
            - calls_before.get(name, {}).get("calls", 0)
            for name, stat in calls_after.items()
        }
        # Minus the reads of the two INFO commands of ours in between.
        return after - before - 2, {k: v for k, v in calls.items() if v and k != "info"}


def _start(workdir: Path, password: str | None = None) -> RedisServer:
    if shutil.which("redis-server") is None:
        unavailable("redis-server is not on PATH")
    pytest.importorskip("redis")
    server = RedisServer(workdir, password)
    server.start()
    return server


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server for this test (it may kill and restart it)."""
    server = _start(tmp_path)
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def shared_private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server for a module's round-trip counting tests (never killed
    by a test; nobody else talks to it)."""
    server = _start(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.kill()


# --- SQL ------------------------------------------------------------------------------


class SqliteFactory:
    """Opens a sqlite file and records every statement sqlite runs (its trace hook)."""

    def __init__(self, path: Path, variable_limit: int | None = None, begin: bool = False
                 ) -> None:
        self.path = str(path)
        self.variable_limit = variable_limit
        self.begin = begin
        self.statements: list[str] = []
        self.connections = 0
        self.opened: list[sqlite3.Connection] = []

    def __call__(self) -> sqlite3.Connection:
        self.connections += 1
        connection = sqlite3.connect(self.path, check_same_thread=not self.begin)
        if self.variable_limit is not None:
            connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, self.variable_limit)
        if self.begin:  # as a driver that starts transactions by itself would
            connection.execute("BEGIN")
        connection.set_trace_callback(self.statements.append)
        self.opened.append(connection)
        return connection

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "variable_limit": self.variable_limit, "begin": self.begin}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def lookups(self) -> list[str]:
        return [s for s in self.statements if '"_lk"' in s]


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "dim.db"


def sqlite_exec(path: Path, script: str, rows: dict[str, list[tuple[Any, ...]]] | None = None
                ) -> None:
    """Run ``script``, then insert ``rows`` per table, and commit."""
    with sqlite3.connect(path) as connection:
        connection.executescript(script)
        for table, values in (rows or {}).items():
            if values:
                marks = ", ".join("?" * len(values[0]))
                connection.executemany(f'INSERT INTO "{table}" VALUES ({marks})', values)
    connection.close()


class PgFactory:
    """Opens psycopg connections tagged with an application name, searching ``schema``
    first, and records the statements their cursors execute."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.application_name = f"sltest_{uuid.uuid4().hex[:12]}"
        self.statements: list[tuple[str, Any]] = []
        self.connections = 0

    def __call__(self) -> Any:
        import psycopg

        log = self.statements

        class RecordingCursor(psycopg.Cursor):  # type: ignore[type-arg]
            def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
                log.append((str(query), params))
                return super().execute(query, params, **kwargs)

        self.connections += 1
        return psycopg.connect(
            self.dsn,
            cursor_factory=RecordingCursor,
            application_name=self.application_name,
            options=f"-c search_path={self.schema}",
        )

    def lookups(self) -> list[tuple[str, Any]]:
        """The lookup statements: an ORDINALITY join, or "= ANY" for one exact key."""
        return [s for s in self.statements if '"_lk"' in s[0] or "= ANY(%s::" in s[0]]

    def __getstate__(self) -> dict[str, Any]:
        return {"dsn": self.dsn, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["dsn"], state["schema"])  # type: ignore[misc]


def pg_exec(dsn: str, schema: str, script: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as conn:
        cursor = conn.execute(script, params or None)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def pg(postgres_dsn: str, pg_schema: str) -> PgFactory:
    """A recording connection factory whose search path is this test's own schema."""
    return PgFactory(postgres_dsn, pg_schema)
