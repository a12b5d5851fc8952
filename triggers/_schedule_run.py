"""The run of one opened trigger: a chain of one-shot jobs on the process scheduler.

A run is created by ``open`` and ended by ``close``; a trigger's configuration never
holds one across pickling. The first job starts a load at the open; each later job is
added when the load before it has ended, at the time the trigger's pure schedule gives,
so two loads of a run never overlap and a fixed delay is measured from the end.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from datetime import datetime, timezone
from functools import partial
from typing import Any

from triggers.base import ReloadContext
from triggers.scheduler import Scheduled, process_scheduler

__all__ = ["Following", "ScheduleRun"]

logger = logging.getLogger("triggers")

Following = Callable[[datetime, datetime, bool], datetime]
"""``(fired_at, ended_at, first) -> next fire time``: the trigger's pure schedule."""


class ScheduleRun:
    """One open period of a trigger; thread-safe.

    A lock makes "is the run closed?" and "start the load" one step, so once
    `close` has taken it no load can start; ``close`` takes it with a timeout, so a
    ``trigger_reload()`` call that hangs cannot hang ``close``.
    """

    def __init__(self, context: ReloadContext, following: Following, label: str) -> None:
        self._context = context
        self._following = following
        self._label = label
        self._scheduler = process_scheduler()
        self._lock = threading.RLock()  # re-entrant: a context may close us from its load
        self._closed = threading.Event()
        self._in_flight: Future[Any] | None = None
        self._next: Scheduled | None = None

    @property
    def closed(self) -> bool:
        """Whether `close` has been called."""
        return self._closed.is_set()

    def start(self, opened_at: datetime) -> None:
        """Start the first load now; the schedule follows from ``opened_at``."""
        with self._lock:
            self._next = self._scheduler.call_at(
                opened_at, partial(self._fire, opened_at, True), self._label)

    def next_run_time(self) -> datetime | None:
        """When the next load starts; None while a load runs (its successor is scheduled
        when it ends) and once closed."""
        with self._lock:
            pending = None if self.closed else self._next
            return None if pending is None else pending.when

    def _fire(self, fired_at: datetime, first: bool) -> None:
        """Start one load; schedule the next when it ends. Never raises for a failed
        load: a ``trigger_reload()`` that raises, a future that fails or a result that
        is not a future is logged, and the schedule goes on."""
        with self._lock:
            if self.closed:
                return
            self._next = None
            future = self._start_load()
            self._in_flight = future
        if future is None:
            self._schedule_after(fired_at, first)
        else:
            future.add_done_callback(partial(self._ended, fired_at, first))

    def _start_load(self) -> Future[Any] | None:
        logger.debug("%s: starting a reload", self)
        try:
            # Typed as object: the plugin's result is checked where it enters.
            future: object = self._context.trigger_reload()
        except Exception:
            logger.exception("%s: trigger_reload() raised; the schedule goes on", self)
            return None
        if not isinstance(future, Future):
            logger.error(
                "%s: trigger_reload() returned %r, expected a concurrent.futures.Future; "
                "treating the load as ended", self, future,
            )
            return None
        return future

    def _ended(self, fired_at: datetime, first: bool, future: Future[Any]) -> None:
        if not self.closed:
            _log_outcome(self, future)
        self._schedule_after(fired_at, first)

    def _schedule_after(self, fired_at: datetime, first: bool) -> None:
        ended_at = datetime.now(timezone.utc)
        with self._lock:
            if self.closed:
                return
            try:
                when = self._following(fired_at, ended_at, first)
            except Exception:
                logger.exception("%s: computing the next reload failed; no more reloads", self)
                return
            self._next = self._scheduler.call_at(
                when, partial(self._fire, when, False), self._label)

    def close(self, timeout: float) -> None:
        """Stop: no load starts after this returns. Idempotent.

        Waits at most ``timeout`` seconds in all: for a ``trigger_reload()`` call in
        progress to return, then for the load in flight to end. A load that has not
        started running yet is cancelled.
        """
        deadline = time.monotonic() + timeout
        self._closed.set()
        acquired = self._lock.acquire(timeout=timeout)
        try:
            if not acquired:
                logger.warning(
                    "%s: trigger_reload() did not return within %.3f s; closing anyway "
                    "(it will not be called again)", self, timeout,
                )
            pending, self._next = self._next, None
            in_flight = self._in_flight
        finally:
            if acquired:
                self._lock.release()
        if pending is not None:
            pending.cancel()
        if in_flight is None or in_flight.done():
            return
        if in_flight.cancel():
            logger.info("%s: cancelled a reload that had not started running", self)
            return
        done, _ = wait([in_flight], timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            logger.warning(
                "%s: a reload is still running after %.3f s; close() returns without "
                "waiting for it", self, timeout,
            )

    def __str__(self) -> str:
        return self._label


def _log_outcome(run: ScheduleRun, future: Future[Any]) -> None:
    if future.cancelled():
        logger.warning("%s: the reload was cancelled; the schedule goes on", run)
        return
    error = future.exception()
    if error is not None:
        logger.error("%s: the reload failed; the schedule goes on: %s", run, error,
                     exc_info=error)
    else:
        logger.debug("%s: reload finished", run)
