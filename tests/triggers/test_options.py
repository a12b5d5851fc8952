"""from_options with Flink's keys (Flink's testCreateFromConfig and
testParseReloadTimeFromConf, ported): happy paths, and every error names its key."""

from __future__ import annotations

from datetime import time, timedelta, timezone
from typing import Any

import pytest

from spark_lookup.errors import ConfigError
from triggers import (
    PeriodicCacheReloadTrigger,
    ScheduleMode,
    TimedCacheReloadTrigger,
    _wallclock,
    reload_trigger_from_options,
)

CACHE = "lookup.cache"
STRATEGY = "lookup.full-cache.reload-strategy"
INTERVAL = "lookup.full-cache.periodic-reload.interval"
MODE = "lookup.full-cache.periodic-reload.schedule-mode"
ISO_TIME = "lookup.full-cache.timed-reload.iso-time"
DAYS = "lookup.full-cache.timed-reload.interval-in-days"


def periodic(**extra: Any) -> dict[str, Any]:
    return {CACHE: "FULL", STRATEGY: "PERIODIC", INTERVAL: "1 s", **extra}


def timed(**extra: Any) -> dict[str, Any]:
    return {CACHE: "FULL", STRATEGY: "TIMED", ISO_TIME: "10:15", **extra}


def without(options: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k != key}


# --- happy paths --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "interval", "mode"),
    [
        (periodic(), timedelta(seconds=1), ScheduleMode.FIXED_DELAY),
        (periodic(**{INTERVAL: "10 min", MODE: "FIXED_RATE"}), timedelta(minutes=10),
         ScheduleMode.FIXED_RATE),
        (periodic(**{INTERVAL: "PT1H", MODE: "fixed-delay"}), timedelta(hours=1),
         ScheduleMode.FIXED_DELAY),
        (periodic(**{INTERVAL: timedelta(seconds=5)}), timedelta(seconds=5),
         ScheduleMode.FIXED_DELAY),
        (without(periodic(), STRATEGY), timedelta(seconds=1), ScheduleMode.FIXED_DELAY),
        ({**periodic(), CACHE: "full", "lookup.max-retries": "3", "url": "x"},
         timedelta(seconds=1), ScheduleMode.FIXED_DELAY),
    ],
)
def test_periodic_from_options(
    options: dict[str, Any], interval: timedelta, mode: ScheduleMode
) -> None:
    for build in (PeriodicCacheReloadTrigger.from_options, reload_trigger_from_options):
        trigger = build(options)
        assert isinstance(trigger, PeriodicCacheReloadTrigger)
        assert (trigger.interval, trigger.schedule_mode) == (interval, mode)


@pytest.mark.parametrize(
    ("iso_time", "wall", "zone"),
    [
        ("10:15", time(10, 15), None),  # local: the zone of this machine
        ("10:15Z", time(10, 15), timezone.utc),
        ("10:15+07:00", time(10, 15), timezone(timedelta(hours=7))),
        ("23:59:30.5-03:30", time(23, 59, 30, 500000), timezone(-timedelta(hours=3, minutes=30))),
    ],
)
def test_timed_from_options_parses_the_iso_time(iso_time: str, wall: time, zone: Any) -> None:
    for build in (TimedCacheReloadTrigger.from_options, reload_trigger_from_options):
        trigger = build(timed(**{ISO_TIME: iso_time}))
        assert isinstance(trigger, TimedCacheReloadTrigger)
        assert trigger.time_of_day == wall
        assert trigger.tz == (zone or _wallclock.local_zone())
        assert trigger.interval_in_days == 1


def test_timed_from_options_reads_the_interval_in_days() -> None:
    assert TimedCacheReloadTrigger.from_options(timed(**{DAYS: "3"})).interval_in_days == 3
    assert TimedCacheReloadTrigger.from_options(timed(**{DAYS: 7})).interval_in_days == 7


def test_from_options_passes_the_runtime_arguments() -> None:
    trigger = reload_trigger_from_options(periodic(), close_timeout=1.5)
    assert trigger.close_timeout == timedelta(seconds=1.5)


# --- errors name the key --------------------------------------------------------------------

