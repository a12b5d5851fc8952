"""The timed schedule as pure arithmetic: ``next_fire_time`` and ``first_fire_time``
(Flink's TimedCacheReloadTriggerTest, ported, plus DST in Europe/Berlin and
America/New_York, 3-day intervals, and a brute-force oracle). Nothing here waits."""

from __future__ import annotations

import pickle
from datetime import date, datetime, time, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_lookup.errors import ConfigError
from triggers import TimedCacheReloadTrigger, _wallclock

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")  # 2024-03-31 02:00 -> 03:00; 2024-10-27 03:00 -> 02:00
NEW_YORK = ZoneInfo("America/New_York")  # 2024-03-10 02:00 -> 03:00; 2024-11-03 02:00 -> 01:00


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def fire_times(trigger: TimedCacheReloadTrigger, now: datetime, count: int) -> list[str]:
    """The first ``count`` fire times after ``now``, as the scheduler would chain them."""
    fires: list[str] = []
    previous: datetime | None = None
    for _ in range(count):
        previous = trigger.next_fire_time(previous, now)
        fires.append(previous.isoformat())
    return fires


# --- Flink's TimedCacheReloadTriggerTest ------------------------------------------------

FLINK_NOW = datetime.fromtimestamp(0.010, tz=UTC)  # Flink's CONSTANT_CLOCK: epoch + 10 ms
MILLIS_DIFF = timedelta(milliseconds=2)


def flink_trigger(kind: str, shift: timedelta, days: int) -> TimedCacheReloadTrigger:
    # Flink's LocalTime (read in a zone) and OffsetTime (carrying its offset) variants.
    wall = (FLINK_NOW + shift).time()
    if kind == "local":
        return TimedCacheReloadTrigger(wall, days, tz="UTC")
    return TimedCacheReloadTrigger(wall.replace(tzinfo=UTC), days)


@pytest.mark.parametrize("kind", ["local", "offset"])
def test_flink_normal_reload_time(kind: str) -> None:
    trigger = flink_trigger(kind, +MILLIS_DIFF, days=7)
    first = trigger.next_fire_time(None, FLINK_NOW)
    assert first - FLINK_NOW == MILLIS_DIFF
    assert trigger.next_fire_time(first, FLINK_NOW) - first == timedelta(days=7)
    # Beyond Flink: after the open-time load, a 7-day schedule does not reload again
    # 2 ms later; it continues 7 days after the occurrence the open stood in for.
    assert trigger.first_fire_time(FLINK_NOW) - FLINK_NOW == timedelta(days=6) + MILLIS_DIFF


@pytest.mark.parametrize("kind", ["local", "offset"])
def test_flink_next_day_reload_time(kind: str) -> None:
    trigger = flink_trigger(kind, -MILLIS_DIFF, days=7)
    assert trigger.next_fire_time(None, FLINK_NOW) - FLINK_NOW == timedelta(days=1) - MILLIS_DIFF
    assert trigger.first_fire_time(FLINK_NOW) - FLINK_NOW == timedelta(days=7) - MILLIS_DIFF


@pytest.mark.parametrize("days", [0, -1])
def test_flink_bad_reload_interval_in_days(days: int) -> None:
    with pytest.raises(ValueError, match="interval_in_days must be an int >= 1"):
        TimedCacheReloadTrigger(time(10, 15), days, tz="UTC")


# --- DST: the wall-clock time stays put -------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "now", "expected"),
    [
        pytest.param(
            "Europe/Berlin",
            "2024-03-30T12:00+01:00",
            ["2024-03-31T03:00:00+02:00", "2024-04-01T03:00:00+02:00"],
            id="berlin-spring-forward",
        ),
        pytest.param(
            "Europe/Berlin",
            "2024-10-26T12:00+02:00",
            ["2024-10-27T03:00:00+01:00", "2024-10-28T03:00:00+01:00"],
            id="berlin-fall-back",
        ),
        pytest.param(
            "America/New_York",
            "2024-03-09T12:00-05:00",
            ["2024-03-10T03:00:00-04:00", "2024-03-11T03:00:00-04:00"],
            id="new-york-spring-forward",
        ),
        pytest.param(
            "America/New_York",
            "2024-11-02T12:00-04:00",
            ["2024-11-03T03:00:00-05:00", "2024-11-04T03:00:00-05:00"],
            id="new-york-fall-back",
        ),
    ],
)
def test_three_oclock_stays_three_oclock_across_dst(
    zone: str, now: str, expected: list[str]
) -> None:
    trigger = TimedCacheReloadTrigger(time(3, 0), tz=zone)
    assert fire_times(trigger, at(now), 2) == expected


