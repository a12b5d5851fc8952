"""Full caches shared by real processes of one host: a new worker starts warm without a
scan, one scan per due reload whatever the number of processes, a killed loader leaves
the previous version served, others switch to a new version at their next lookup, and
a process keeps serving while another holds the lock.

Every process is a :class:`~tests.integration.processes.Worker` (forked from a fork
server) with its own runtime; scans are counted in a file by the source itself.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.processes import (
    FileClock,
    LockHolder,
    Worker,
    count_lines,
    make_db,
    provider,
    set_tier,
    store_for,
    workers,
)
from triggers import PeriodicCacheReloadTrigger

HOUR = 3600.0
IDS = list(range(0, 200, 7))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, Path]:
    return {"db": make_db(tmp_path / "dim.db"), "scans": tmp_path / "scans",
            "store": tmp_path / "snapshots" / "customers", "clock": tmp_path / "clock"}


def test_a_second_worker_opens_the_snapshot_without_scanning(env: dict[str, Path]) -> None:
    # The real trigger: it loads on open, then hourly.
    p = provider(env["db"], env["scans"], trigger=PeriodicCacheReloadTrigger(timedelta(hours=1)))
    (first,) = workers(Worker(p, env["store"], env["clock"], open_fires=False))
    try:
        assert first.tiers(IDS) == ({"v1"}, 1)  # waits for its open-time load
        assert count_lines(env["scans"]) == 1
        (second,) = workers(Worker(p, env["store"], env["clock"], open_fires=False))
        try:
            found, version = second.lookup(IDS)
            assert version == 1
            assert found[(7,)] == ((7, "n7", "v1"),)
            assert second.call("metrics")["load_count"] == 0
            assert count_lines(env["scans"]) == 1  # the second process never scanned
        finally:
            second.close()
    finally:
        first.close()
    # A third one, after both exited: the file is still there and still current.
    (third,) = workers(Worker(p, env["store"], env["clock"], open_fires=False))
    try:
        assert third.tiers(IDS) == ({"v1"}, 1)
        assert count_lines(env["scans"]) == 1
    finally:
        third.close()


def test_one_scan_per_firing_across_two_processes(env: dict[str, Path]) -> None:
    # A scan holds its load open 0.2 s, so both processes really compete for each one.
    p = provider(env["db"], env["scans"], delay=0.2)
    a, b = workers(Worker(p, env["store"], env["clock"]), Worker(p, env["store"], env["clock"]))
    clock = FileClock(env["clock"])
    try:
        assert count_lines(env["scans"]) == 1  # both fired on open, concurrently
        for firing in range(2, 5):
            clock.advance(2 * HOUR)  # the published version is now due
            set_tier(env["db"], f"v{firing}")
            a.send("fire")
            b.send("fire")
            assert (a.receive(), b.receive()) == (firing, firing)
            assert count_lines(env["scans"]) == firing
            assert a.tiers(IDS)[0] == b.tiers(IDS)[0] == {f"v{firing}"}
            # A firing before the version comes due again changes nothing.
            assert (a.call("fire"), b.call("fire")) == (firing, firing)
            assert count_lines(env["scans"]) == firing
        loads = a.call("metrics")["load_count"] + b.call("metrics")["load_count"]
        assert loads == 4  # each scan was one process's load, never both
    finally:
        a.close()
        b.close()


def test_a_killed_loader_leaves_the_previous_version_served(env: dict[str, Path]) -> None:
    p = provider(env["db"], env["scans"])
    clock = FileClock(env["clock"])
    (reader,) = workers(Worker(p, env["store"], env["clock"], check_interval=HOUR))
    # This one dies (SIGKILL) after writing 2 record batches of its first publication.
    (victim,) = workers(Worker(p, env["store"], env["clock"], kill_after=2))
    try:
        assert count_lines(env["scans"]) == 1
        clock.advance(2 * HOUR)
        set_tier(env["db"], "v2")
        victim.send("fire")
        victim.process.join(30)
        assert victim.process.exitcode == -9
        assert count_lines(env["scans"]) == 2  # it scanned, then died while writing
        names = os.listdir(env["store"])
        assert [n for n in names if n.startswith("v")] == [
            n for n in names if n.startswith("v0000000001-")]
        assert any(n.startswith(".tmp-") for n in names)
        assert any(n.startswith(".spool-") for n in names)  # the columns it loaded
        assert reader.tiers(IDS) == ({"v1"}, 1)  # the previous version, still readable
        assert store_for(p, env["store"]).latest().version == 1  # type: ignore[union-attr]
        # The lock died with the victim: the next firing loads and cleans up.
        assert reader.call("fire") == 2
        assert count_lines(env["scans"]) == 3
        assert reader.tiers(IDS) == ({"v2"}, 2)
        assert not any(n.startswith((".tmp-", ".spool-")) for n in os.listdir(env["store"]))
    finally:
        reader.close()
        victim.close()


def test_others_switch_at_their_next_lookup_and_old_versions_go(env: dict[str, Path]) -> None:
    p = provider(env["db"], env["scans"])
    clock = FileClock(env["clock"])
    loader, follower, laggard = workers(
        Worker(p, env["store"], env["clock"]),
        Worker(p, env["store"], env["clock"], check_interval=0.0),
        # Looks for new versions only hourly: it keeps serving the version it maps.
        Worker(p, env["store"], env["clock"], check_interval=HOUR),
    )
    try:
        assert laggard.tiers(IDS) == ({"v1"}, 1)
        assert count_lines(env["scans"]) == 1  # one of the three loaded version 1
        loads = follower.call("metrics")["load_count"]
        clock.advance(2 * HOUR)
        set_tier(env["db"], "v2")
        assert loader.call("fire") == 2
        assert follower.tiers(IDS) == ({"v2"}, 2)  # switched, without a scan
        assert follower.call("metrics")["load_count"] == loads
        assert count_lines(env["scans"]) == 2
        files = [n for n in os.listdir(env["store"]) if n.endswith(".arrow")]
        assert len(files) == 1
        assert files[0].startswith("v0000000002-")  # version 1 is deleted...
        assert laggard.tiers(IDS) == ({"v1"}, 1)  # ...and still served from its map
    finally:
        for worker in (loader, follower, laggard):
            worker.close()


def test_a_worker_waiting_on_the_lock_switches_to_what_the_holder_published(
        env: dict[str, Path]) -> None:
    p = provider(env["db"], env["scans"])
    clock = FileClock(env["clock"])
    (worker,) = workers(Worker(p, env["store"], env["clock"]))
    holder = LockHolder(env["store"], p.snapshot_fingerprint())
    try:
        assert holder.locked
        clock.advance(2 * HOUR)
        worker.call("fire_async")
        assert worker.tiers(IDS) == ({"v1"}, 1)
    finally:
        holder.release(publish=(2, clock(), "v2", 200))
    try:
        assert worker.call("wait") == 2
        assert worker.tiers(IDS) == ({"v2"}, 2)
        assert count_lines(env["scans"]) == 1  # the worker never scanned for this firing
    finally:
        worker.close()


def test_a_worker_keeps_serving_while_another_process_holds_the_lock(
        env: dict[str, Path]) -> None:
    p = provider(env["db"], env["scans"])
    clock = FileClock(env["clock"])
    (worker,) = workers(Worker(p, env["store"], env["clock"]))
    holder = LockHolder(env["store"], p.snapshot_fingerprint())
    try:
        assert holder.locked
        clock.advance(2 * HOUR)
        worker.call("fire_async")  # due, but the lock is taken: it waits for the holder
        assert worker.tiers(IDS) == ({"v1"}, 1)  # and serves the previous version meanwhile
        assert worker.tiers(IDS) == ({"v1"}, 1)
    finally:
        holder.release()
    try:
        assert worker.call("wait") == 2  # the holder published nothing: it loads itself
        assert count_lines(env["scans"]) == 2
    finally:
        worker.close()
