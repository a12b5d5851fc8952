"""A change feed applied to a full cache: reload soon after a change, debounced (a
source without a keyed lookup, or what ``lookup.changes.overlay`` cannot apply by key).

Design notes: DESIGN.md, lookup/ ``lookup/changes/reload.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Final

from cache.metrics import CacheMetrics
from lookup.changes.feed import Change
from lookup.changes.host_listeners import HostListeners

__all__ = ["SETTLE_SECONDS", "ChangeReloads"]

log = logging.getLogger("lookup")

SETTLE_SECONDS = 0.05
"""How long a change waits before its reload: the workers of a host hear a notification
within milliseconds of each other, so the first one's load starts after every one has
heard it, and the others find that load good enough (one load per change per host)."""

CallLater = Callable[[float, Callable[[], object], str], object]


class ChangeReloads:
    """Reloads a full cache after changes (a `ChangeSink`).

    Parameters
    ----------
    served_since
        When the load of the snapshot served started, or of a newer one the host's
        store holds (None: no snapshot yet).
    reload
        Starts a reload whose load starts after the given time, or joins the one
        running; its future ends with it.
    min_interval
        Seconds between the starts of two reloads for changes.
    clock
        The full cache's clock (seconds; the one load times are read with).
    call_later
        Runs ``action`` once after ``delay`` seconds: ``(delay, action, name)``, returns
        something with ``cancel()`` (the process scheduler's ``call_later``).
    host
        The listening marks of the host's shared store (None: not shared): a listener
        that connects reloads only when no other process of the host has been covering
        the snapshot served (``lookup.changes.host_listeners``).

    Attributes
    ----------
    metrics, clock, describe, host
        As given; the runtime's `ChangeOverlay` reports
        through the same ones (both serve one full cache).
    """

    def __init__(self, *, served_since: Callable[[], float | None],
                 reload: Callable[[float], Future[None]], min_interval: float,
                 metrics: CacheMetrics, clock: Callable[[], float], call_later: CallLater,
                 describe: str, host: HostListeners | None = None) -> None:
        self._served_since = served_since
        self._reload = reload
        self._min_interval = min_interval
        self.metrics: Final = metrics
        self.clock: Final = clock
        self._call_later = call_later
        self.describe: Final = describe
        self.host: Final = host
        self._lock = threading.Lock()
        self._since: float | None = None  # the latest change not yet asked for
        self._needed: float | None = None  # the latest change not yet served
        self._firing = False
        self._reloading: Future[None] | None = None
        self._timer: object | None = None
        self._last_start = float("-inf")
        self._closed = False

    def close(self) -> None:
        """Reload nothing more (the runtime closes)."""
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
            needed = self._needed
        cancel = getattr(timer, "cancel", None)
        if cancel is not None:
            cancel()
        if self.host is not None:
            if needed is not None:
                self.host.leave_pending(needed)  # for a worker that starts listening later
            self.host.stopped()

    def changes(self, changes: Sequence[Change]) -> None:
        """Changes arrived: reload soon."""
        self.metrics.inc_notifications(len(changes))
        self.reload_soon()

    def reload_soon(self) -> None:
        """Reload soon, as for a change seen now (what an overlay of changes cannot
        apply by key: "everything", or more keys than it holds)."""
        self._due(self.clock())

    def connected(self, reconnected: bool) -> None:
        """The feed listens (again): a change may have been missed, reload soon (unless
        the snapshot served started loading after this, or another process of the host
        has listened since before it was loaded)."""
        now = self.clock()
        if reconnected:
            self.metrics.inc_reconnect_flushes()
        if self.host is not None:
            self.host.listening(now)
            served = self._served_since()
            if served is not None and self.host.covered(served):
                return
        self._due(now)

    def subscribed(self) -> bool:
        """The runtime subscribed, perhaps to a listener connected long ago (then no
        `connected` comes): whether the host's version may be served as it is.
        False when it was loaded before now and no other process has covered it: it
        may lack a change only other processes heard (one they hold in their overlays,
        or one nobody heard), and the runtime loads one after now before serving."""
        if self.host is None:
            return True  # not shared: its first load starts after it listens
        served = self._served_since()
        return served is None or self.host.covered(served)

    def disconnected(self) -> None:
        """The feed stopped listening: this process covers the host no more."""
        if self.host is not None:
            self.host.stopped()

    def _base(self) -> float:
        """When the latest load started: this runtime's, or the host's (served)."""
        served = self._served_since()
        return self._last_start if served is None else max(self._last_start, served)

    def _due(self, since: float) -> None:
        with self._lock:
            if self._closed:
                return
            self._since = since if self._since is None else max(self._since, since)
            self._needed = since if self._needed is None else max(self._needed, since)
            if self._timer is not None:
                return
            delay = max(SETTLE_SECONDS, self._base() + self._min_interval - self.clock())
            self._timer = self._call_later(delay, self._fire,
                                           f"reload for changes of {self.describe}")

    def idle(self) -> bool:
        """Whether no reload for changes is waiting, starting or running (for tests)."""
        with self._lock:
            return self._timer is None and not self._firing and self._reloading is None

    def _fire(self) -> None:
        with self._lock:
            since, self._since = self._since, None
            self._timer = None
            if since is None or self._closed:
                return
            self._firing = True
        try:
            self._fire_for(since)
        finally:
            with self._lock:
                self._firing = False

    def _fire_for(self, since: float) -> None:
        served = self._served_since()
        if served is not None and served >= since:
            self._served(served)
            return  # a load that started after the change serves already
        now = self.clock()
        if self._base() + self._min_interval > now:
            # Another worker of the host loaded meanwhile: the next round covers this.
            self._due(since)
            return
        future = self._reload(since)
        with self._lock:
            self._last_start = now
            self._reloading = future
        future.add_done_callback(lambda done: self._ended(done, since))

    def _served(self, served: float) -> None:
        with self._lock:
            if self._needed is not None and self._needed <= served:
                self._needed = None

    def _ended(self, done: Future[None], since: float) -> None:
        try:
            if done.cancelled() or done.exception() is not None:
                return  # closed, or failed: counted and logged by the load; the schedule retries
            served = self._served_since()
            if served is None or served < since:
                # The load joined had started before the change: one more.
                self._due(since)
            else:
                self._served(served)
        finally:
            with self._lock:
                if self._reloading is done:
                    self._reloading = None