def test_a_dst_day_is_23_or_25_hours_long_not_24() -> None:
    trigger = TimedCacheReloadTrigger(time(3, 0), tz=BERLIN)
    spring = trigger.next_fire_time(at("2024-03-30T03:00+01:00"), at("2024-03-30T03:00+01:00"))
    assert spring - at("2024-03-30T03:00+01:00") == timedelta(hours=23)
    fall = trigger.next_fire_time(at("2024-10-26T03:00+02:00"), at("2024-10-26T03:00+02:00"))
    assert fall - at("2024-10-26T03:00+02:00") == timedelta(hours=25)


@pytest.mark.parametrize(
    ("zone", "wall", "now", "expected"),
    [
        # Spring-forward gap: the time never shows on the clock; the reload runs at the jump.
        pytest.param(BERLIN, time(2, 30), "2024-03-31T00:00+01:00", "2024-03-31T03:00:00+02:00",
                     id="berlin-gap-fires-at-the-jump"),
        pytest.param(BERLIN, time(2, 0), "2024-03-31T00:00+01:00", "2024-03-31T03:00:00+02:00",
                     id="berlin-gap-start"),
        pytest.param(BERLIN, time(2, 59, 59), "2024-03-31T01:59+01:00",
                     "2024-03-31T03:00:00+02:00", id="berlin-gap-end"),
        pytest.param(BERLIN, time(2, 30), "2024-03-31T03:10+02:00", "2024-04-01T02:30:00+02:00",
                     id="berlin-gap-already-passed"),
        pytest.param(NEW_YORK, time(2, 30), "2024-03-10T00:00-05:00",
                     "2024-03-10T03:00:00-04:00", id="new-york-gap-fires-at-the-jump"),
        # Fall-back overlap: the time shows twice; fold 0 (default) is the first.
        pytest.param(BERLIN, time(2, 30), "2024-10-27T00:00+02:00", "2024-10-27T02:30:00+02:00",
                     id="berlin-overlap-first"),
        pytest.param(BERLIN, time(2, 30, fold=1), "2024-10-27T00:00+02:00",
                     "2024-10-27T02:30:00+01:00", id="berlin-overlap-fold-1-second"),
        pytest.param(BERLIN, time(2, 30), "2024-10-27T02:45+02:00", "2024-10-28T02:30:00+01:00",
                     id="berlin-overlap-fires-once"),
        pytest.param(BERLIN, time(2, 30, fold=1), "2024-10-27T02:45+02:00",
                     "2024-10-27T02:30:00+01:00", id="berlin-overlap-fold-1-still-ahead"),
        pytest.param(NEW_YORK, time(1, 30), "2024-11-03T00:00-04:00",
                     "2024-11-03T01:30:00-04:00", id="new-york-overlap-first"),
        pytest.param(NEW_YORK, time(1, 30, fold=1), "2024-11-03T00:00-04:00",
                     "2024-11-03T01:30:00-05:00", id="new-york-overlap-fold-1-second"),
        pytest.param(NEW_YORK, time(1, 30), "2024-11-03T01:40-04:00",
                     "2024-11-04T01:30:00-05:00", id="new-york-overlap-fires-once"),
    ],
)
def test_nonexistent_and_ambiguous_times(
    zone: ZoneInfo, wall: time, now: str, expected: str
) -> None:
    trigger = TimedCacheReloadTrigger(wall, tz=zone)
    fire = trigger.next_fire_time(None, at(now))
    assert fire.isoformat() == expected
    assert fire > at(now)


