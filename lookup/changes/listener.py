"""The listener of a change feed in one process: one daemon thread per feed, shared by
every runtime that uses the feed here, started by the first `subscribe` and
stopped when the last subscription closes.

The thread connects ([`ChangeFeed.connect`][]), tells every subscriber that it is
connected, then hands each batch of changes it receives to every subscriber. When the
connection is lost it reconnects with backoff (0.1 s doubling to 10 s); once connected
again it tells every subscriber so, *after* listening, and each then treats everything
as changed: whatever was committed between the loss and the new connection is flushed,
and nothing committed after it is missed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from typing import Protocol

from lookup.changes.feed import Change, ChangeConnection, ChangeFeed

__all__ = ["ChangeSink", "Subscription", "listener_thread", "subscribe"]

log = logging.getLogger("lookup")

_RECEIVE_SECONDS = 1.0
"""Longest wait of one receive: how late a stop is noticed when a backend cannot
interrupt its wait."""

_FIRST_BACKOFF_SECONDS = 0.1
_MAX_BACKOFF_SECONDS = 10.0


class ChangeSink(Protocol):
    """What a runtime gives `subscribe`: called on the listener thread."""

    def changes(self, changes: Sequence[Change]) -> None:
        """Changes received (in order); one call per batch the connection returned."""

    def connected(self, reconnected: bool) -> None:
        """The listener is (again, with ``reconnected``) listening: anything before may
        have been missed."""

    def disconnected(self) -> None:
        """The connection ended (lost, or the listener stops): changes may be missed
        until `connected` is called again."""


def _backoff(failures: int) -> float:
    return min(_FIRST_BACKOFF_SECONDS * 2.0 ** (failures - 1), _MAX_BACKOFF_SECONDS)


class _Listener:
    """The thread of one feed in this process and its subscribers."""

    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed
        self._lock = threading.Lock()
        self._sinks: tuple[ChangeSink, ...] = ()
        self._stopping = threading.Event()
        self._connected = threading.Event()
        self._connection: ChangeConnection | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"spark-lookup-changes-{feed.feed_id[:8]}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, sink: ChangeSink) -> None:
        with self._lock:
            self._sinks = (*self._sinks, sink)

    def remove(self, sink: ChangeSink) -> int:
        """Remove ``sink``; how many subscribers remain."""
        with self._lock:
            self._sinks = tuple(s for s in self._sinks if s is not sink)
            return len(self._sinks)

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            connection = self._connection
        if connection is not None:
            with contextlib.suppress(Exception):  # a dead connection may fail to wake
                connection.interrupt()

    def wait_connected(self, timeout: float) -> bool:
        return self._connected.wait(timeout)

    def is_connected(self) -> bool:
        return self._connected.is_set()

    def _run(self) -> None:
        failures = 0
        connected_before = False
        what = self.feed.describe()
        while not self._stopping.is_set():
            try:
                connection = self.feed.connect()
            except Exception as exc:
                failures += 1
                wait = _backoff(failures)
                level = logging.WARNING if failures == 1 or wait == _MAX_BACKOFF_SECONDS \
                    else logging.DEBUG
                log.log(level, "change feed %s cannot connect (%s: %s); caches rely on their "
                        "TTL or schedule meanwhile; retrying in %.1f s", what,
                        type(exc).__name__, exc, wait)
                self._stopping.wait(wait)
                continue
            with self._lock:
                self._connection = connection
            try:
                self._dispatch_connected(connected_before)
                if connected_before:
                    log.info("change feed %s connected again; caches flushed", what)
                connected_before = True
                failures = 0
                self._connected.set()
                while not self._stopping.is_set():
                    received = connection.receive(_RECEIVE_SECONDS)
                    if received:
                        self._dispatch(received)
            except Exception as exc:
                if not self._stopping.is_set():
                    failures += 1
                    log.warning("change feed %s lost its connection (%s: %s); reconnecting, "
                                "then flushing the caches", what, type(exc).__name__, exc)
                    self._stopping.wait(_backoff(failures))
            finally:
                self._connected.clear()
                with self._lock:
                    self._connection = None
                self._dispatch_disconnected()
                with contextlib.suppress(Exception):  # it is broken already, maybe
                    connection.close()

    def _dispatch_connected(self, reconnected: bool) -> None:
        for sink in self._sinks:
            try:
                sink.connected(reconnected)
            except Exception:
                log.exception("a cache failed to flush after %s connected",
                              self.feed.describe())

    def _dispatch_disconnected(self) -> None:
        for sink in self._sinks:
            try:
                sink.disconnected()
            except Exception:
                log.exception("a cache failed to note that %s disconnected",
                              self.feed.describe())

    def _dispatch(self, changes: list[Change]) -> None:
        for sink in self._sinks:
            try:
                sink.changes(changes)
            except Exception:
                log.exception("a cache failed to apply changes of %s", self.feed.describe())


class Subscription:
    """A runtime's use of a feed's listener; `close` ends it (idempotent)."""

    def __init__(self, listener: _Listener, sink: ChangeSink) -> None:
        self._listener: _Listener | None = listener
        self._sink = sink

    @property
    def connected(self) -> bool:
        """Whether the listener is connected now (a sink added to a listener connected
        before gets no `ChangeSink.connected` call)."""
        listener = self._listener
        return listener is not None and listener.is_connected()

    def close(self) -> None:
        """Stop delivering to the sink; the last subscription stops the thread."""
        with _registry_lock:
            listener, self._listener = self._listener, None
            if listener is None or listener.remove(self._sink):
                return
            if _listeners.get(listener.feed.feed_id) is listener:
                del _listeners[listener.feed.feed_id]
        listener.stop()


_registry_lock = threading.Lock()
_listeners: dict[str, _Listener] = {}


def subscribe(feed: ChangeFeed, sink: ChangeSink) -> Subscription:
    """Deliver ``feed``'s changes to ``sink`` from this process's listener of the feed
    (started now if there is none), waiting at most the feed's ``connect_timeout`` for
    it to be connected."""
    with _registry_lock:
        listener = _listeners.get(feed.feed_id)
        if listener is None:
            listener = _listeners[feed.feed_id] = _Listener(feed)
            listener.add(sink)
            listener.start()
        else:
            listener.add(sink)
    if not listener.wait_connected(feed.connect_timeout.total_seconds()):
        log.warning("change feed %s is not connected after %.1f s; opening anyway (caches "
                    "are flushed when it connects)", feed.describe(),
                    feed.connect_timeout.total_seconds())
    return Subscription(listener, sink)


def listener_thread(feed: ChangeFeed) -> threading.Thread | None:
    """The live listener thread of ``feed`` in this process, if any (for tests and
    diagnostics: a stopped listener's thread ends within a receive's wait)."""
    name = f"spark-lookup-changes-{feed.feed_id[:8]}"
    return next((t for t in threading.enumerate() if t.name == name and t.is_alive()), None)


def _forget_after_fork() -> None:
    # The child has none of the parent's threads, and the lock may have been held.
    global _registry_lock, _listeners
    _registry_lock = threading.Lock()
    _listeners = {}


os.register_at_fork(after_in_child=_forget_after_fork)
