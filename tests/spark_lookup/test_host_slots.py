"""Host slots across processes: never more holders than slots, a killed holder's or
waiter's place comes back, a wait is bounded and reported, and a sweep deletes only the
directories nobody uses."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import ConfigError, SourceBusyError
from spark_lookup.host_slots import HostSlots, sweep

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


# --- sweeping unused slot directories (issue 44) -------------------------------------------

NOW = timedelta(0)  # a sweep that does not wait for a directory to age


def _use_forever(directory: str, count: int, ready: Any) -> None:
    """Use the directory (no slot held), until the test kills this process."""
    HostSlots(directory, count)
    ready.set()
    time.sleep(600)


def _use_and_leave(directory: str) -> None:
    slots = HostSlots(directory, 2)
    slots.take(timeout=10).release()
    slots.close()


def _started(target: Any, *args: Any) -> tuple[Any, Any]:
    ready = _CONTEXT.Event()
    process = _CONTEXT.Process(target=target, args=(*args, ready))
    process.start()
    assert ready.wait(30)
    return process, ready


def test_a_directory_in_use_survives_a_sweep_and_an_unused_one_goes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    holding, _ = _started(_hold_forever, str(root / "holding"), 1)
    using, _ = _started(_use_forever, str(root / "using"), 1)
    leaver = _CONTEXT.Process(target=_use_and_leave, args=(str(root / "left"),))
    leaver.start()
    leaver.join(30)
    assert leaver.exitcode == 0
    closed = HostSlots(root / "closed", 1)
    closed.try_take().release()  # type: ignore[union-attr]
    closed.close()
    ours = HostSlots(root / "ours", 1)
    (root / "not-slots").mkdir()  # no users file: never ours to delete
    (root / "not-slots" / "slot-0").touch()
    try:
        assert sweep(root) == []  # the unused ones are younger than an hour
        removed = sweep(root, unused_for=NOW)
        assert sorted(path.name for path in removed) == ["closed", "left"]
        assert sorted(entry.name for entry in root.iterdir()) == [
            "holding", "not-slots", "ours", "using"]
        assert ours.try_take() is not None  # still usable after the sweep
    finally:
        for process in (holding, using):
            process.kill()
            process.join(30)


def test_a_holder_killed_with_sigkill_leaves_a_directory_the_next_sweep_removes(
        tmp_path: Path) -> None:
    root = tmp_path / "root"
    holder, _ = _started(_hold_forever, str(root / "killed"), 1)
    try:
        assert sweep(root, unused_for=NOW) == []
        os.kill(holder.pid or 0, signal.SIGKILL)
        holder.join(30)
        assert sweep(root, unused_for=NOW) == [root / "killed"]
        assert list(root.iterdir()) == []
    finally:
        if holder.is_alive():
            holder.kill()


def test_a_slot_held_past_close_keeps_its_directory(tmp_path: Path) -> None:
    slots = HostSlots(tmp_path / "slots", 2)
    held = slots.take(timeout=1)
    slots.close()
    assert sweep(tmp_path, unused_for=NOW) == []
    held.release()
    assert sweep(tmp_path, unused_for=NOW) == [tmp_path / "slots"]


def _take_in_turn_and_leave(directory: str, log: str, rounds: int) -> None:
    for _ in range(rounds):
        slots = HostSlots(directory, 1)
        slot = slots.take(timeout=30)
        started = time.monotonic()
        time.sleep(0.002)
        ended = time.monotonic()
        slot.release()
        slots.close()
        with open(log, "a") as out:
            out.write(f"{started} {ended}\n")
        time.sleep(random.uniform(0, 0.01))  # so that nobody uses it, at times


def test_sweeping_while_processes_come_and_go_never_lets_two_hold_one_slot(
        tmp_path: Path) -> None:
    root, log = tmp_path / "root", tmp_path / "held.log"
    users = [_CONTEXT.Process(target=_take_in_turn_and_leave,
                              args=(str(root / "slots"), str(log), 40)) for _ in range(2)]
    for process in users:
        process.start()
    swept = 0
    while any(process.is_alive() for process in users):
        if root.exists():
            swept += len(sweep(root, unused_for=NOW))
        time.sleep(0.001)
    for process in users:
        process.join(60)
        assert process.exitcode == 0
    assert len(log.read_text().splitlines()) == 80
    assert _most_at_once(log) == 1
    assert swept > 0  # the directory went while they came and went, and came back
    assert not [entry for entry in root.iterdir() if entry.name.startswith(".trash-")]


def test_a_budgets_first_slots_sweep_their_parent(tmp_path: Path) -> None:
    old = HostSlots(tmp_path / "old", 1)
    old.close()
    hours_ago = time.time() - 7200
    os.utime(tmp_path / "old" / "host-slots-users", (hours_ago, hours_ago))
    ConnectionBudget(str(tmp_path / "new"), 1, timeout=1).take().release()
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["new"]