def test_after_a_gap_the_schedule_returns_to_the_configured_time() -> None:
    trigger = TimedCacheReloadTrigger(time(2, 30), tz=NEW_YORK)
    assert fire_times(trigger, at("2024-03-09T12:00-05:00"), 3) == [
        "2024-03-10T03:00:00-04:00",
        "2024-03-11T02:30:00-04:00",
        "2024-03-12T02:30:00-04:00",
    ]


# --- N-day intervals --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "wall", "previous", "expected", "elapsed"),
    [
        pytest.param(BERLIN, time(3), "2024-03-29T03:00+01:00",
                     ["2024-04-01T03:00:00+02:00", "2024-04-04T03:00:00+02:00"],
                     timedelta(hours=71), id="berlin-spring-3-days"),
        pytest.param(BERLIN, time(3), "2024-10-25T03:00+02:00",
                     ["2024-10-28T03:00:00+01:00", "2024-10-31T03:00:00+01:00"],
                     timedelta(hours=73), id="berlin-fall-3-days"),
        pytest.param(NEW_YORK, time(2, 30), "2024-03-07T02:30-05:00",
                     ["2024-03-10T03:00:00-04:00", "2024-03-13T02:30:00-04:00"],
                     timedelta(hours=71, minutes=30), id="new-york-gap-3-days"),
        pytest.param(NEW_YORK, time(1, 30), "2024-10-31T01:30-04:00",
                     ["2024-11-03T01:30:00-04:00", "2024-11-06T01:30:00-05:00"],
                     timedelta(hours=72), id="new-york-overlap-3-days"),
    ],
)
def test_three_day_interval_across_dst(
    zone: ZoneInfo, wall: time, previous: str, expected: list[str], elapsed: timedelta
) -> None:
    trigger = TimedCacheReloadTrigger(wall, 3, tz=zone)
    first = trigger.next_fire_time(at(previous), at(previous))
    second = trigger.next_fire_time(first, first)
    assert [first.isoformat(), second.isoformat()] == expected
    assert first - at(previous) == elapsed


def test_next_fire_time_may_be_in_the_past_when_the_schedule_fell_behind() -> None:
    # APScheduler's convention: the scheduler coalesces the missed runs into one.
    trigger = TimedCacheReloadTrigger(time(3), 2, tz=BERLIN)
    late = at("2024-06-20T12:00+02:00")
    assert trigger.next_fire_time(at("2024-06-01T03:00+02:00"), late).isoformat() == (
        "2024-06-03T03:00:00+02:00"
    )


@pytest.mark.parametrize(
    ("opened_at", "expected"),
    [
        # Open after 03:00 on Monday: stands in for Monday 03:00 -> Thursday.
        ("2024-06-03T10:00+02:00", "2024-06-06T03:00:00+02:00"),
        # Open before 03:00 on Monday: stands in for Sunday 03:00 -> Wednesday.
        ("2024-06-03T02:00+02:00", "2024-06-05T03:00:00+02:00"),
        # Open exactly at 03:00: that occurrence itself.
        ("2024-06-03T03:00+02:00", "2024-06-06T03:00:00+02:00"),
        # Across the spring-forward: still 03:00 local.
        ("2024-03-29T10:00+01:00", "2024-04-01T03:00:00+02:00"),
        # The same instant written in UTC.
        ("2024-06-03T08:00+00:00", "2024-06-06T03:00:00+02:00"),
    ],
)
def test_first_fire_time_of_a_three_day_schedule(opened_at: str, expected: str) -> None:
    trigger = TimedCacheReloadTrigger(time(3), 3, tz=BERLIN)
    first = trigger.first_fire_time(at(opened_at))
    assert first.isoformat() == expected
    assert timedelta(days=2) < first - at(opened_at) <= timedelta(days=3, hours=1)


# --- zones -------------------------------------------------------------------------------


