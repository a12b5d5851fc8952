"""Wall-clock arithmetic in a time zone: which zone a time of day means, and which
instant a local date at a time of day is, across DST changes.

Everything here is pure (no clock is read), so schedules are tested without waiting.
"""

from __future__ import annotations

import pickle
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tzlocal

from spark_lookup.errors import ConfigError

__all__ = ["check_aware", "local_instant", "local_zone", "resolve_zone", "zone_name"]

_MICROSECOND = timedelta(microseconds=1)


def local_zone() -> tzinfo:
    """The time zone this machine is configured for (``TZ``, ``/etc/localtime``...)."""
    return tzlocal.get_localzone()


def resolve_zone(time_of_day: time, tz: str | tzinfo | None) -> tzinfo:
    """The zone in which ``time_of_day`` is read.

    Resolution order: the ``tzinfo`` of ``time_of_day`` (``10:15+07:00`` is read at
    UTC+07:00), else ``tz`` (an IANA name or a ``tzinfo``), else the local zone of this
    machine. Giving both a zoned ``time_of_day`` and ``tz`` is refused rather than
    letting one silently win.

    Raises
    ------
    ConfigError
        Both were given; ``tz`` is not a known IANA name or not a ``tzinfo``; the zone is
        a pytz zone (it ignores PEP 495 folds, so DST arithmetic would be wrong); or the
        zone cannot be pickled (the trigger could not be shipped to executors).
    """
    own = time_of_day.tzinfo
    if own is not None and tz is not None:
        raise ConfigError(
            f"time_of_day {time_of_day.isoformat()!r} carries its own zone and tz={tz!r} "
            "was given too; pass only one of them"
        )
    zone: tzinfo
    if own is not None:
        zone = own
    elif tz is None:
        zone = local_zone()
        what = f"the local time zone ({zone!r})"
        _check_zone(zone, what, "name the zone explicitly with tz='Region/City'")
        return zone
    elif isinstance(tz, str):
        zone = _named_zone(tz)
    elif isinstance(tz, tzinfo):
        zone = tz
    else:
        raise ConfigError(f"tz must be an IANA zone name, a datetime.tzinfo or None, got {tz!r}")
    _check_zone(zone, f"time zone {zone!r}", "pass an IANA name such as tz='Europe/Berlin'")
    return zone


def _named_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(f"tz={name!r} is not a known IANA time zone name") from exc


def _check_zone(zone: tzinfo, what: str, hint: str) -> None:
    if hasattr(zone, "localize") and hasattr(zone, "normalize"):
        raise ConfigError(f"{what} is a pytz zone, which ignores PEP 495 folds and would break DST "
                          f"arithmetic; {hint}")
    try:
        pickle.dumps(zone)
    except Exception as exc:
        raise ConfigError(
            f"{what} cannot be pickled, so the trigger could not be shipped to executors; "
            f"{hint}"
        ) from exc


def zone_name(zone: tzinfo) -> str:
    """A short display name: the IANA key of a zone, else its ``str`` (``UTC+07:00``)."""
    key = getattr(zone, "key", None)
    return key if isinstance(key, str) else str(zone)


def local_instant(day: date, at: time, zone: tzinfo) -> datetime:
    """The first instant at which the clock in ``zone`` reads ``at`` or later on ``day``.

    That is ``day`` at ``at`` in ``zone`` on ordinary days, and it fixes the two DST
    cases: when ``at`` falls in a spring-forward gap (it never appears on the clock),
    the answer is the instant the clocks jump over it, shown as the first time after the
    gap (02:30 in Berlin on 2024-03-31 -> 03:00+02:00); when ``at`` appears twice
    (fall-back), ``at.fold`` picks the occurrence, 0 (the default) the first one.

    ``at`` must be naive; the returned datetime is aware, in ``zone``.
    """
    wall = datetime.combine(day, at)
    # PEP 495: fold=0 reads a wall time with the offset in force before a transition,
    # fold=1 with the one after. They disagree only at a gap or an overlap.
    first = wall.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(timezone.utc)
    if first == second:
        return first.astimezone(zone)
    if first < second:  # the wall time occurs twice
        return (second if at.fold else first).astimezone(zone)
    return _gap_end(wall.replace(fold=0), zone, before=second, after=first).astimezone(zone)


def _gap_end(wall: datetime, zone: tzinfo, before: datetime, after: datetime) -> datetime:
    # Inside a gap, reading `wall` with the new offset gives an instant whose clock still
    # shows less than `wall`, and with the old offset one whose clock shows more. The
    # jump lies between them; zoneinfo does not expose transitions, so bisect to the
    # microsecond (about 32 steps for a one-hour gap).
    while after - before > _MICROSECOND:
        middle = before + (after - before) // 2
        if middle.astimezone(zone).replace(tzinfo=None) >= wall:
            after = middle
        else:
            before = middle
    return after


def check_aware(value: datetime, name: str) -> None:
    """Refuse a naive datetime (or anything else), naming the argument."""
    if not isinstance(value, datetime):
        raise ConfigError(f"{name} must be an aware datetime.datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(f"{name} must be timezone-aware, got naive {value!r}")
