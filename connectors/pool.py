"""Idle connections of one table in one process, closed when idle a few seconds: a
connection serves the next read of the same load (planning, then each reader), never
holds a connection between loads."""

from __future__ import annotations

import threading
import time
import weakref

from connectors.sql.connection import SqlConnection

__all__ = ["POOL_LOCK", "ConnectionPool"]

POOL_LOCK = threading.Lock()
_POOL_SIZE = 4
_POOL_IDLE_SECONDS = 2.0
"""A pooled connection is for the next read of the same load (the enumerator's planning,
then its readers; several readers, one after another): a few seconds. Reloads minutes
or hours apart connect anew, so nothing holds a database connection between loads."""


class ConnectionPool:
    """Idle connections of one table in one process; thread-safe. Connections idle longer
    than `_POOL_IDLE_SECONDS` are closed by a daemon reaper, and every idle
    connection when the pool is collected."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[tuple[float, SqlConnection]] = []
        weakref.finalize(self, _close_all, self._idle)
        _REAPER.watch(self)

    def take(self) -> SqlConnection | None:
        """The most recently returned connection still fresh enough, or None."""
        now = time.monotonic()
        with self._lock:
            while self._idle:
                since, connection = self._idle.pop()
                if now - since <= _POOL_IDLE_SECONDS:
                    return connection
                connection.close()
        return None

    def give(self, connection: SqlConnection) -> None:
        """Keep ``connection`` for the next read (or close it when the pool is full)."""
        with self._lock:
            if len(self._idle) < _POOL_SIZE:
                self._idle.append((time.monotonic(), connection))
                return
        connection.close()

    def reap(self) -> None:
        """Close the connections idle too long."""
        limit = time.monotonic() - _POOL_IDLE_SECONDS
        with self._lock:
            stale = [s for since, s in self._idle if since < limit]
            self._idle[:] = [(since, s) for since, s in self._idle if since >= limit]
        for connection in stale:
            connection.close()

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            _close_all(self._idle)


def _close_all(idle: list[tuple[float, SqlConnection]]) -> None:
    connections = [connection for _, connection in idle]
    idle.clear()
    for connection in connections:
        connection.close()


class _Reaper:
    """One daemon thread per process closing pooled connections that idle too long."""

    def __init__(self) -> None:
        self._pools: weakref.WeakSet[ConnectionPool] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, pool: ConnectionPool) -> None:
        with self._lock:
            self._pools.add(pool)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="connectors-connection-reaper", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(_POOL_IDLE_SECONDS / 2)
            with self._lock:
                pools = list(self._pools)
            for pool in pools:
                pool.reap()


_REAPER = _Reaper()
