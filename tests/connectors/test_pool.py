"""Idle connections under a connection budget: kept for the next read, closed at once
when someone on the host waits for a slot (their slots go back with them)."""

from __future__ import annotations

import time

from connectors.pool import ConnectionPool


class _Connection:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_an_idle_connection_is_kept_unless_someone_waits() -> None:
    waiting = False
    pool: ConnectionPool[_Connection] = ConnectionPool(lambda: waiting)
    kept = _Connection()
    pool.give(kept)
    assert pool.take() is kept
    assert not kept.closed
    waiting = True
    given = _Connection()
    pool.give(given)
    assert given.closed
    assert pool.take() is None


def test_the_reaper_closes_idle_connections_while_someone_waits() -> None:
    waiting = False
    pool: ConnectionPool[_Connection] = ConnectionPool(lambda: waiting)
    idle = _Connection()
    pool.give(idle)
    pool.reap()
    assert not idle.closed  # fresh, and nobody waits
    waiting = True
    deadline = time.monotonic() + 5
    while not idle.closed:  # the process's reaper looks four times a second
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert pool.take() is None
