"""Triggers travel from the driver to executors by pickle, as configuration only."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from datetime import time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.triggers.recording import RecordingContext
from triggers import (
    CacheReloadTrigger,
    PeriodicCacheReloadTrigger,
    ScheduleMode,
    TimedCacheReloadTrigger,
)

MakeContext = Callable[..., RecordingContext]


def roundtrip(trigger: CacheReloadTrigger) -> Any:
    return pickle.loads(pickle.dumps(trigger))


def test_periodic_pickles_its_configuration() -> None:
    trigger = PeriodicCacheReloadTrigger(
        timedelta(minutes=5), ScheduleMode.FIXED_RATE, close_timeout=3)
    copy = roundtrip(trigger)
    assert isinstance(copy, PeriodicCacheReloadTrigger)
    assert (copy.interval, copy.schedule_mode, copy.close_timeout) == (
        timedelta(minutes=5), ScheduleMode.FIXED_RATE, timedelta(seconds=3)
    )
    assert repr(copy) == repr(trigger)
    assert not copy.is_open


@pytest.mark.parametrize(
    "trigger",
    [
        TimedCacheReloadTrigger(time(3, 30, fold=1), 3, tz="America/New_York"),
        TimedCacheReloadTrigger(time(10, 15, tzinfo=ZoneInfo("Asia/Kolkata"))),
        TimedCacheReloadTrigger.from_options({
            "lookup.cache": "FULL",
            "lookup.full-cache.reload-strategy": "TIMED",
            "lookup.full-cache.timed-reload.iso-time": "10:15+07:00",
        }),
    ],
    ids=repr,
)
def test_timed_pickles_its_configuration(trigger: TimedCacheReloadTrigger) -> None:
    copy = roundtrip(trigger)
    assert (copy.time_of_day, copy.time_of_day.fold, copy.interval_in_days, copy.tz) == (
        trigger.time_of_day, trigger.time_of_day.fold, trigger.interval_in_days, trigger.tz
    )
    assert repr(copy) == repr(trigger)


@pytest.mark.parametrize(
    "trigger",
    [PeriodicCacheReloadTrigger(timedelta(seconds=30)), TimedCacheReloadTrigger(time(3), tz="UTC")],
    ids=lambda t: type(t).__name__,
)
def test_an_open_trigger_pickles_closed(
    trigger: PeriodicCacheReloadTrigger | TimedCacheReloadTrigger, make_context: MakeContext
) -> None:
    driver_context = make_context()
    trigger.open(driver_context)
    try:
        copy = roundtrip(trigger)  # no scheduler, lock or context is pickled
        assert not copy.is_open
        executor_context = make_context()
        copy.open(executor_context)
        try:
            assert executor_context.wait_for_calls(1, timeout=2)
        finally:
            copy.close()
        assert trigger.is_open
    finally:
        trigger.close()


def test_a_newer_state_version_is_refused() -> None:
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=30))
    state = trigger.__getstate__()
    assert state["version"] == 2
    clone = PeriodicCacheReloadTrigger.__new__(PeriodicCacheReloadTrigger)
    with pytest.raises(ValueError, match="state version 3 is newer than the supported version 2"):
        clone.__setstate__({**state, "version": 3})


def test_a_state_of_version_1_still_loads() -> None:
    # Version 1 carried a scheduler factory per trigger; there is one scheduler per
    # process now, and the key is ignored.
    clone = PeriodicCacheReloadTrigger.__new__(PeriodicCacheReloadTrigger)
    clone.__setstate__({"version": 1, "config": {
        "interval": timedelta(seconds=30), "schedule_mode": ScheduleMode.FIXED_RATE,
        "close_timeout": timedelta(seconds=10), "scheduler_factory": None}})
    assert (clone.interval, clone.schedule_mode) == (timedelta(seconds=30), ScheduleMode.FIXED_RATE)
