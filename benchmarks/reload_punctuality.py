"""Reload punctuality under lookup load: a full cache on a short periodic schedule while
lookup threads keep the CPU busy.

A full cache over a SQLite table read in ``--chunks`` chunks reloads on a
``--interval`` FIXED_DELAY schedule for ``--seconds`` while ``--threads`` threads look
up (half single-key ``lookup``, half ``lookup_batch`` of 1-50 keys), then again with
no lookup thread. Reported per case: loads done against loads scheduled (the schedule
with idle-length loads: the first at open, then one per interval plus load time), the
lateness of each load's start against its due time (the end of the load before it plus
the interval), and the median load time.

    .venv/bin/python benchmarks/reload_punctuality.py [--rows 1000] [--chunks 20]
        [--interval 1] [--seconds 10] [--threads 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import write_result

SCHEMA = "id BIGINT, name STRING, gen INT"


def _table(rows: int, workdir: Path) -> str:
    path = workdir / "dim.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT, gen INTEGER)")
        db.executemany("INSERT INTO dim VALUES (?, ?, 1)", ((k, f"v{k}") for k in range(rows)))
    db.close()
    return str(path)


def run_case(path: str, args: argparse.Namespace, threads: int) -> dict[str, Any]:
    """One soak: loads (start, end) recorded around the runtime's reload."""
    from lookup import FullCachingLookupProvider, open_lookup
    from scan import SqlTableSource
    from triggers import PeriodicCacheReloadTrigger

    chunk_size = -(-args.rows // args.chunks)
    source = SqlTableSource(functools.partial(sqlite3.connect, path), "dim", schema=SCHEMA,
                            chunk_size=chunk_size)
    provider = FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(seconds=args.interval)), ["id"],
        share_across_workers=False)
    loads: list[tuple[float, float]] = []
    stop = threading.Event()

    def single(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            handle.lookup((rng.randrange(args.rows),))

    def batched(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            handle.lookup_batch([(rng.randrange(args.rows),) for _ in range(rng.randint(1, 50))])

    workers = [threading.Thread(target=single if i % 2 == 0 else batched, args=(i,),
                                daemon=True) for i in range(threads)]
    with open_lookup(provider) as handle:
        runtime: Any = handle.runtime
        original = runtime._reload

        def timed_reload(fired_at: float) -> None:
            started = time.perf_counter()
            try:
                original(fired_at)
            finally:
                loads.append((started, time.perf_counter()))

        runtime._reload = timed_reload
        # The open-time load was submitted before the wrapper: wait for it, then start
        # the clock at the next load.
        handle.lookup((0,))
        try:
            for worker in workers:
                worker.start()
            began = time.perf_counter()
            time.sleep(args.seconds)
        finally:
            stop.set()
            for worker in workers:
                worker.join()
    window = [(s, e) for s, e in loads if s >= began - 1e-3 and e <= began + args.seconds]
    durations = [e - s for s, e in window]
    lateness = [max(0.0, s - (prev_end + args.interval))
                for (_, prev_end), (s, _) in itertools.pairwise(loads)
                if began <= s <= began + args.seconds]
    return {"loads": len(window), "durations": durations, "lateness": lateness}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    results: dict[str, list[dict[str, Any]]] = {"idle": [], "busy": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = _table(args.rows, Path(tmp))
        for _ in range(args.repeats):
            results["idle"].append(run_case(path, args, 0))
            results["busy"].append(run_case(path, args, args.threads))
    idle_load = statistics.median(d for r in results["idle"] for d in r["durations"])
    expected = int(args.seconds / (args.interval + idle_load))
    print(f"{args.rows} rows in {args.chunks} chunks, {args.interval} s FIXED_DELAY, "
          f"{args.seconds} s, {args.repeats} rounds; idle load {idle_load * 1000:.0f} ms, "
          f"{expected} loads expected per round")
    summary: dict[str, Any] = {}
    for name, runs in results.items():
        late = [x for r in runs for x in r["lateness"]]
        loads = [r["loads"] for r in runs]
        load_ms = statistics.median(d for r in runs for d in r["durations"]) * 1000
        late_ms = sorted(x * 1000 for x in late)
        summary[name] = {"loads": loads, "expected": expected, "late_ms": late_ms,
                         "max_late_ms": max(late, default=0) * 1000,
                         "median_load_ms": load_ms}
        print(f"{name:5} loads {loads} of {expected} ({min(loads) / expected:.0%} worst), "
              f"start late by {statistics.median(late_ms or [0]):.0f} ms median, "
              f"{max(late_ms, default=0):.0f} ms at most, "
              f"median load {load_ms:.0f} ms ({load_ms / 1000 / idle_load:.1f}x idle)")
    path = write_result("reload_punctuality", {
        "args": vars(args),
        "command": " ".join([".venv/bin/python", "benchmarks/reload_punctuality.py",
                             *sys.argv[1:]]),
        "summary": summary, "load_average_end": os.getloadavg()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
