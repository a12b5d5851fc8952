"""PeriodicCacheReloadTrigger on a real scheduler (Flink's PeriodicCacheReloadTriggerTest,
ported, plus FIXED_DELAY/FIXED_RATE timing, failures, close).

Intervals are 100-300 ms; timing bounds are loose enough for a loaded CI machine but
tight enough to tell the two schedule modes (and a queued tick from a skipped one) apart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from typing import Any

import pytest

from spark_lookup.errors import ConfigError
from tests.polling import wait_until
from tests.triggers.recording import Opener as Open
from tests.triggers.recording import RecordingContext
from triggers import PeriodicCacheReloadTrigger, ScheduleMode

MakeContext = Callable[..., RecordingContext]

INTERVAL = 0.1
# Upper bounds tolerate a scheduler that wakes late on a busy machine. The lower bounds
# are sharp (nothing starts early), and they are what tells the modes apart.
SLACK = 0.5


def starts(context: RecordingContext) -> list[float]:
    return [load.requested for load in context.loads]


# --- construction (Flink: testNegativeReloadInterval) -----------------------------------


@pytest.mark.parametrize("interval", [timedelta(0), timedelta(seconds=-1), 0, -0.5])
def test_non_positive_interval_is_refused(interval: Any) -> None:
    with pytest.raises(ValueError, match="interval must be positive") as info:
        PeriodicCacheReloadTrigger(interval)
    assert isinstance(info.value, ConfigError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"interval": "10 s"}, "interval must be a datetime.timedelta"),
        ({"interval": 1, "schedule_mode": "SOMETIMES"}, "schedule_mode must be"),
        ({"interval": 1, "schedule_mode": 3}, "schedule_mode must be"),
        ({"interval": 1, "close_timeout": -1}, "close_timeout must be non-negative"),
    ],
)
def test_invalid_arguments_name_the_argument(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PeriodicCacheReloadTrigger(**kwargs)


def test_arguments_are_normalised() -> None:
    trigger = PeriodicCacheReloadTrigger(1.5, "fixed-rate", close_timeout=0)
    assert trigger.interval == timedelta(seconds=1.5)
    assert trigger.schedule_mode is ScheduleMode.FIXED_RATE
    assert trigger.close_timeout == timedelta(0)
    assert PeriodicCacheReloadTrigger(timedelta(hours=1)).schedule_mode is ScheduleMode.FIXED_DELAY


def test_constructor_starts_nothing() -> None:
    before = threading.active_count()
    trigger = PeriodicCacheReloadTrigger(timedelta(milliseconds=100))
    assert not trigger.is_open
    assert trigger.next_reload_time() is None
    assert threading.active_count() == before


# --- the schedule (Flink: testNormalReloadInterval) -------------------------------------


@pytest.mark.parametrize("mode", list(ScheduleMode))
def test_first_load_is_immediate_then_every_interval(
    mode: ScheduleMode, make_context: MakeContext, opened: Open
) -> None:
    context = make_context()
    opened_at = time.monotonic()
    trigger = opened(PeriodicCacheReloadTrigger(timedelta(seconds=30), mode), context)
    assert context.wait_for_finished(1, timeout=2)
    assert context.loads[0].requested - opened_at < SLACK
    # The next one is one interval away: after the start (FIXED_RATE) or the end
    # (FIXED_DELAY, scheduled once the trigger has seen the load end).
    wait_until(lambda: trigger.next_reload_time() is not None)
    next_time = trigger.next_reload_time()
    assert next_time is not None
    assert next_time.tzinfo is not None
    delay = (next_time - datetime.now(timezone.utc)).total_seconds()
    assert 30 - 1 < delay <= 30
    time.sleep(0.05)
    assert context.calls == 1


def test_fixed_delay_fast_loads_start_an_interval_apart(
    make_context: MakeContext, opened: Open
) -> None:
    context = make_context(load_seconds=0.0)
    opened(PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL)), context)
    assert context.wait_for_finished(5, timeout=3)
    loads = context.finished()[:5]
    for previous, following in pairwise(loads):
        assert previous.ended is not None
        gap = following.requested - previous.ended
        assert INTERVAL - 0.01 <= gap < INTERVAL + SLACK


def test_fixed_delay_measures_from_the_end_of_a_slow_load(
    make_context: MakeContext, opened: Open
) -> None:
    # Loads (150 ms) are slower than the interval (100 ms): each next load starts 100 ms
    # after the previous one ENDS, 250 ms after it started. (FIXED_RATE would start
    # them 200 ms apart, 50 ms after the end: the lower bounds tell the modes apart.)
    context = make_context(load_seconds=0.15)
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL), ScheduleMode.FIXED_DELAY)
    opened(trigger, context)
    assert context.wait_for_finished(3, timeout=4)
    loads = context.finished()[:3]
    for previous, following in pairwise(loads):
        assert previous.ended is not None
        assert INTERVAL - 0.01 <= following.requested - previous.ended < INTERVAL + SLACK
        assert following.requested - previous.requested >= 0.25 - 0.01
    assert context.max_concurrent == 1


def test_fixed_rate_starts_on_the_grid(make_context: MakeContext, opened: Open) -> None:
    context = make_context(load_seconds=0.05)
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL), ScheduleMode.FIXED_RATE)
    before = time.monotonic()
    opened(trigger, context)
    after = time.monotonic()
    scheduled: set[datetime] = set()
    while context.calls < 6 and time.monotonic() < after + 3:
        next_time = trigger.next_reload_time()
        if next_time is not None:
            scheduled.add(next_time)
        time.sleep(0.01)
    assert context.calls >= 6
    # Start to start: the k-th load starts k intervals after the open, whatever the
    # 50 ms loads (FIXED_DELAY would drift by 50 ms per load).
    for k, start in enumerate(starts(context)[:6]):
        assert before + k * INTERVAL - 0.01 <= start < after + k * INTERVAL + SLACK
    # The times the scheduler planned are exactly on the grid, however late it woke.
    assert len(scheduled) >= 3
    origin = min(scheduled)
    for planned in scheduled:
        steps = (planned - origin) / timedelta(seconds=INTERVAL)
        assert abs(steps - round(steps)) < 1e-3


def test_fixed_rate_never_overlaps_and_skips_ticks(
    make_context: MakeContext, opened: Open, caplog: pytest.LogCaptureFixture
) -> None:
    # Loads of 230 ms at a 100 ms rate: the ticks at 100 and 200 ms find a load running
    # and are skipped; the next load starts on the grid at 300 ms. A queued tick would
    # instead start as soon as the load ends, at ~230 ms.
    caplog.set_level(logging.INFO, logger="triggers")
    context = make_context(load_seconds=0.23)
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL), ScheduleMode.FIXED_RATE)
    before = time.monotonic()
    opened(trigger, context)
    after = time.monotonic()
    assert context.wait_for_finished(3, timeout=4)
    loads = context.finished()[:3]
    for previous, following in pairwise(loads):
        assert previous.ended is not None
        assert following.started is not None
        assert following.started >= previous.ended  # never two at once
    for k, load in zip((0, 3, 6), loads, strict=True):
        assert before + k * INTERVAL - 0.01 <= load.requested < after + k * INTERVAL + SLACK
    assert context.max_concurrent == 1
    assert any("skipped" in record.getMessage() for record in caplog.records)


# --- failures keep the schedule ---------------------------------------------------------


@pytest.mark.parametrize("mode", list(ScheduleMode))
@pytest.mark.parametrize("failure", ["raise_on", "fail_on"])
def test_failing_reloads_keep_the_schedule(
    mode: ScheduleMode,
    failure: str,
    make_context: MakeContext,
    opened: Open,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="triggers")
    context = make_context(**{failure: frozenset({1, 2})})
    opened(PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL), mode), context)
    assert context.wait_for_calls(4, timeout=3)
    errors = [r for r in caplog.records if r.name == "triggers" and r.levelno >= logging.ERROR]
    assert len(errors) >= 2
    assert all("schedule goes on" in r.getMessage() for r in errors)
    assert "load 1" in str(errors[0].exc_info[1] if errors[0].exc_info else "")


class _NotAFutureContext:
    def __init__(self) -> None:
        self.calls = 0

    def current_processing_time(self) -> int:
        return 0

    def trigger_reload(self) -> Any:
        self.calls += 1
        return "done"


def test_a_result_that_is_not_a_future_is_logged_and_the_schedule_goes_on(
    opened: Open, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="triggers")
    context = _NotAFutureContext()
    opened(PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL)), context)
    wait_until(lambda: context.calls >= 3)
    assert "expected a concurrent.futures.Future" in caplog.records[0].getMessage()


# --- close -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(ScheduleMode))
def test_no_load_starts_after_close(mode: ScheduleMode, make_context: MakeContext) -> None:
    context = make_context(load_seconds=0.01)
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL), mode)
    trigger.open(context)
    assert context.wait_for_calls(2, timeout=3)
    trigger.close()
    calls = context.calls
    assert not trigger.is_open
    assert trigger.next_reload_time() is None
    time.sleep(3 * INTERVAL)
    assert context.calls == calls


def test_close_waits_for_a_short_load_in_progress(make_context: MakeContext) -> None:
    context = make_context(load_seconds=0.2)
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL))
    trigger.open(context)
    assert context.wait_for_calls(1, timeout=2)
    trigger.close()
    assert context.loads[0].ended is not None  # close() returned after the load ended
    time.sleep(2 * INTERVAL)
    assert context.calls == 1


def test_close_does_not_wait_forever_for_a_running_load(
    make_context: MakeContext, caplog: pytest.LogCaptureFixture
) -> None:
    context = make_context(load_seconds=30)
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL), close_timeout=0.15)
    trigger.open(context)
    assert context.wait_for_calls(1, timeout=2)
    began = time.monotonic()
    trigger.close()
    assert 0.15 - 0.01 <= time.monotonic() - began < 0.15 + SLACK
    assert context.loads[0].ended is None
    assert "still running" in caplog.text
    time.sleep(2 * INTERVAL)
    assert context.calls == 1


def test_close_timeout_argument_overrides_the_default(make_context: MakeContext) -> None:
    context = make_context(load_seconds=30)
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL))  # default: 10 s
    trigger.open(context)
    assert context.wait_for_calls(1, timeout=2)
    began = time.monotonic()
    trigger.close(timeout=timedelta(milliseconds=100))
    assert time.monotonic() - began < 0.1 + SLACK


class _HangingContext:
    """trigger_reload() itself blocks (a synchronous load) until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def current_processing_time(self) -> int:
        return 0

    def trigger_reload(self) -> Future[None]:
        self.calls += 1
        self.entered.set()
        self.release.wait(10)
        done: Future[None] = Future()
        done.set_result(None)
        return done