def test_an_offset_time_of_day_uses_its_offset() -> None:
    trigger = TimedCacheReloadTrigger(time(10, 15, tzinfo=timezone(timedelta(hours=7))))
    assert trigger.tz == timezone(timedelta(hours=7))
    assert trigger.time_of_day == time(10, 15)
    fire = trigger.next_fire_time(None, at("2024-01-01T00:00+00:00"))
    assert fire.isoformat() == "2024-01-01T10:15:00+07:00"


def test_a_zone_name_and_a_tzinfo_are_equivalent() -> None:
    by_name = TimedCacheReloadTrigger(time(3), tz="America/New_York")
    by_object = TimedCacheReloadTrigger(time(3), tz=NEW_YORK)
    zoned_time = TimedCacheReloadTrigger(time(3, tzinfo=NEW_YORK))
    now = at("2024-03-09T12:00-05:00")
    assert by_name.tz == by_object.tz == zoned_time.tz == NEW_YORK
    assert len({t.next_fire_time(None, now) for t in (by_name, by_object, zoned_time)}) == 1


def test_no_zone_means_the_local_zone_of_the_constructing_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_wallclock, "local_zone", lambda: ZoneInfo("Asia/Tokyo"))
    trigger = TimedCacheReloadTrigger(time(3))
    assert trigger.tz == ZoneInfo("Asia/Tokyo")
    # Resolved once, and shipped: an executor in another zone keeps the driver's.
    monkeypatch.setattr(_wallclock, "local_zone", lambda: ZoneInfo("America/Lima"))
    assert pickle.loads(pickle.dumps(trigger)).tz == ZoneInfo("Asia/Tokyo")


def test_the_machine_local_zone_by_default() -> None:
    assert TimedCacheReloadTrigger(time(3)).tz == _wallclock.local_zone()


def test_an_unnamed_local_zone_is_refused_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    with open("/usr/share/zoneinfo/Europe/Berlin", "rb") as tzfile:
        unnamed = ZoneInfo.from_file(tzfile, key="local")
    monkeypatch.setattr(_wallclock, "local_zone", lambda: unnamed)
    with pytest.raises(ConfigError, match=r"local time zone .* cannot be pickled.*tz="):
        TimedCacheReloadTrigger(time(3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"time_of_day": time(3, tzinfo=UTC), "tz": "Europe/Berlin"}, "pass only one"),
        ({"time_of_day": time(3), "tz": "Mars/Olympus_Mons"}, "'Mars/Olympus_Mons' is not a known"),
        ({"time_of_day": time(3), "tz": "../etc/passwd"}, "is not a known IANA"),
        ({"time_of_day": time(3), "tz": 7}, "tz must be an IANA zone name"),
        ({"time_of_day": "03:00"}, "time_of_day must be a datetime.time"),
        ({"time_of_day": datetime(2024, 1, 1, 3)}, "time_of_day must be a datetime.time"),
        ({"time_of_day": time(3), "interval_in_days": 1.5}, "interval_in_days must be an int"),
        ({"time_of_day": time(3), "interval_in_days": True}, "interval_in_days must be an int"),
        ({"time_of_day": time(3), "interval_in_days": "2"}, "interval_in_days must be an int"),
        ({"time_of_day": time(3), "close_timeout": "soon"}, "close_timeout"),
    ],
)
def test_invalid_arguments_name_the_argument(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TimedCacheReloadTrigger(**kwargs)


def test_a_pytz_zone_is_refused() -> None:
    pytz = pytest.importorskip("pytz")
    with pytest.raises(ConfigError, match="pytz"):
        TimedCacheReloadTrigger(time(3), tz=pytz.timezone("Europe/Berlin"))


def test_an_unpicklable_zone_is_refused() -> None:
    with open("/usr/share/zoneinfo/Europe/Berlin", "rb") as tzfile:
        unnamed = ZoneInfo.from_file(tzfile)
    with pytest.raises(ConfigError, match="cannot be pickled"):
        TimedCacheReloadTrigger(time(3), tz=unnamed)


def test_naive_datetimes_are_refused() -> None:
    trigger = TimedCacheReloadTrigger(time(3), tz=BERLIN)
    naive = datetime(2024, 1, 1, 12)
    with pytest.raises(ConfigError, match="now must be timezone-aware"):
        trigger.next_fire_time(None, naive)
    with pytest.raises(ConfigError, match="opened_at must be timezone-aware"):
        trigger.first_fire_time(naive)
    with pytest.raises(ConfigError, match="previous must be timezone-aware"):
        trigger.next_fire_time(naive, at("2024-01-01T12:00+01:00"))


def test_a_skipped_calendar_day() -> None:
    # Samoa skipped 2011-12-30 entirely (-10:00 -> +14:00 at midnight): the reload due that
    # day runs when the clocks jump, shown as midnight of the 31st.
    trigger = TimedCacheReloadTrigger(time(3), tz="Pacific/Apia")
    fire = trigger.next_fire_time(None, at("2011-12-29T12:00-10:00"))
    assert fire.isoformat() == "2011-12-31T00:00:00+14:00"


def test_repr_names_the_configuration() -> None:
    assert repr(TimedCacheReloadTrigger(time(3, 30), 3, tz="Europe/Berlin")) == (
        "TimedCacheReloadTrigger(time_of_day=03:30:00, interval_in_days=3, tz='Europe/Berlin')"
    )


# --- properties against a brute-force oracle --------------------------------------------

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute DST shift
    "America/Santiago",  # changes at midnight
    "Pacific/Chatham",  # +12:45 / +13:45
    "Asia/Kolkata",  # no DST, half-hour offset
    "UTC",
]


