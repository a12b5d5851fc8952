"""PeriodicCacheReloadTrigger: reload every interval, measured from the start or the end
of the previous load (Flink's ``PeriodicCacheReloadTrigger``)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from spark_lookup import options as opts
from triggers._scheduled import DEFAULT_CLOSE_TIMEOUT, ScheduledTrigger
from triggers._wallclock import check_aware

__all__ = ["PeriodicCacheReloadTrigger", "ScheduleMode"]


class ScheduleMode(enum.Enum):
    """How a [`PeriodicCacheReloadTrigger`][] measures its interval."""

    FIXED_DELAY = "FIXED_DELAY"
    """From the end of one load to the start of the next."""
    FIXED_RATE = "FIXED_RATE"
    """From start to start; a start that finds the previous load running is skipped."""


class PeriodicCacheReloadTrigger(ScheduledTrigger):
    """Reloads a full cache every ``interval``, the first time as soon as it is opened.

    Built on the driver, pickled to executors as its configuration, where the full
    cache opens it on the process scheduler.

    With ``FIXED_DELAY`` (the default) the next load starts ``interval`` after the
    previous one *ends*, however long it took. With ``FIXED_RATE`` loads start at
    ``open + k * interval``; two loads never run at once: a start time that finds a load
    still running is skipped, not queued, and the next start is the next multiple of
    ``interval`` after that load ends. A load that fails (``trigger_reload()`` raises or
    its future fails) is logged on the ``triggers`` logger and the schedule goes on.

    [`from_options`][triggers.PeriodicCacheReloadTrigger.from_options] reads
    ``lookup.full-cache.periodic-reload.interval`` (required) and
    ``lookup.full-cache.periodic-reload.schedule-mode`` (default ``FIXED_DELAY``), e.g.
    ``{"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "10 min"}``.

    Parameters
    ----------
    interval : timedelta or float
        Time between loads (a number means seconds); must be positive.
    schedule_mode : ScheduleMode or str
        ``FIXED_DELAY`` (default) or ``FIXED_RATE``; a string is read case-insensitively.
    close_timeout : timedelta or float
        How long [`close`][triggers.PeriodicCacheReloadTrigger.close] waits for a load
        in progress (default 10 s).

    Attributes
    ----------
    interval : timedelta
        Time between loads.
    schedule_mode : ScheduleMode
        How the interval is measured.

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
    ) -> None:
        self.interval: Final = opts.as_timedelta(interval, "interval")
        self.schedule_mode: Final = opts.check_enum(schedule_mode, "schedule_mode", ScheduleMode)
        super().__init__(close_timeout=close_timeout)

    _STRATEGY = "PERIODIC"

    @classmethod
    def _arguments(cls, options: Mapping[str, Any]) -> tuple[Any, ...]:
        mode = opts.PERIODIC_RELOAD_SCHEDULE_MODE.get(options)
        return opts.PERIODIC_RELOAD_INTERVAL.require(options), mode or ScheduleMode.FIXED_DELAY

    def next_reload_after(self, loaded_at: datetime) -> datetime:
        """``loaded_at + interval``, in both modes (pure; a naive ``loaded_at`` is a
        ConfigError).

        Measured from the *start* of the load that produced the data (its load time), so
        data served from a shared snapshot is never older than ``interval`` plus one
        load, whichever process loaded it.

        Examples
        --------
        >>> from datetime import timezone
        >>> trigger = PeriodicCacheReloadTrigger(timedelta(minutes=10))
        >>> print(trigger.next_reload_after(datetime(2024, 6, 3, 9, 55, tzinfo=timezone.utc)))
        2024-06-03 10:05:00+00:00
        """
        check_aware(loaded_at, "loaded_at")
        return loaded_at + self.interval

    def next_fire_time(self, previous: datetime | None, now: datetime) -> datetime:
        """The reload after one that fired at ``previous`` and ended at ``now`` (pure).

        ``FIXED_DELAY``: ``now + interval``. ``FIXED_RATE``: ``previous + interval``
        (``now + interval`` with no ``previous``), even when a slow load ended after it:
        the trigger then skips it, not queues it, and starts on the next grid time.

        Examples
        --------
        >>> from datetime import timezone
        >>> at = datetime(2024, 6, 3, 9, 0, tzinfo=timezone.utc)
        >>> rate = PeriodicCacheReloadTrigger(timedelta(minutes=10), "FIXED_RATE")
        >>> print(rate.next_fire_time(at, at + timedelta(minutes=2)))
        2024-06-03 09:10:00+00:00
        >>> delay = PeriodicCacheReloadTrigger(timedelta(minutes=10))
        >>> print(delay.next_fire_time(at, at + timedelta(minutes=2)))
        2024-06-03 09:12:00+00:00
        """
        if self.schedule_mode is ScheduleMode.FIXED_DELAY or previous is None:
            return now + self.interval
        return previous + self.interval

    def _config(self) -> dict[str, Any]:
        return {"interval": self.interval, "schedule_mode": self.schedule_mode,
                **self._common_config()}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(interval={self.interval!r}, "
            f"schedule_mode={self.schedule_mode.name})"
        )
