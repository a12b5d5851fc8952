"""When a full cache's data comes due: a reload at the due time of the version served, and
the warning that lets lookups make way for a load about to start."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timezone
from functools import partial

from cache.full.snapshot import FullSnapshot
from triggers.base import CacheReloadTrigger
from triggers.scheduler import Scheduled, process_scheduler

__all__ = ["DueTimer"]

log = logging.getLogger("lookup")

_DUE_MARGIN_SECONDS = 0.2
"""Lookups take turns from this long before a scheduled load (its threads must wake)."""

_DUE_RECHECK_SECONDS = 0.05
"""How often a lookup asks the trigger for its next load time (a lock and a clock)."""


@dataclass(eq=False)  # a timer is itself, not its settings
class DueTimer:
    """Calls ``fire`` when the version served comes due on ``trigger``'s schedule,
    evaluated from the version's load time (``next_reload_after``), so the host reloads
    on the schedule of the data, not of whichever worker happens to be alive.

    ``clock`` is the cache's (epoch seconds); nothing is armed or fired once ``closed``
    is set.
    """

    trigger: CacheReloadTrigger
    _: KW_ONLY
    clock: Callable[[], float]
    fire: Callable[[], object]
    closed: threading.Event
    describe: str
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _timer: Scheduled | None = field(default=None, init=False, repr=False)
    _checked_until: float = field(default=-math.inf, init=False, repr=False)
    _soon_from: float = field(default=math.inf, init=False, repr=False)

    def due(self, loaded_at: float) -> float | None:
        """When a version loaded at ``loaded_at`` comes due (None: never)."""
        due = self.trigger.next_reload_after(datetime.fromtimestamp(loaded_at, timezone.utc))
        return None if due is None else due.timestamp()

    def arm(self, snapshot: FullSnapshot) -> None:
        """Fire when ``snapshot``, now served, comes due (``on_swap`` of the shared
        cache, and after each firing that succeeded); replaces the timer armed before."""
        try:
            due = self.due(snapshot.loaded_at)
        except Exception:  # a trigger's bug must not fail the lookup that switched
            log.exception("%r.next_reload_after failed; no reload timer", self.trigger)
            due = None
        self._start(due)

    def cancel(self) -> None:
        """Drop the timer armed (closing)."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _start(self, due: float | None) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if due is None or self.closed.is_set():
                return
            # On the process scheduler, with the trigger's own reloads: one timer thread
            # for every cache of the process.
            self._timer = process_scheduler().call_later(
                max(0.0, due - self.clock()), partial(self._fire_at, due),
                f"due reload of {self.describe}")

    def _fire_at(self, due: float) -> None:
        if self.closed.is_set():
            return
        if self.clock() < due:
            # The cache's clock is behind the scheduler's (an injected clock, or a step of
            # the wall clock): wait for the rest (a firing before `due` would find the
            # version not due and reload nothing).
            self._start(due)
            return
        self.fire()  # its outcome is logged by the load itself

    def soon(self) -> bool:
        """Whether the trigger's next load starts within `_DUE_MARGIN_SECONDS`: lookups
        take turns already (see `lookup_turn`), so that the threads that start it wake
        in time. Asks the trigger at most every `_DUE_RECHECK_SECONDS`."""
        now = time.monotonic()
        if now >= self._checked_until:
            due = self._next_in()
            self._checked_until = now + _DUE_RECHECK_SECONDS
            self._soon_from = math.inf if due is None else now + due - _DUE_MARGIN_SECONDS
        return now >= self._soon_from

    def _next_in(self) -> float | None:
        """Seconds until the trigger's next load (None: none scheduled, or unknown)."""
        next_time = getattr(self.trigger, "next_reload_time", None)
        when = next_time() if callable(next_time) else None
        if not isinstance(when, datetime):
            return None
        return (when - datetime.now(timezone.utc)).total_seconds()
