"""What the periodic and the timed trigger share: lifecycle on the process scheduler,
close timeout, pickling. A subclass is a pure schedule (`next_fire_time`)."""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, TypeVar

from spark_lookup import options as opts
from triggers._config import check_strategy_options
from triggers._schedule_run import ScheduleRun
from triggers.base import CacheReloadTrigger, ReloadContext

__all__ = ["DEFAULT_CLOSE_TIMEOUT", "ScheduledTrigger"]

logger = logging.getLogger("triggers")

DEFAULT_CLOSE_TIMEOUT = timedelta(seconds=10)
"""How long ``close()`` waits for a load in progress unless told otherwise."""

_T = TypeVar("_T", bound="ScheduledTrigger")

_STATE_VERSION = 2  # 2: no scheduler_factory (one scheduler per process)


class ScheduledTrigger(CacheReloadTrigger):
    """A trigger whose loads are one-shot jobs on the process scheduler
    (`triggers.scheduler.process_scheduler`), each added when the load before it
    ended, at the time the pure schedule `next_fire_time` gives.

    Subclasses hold only configuration and say when (`next_fire_time`) and what
    to pickle (`_config`).
    """

    def __init__(self, *, close_timeout: timedelta | float) -> None:
        self._close_timeout = opts.as_timedelta(close_timeout, "close_timeout", allow_zero=True)
        self._lifecycle = threading.Lock()
        self._run: ScheduleRun | None = None

    _STRATEGY: ClassVar[str]
    """The ``lookup.full-cache.reload-strategy`` this trigger implements."""

    @classmethod
    def from_options(cls: type[_T], options: Mapping[str, Any], *,
                     close_timeout: timedelta | float = DEFAULT_CLOSE_TIMEOUT) -> _T:
        """Build from Flink's option keys, on the driver.

        Reads ``lookup.cache`` (must be ``FULL``), ``lookup.full-cache.reload-strategy``
        (must be this trigger's) and the keys of that strategy (the class lists them).
        Other ``lookup.*`` keys are left to their owners.

        Raises
        ------
        ConfigError
            (a ``ValueError``) naming the key that is missing, unknown, invalid, or
            that belongs to the other strategy.
        """
        check_strategy_options(options, cls._STRATEGY, cls.__name__)
        return cls(*cls._arguments(options), close_timeout=close_timeout)

    @classmethod
    @abstractmethod
    def _arguments(cls, options: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional constructor arguments that ``options`` (already checked) give."""

    @property
    def close_timeout(self) -> timedelta:
        """How long [`close`][] waits for a load in progress by default."""
        return self._close_timeout

    @property
    def is_open(self) -> bool:
        """Whether the trigger is open (between [`open`][] and [`close`][])."""
        return self._run is not None

    def open(self, context: ReloadContext) -> None:
        """Start the schedule on the process scheduler; the first load starts right away.

        Runs on the executor that holds the cache; returns without waiting for the first
        load. A closed trigger may be opened again (it starts a fresh schedule, with a
        new first load); opening an open trigger is an error.

        Raises
        ------
        TypeError
            If ``context`` does not implement [`ReloadContext`][].
        RuntimeError
            If the trigger is already open.
        """
        if not isinstance(context, ReloadContext):
            raise TypeError("context must implement triggers.ReloadContext (trigger_reload() and "
                            f"current_processing_time()), got {type(context).__name__}")
        with self._lifecycle:
            if self._run is not None:
                raise RuntimeError(f"{self!r} is already open; close() it before re-opening")
            run = ScheduleRun(context, self._following, label=repr(self))
            # The open instant anchors the schedule: read once, here, never in __init__.
            run.start(datetime.now(timezone.utc))
            self._run = run
        logger.info("%r opened", self)

    def close(self, timeout: timedelta | float | None = None) -> None:
        """Stop the schedule: no load starts after this returns. Idempotent.

        Waits at most ``timeout`` (default [`close_timeout`][], 10 s unless configured)
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
            run, self._run = self._run, None
        if run is None:
            return
        run.close(seconds)
        logger.info("%r closed", self)

    def next_reload_time(self) -> datetime | None:
        """When the next scheduled reload starts (aware, UTC), as the scheduler knows it.

        None when the trigger is closed, and while a load runs (its successor is
        scheduled when it ends).
        """
        run = self._run
        return None if run is None else run.next_run_time()

    @abstractmethod
    def next_fire_time(self, previous: datetime | None, now: datetime) -> datetime:
        """The reload after the one that fired at ``previous`` (None: none yet), its load
        having ended at ``now``. Pure: no clock is read. A time not after ``now`` is
        allowed; the run skips it (a load never starts while another runs)."""

    def _first_after_open(self, opened_at: datetime, ended_at: datetime) -> datetime:
        """The reload after the open-time load (which fired at ``opened_at``)."""
        return self.next_fire_time(opened_at, ended_at)

    def _following(self, fired_at: datetime, ended_at: datetime, first: bool) -> datetime:
        """When the load after the one that fired at ``fired_at`` and ended at
        ``ended_at`` starts: fire times that passed during that load are skipped."""
        when = (self._first_after_open(fired_at, ended_at) if first
                else self.next_fire_time(fired_at, ended_at))
        skipped = 0
        while when <= ended_at:
            when, skipped = self.next_fire_time(when, ended_at), skipped + 1
        if skipped:
            logger.info("%r: the load ended after %d reload time(s); they are skipped, the "
                        "next is at %s", self, skipped, when.isoformat())
        return when

    @abstractmethod
    def _config(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this trigger (what pickling ships)."""

    def _common_config(self) -> dict[str, Any]:
        return {"close_timeout": self._close_timeout}

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
        config = dict(state["config"])
        config.pop("scheduler_factory", None)  # version 1: one scheduler per trigger then
        self.__init__(**config)  # type: ignore[misc]
