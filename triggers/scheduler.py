"""The one scheduler of a process: every timed action of spark-lookup (a trigger's next
reload, a full cache's due time, a refreshed view's retirement and staleness) is a
one-shot job on one APScheduler background scheduler, started by the first job and
built again in a forked child (a fork does not copy the parent's thread).

A schedule is pure (a trigger computes its next time from the previous one); a
recurring schedule is a chain of one-shot jobs, each added when the action before it
has ended. So a fixed delay is measured from the end of a load, and no job is ever
parked in a far future to wait for one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.job import Job
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.date import DateTrigger

__all__ = ["ProcessScheduler", "Scheduled", "process_scheduler"]

logger = logging.getLogger("triggers")

_WORKERS = 4
"""Threads that run due jobs. A job only starts work elsewhere (a load on its cache's
own executor), so a few serve every cache of the process; more than one, so that one
``trigger_reload()`` that hangs does not hold up the others."""


class Scheduled:
    """A job added by `ProcessScheduler.call_at`: when it runs, and how to cancel it."""

    __slots__ = ("_job", "when")

    def __init__(self, job: Job, when: datetime) -> None:
        self._job = job
        self.when = when

    def cancel(self) -> None:
        """Remove the job if it has not run yet (a no-op once it ran or was cancelled)."""
        with contextlib.suppress(JobLookupError):
            self._job.remove()


class ProcessScheduler:
    """One APScheduler ``BackgroundScheduler`` (UTC, daemon thread) running one-shot jobs.

    Jobs run however late they are (a suspended machine wakes up to one run per job,
    never to none), on a small pool of daemon threads; a job that raises is logged.
    """

    def __init__(self) -> None:
        self._scheduler = BackgroundScheduler(
            timezone=timezone.utc,
            executors={"default": ThreadPoolExecutor(
                max_workers=_WORKERS, pool_kwargs={"thread_name_prefix": "spark-lookup-timer"})},
            job_defaults={"misfire_grace_time": None, "coalesce": True},
            daemon=True,
        )
        self._start = threading.Lock()

    def call_at(self, when: datetime, action: Callable[[], object], name: str) -> Scheduled:
        """Run ``action`` once at the aware datetime ``when`` (at once if it is past)."""
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(f"call_at needs an aware datetime, got {when!r}")
        self._ensure_started()
        job = self._scheduler.add_job(_logged(action, name), DateTrigger(when), name=name)
        return Scheduled(job, when)

    def call_later(self, delay: timedelta | float, action: Callable[[], object],
                   name: str) -> Scheduled:
        """Run ``action`` once ``delay`` (a timedelta or seconds) from now."""
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        return self.call_at(datetime.now(timezone.utc) + timedelta(seconds=seconds),
                            action, name)

    def pending(self) -> list[str]:
        """The names of the jobs waiting to run (for diagnostics and tests)."""
        return [job.name for job in self._scheduler.get_jobs()]

    def _ensure_started(self) -> None:
        with self._start:
            if not self._scheduler.running:
                self._scheduler.start()


def _logged(action: Callable[[], object], name: str) -> Callable[[], None]:
    def run() -> None:
        try:
            action()
        except Exception:
            logger.exception("%s failed", name)

    return run


_lock = threading.Lock()
_instance: ProcessScheduler | None = None


def process_scheduler() -> ProcessScheduler:
    """This process's scheduler (built on first use, and again in a forked child)."""
    global _instance
    with _lock:
        if _instance is None:
            _instance = ProcessScheduler()
        return _instance


def _forget_after_fork() -> None:
    # The child has no scheduler thread, and the lock may have been held at the fork.
    global _lock, _instance
    _lock = threading.Lock()
    _instance = None


os.register_at_fork(after_in_child=_forget_after_fork)
