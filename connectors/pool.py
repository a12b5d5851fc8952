"""Idle connections of one table (or client) in one process, closed when idle a few
seconds: a connection serves the next read of the same load (planning, then each
reader), never holds a connection between loads. Under a connection budget an idle
connection holds a slot of the host, so it closes at once when someone waits for one."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["POOL_LOCK", "Closeable", "ConnectionPool"]


class Closeable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)

POOL_LOCK = threading.Lock()
_POOL_SIZE = 4
_POOL_IDLE_SECONDS = 2.0
"""A pooled connection is for the next read of the same load (the enumerator's planning,
then its readers; several readers, one after another): a few seconds. Reloads minutes
or hours apart connect anew, so nothing holds a database connection between loads."""
_REAP_SECONDS = 0.25
"""How often idle connections are looked at: a connection idle while someone waits for
a slot is closed within this."""


class ConnectionPool(Generic[C]):
    """Idle connections of one table in one process; thread-safe. Connections idle longer
    than `_POOL_IDLE_SECONDS` are closed by a daemon reaper, and every idle
    connection when the pool is collected. With ``contended`` (whether someone waits
    for a slot of the host's connection budget), none is kept idle while it says so;
    with ``admits``, a connection it refuses (its slot is above the budget's adaptive
    limit) is closed instead of kept or reused."""

    def __init__(self, contended: Callable[[], bool] | None = None,
                 admits: Callable[[C], bool] | None = None) -> None:
        self._lock = threading.Lock()
        self._idle: list[tuple[float, C]] = []
        self._contended = contended
        self._admits = admits
        weakref.finalize(self, _close_all, self._idle)
        _REAPER.watch(self)

    def take(self) -> C | None:
        """The most recently returned connection still fresh enough, or None."""
        now = time.monotonic()
        while True:
            with self._lock:
                if not self._idle:
                    return None
                since, connection = self._idle.pop()
            if now - since <= _POOL_IDLE_SECONDS and (
                    self._admits is None or self._admits(connection)):
                return connection
            connection.close()

    def give(self, connection: C) -> None:
        """Keep ``connection`` for the next read (or close it when the pool is full, or
        someone waits for its slot)."""
        if (self._contended is not None and self._contended()) or (
                self._admits is not None and not self._admits(connection)):
            connection.close()
            return
        with self._lock:
            if len(self._idle) < _POOL_SIZE:
                self._idle.append((time.monotonic(), connection))
                return
        connection.close()

    def reap(self) -> None:
        """Close the connections idle too long (all of them, when someone waits for a
        slot)."""
        limit = time.monotonic() - _POOL_IDLE_SECONDS
        if self._idle and self._contended is not None and self._contended():
            limit = float("inf")
        with self._lock:
            stale = [s for since, s in self._idle if since < limit]
            self._idle[:] = [(since, s) for since, s in self._idle if since >= limit]
        for connection in stale:
            connection.close()

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            _close_all(self._idle)


def _close_all(idle: list[tuple[float, C]]) -> None:
    connections = [connection for _, connection in idle]
    idle.clear()
    for connection in connections:
        connection.close()


class _Reaper:
    """One daemon thread per process closing pooled connections that idle too long."""

    def __init__(self) -> None:
        self._pools: weakref.WeakSet[ConnectionPool[Closeable]] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, pool: ConnectionPool[C]) -> None:
        with self._lock:
            self._pools.add(pool)  # type: ignore[arg-type]
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="connectors-connection-reaper", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(_REAP_SECONDS)
            with self._lock:
                pools = list(self._pools)
            for pool in pools:
                pool.reap()


_REAPER = _Reaper()