def oracle(day: date, wall: time, zone: ZoneInfo) -> datetime:
    """The first instant, minute by minute, whose local clock shows ``day`` at ``wall`` or
    later: the documented rule, computed the slow way."""
    instant = datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC) - timedelta(hours=3)
    while True:
        local = instant.astimezone(zone)
        if local.date() == day and local.time() >= wall:
            return local
        instant += timedelta(minutes=1)


days = st.dates(min_value=date(2020, 1, 1), max_value=date(2030, 12, 31))
walls = st.builds(time, st.integers(0, 23), st.sampled_from([0, 1, 15, 30, 45, 59]))
zones = st.sampled_from(ZONES).map(ZoneInfo)
instants = st.datetimes(
    min_value=datetime(2020, 1, 2), max_value=datetime(2030, 12, 30), timezones=st.just(UTC)
)


@settings(max_examples=60, deadline=None)
@given(day=days, wall=walls, zone=zones)
def test_local_instant_matches_the_oracle(day: date, wall: time, zone: ZoneInfo) -> None:
    assert _wallclock.local_instant(day, wall, zone) == oracle(day, wall, zone)


@settings(max_examples=60, deadline=None)
@given(now=instants, wall=walls, zone=zones, interval=st.integers(1, 10))
def test_schedule_properties(now: datetime, wall: time, zone: ZoneInfo, interval: int) -> None:
    trigger = TimedCacheReloadTrigger(wall, interval, tz=zone)
    first = trigger.next_fire_time(None, now)
    # The next occurrence: after now, within a day (plus a DST shift), on the grid.
    assert now < first <= now + timedelta(days=1, hours=1)
    assert first == oracle(first.astimezone(zone).date(), wall, zone)
    # The following one: interval_in_days local dates later, at the time of day.
    following = trigger.next_fire_time(first, now)
    assert following.date() == first.date() + timedelta(days=interval)
    assert following == oracle(following.date(), wall, zone)
    # After an open at `now`: never stale for longer than the interval, and no reload
    # again within interval - 1 days of the open-time one.
    after_open = trigger.first_fire_time(now)
    shift = timedelta(hours=1)
    gap = after_open - now
    assert timedelta(days=interval - 1) - shift < gap <= timedelta(days=interval) + shift
    assert after_open == oracle(after_open.date(), wall, zone)
    if interval == 1:
        assert after_open == first
