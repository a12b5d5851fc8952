"""A change feed within one Python process, for tests: the smallest `ChangeFeed`."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from lookup.changes.feed import Change, ChangeConnection, ChangeFeed, Key

__all__ = ["InProcessChanges"]


class _Bus:
    """The live connections of one in-process feed in this process."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.connections: list[_InProcessConnection] = []
        self.refusing = False
        self.connects = 0


_buses: dict[str, _Bus] = {}
_buses_lock = threading.Lock()


def _bus(feed_id: str) -> _Bus:
    with _buses_lock:
        return _buses.setdefault(feed_id, _Bus())


class _InProcessConnection(ChangeConnection):
    def __init__(self, bus: _Bus) -> None:
        self._bus = bus
        self.queue: list[Change] = []
        self.dropped = False
        self.interrupted = False

    def receive(self, timeout: float) -> list[Change]:
        with self._bus.condition:
            self._bus.condition.wait_for(
                lambda: self.queue or self.dropped or self.interrupted, timeout)
            if self.dropped:
                raise ConnectionError("the in-process change feed dropped this connection")
            self.interrupted = False
            received, self.queue = self.queue, []
            return received

    def interrupt(self) -> None:
        with self._bus.condition:
            self.interrupted = True
            self._bus.condition.notify_all()

    def close(self) -> None:
        with self._bus.condition:
            if self in self._bus.connections:
                self._bus.connections.remove(self)


class InProcessChanges(ChangeFeed):
    """A change feed within one Python process, as ``LISTEN``/``NOTIFY`` within one
    database: `publish` delivers to the connections open at that moment, and a
    change published while no connection is open is lost (the listener's flush after
    reconnecting makes up for it).

    A test double (copies unpickled in another process publish there only).

    Examples
    --------
    >>> feed = InProcessChanges(["id"])
    >>> feed.publish([(1,), (2,)])  # no connection open: nobody hears it
    0
    """

    def connect(self) -> ChangeConnection:
        bus = _bus(self.feed_id)
        with bus.condition:
            if bus.refusing:
                raise ConnectionRefusedError("the in-process change feed refuses connections")
            connection = _InProcessConnection(bus)
            bus.connections.append(connection)
            bus.connects += 1
            bus.condition.notify_all()
            return connection

    def publish(self, keys: Iterable[Key]) -> int:
        """Deliver one change of ``keys`` (tuples in ``key_columns`` order) to every open
        connection; returns how many there were."""
        return self._deliver(Change(tuple(keys)))

    def publish_everything(self, reason: str = "everything changed") -> int:
        """Deliver one "everything may have changed"; returns the connections reached."""
        return self._deliver(Change(everything=True, reason=reason))

    def _deliver(self, change: Change) -> int:
        bus = _bus(self.feed_id)
        with bus.condition:
            for connection in bus.connections:
                connection.queue.append(change)
            bus.condition.notify_all()
            return len(bus.connections)

    def drop_connections(self, *, refuse: bool = False) -> None:
        """Break every open connection (their listeners reconnect); with ``refuse``, also
        refuse new connections until `accept_connections`."""
        bus = _bus(self.feed_id)
        with bus.condition:
            bus.refusing = refuse
            for connection in bus.connections:
                connection.dropped = True
            bus.connections = []
            bus.condition.notify_all()

    def accept_connections(self) -> None:
        """Accept connections again (after ``drop_connections(refuse=True)``)."""
        bus = _bus(self.feed_id)
        with bus.condition:
            bus.refusing = False

    @property
    def connections(self) -> int:
        """How many connections are open in this process now."""
        bus = _bus(self.feed_id)
        with bus.condition:
            return len(bus.connections)

    @property
    def connects(self) -> int:
        """How many connections were opened in this process so far."""
        bus = _bus(self.feed_id)
        with bus.condition:
            return bus.connects

    def wait_for_connects(self, count: int, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until ``count`` connections were opened
        here in all and one is open; whether that happened."""
        bus = _bus(self.feed_id)
        with bus.condition:
            return bus.condition.wait_for(
                lambda: bus.connects >= count and bool(bus.connections), timeout)
