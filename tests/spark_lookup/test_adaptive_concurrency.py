"""Adaptive concurrency: the host's limit goes down on errors and slow loads (at most once
per window, never below 1), back up as the source recovers (never above the ceiling), is
shared by the host's processes, and no dead process or damaged record leaves it low."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from connectors.pool import ConnectionPool
from spark_lookup.adaptive_concurrency import (
    RECOVERY_INTERVAL,
    AdaptiveLimit,
    LimitState,
    SharedLimit,
)
from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import SourceBusyError
from spark_lookup.host_slots import HostSlots

_CONTEXT = multiprocessing.get_context("spawn")  # no fork of the test process's threads


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _limit(tmp_path: Path, ceiling: int = 4, window: float = 0.1) -> tuple[AdaptiveLimit, Clock]:
    clock = Clock()
    return AdaptiveLimit(SharedLimit(tmp_path, ceiling, clock), min_window=window), clock


def _loads(limit: AdaptiveLimit, clock: Clock, seconds: float, count: int,
           keys: int = 100) -> list[int]:
    """``count`` loads of ``seconds`` each, one after another; the changes they made."""
    changes = []
    for _ in range(count):
        clock.now += seconds
        changes.append(limit.on_load(seconds, keys))
    return changes


def test_errors_lower_the_limit_once_per_window_and_never_below_one(tmp_path: Path) -> None:
    limit, clock = _limit(tmp_path, ceiling=8)
    assert limit.limit() == 8
    assert limit.on_overload() == -1
    assert limit.limit() == 6  # multiplicative: 8 * 0.75
    assert limit.on_overload() == 0  # the same window: loads in flight say it again
    seen = [6]
    for _ in range(6):
        clock.now += 0.1
        limit.on_overload()
        seen.append(limit.limit())
    assert seen == [6, 4, 3, 2, 1, 1, 1]


def test_slow_loads_lower_the_limit_and_it_rises_one_at_a_time_as_they_recover(
        tmp_path: Path) -> None:
    limit, clock = _limit(tmp_path)
    assert set(_loads(limit, clock, 0.01, 50)) == {0}  # healthy at the ceiling: stays
    assert limit.limit() == 4
    slow = _loads(limit, clock, 0.05, 40)  # five times the baseline
    assert slow.count(-1) == 3
    assert 1 not in slow
    assert limit.limit() == 1
    fast = _loads(limit, clock, 0.01, 100)
    assert fast.count(1) == 3
    assert -1 not in fast
    assert limit.limit() == 4
    assert _loads(limit, clock, 0.01, 50).count(1) == 0  # never above the ceiling


def test_a_slowdown_below_the_tolerance_changes_nothing(tmp_path: Path) -> None:
    limit, clock = _limit(tmp_path)
    _loads(limit, clock, 0.01, 20)
    assert -1 not in _loads(limit, clock, 0.018, 50)
    assert limit.limit() == 4


def test_loads_of_many_keys_are_compared_with_loads_of_as_many(tmp_path: Path) -> None:
    limit, clock = _limit(tmp_path)
    for _ in range(40):  # a big load takes 100 times a small one: no slowdown
        _loads(limit, clock, 0.001, 1, keys=10)
        _loads(limit, clock, 0.1, 1, keys=10_000)
    assert limit.limit() == 4
    assert _loads(limit, clock, 0.005, 40, keys=10).count(-1) >= 1  # small ones slowed


def test_a_load_begun_before_a_decrease_does_not_lower_it_again(tmp_path: Path) -> None:
    limit, clock = _limit(tmp_path)
    _loads(limit, clock, 0.01, 20)
    clock.now += 0.05
    assert limit.on_overload() == -1
    clock.now += 0.5  # several windows later, a load that started before the decrease
    assert limit.on_load(0.6, 100) == 0
    assert limit.limit() == 3


def test_the_limit_is_the_hosts_whichever_process_changed_it(tmp_path: Path) -> None:
    clock = Clock()
    one = AdaptiveLimit(SharedLimit(tmp_path, 4, clock))
    other = AdaptiveLimit(SharedLimit(tmp_path, 4, clock))
    assert one.on_overload() == -1
    assert other.limit() == 3
    assert other.on_overload() == 0  # within the window of the first decrease
    clock.now += 0.1
    assert other.on_overload() == -1
    assert one.limit() == 2


def test_a_lowered_limit_recovers_with_time_when_its_process_is_gone(tmp_path: Path) -> None:
    clock = Clock()
    dead = AdaptiveLimit(SharedLimit(tmp_path, 4, clock))
    for _ in range(3):
        clock.now += 1
        dead.on_overload()
    dead.close()
    shared = SharedLimit(tmp_path, 4, clock)
    assert shared.current() == 1
    clock.now += RECOVERY_INTERVAL
    assert shared.current() == 2
    clock.now += 10 * RECOVERY_INTERVAL
    assert shared.current() == 4  # never above the ceiling


@pytest.mark.parametrize("damage", ["torn", "garbage", "future", "zero"])
def test_a_damaged_or_foreign_record_means_the_ceiling(tmp_path: Path, damage: str) -> None:
    clock = Clock()
    shared = SharedLimit(tmp_path, 4, clock)
    shared.update(lambda state, now: LimitState(1, now, now))
    assert shared.current() == 1
    record = shared.path
    if damage == "torn":  # a writer killed mid-write
        data = bytearray(record.read_bytes())
        data[5] ^= 0xFF
        record.write_bytes(bytes(data))
    elif damage == "garbage":
        record.write_bytes(os.urandom(7))
    elif damage == "future":  # another boot's monotonic clock
        shared.update(lambda state, now: LimitState(1, now + 3600, now + 3600))
    else:
        shared.update(lambda state, now: LimitState(0, now, now))
    assert shared.current() == 4
    assert SharedLimit(tmp_path, 2, clock).current() == 2  # a record never above the ceiling


def test_slots_above_the_limit_are_not_taken(tmp_path: Path) -> None:
    slots = HostSlots(tmp_path / "slots", 4)
    first = slots.take(1, limit=lambda: 1)
    assert first.index == 0
    with pytest.raises(SourceBusyError, match="1 \\(of 4, lowered"):
        slots.take(0.01, limit=lambda: 1)
    first.release()
    held = [slots.take(1, limit=lambda: 2) for _ in range(2)]
    assert sorted(s.index for s in held) == [0, 1]
    for slot in held:
        slot.release()


class _Connection:
    def __init__(self, index: int) -> None:
        self.slot = type("Slot", (), {"index": index})()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_budget_closes_pooled_connections_above_its_limit(tmp_path: Path) -> None:
    budget = ConnectionBudget(str(tmp_path / "budget"), 4, 1.0)
    concurrency = budget.concurrency()
    assert concurrency is not None
    pool: ConnectionPool[_Connection] = ConnectionPool(
        budget.contended, lambda c: budget.admits(c.slot))  # type: ignore[arg-type]
    low, high = _Connection(0), _Connection(3)
    pool.give(low)
    pool.give(high)
    assert concurrency.on_overload() == -1  # 3: slot 3 is above it
    assert pool.take() is low
    assert high.closed
    pool.give(low)
    assert not low.closed
    off = ConnectionBudget(str(tmp_path / "off"), 4, 1.0, adaptive=False)
    assert off.concurrency() is None
    assert off.admits(high.slot)
    pool.close()


# --- across processes


def _load_in_a_loop(directory: str, ceiling: int, slow: str, stop: str, log: str) -> None:
    """Load from a fake source until ``stop`` exists: 2 ms a load, 30 ms while ``slow``
    exists; write each load's start and end to ``log`` (and ``<log>.ready`` once it knows
    the fast source)."""
    slots = HostSlots(directory, ceiling)
    limit = AdaptiveLimit(SharedLimit(directory, ceiling), min_window=0.02)
    spans = []
    while not os.path.exists(stop):
        slot = slots.take(30, limit=limit.limit)
        started = time.monotonic()
        time.sleep(0.03 if os.path.exists(slow) else 0.002)
        ended = time.monotonic()
        slot.release()
        limit.on_load(ended - started, 1)
        spans.append(f"{started} {ended}\n")
        if len(spans) == 50:
            Path(f"{log}.ready").touch()
    with open(log, "w") as out:
        out.writelines(spans)


def _most_at_once(spans: list[tuple[float, float]], start: float, end: float) -> int:
    events = sorted([(s, 1) for s, e in spans if start <= s and e <= end]
                    + [(e, -1) for s, e in spans if start <= s and e <= end])
    held = most = 0
    for _, change in events:
        held += change
        most = max(most, held)
    return most


def _wait_for(condition: object, seconds: float) -> float:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
    return time.monotonic()


def test_a_slow_source_gets_fewer_loads_at_once_across_processes_until_it_recovers(
        tmp_path: Path) -> None:
    directory, ceiling = str(tmp_path / "slots"), 3
    slow, stop = tmp_path / "slow", tmp_path / "stop"
    logs = [tmp_path / f"loads-{n}.log" for n in range(3)]
    HostSlots(directory, ceiling)
    shared = SharedLimit(directory, ceiling)
    workers = [_CONTEXT.Process(target=_load_in_a_loop,
                                args=(directory, ceiling, str(slow), str(stop), str(log)))
               for log in logs]
    for worker in workers:
        worker.start()
    try:
        _wait_for(lambda: all(Path(f"{log}.ready").exists() for log in logs), 60)
        time.sleep(0.2)  # fast: every process loads at once
        fast_until = time.monotonic()
        slow.touch()
        lowered = _wait_for(lambda: shared.current() == 1, 10)
        time.sleep(0.4)
        recovering = time.monotonic()
        slow.unlink()
        _wait_for(lambda: shared.current() == ceiling, 10)
    finally:
        stop.touch()
        for worker in workers:
            worker.join(30)
    assert all(worker.exitcode == 0 for worker in workers)
    spans = [tuple(map(float, line.split())) for log in logs
             for line in log.read_text().splitlines()]
    pairs = [(s, e) for s, e in spans]
    assert _most_at_once(pairs, 0, fast_until) >= 2
    assert _most_at_once(pairs, lowered + 0.05, recovering) == 1
