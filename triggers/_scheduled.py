"""What the periodic and the timed trigger share: lifecycle, close timeout, pickling."""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from datetime import datetime, timedelta, timezone
from typing import Any

from spark_lookup import options as opts
from spark_lookup.errors import ConfigError
from triggers._session import ReloadSession, SchedulerFactory, new_scheduler
from triggers.base import CacheReloadTrigger, ReloadContext

__all__ = ["DEFAULT_CLOSE_TIMEOUT", "ScheduledTrigger"]

logger = logging.getLogger("triggers")

DEFAULT_CLOSE_TIMEOUT = timedelta(seconds=10)
"""How long ``close()`` waits for a load in progress unless told otherwise."""

_STATE_VERSION = 1


class ScheduledTrigger(CacheReloadTrigger):
    """A trigger that runs its schedule on an APScheduler scheduler created by ``open``.

    Subclasses hold only configuration and say how to schedule (:meth:`_schedule`) and
    what to pickle (:meth:`_config`).
    """

    def __init__(
        self,
        *,
        close_timeout: timedelta | float,
        scheduler_factory: SchedulerFactory | None,
    ) -> None:
        self._close_timeout = opts.as_timedelta(close_timeout, "close_timeout", allow_zero=True)
        if scheduler_factory is not None and not callable(scheduler_factory):
            raise ConfigError(
                "scheduler_factory must be a zero-argument callable returning an APScheduler "
                f"scheduler, got {scheduler_factory!r}"
            )
        self._scheduler_factory = scheduler_factory
        self._lifecycle = threading.Lock()
        self._session: ReloadSession | None = None

    @property
    def close_timeout(self) -> timedelta:
        """How long :meth:`close` waits for a load in progress by default."""
        return self._close_timeout

    @property
    def is_open(self) -> bool:
        """Whether the trigger is open (between :meth:`open` and :meth:`close`)."""
        return self._session is not None

    def open(self, context: ReloadContext) -> None:
        """Start the scheduler thread and the schedule; the first load starts right away.

        Runs on the executor that holds the cache; returns without waiting for the first
        load. A closed trigger may be opened again (it starts a fresh schedule, with a
        new first load); opening an open trigger is an error.

        Raises
        ------
        TypeError
            If ``context`` does not implement :class:`ReloadContext`.
        RuntimeError
            If the trigger is already open.
        """
        if not isinstance(context, ReloadContext):
            raise TypeError(
                "context must implement triggers.ReloadContext (trigger_reload() and "
                f"current_processing_time()), got {type(context).__name__}"
            )
        with self._lifecycle:
            if self._session is not None:
                raise RuntimeError(f"{self!r} is already open; close() it before re-opening")
            factory = self._scheduler_factory or new_scheduler
            session = ReloadSession(context, factory(), label=repr(self))
            try:
                session.start()
                # The open instant anchors the schedule: read once, here, never in __init__.
                self._schedule(session, datetime.now(timezone.utc))
            except BaseException:
                session.close(timeout=0.0)
                raise
            self._session = session
        logger.info("%r opened", self)

    def close(self, timeout: timedelta | float | None = None) -> None:
        """Stop the schedule: no load starts after this returns. Idempotent.

        Waits at most ``timeout`` (default :attr:`close_timeout`, 10 s unless configured)
        for a ``trigger_reload()`` call in progress to return and for the load in flight
        to end; a load queued but not yet running is cancelled. It never waits longer: a
        load still running then is left to finish on its own (logged as a warning), and
        its outcome is no longer reported by the trigger.
        """
        seconds = (
            self._close_timeout
            if timeout is None
            else opts.as_timedelta(timeout, "timeout", allow_zero=True)
        ).total_seconds()
        with self._lifecycle:
            session, self._session = self._session, None
        if session is None:
            return
        session.close(seconds)
        logger.info("%r closed", self)

    def next_reload_time(self) -> datetime | None:
        """When the next scheduled reload starts (aware, UTC), as the scheduler knows it.

        None when the trigger is closed, and while a fixed-delay load runs (its successor
        is scheduled when it ends).
        """
        session = self._session
        return None if session is None else session.next_run_time()

    @abstractmethod
    def _schedule(self, session: ReloadSession, opened_at: datetime) -> None:
        """Add the jobs of this schedule to ``session``; the first load runs at ``opened_at``."""

    @abstractmethod
    def _config(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this trigger (what pickling ships)."""

    def _common_config(self) -> dict[str, Any]:
        return {
            "close_timeout": self._close_timeout,
            "scheduler_factory": self._scheduler_factory,
        }

    def __getstate__(self) -> dict[str, Any]:
        # Configuration only: an open trigger's copy arrives closed, ready to be opened.
        return {"version": _STATE_VERSION, "config": self._config()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        version = state.get("version")
        if not isinstance(version, int) or version > _STATE_VERSION:
            raise ValueError(
                f"cannot unpickle {type(self).__name__}: state version {version!r} is newer "
                f"than the supported version {_STATE_VERSION}; upgrade spark-lookup on the "
                "executors to match the driver"
            )
        self.__init__(**state["config"])  # type: ignore[misc]
