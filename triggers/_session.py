"""The runtime of one opened trigger: its APScheduler scheduler and the loads it starts.

A session is created by ``open`` and ended by ``close``; a trigger's configuration never
holds one across pickling. Each APScheduler job run starts one load through the context
and then *waits for that load's future*, so a job run lasts exactly as long as its load.
That is what lets APScheduler's ``max_instances=1`` skip (not queue) a tick that finds a
load running, and lets a fixed-delay schedule measure from the end of a load.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from datetime import datetime, timezone
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.base import BaseTrigger

from triggers.base import ReloadContext

__all__ = ["PARKED", "ReloadSession", "SchedulerFactory", "new_scheduler"]

logger = logging.getLogger("triggers")

SchedulerFactory = Callable[[], BaseScheduler]
"""Builds a new, not yet started APScheduler scheduler; must be picklable (module level)."""

PARKED = datetime(9000, 1, 1, tzinfo=timezone.utc)
"""The run time of a job whose real next run time its running instance will set."""


def new_scheduler() -> BaseScheduler:
    """The default scheduler: a daemon background thread and a one-thread job pool.

    UTC because every datetime we hand it is aware; the zone of a timed schedule is the
    trigger's business, not the scheduler's.
    """
    return BackgroundScheduler(
        timezone=timezone.utc,
        executors={
            "default": ThreadPoolExecutor(
                max_workers=1, pool_kwargs={"thread_name_prefix": "cache-reload"}
            )
        },
        daemon=True,
    )


class ReloadSession:
    """One open period of a trigger; thread-safe.

    ``run_load`` is the APScheduler job function. A lock makes "is the session closed?"
    and "start the load" one step, so once :meth:`close` has taken the lock no load can
    start; ``close`` takes it with a timeout, so a ``trigger_reload()`` call that hangs
    cannot hang ``close``.
    """

    def __init__(self, context: ReloadContext, scheduler: BaseScheduler, label: str) -> None:
        self._context = context
        self._scheduler = scheduler
        self._label = label
        self._lock = threading.RLock()  # re-entrant: a context may close us from its load
        self._closed = threading.Event()
        self._stop: Future[None] = Future()  # completes on close; wakes a waiting job run
        self._in_flight: Future[Any] | None = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed.is_set()

    def start(self) -> None:
        """Start the scheduler's thread."""
        self._scheduler.start()

    def add_job(
        self,
        func: Callable[[], None],
        trigger: BaseTrigger,
        *,
        job_id: str | None = None,
        next_run_time: datetime | None = None,
    ) -> None:
        """Schedule ``func`` on ``trigger``; a no-op once the session is closed.

        ``coalesce`` runs a schedule that fell behind (a suspended machine) once, not once
        per missed time; ``misfire_grace_time=None`` runs it however late, because a late
        reload is better than none; ``max_instances=1`` skips a run while one is going.
        """
        options: dict[str, Any] = {
            "id": job_id,
            "name": self._label,
            "coalesce": True,
            "max_instances": 1,
            "misfire_grace_time": None,
        }
        if next_run_time is not None:
            options["next_run_time"] = next_run_time
        with self._lock:
            if self.closed:
                return
            self._scheduler.add_job(func, trigger, **options)

    def reschedule(self, job_id: str, run_at: datetime) -> None:
        """Set the next run time of job ``job_id``; a no-op once the session is closed."""
        with self._lock:
            if self.closed:
                return
            try:
                self._scheduler.modify_job(job_id, next_run_time=run_at)
            except JobLookupError:
                # Only if close() gave up waiting for our lock and shut the scheduler down.
                logger.debug("%s: job %s is gone; not rescheduled", self, job_id)

    def next_run_time(self) -> datetime | None:
        """The earliest time a job of this session is scheduled to run, if any."""
        with self._lock:
            if self.closed:
                return None
            times: list[datetime] = [
                job.next_run_time
                for job in self._scheduler.get_jobs()
                if job.next_run_time and job.next_run_time < PARKED
            ]
        return min(times, default=None)

    def run_load(self) -> None:
        """Start one load and wait until it ends (or the session closes).

        Never raises for a failed load: a ``trigger_reload()`` that raises, a future that
        fails or a result that is not a future is logged, and the schedule goes on.
        """
        with self._lock:
            if self.closed:
                return
            in_flight = self._in_flight
            if in_flight is not None and not in_flight.done():
                # Unreachable with our scheduler (a run lasts as long as its load, and
                # max_instances=1); a guard for an injected one that runs jobs in parallel.
                logger.info("%s: previous load still running; this reload is skipped", self)
                return
            logger.debug("%s: starting a reload", self)
            try:
                # Typed as object: the plugin's result is checked where it enters.
                future: object = self._context.trigger_reload()
            except Exception:
                logger.exception("%s: trigger_reload() raised; the schedule goes on", self)
                return
            if not isinstance(future, Future):
                logger.error(
                    "%s: trigger_reload() returned %r, expected a concurrent.futures.Future; "
                    "treating the load as ended",
                    self,
                    future,
                )
                return
            self._in_flight = future
        wait([future, self._stop], return_when=FIRST_COMPLETED)
        if future.done():
            _log_outcome(self, future)

    def close(self, timeout: float) -> None:
        """Stop: no load starts after this returns. Idempotent.

        Waits at most ``timeout`` seconds in all: for a ``trigger_reload()`` call in
        progress to return, then for the load in flight to end. A load that has not
        started running yet is cancelled.
        """
        deadline = time.monotonic() + timeout
        self._closed.set()
        if not self._stop.done():
            self._stop.set_result(None)
        acquired = self._lock.acquire(timeout=timeout)
        try:
            if not acquired:
                logger.warning(
                    "%s: trigger_reload() did not return within %.3f s; closing anyway "
                    "(it will not be called again)",
                    self,
                    timeout,
                )
            if self._scheduler.running:
                # wait=False: our job run has been woken by _stop, and a trigger_reload()
                # still in progress must not extend close() beyond its timeout.
                self._scheduler.shutdown(wait=False)
            in_flight = self._in_flight
        finally:
            if acquired:
                self._lock.release()
        if in_flight is None or in_flight.done():
            return
        if in_flight.cancel():
            logger.info("%s: cancelled a reload that had not started running", self)
            return
        remaining = max(0.0, deadline - time.monotonic())
        done, _ = wait([in_flight], timeout=remaining)
        if not done:
            logger.warning(
                "%s: a reload is still running after %.3f s; close() returns without "
                "waiting for it",
                self,
                timeout,
            )

    def __str__(self) -> str:
        return self._label


def _log_outcome(session: ReloadSession, future: Future[Any]) -> None:
    if future.cancelled():
        logger.warning("%s: the reload was cancelled; the schedule goes on", session)
        return
    error = future.exception()
    if error is not None:
        logger.error(
            "%s: the reload failed; the schedule goes on: %s",
            session,
            error,
            exc_info=error,
        )
    else:
        logger.debug("%s: reload finished", session)
