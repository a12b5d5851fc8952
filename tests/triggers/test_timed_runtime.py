"""TimedCacheReloadTrigger on a real scheduler: the open-time load, the first scheduled
reload, a reload at a time of day 300 ms ahead, failures."""

from __future__ import annotations

import logging
import time as clock
from collections.abc import Callable
from datetime import datetime, time, timedelta, timezone

import pytest

from tests.polling import wait_until
from tests.triggers.recording import Opener as Open
from tests.triggers.recording import RecordingContext
from triggers import TimedCacheReloadTrigger

MakeContext = Callable[..., RecordingContext]
UTC = timezone.utc
SLACK = timedelta(milliseconds=500)  # a scheduler that wakes late on a busy machine


@pytest.mark.parametrize("days", [1, 3])
def test_loads_on_open_then_schedules_the_first_fire_time(
    days: int, make_context: MakeContext, opened: Open
) -> None:
    context = make_context()
    trigger = TimedCacheReloadTrigger(time(3, 0), days, tz="Europe/Berlin")
    before = datetime.now(UTC)
    opened(trigger, context)
    after = datetime.now(UTC)
    assert context.wait_for_calls(1, timeout=2)
    assert context.loads[0].requested_at - after < SLACK
    wait_until(lambda: (trigger.next_reload_time() or before) > after)
    scheduled = trigger.next_reload_time()
    assert scheduled in {trigger.first_fire_time(before), trigger.first_fire_time(after)}
    assert scheduled is not None
    assert timedelta(days=days - 1) < scheduled - after <= timedelta(days=days, hours=1)
    clock.sleep(0.05)
    assert context.calls == 1


def test_reloads_at_the_time_of_day(make_context: MakeContext, opened: Open) -> None:
    fire = datetime.now(UTC) + timedelta(milliseconds=300)
    trigger = TimedCacheReloadTrigger(fire.time(), tz="UTC")
    context = make_context()
    opened(trigger, context)
    assert context.wait_for_calls(2, timeout=3)
    second = context.loads[1].requested_at
    assert fire - timedelta(milliseconds=10) <= second < fire + SLACK
    # Then daily, on the grid of the configured time (not 24 h after the actual start).
    tomorrow = fire + timedelta(days=1)
    wait_until(lambda: trigger.next_reload_time() == tomorrow)
    clock.sleep(0.05)
    assert context.calls == 2


def test_a_failing_open_time_load_keeps_the_schedule(
    make_context: MakeContext, opened: Open, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="triggers")
    fire = datetime.now(UTC) + timedelta(milliseconds=250)
    context = make_context(raise_on=frozenset({1}))
    opened(TimedCacheReloadTrigger(fire.time(), tz="UTC"), context)
    assert context.wait_for_finished(1, timeout=3)  # the second call: a load that ran
    assert context.calls == 2
    assert "trigger_reload() raised" in caplog.records[0].getMessage()


def test_no_load_starts_after_close(make_context: MakeContext) -> None:
    fire = datetime.now(UTC) + timedelta(milliseconds=200)
    context = make_context()
    trigger = TimedCacheReloadTrigger(fire.time(), tz="UTC")
    trigger.open(context)
    assert context.wait_for_calls(1, timeout=2)
    trigger.close()
    clock.sleep(0.35)
    assert context.calls == 1
    assert trigger.next_reload_time() is None


def test_the_session_follows_the_documented_schedule() -> None:
    trigger = TimedCacheReloadTrigger(time(3, 0), 3, tz="Europe/Berlin")
    opened_at = datetime.fromisoformat("2024-06-03T08:00+00:00")
    later = opened_at + timedelta(hours=1)
    # After the open-time load: the first fire time; after that, every 3 days.
    first = trigger._following(opened_at, later, True)
    assert first == trigger.first_fire_time(opened_at)
    assert trigger._following(first, later, False) == trigger.next_fire_time(first, later)
    # A load that ended after fire times passed (a suspended machine): they are skipped,
    # the next one is on the grid after the end.
    week_later = first + timedelta(days=7, hours=1)
    following = trigger._following(first, week_later, False)
    assert following == trigger.next_fire_time(first + timedelta(days=6), week_later)
    assert week_later < following <= week_later + timedelta(days=3)
