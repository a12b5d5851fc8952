"""TimedCacheReloadTrigger: reload at a wall-clock time of day every N days, correct
across DST changes (Flink's ``TimedCacheReloadTrigger``, without its drift)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any, Final

from spark_lookup import options as opts
from spark_lookup.errors import ConfigError
from spark_lookup.options import check_int
from triggers._scheduled import DEFAULT_CLOSE_TIMEOUT, ScheduledTrigger
from triggers._wallclock import check_aware, local_instant, resolve_zone, zone_name

__all__ = ["TimedCacheReloadTrigger"]

_ONE_DAY = timedelta(days=1)


class TimedCacheReloadTrigger(ScheduledTrigger):
    """Reloads a full cache at ``time_of_day`` (wall clock) every ``interval_in_days`` days,
    and once as soon as it is opened.

    Built on the driver, pickled to executors as its configuration (with the zone
    already resolved), and opened there by the full cache, on the process scheduler.

    **Time zone.** ``time_of_day`` is read in, first, its own ``tzinfo`` (``10:15+07:00``:
    UTC+07:00; ``10:15Z``: UTC); else ``tz``, an IANA name or a ``tzinfo``; else the
    local zone of the machine that *constructs* the trigger (normally the driver),
    resolved once and shipped, so executors whose clocks run in UTC still reload at
    the driver's local time. Giving a zoned ``time_of_day`` and ``tz`` is an error.

    **Schedule.** Days are counted on the local calendar, never as multiples of 24 h, so
    03:00 stays 03:00 local time across DST changes (Flink drifts by an hour). Each
    reload runs on a local date at the first instant whose local time is ``time_of_day``
    or later; this settles the two DST cases:

    - a ``time_of_day`` inside a spring-forward gap (02:30 when clocks jump from 02:00
      to 03:00) fires at the jump, which the clock shows as 03:00;
    - a ``time_of_day`` that occurs twice in a fall-back fires once, at the first
      occurrence (summer time), unless ``time_of_day.fold`` is 1 (the second).

    **First reloads.** ``open`` starts a load immediately. The first *scheduled* reload
    is [`first_fire_time`][]: the open-time load stands in for the latest occurrence
    of ``time_of_day`` at or before the open, and the schedule continues
    ``interval_in_days`` days after that occurrence. So the gap after the open-time
    load is more than ``interval_in_days - 1`` days and at most ``interval_in_days``
    days: the data is never older than the interval, and a 7-day schedule does not
    reload again within 24 hours of opening (as Flink's does). For one day it is simply
    the next occurrence of ``time_of_day``. After that, reloads follow
    [`next_fire_time`][]. A schedule that fell behind (a suspended machine) catches up
    with one reload, then continues on its grid.

    Loads never overlap (a fire time that finds a load running is skipped); a load that
    fails is logged on the ``triggers`` logger and the schedule goes on.

    [`from_options`][triggers.TimedCacheReloadTrigger.from_options] reads
    ``lookup.full-cache.timed-reload.iso-time`` (required: ``10:15`` local, read in the
    zone of the machine calling it, ``10:15Z`` UTC, ``10:15+07:00``) and
    ``lookup.full-cache.timed-reload.interval-in-days`` (default 1), with
    ``lookup.full-cache.reload-strategy`` = ``TIMED``.

    Parameters
    ----------
    time_of_day : datetime.time
        Wall-clock time of the reload, optionally with a ``tzinfo``.
    interval_in_days : int
        Days between reloads, at least 1 (default 1).
    tz : str or datetime.tzinfo, optional
        Zone of ``time_of_day`` when it has none; default: the local zone.
    close_timeout : timedelta or float
        How long [`close`][triggers.TimedCacheReloadTrigger.close] waits for a load in
        progress (default 10 s).

    Attributes
    ----------
    time_of_day : datetime.time
        Wall-clock time of the reload (naive; read in `tz`).
    interval_in_days : int
        Local calendar days between reloads.
    tz : datetime.tzinfo
        The resolved zone in which `time_of_day` is read.

    Raises
    ------
    ConfigError
        (a ``ValueError``) naming the bad argument: ``interval_in_days < 1``, an
        unknown zone name, a zone that cannot be pickled or is a pytz zone, both a
        zoned ``time_of_day`` and ``tz``.

    Examples
    --------
    Across the Berlin spring-forward (2024-03-31, 02:00 -> 03:00) and fall-back
    (2024-10-27, 03:00 -> 02:00), 03:00 stays 03:00 local time:

    >>> from datetime import datetime, time
    >>> trigger = TimedCacheReloadTrigger(time(3, 0), tz="Europe/Berlin")
    >>> trigger
    TimedCacheReloadTrigger(time_of_day=03:00:00, interval_in_days=1, tz='Europe/Berlin')
    >>> before = datetime.fromisoformat("2024-03-30T03:00:00+01:00")
    >>> print(trigger.next_fire_time(before, before))
    2024-03-31 03:00:00+02:00
    >>> before = datetime.fromisoformat("2024-10-26T03:00:00+02:00")
    >>> print(trigger.next_fire_time(before, before))
    2024-10-27 03:00:00+01:00

    02:30 does not exist on 2024-03-31 in Berlin; the reload runs when the clocks jump:

    >>> trigger = TimedCacheReloadTrigger(time(2, 30), tz="Europe/Berlin")
    >>> print(trigger.next_fire_time(None, datetime.fromisoformat("2024-03-31T00:00:00+01:00")))
    2024-03-31 03:00:00+02:00
    """

    def __init__(
        self,
        time_of_day: time,
        interval_in_days: int = 1,
        tz: str | tzinfo | None = None,
        *,
        close_timeout: timedelta | float = DEFAULT_CLOSE_TIMEOUT,
    ) -> None:
        if not isinstance(time_of_day, time):
            raise ConfigError(
                "time_of_day must be a datetime.time (use from_options for ISO strings), "
                f"got {time_of_day!r}"
            )
        check_int(interval_in_days, "interval_in_days")
        self.tz: Final = resolve_zone(time_of_day, tz)
        self.time_of_day: Final = time_of_day.replace(tzinfo=None)
        self.interval_in_days: Final = interval_in_days
        super().__init__(close_timeout=close_timeout)

    _STRATEGY = "TIMED"

    @classmethod
    def _arguments(cls, options: Mapping[str, Any]) -> tuple[Any, ...]:
        days = opts.TIMED_RELOAD_INTERVAL_IN_DAYS.get(options)
        return opts.TIMED_RELOAD_ISO_TIME.require(options), 1 if days is None else days

    def next_fire_time(self, previous: datetime | None, now: datetime) -> datetime:
        """The reload after ``previous`` (pure: no clock is read).

        With ``previous=None``: the first occurrence of `time_of_day` strictly
        after ``now``. Otherwise: ``previous``'s local date plus
        `interval_in_days` days, at `time_of_day`, even if that is not after
        ``now`` (the scheduler then runs one catch-up reload). DST gaps and overlaps are
        resolved as the class describes.

        Parameters
        ----------
        previous : datetime or None
            The previous scheduled fire time (aware), or None.
        now : datetime
            The current time (aware).

        Returns
        -------
        datetime
            Aware, in `tz`.

        Raises
        ------
        ConfigError
            If ``previous`` or ``now`` is naive.
        """
        check_aware(now, "now")
        if previous is None:
            return self._next_occurrence(now)
        check_aware(previous, "previous")
        return self._at(self._local_date(previous) + self.interval_in_days * _ONE_DAY)

    def first_fire_time(self, opened_at: datetime) -> datetime:
        """The first scheduled reload after the immediate load of an open at ``opened_at``.

        The open-time load stands in for the latest occurrence of `time_of_day`
        at or before ``opened_at``; the result is that occurrence's local date plus
        `interval_in_days` days, at `time_of_day`. It is later than
        ``opened_at + (interval_in_days - 1) days`` and no later than
        ``opened_at + interval_in_days days`` (give or take a DST hour). With one day it
        equals ``next_fire_time(None, opened_at)``. Pure.

        Examples
        --------
        Every 3 days at 03:00; opened on Monday 2024-06-03, after and before 03:00:

        >>> from datetime import datetime, time
        >>> trigger = TimedCacheReloadTrigger(time(3, 0), 3, tz="Europe/Berlin")
        >>> print(trigger.first_fire_time(datetime.fromisoformat("2024-06-03T10:00+02:00")))
        2024-06-06 03:00:00+02:00
        >>> print(trigger.first_fire_time(datetime.fromisoformat("2024-06-03T02:00+02:00")))
        2024-06-05 03:00:00+02:00
        """
        check_aware(opened_at, "opened_at")
        day = self._local_date(opened_at)
        while self._at(day) > opened_at:
            day -= _ONE_DAY
        return self._at(day + self.interval_in_days * _ONE_DAY)

    def next_reload_after(self, loaded_at: datetime) -> datetime:
        """[`first_fire_time`][] of ``loaded_at`` (pure): data loaded at ``loaded_at``
        stands in for the latest occurrence of `time_of_day` at or before it, and
        is due ``interval_in_days`` days after that occurrence.

        Raises
        ------
        ConfigError
            If ``loaded_at`` is naive.

        Examples
        --------
        >>> from datetime import datetime, time
        >>> trigger = TimedCacheReloadTrigger(time(3, 0), tz="Europe/Berlin")
        >>> print(trigger.next_reload_after(datetime.fromisoformat("2024-06-03T10:00+02:00")))
        2024-06-04 03:00:00+02:00
        """
        return self.first_fire_time(loaded_at)

    def _next_occurrence(self, now: datetime) -> datetime:
        day = self._local_date(now)
        # At most two steps: the next local date's occurrence is after `now` by
        # construction; a loop rather than an `if` keeps that true for zones that
        # once skipped a whole calendar day (Pacific/Apia, 2011-12-30).
        while (fire := self._at(day)) <= now:
            day += _ONE_DAY
        return fire

    def _local_date(self, instant: datetime) -> date:
        return instant.astimezone(self.tz).date()

    def _at(self, day: date) -> datetime:
        return local_instant(day, self.time_of_day, self.tz)

    def _first_after_open(self, opened_at: datetime, ended_at: datetime) -> datetime:
        return self.first_fire_time(opened_at)

    def _config(self) -> dict[str, Any]:
        return {
            "time_of_day": self.time_of_day,
            "interval_in_days": self.interval_in_days,
            "tz": self.tz,
            **self._common_config(),
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(time_of_day={self.time_of_day.isoformat()}, "
            f"interval_in_days={self.interval_in_days}, tz={zone_name(self.tz)!r})"
        )
