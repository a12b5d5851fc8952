"""Host slots across processes: never more holders than slots, a killed holder's or
waiter's place comes back, a wait is bounded and reported."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import ConfigError, SourceBusyError
from spark_lookup.host_slots import HostSlots

_CONTEXT = multiprocessing.get_context("spawn")  # no fork of the test process's threads


def _hold_in_turn(directory: str, count: int, log: str, hold: float) -> None:
    """Take a slot, write when it was held (start, end) to ``log``, give it back."""
    slots = HostSlots(directory, count)
    slot = slots.take(timeout=30)
    started = time.monotonic()
    time.sleep(hold)
    ended = time.monotonic()
    with open(log, "a") as out:
        out.write(f"{started} {ended}\n")
    slot.release()


def _hold_forever(directory: str, count: int, ready: Any) -> None:
    slot = HostSlots(directory, count).take(timeout=30)
    ready.set()
    time.sleep(600)
    slot.release()  # never reached: the test kills this process


def _wait_forever(directory: str, count: int, waiting: Any) -> None:
    slots = HostSlots(directory, count)
    waiting.set()
    slots.take(timeout=600)  # the test holds every slot, then kills this process


def _most_at_once(log: Path) -> int:
    spans = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                    key=lambda event: (event[0], event[1]))
    held = most = 0
    for _, change in events:
        held += change
        most = max(most, held)
    return most


def test_no_more_holders_than_slots_across_processes(tmp_path: Path) -> None:
    log = tmp_path / "held.log"
    processes = [_CONTEXT.Process(target=_hold_in_turn,
                                  args=(str(tmp_path / "slots"), 2, str(log), 0.2))
                 for _ in range(5)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert len(log.read_text().splitlines()) == 5
    assert _most_at_once(log) <= 2


def test_a_holder_killed_with_sigkill_gives_its_slot_back(tmp_path: Path) -> None:
    directory = str(tmp_path / "slots")
    ready = _CONTEXT.Event()
    holder = _CONTEXT.Process(target=_hold_forever, args=(directory, 1, ready))
    holder.start()
    try:
        assert ready.wait(30)
        slots = HostSlots(directory, 1)
        assert slots.try_take() is None
        os.kill(holder.pid or 0, signal.SIGKILL)
        holder.join(30)
        slot = slots.take(timeout=10)
        assert slot.held
        slot.release()
        assert not slot.held
    finally:
        if holder.is_alive():
            holder.kill()


def test_a_waiter_killed_with_sigkill_leaves_no_queue_behind(tmp_path: Path) -> None:
    directory = str(tmp_path / "slots")
    slots = HostSlots(directory, 1)
    held = slots.take(timeout=1)
    waiting = _CONTEXT.Event()
    waiter = _CONTEXT.Process(target=_wait_forever, args=(directory, 1, waiting))
    waiter.start()
    try:
        assert waiting.wait(30)
        deadline = time.monotonic() + 30
        while not slots.contended():  # its ticket is in the queue
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(waiter.pid or 0, signal.SIGKILL)
        waiter.join(30)
        assert not slots.contended()  # a dead waiter's ticket is removed
        held.release()
        started = time.monotonic()
        slots.take(timeout=5).release()
        assert time.monotonic() - started < 1  # nobody queued ahead
    finally:
        if waiter.is_alive():
            waiter.kill()


def test_a_wait_is_bounded_and_reported(tmp_path: Path) -> None:
    slots = HostSlots(tmp_path / "slots", 1)
    waits: list[float] = []
    held = slots.take(timeout=1, on_wait=waits.append)
    assert waits == []  # taken at once: no wait
    with pytest.raises(SourceBusyError, match="max_source_connections"):
        slots.take(timeout=0.2, on_wait=waits.append)
    assert waits == []
    assert not slots.contended()  # the timed-out waiter left the queue

    import threading

    threading.Timer(0.3, held.release).start()
    slots.take(timeout=10, on_wait=waits.append).release()
    assert len(waits) == 1
    assert waits[0] >= 0.25


def test_a_budget_reports_its_waits_to_its_watchers(tmp_path: Path) -> None:
    budget = ConnectionBudget(str(tmp_path / "budget"), 1, timeout=10)
    waits: list[float] = []
    unwatch = budget.watch(waits.append)
    held = budget.take()
    import threading

    threading.Timer(0.2, held.release).start()
    budget.take().release()
    unwatch()
    assert len(waits) == 1
    held = budget.take()
    threading.Timer(0.1, held.release).start()
    budget.take().release()
    assert len(waits) == 1  # unwatched


def test_slots_refuse_a_bad_count(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        HostSlots(tmp_path / "slots", 0)