def test_close_is_bounded_when_trigger_reload_itself_hangs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = _HangingContext()
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL), close_timeout=0.15)
    trigger.open(context)
    try:
        assert context.entered.wait(2)
        began = time.monotonic()
        trigger.close()
        assert time.monotonic() - began < 0.15 + SLACK
        assert "did not return" in caplog.text
    finally:
        context.release.set()
    time.sleep(2 * INTERVAL)
    assert context.calls == 1  # the released call was not followed by another


class _QueueingContext:
    """Loads queue behind a busy loader: trigger_reload() returns a pending future."""

    def __init__(self) -> None:
        self.futures: list[Future[None]] = []

    def current_processing_time(self) -> int:
        return 0

    def trigger_reload(self) -> Future[None]:
        future: Future[None] = Future()
        self.futures.append(future)
        return future


def test_close_cancels_a_load_that_has_not_started() -> None:
    context = _QueueingContext()
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL))
    trigger.open(context)
    wait_until(lambda: bool(context.futures))
    trigger.close()
    assert len(context.futures) == 1
    # The loader would now see the cancellation (set_running_or_notify_cancel is False).
    assert context.futures[0].cancelled()


# --- lifecycle ----------------------------------------------------------------------------


def test_open_twice_is_an_error_and_close_is_idempotent(
    make_context: MakeContext, opened: Open
) -> None:
    trigger = opened(PeriodicCacheReloadTrigger(timedelta(seconds=30)), make_context())
    with pytest.raises(RuntimeError, match="already open"):
        trigger.open(make_context())
    trigger.close()
    trigger.close()
    PeriodicCacheReloadTrigger(timedelta(seconds=30)).close()  # never opened


