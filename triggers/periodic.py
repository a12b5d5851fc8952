"""PeriodicCacheReloadTrigger: reload every interval, measured from the start or the end
of the previous load (Flink's ``PeriodicCacheReloadTrigger``)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from spark_lookup import options as opts
from spark_lookup.errors import ConfigError
from triggers._config import check_strategy_options
from triggers._scheduled import DEFAULT_CLOSE_TIMEOUT, ScheduledTrigger
from triggers._session import PARKED, ReloadSession, SchedulerFactory

__all__ = ["PeriodicCacheReloadTrigger", "ScheduleMode"]


class ScheduleMode(enum.Enum):
    """How a :class:`PeriodicCacheReloadTrigger` measures its interval."""

    FIXED_DELAY = "FIXED_DELAY"
    """From the end of one load to the start of the next."""
    FIXED_RATE = "FIXED_RATE"
    """From start to start; a start that finds the previous load running is skipped."""


class PeriodicCacheReloadTrigger(ScheduledTrigger):
    """Reloads a full cache every ``interval``, the first time as soon as it is opened.

    Built on the driver, pickled to executors as its configuration (the scheduler is
    created by :meth:`open`, on the executor), where the full cache opens it.

    With ``FIXED_DELAY`` (the default) the next load starts ``interval`` after the
    previous one *ends*, however long it took. With ``FIXED_RATE`` loads start at
    ``open + k * interval``; two loads never run at once: a start time that finds a load
    still running is skipped, not queued, and the next start is the next multiple of
    ``interval`` after that load ends. A load that fails (``trigger_reload()`` raises or
    its future fails) is logged on the ``triggers`` logger and the schedule goes on.

    Parameters
    ----------
    interval : timedelta or float
        Time between loads (a number means seconds); must be positive.
    schedule_mode : ScheduleMode or str
        ``FIXED_DELAY`` (default) or ``FIXED_RATE``; a string is read case-insensitively.
    close_timeout : timedelta or float
        How long :meth:`close` waits for a load in progress (default 10 s).
    scheduler_factory : callable, optional
        Builds the APScheduler scheduler at :meth:`open` (default: a background
        scheduler with a one-thread pool). Must be picklable to ship the trigger.

    Raises
    ------
    ConfigError
        (a ``ValueError``) for a non-positive interval or any other invalid argument;
        the message names the argument.

    Examples
    --------
    >>> import threading
    >>> from concurrent.futures import Future
    >>> class Context:
    ...     def __init__(self) -> None:
    ...         self.loaded = threading.Event()
    ...     def current_processing_time(self) -> int:
    ...         return 0
    ...     def trigger_reload(self) -> Future[None]:
    ...         self.loaded.set()
    ...         done: Future[None] = Future()
    ...         done.set_result(None)
    ...         return done
    >>> trigger = PeriodicCacheReloadTrigger(timedelta(hours=1), ScheduleMode.FIXED_RATE)
    >>> trigger
    PeriodicCacheReloadTrigger(interval=datetime.timedelta(seconds=3600), schedule_mode=FIXED_RATE)
    >>> context = Context()
    >>> trigger.open(context)
    >>> context.loaded.wait(timeout=5)  # the first load starts immediately
    True
    >>> trigger.close()
    """

    def __init__(
        self,
        interval: timedelta | float,
        schedule_mode: ScheduleMode | str = ScheduleMode.FIXED_DELAY,
        *,
        close_timeout: timedelta | float = DEFAULT_CLOSE_TIMEOUT,
        scheduler_factory: SchedulerFactory | None = None,
    ) -> None:
        self._interval = opts.as_timedelta(interval, "interval")
        self._mode = _schedule_mode(schedule_mode)
        super().__init__(close_timeout=close_timeout, scheduler_factory=scheduler_factory)

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, Any],
        *,
        close_timeout: timedelta | float = DEFAULT_CLOSE_TIMEOUT,
        scheduler_factory: SchedulerFactory | None = None,
    ) -> PeriodicCacheReloadTrigger:
        """Build from Flink's option keys, on the driver.

        Reads ``lookup.cache`` (must be ``FULL``), ``lookup.full-cache.reload-strategy``
        (must be ``PERIODIC``, its default), ``lookup.full-cache.periodic-reload.interval``
        (required) and ``lookup.full-cache.periodic-reload.schedule-mode`` (default
        ``FIXED_DELAY``). Other ``lookup.*`` keys are left to their owners.

        Raises
        ------
        ConfigError
            (a ``ValueError``) naming the key that is missing, unknown, invalid, or
            that belongs to the ``TIMED`` strategy.

        Examples
        --------
        >>> trigger = PeriodicCacheReloadTrigger.from_options({
        ...     "lookup.cache": "FULL",
        ...     "lookup.full-cache.reload-strategy": "PERIODIC",
        ...     "lookup.full-cache.periodic-reload.interval": "10 min",
        ...     "lookup.full-cache.periodic-reload.schedule-mode": "FIXED_RATE",
        ... })
        >>> print(trigger.interval, trigger.schedule_mode.name)
        0:10:00 FIXED_RATE
        """
        check_strategy_options(options, "PERIODIC", cls.__name__)
        interval = opts.PERIODIC_RELOAD_INTERVAL.require(options)
        mode = opts.PERIODIC_RELOAD_SCHEDULE_MODE.get(options)
        return cls(
            interval,
            ScheduleMode(mode) if mode is not None else ScheduleMode.FIXED_DELAY,
            close_timeout=close_timeout,
            scheduler_factory=scheduler_factory,
        )

    @property
    def interval(self) -> timedelta:
        """Time between loads."""
        return self._interval

    @property
    def schedule_mode(self) -> ScheduleMode:
        """How the interval is measured."""
        return self._mode

    def next_reload_after(self, loaded_at: datetime) -> datetime:
        """``loaded_at + interval``, in both modes (pure).

        Measured from the *start* of the load that produced the data (its load time), so
        data served from a shared snapshot is never older than ``interval`` plus one
        load, whichever process loaded it.

        Raises
        ------
        ConfigError
            If ``loaded_at`` is naive.

        Examples
        --------
        >>> trigger = PeriodicCacheReloadTrigger(timedelta(minutes=10))
        >>> print(trigger.next_reload_after(datetime(2024, 6, 3, 9, 55, tzinfo=timezone.utc)))
        2024-06-03 10:05:00+00:00
        """
        if loaded_at.tzinfo is None or loaded_at.utcoffset() is None:
            raise ConfigError(f"loaded_at must be timezone-aware, got naive {loaded_at!r}")
        return loaded_at + self._interval

    def _schedule(self, session: ReloadSession, opened_at: datetime) -> None:
        if self._mode is ScheduleMode.FIXED_RATE:
            # Start-to-start is APScheduler's interval trigger; max_instances=1 plus a job
            # run that lasts as long as its load turns an overlapping tick into a skip.
            rate = IntervalTrigger(
                seconds=self._interval.total_seconds(), start_date=opened_at, timezone=timezone.utc
            )
            session.add_job(session.run_load, rate, next_run_time=opened_at)
        else:
            session.add_job(
                self._fixed_delay_run(session),
                _UntilLoadEnds(),
                job_id=_FIXED_DELAY_JOB,
                next_run_time=opened_at,
            )

    def _fixed_delay_run(self, session: ReloadSession) -> Callable[[], None]:
        # APScheduler computes a job's next run time when it *submits* a run, before the
        # load ends, so it has no fixed-delay mode. The job parks itself instead
        # (_UntilLoadEnds) and its run sets the next run time once the load has ended.
        # (APScheduler applies the parking under its job store lock before our run can
        # take that lock to reschedule, so the two never race.)
        def run() -> None:
            try:
                session.run_load()
            finally:
                ended_at = datetime.now(timezone.utc)
                session.reschedule(_FIXED_DELAY_JOB, ended_at + self._interval)

        return run

    def _config(self) -> dict[str, Any]:
        return {"interval": self._interval, "schedule_mode": self._mode, **self._common_config()}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(interval={self._interval!r}, "
            f"schedule_mode={self._mode.name})"
        )


_FIXED_DELAY_JOB = "fixed-delay-reload"


class _UntilLoadEnds(BaseTrigger):  # type: ignore[misc]  # APScheduler is untyped
    """Parks a fixed-delay job after each run; the run itself sets the next time."""

    __slots__ = ()

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime:
        return PARKED

    def __str__(self) -> str:
        return "fixed delay: interval after the end of each load"


def _schedule_mode(value: object) -> ScheduleMode:
    if isinstance(value, ScheduleMode):
        return value
    if isinstance(value, str):
        wanted = value.strip().upper().replace("-", "_")
        for mode in ScheduleMode:
            if mode.name == wanted:
                return mode
    raise ConfigError(f"schedule_mode must be FIXED_DELAY or FIXED_RATE, got {value!r}")
