"""Reloads keep their schedule while lookup threads keep the interpreter busy (issue 27).

A full cache over a 1,000-row SQLite table read in 20 chunks reloads on a short
FIXED_DELAY schedule while eight threads look up without pause (half single keys, half
batches). Before lookups took turns during loads (``spark_lookup.load_priority``),
such threads left the loader's many threads a small share of the interpreter: 9-10
reloads where 13 were due, each several times its idle length. The test counts the
reloads of a stretch without lookups, then of one with the eight threads, and compares
the two rates: a machine busy with other work slows both alike. The lateness of each
start is measured by ``benchmarks/reload_punctuality.py``.
"""

from __future__ import annotations

import functools
import random
import sqlite3
import threading
import time
from datetime import timedelta
from pathlib import Path

from lookup import FullCachingLookupProvider, open_lookup
from scan import SqlTableSource
from triggers import PeriodicCacheReloadTrigger

ROWS = 1000
CHUNKS = 20
INTERVAL = 0.25
CALM = 3.0
SOAK = 4.0
THREADS = 8


def test_reloads_keep_their_schedule_while_eight_threads_look_up(tmp_path: Path) -> None:
    path = tmp_path / "dim.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT)")
        db.executemany("INSERT INTO dim VALUES (?, ?)", ((k, f"v{k}") for k in range(ROWS)))
    db.close()
    source = SqlTableSource(functools.partial(sqlite3.connect, str(path)), "dim",
                            schema="id BIGINT, name STRING", chunk_size=ROWS // CHUNKS)
    provider = FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(seconds=INTERVAL)), ["id"],
        share_across_workers=False)
    stop = threading.Event()
    errors: list[BaseException] = []

    with open_lookup(provider) as handle:
        assert handle.lookup((1,)) == ((1, "v1"),)  # the first load
        before = handle.metrics.load_count
        time.sleep(CALM)
        calm = (handle.metrics.load_count - before) / CALM

        def look(seed: int) -> None:
            rng = random.Random(seed)
            try:
                while not stop.is_set():
                    if seed % 2:
                        key = rng.randrange(ROWS)
                        assert handle.lookup((key,)) == ((key, f"v{key}"),)
                    else:
                        keys = [(rng.randrange(ROWS),) for _ in range(rng.randint(1, 50))]
                        assert len(handle.lookup_batch(keys)) == len(set(keys))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=look, args=(i,), daemon=True) for i in range(THREADS)]
        try:
            for thread in threads:
                thread.start()
            before = handle.metrics.load_count
            time.sleep(SOAK)
            loads = handle.metrics.load_count - before
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
    assert errors == []
    assert not any(thread.is_alive() for thread in threads)
    # Each reload waits INTERVAL after the end of the one before, so slower loads mean
    # fewer reloads: the lookups may cost the schedule a quarter at most (before the
    # loads took turns with them, a third).
    busy = loads / SOAK
    assert busy >= 0.75 * calm, (
        f"{busy:.2f} reloads/s while {THREADS} threads looked up, {calm:.2f}/s without")