PERIODIC_ERRORS = [
    pytest.param(without(periodic(), CACHE), CACHE, "must be FULL.*NONE \\(the default\\)",
                 id="cache-missing"),
    pytest.param(periodic(**{CACHE: "PARTIAL"}), CACHE, "must be FULL", id="cache-partial"),
    pytest.param(periodic(**{CACHE: "EVERYTHING"}), CACHE, "expected one of", id="cache-bad"),
    pytest.param(periodic(**{STRATEGY: "TIMED"}), STRATEGY, "must be PERIODIC",
                 id="strategy-timed"),
    pytest.param(periodic(**{STRATEGY: "DAILY"}), STRATEGY, "one of PERIODIC, TIMED",
                 id="strategy-bad"),
    pytest.param(without(periodic(), INTERVAL), INTERVAL, "missing required",
                 id="interval-missing"),
    pytest.param(periodic(**{INTERVAL: "ten seconds"}), INTERVAL, "cannot parse",
                 id="interval-bad"),
    pytest.param(periodic(**{INTERVAL: "0 s"}), INTERVAL, "positive", id="interval-zero"),
    pytest.param(periodic(**{INTERVAL: 10}), INTERVAL, "ambiguous", id="interval-bare-number"),
    pytest.param(periodic(**{MODE: "FIXED"}), MODE, "one of FIXED_DELAY, FIXED_RATE",
                 id="mode-bad"),
    pytest.param(periodic(**{ISO_TIME: "10:15"}), ISO_TIME, "applies to reload strategy TIMED",
                 id="timed-key-in-periodic"),
    pytest.param(periodic(**{DAYS: "2"}), DAYS, "applies to reload strategy TIMED",
                 id="timed-days-in-periodic"),
    pytest.param(periodic(**{"lookup.full-cache.periodic-reload.intervall": "1 s"}),
                 "lookup.full-cache.periodic-reload.intervall", "did you mean", id="typo"),
]


@pytest.mark.parametrize(("options", "key", "message"), PERIODIC_ERRORS)
def test_periodic_from_options_errors_name_the_key(
    options: dict[str, Any], key: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        PeriodicCacheReloadTrigger.from_options(options)
    assert repr(key) in str(info.value)


TIMED_ERRORS = [
    pytest.param(timed(**{CACHE: "PARTIAL"}), CACHE, "must be FULL", id="cache-partial"),
    pytest.param(timed(**{STRATEGY: "PERIODIC"}), STRATEGY, "must be TIMED",
                 id="strategy-periodic"),
    pytest.param(without(timed(), STRATEGY), STRATEGY, "must be TIMED.*\\(the default\\)",
                 id="strategy-default"),
    pytest.param(without(timed(), ISO_TIME), ISO_TIME, "missing required", id="time-missing"),
    pytest.param(timed(**{ISO_TIME: "10"}), ISO_TIME, "cannot parse time", id="time-flink-10"),
    pytest.param(timed(**{ISO_TIME: "25:00"}), ISO_TIME, "invalid time", id="time-25h"),
    pytest.param(timed(**{ISO_TIME: "10:15 Europe/Berlin"}), ISO_TIME, "cannot parse time",
                 id="time-zone-name"),
    pytest.param(timed(**{DAYS: "0"}), DAYS, ">= 1", id="days-zero"),
    pytest.param(timed(**{DAYS: "-2"}), DAYS, ">= 1", id="days-negative"),
    pytest.param(timed(**{DAYS: "weekly"}), DAYS, "expected an integer", id="days-bad"),
    pytest.param(timed(**{INTERVAL: "1 h"}), INTERVAL, "applies to reload strategy PERIODIC",
                 id="periodic-key-in-timed"),
    pytest.param(timed(**{MODE: "FIXED_RATE"}), MODE, "applies to reload strategy PERIODIC",
                 id="periodic-mode-in-timed"),
    pytest.param(timed(**{"lookup.full-cache.timed-reload.iso_time": "10:15"}),
                 "lookup.full-cache.timed-reload.iso_time", "unknown option", id="typo"),
]


@pytest.mark.parametrize(("options", "key", "message"), TIMED_ERRORS)
def test_timed_from_options_errors_name_the_key(
    options: dict[str, Any], key: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        TimedCacheReloadTrigger.from_options(options)
    assert repr(key) in str(info.value)


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({CACHE: "PARTIAL"}, CACHE),
        ({CACHE: "FULL", STRATEGY: "HOURLY"}, STRATEGY),
        ({CACHE: "FULL"}, INTERVAL),  # PERIODIC is the default strategy
        ({CACHE: "FULL", STRATEGY: "TIMED"}, ISO_TIME),
    ],
)
def test_reload_trigger_from_options_errors_name_the_key(
    options: dict[str, Any], key: str
) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        reload_trigger_from_options(options)


def test_options_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="mapping"):
        reload_trigger_from_options([(CACHE, "FULL")])  # type: ignore[arg-type]