def test_reopen_after_close_starts_a_fresh_schedule(make_context: MakeContext) -> None:
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=30))
    first, second = make_context(), make_context()
    trigger.open(first)
    assert first.wait_for_calls(1, timeout=2)
    trigger.close()
    trigger.open(second)
    try:
        assert second.wait_for_calls(1, timeout=2)
        assert trigger.is_open
    finally:
        trigger.close()
    assert first.calls == 1


def test_open_refuses_an_object_that_is_not_a_context() -> None:
    trigger = PeriodicCacheReloadTrigger(timedelta(seconds=1))
    with pytest.raises(TypeError, match="ReloadContext"):
        trigger.open(object())  # type: ignore[arg-type]
    assert not trigger.is_open


def test_every_open_trigger_runs_on_the_one_process_scheduler(
    make_context: MakeContext, opened: Open
) -> None:
    from triggers.scheduler import process_scheduler

    # An interval no other test uses: the jobs' names (the triggers' reprs) are ours only.
    triggers = [opened(PeriodicCacheReloadTrigger(timedelta(seconds=4321), mode),
                       make_context()) for mode in ScheduleMode]
    # Each open trigger's next reload is a job on the scheduler every trigger shares.
    def scheduled_after_the_first_load() -> bool:
        later = datetime.now(timezone.utc) + timedelta(seconds=4000)
        return all((t.next_reload_time() or later) > later for t in triggers)

    wait_until(scheduled_after_the_first_load)
    pending = process_scheduler().pending()
    assert all(pending.count(repr(t)) == 1 for t in triggers)
    for trigger in triggers:
        trigger.close()
    assert not {repr(t) for t in triggers} & set(process_scheduler().pending())


@pytest.mark.parametrize("mode", list(ScheduleMode))
def test_the_next_fire_time_is_pure(mode: ScheduleMode) -> None:
    trigger = PeriodicCacheReloadTrigger(timedelta(minutes=10), mode)
    at = datetime(2024, 6, 3, 9, 0, tzinfo=timezone.utc)
    ended = at + timedelta(minutes=2)
    assert trigger.next_fire_time(None, ended) == ended + timedelta(minutes=10)
    # A load overran two starts: FIXED_RATE skips them and stays on its grid.
    overran = at + timedelta(minutes=25)
    pure = {ScheduleMode.FIXED_RATE: at + timedelta(minutes=10),
            ScheduleMode.FIXED_DELAY: overran + timedelta(minutes=10)}[mode]
    assert trigger.next_fire_time(at, overran) == pure
    followed = {ScheduleMode.FIXED_RATE: at + timedelta(minutes=30),
                ScheduleMode.FIXED_DELAY: overran + timedelta(minutes=10)}[mode]
    assert trigger._following(at, overran, False) == followed
