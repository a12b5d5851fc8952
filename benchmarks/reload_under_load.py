"""Full-cache reload time while lookup threads keep the CPU busy (CPython's GIL convoy).

A full cache reloads on a background thread whose scan needs the GIL back after every
I/O wait (fetcher hand-offs, driver socket waits, SQLite row steps). A lookup thread
that is CPU-bound gives the GIL up only every switch interval (5 ms), so each of those
waits can cost 5 ms or more. While a load runs, lookups therefore take turns and hand
the GIL over after each (``spark_lookup.load_priority``). This script times reloads
side by side:

    a. no lookup thread (the floor)
    b. N threads calling ``lookup_batch`` (1-50 random keys) in a loop, taking turns
    c. the same, turns disabled (``lookup_turn`` replaced by a no-op in
       ``lookup.runtime.full`` and ``cache.full.snapshot`` for this case only): no priority at all

Rounds run a, b, c in turn (``--repeats`` rounds); a case's figure is the median of its
reload times.

    .venv/bin/python benchmarks/reload_under_load.py [--rows 20000] [--threads 1] [--repeats 5]
    .venv/bin/python benchmarks/reload_under_load.py --postgres   # the table in PostgreSQL

``--postgres`` reads ``POSTGRES_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/test``)
and uses a table of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import median, write_result

SCHEMA = "id BIGINT, name STRING, gen INT"


def _sqlite_table(rows: int, workdir: Path) -> Callable[[], Any]:
    path = workdir / "dim.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT, gen INTEGER)")
        db.executemany("INSERT INTO dim VALUES (?, ?, 1)", ((k, f"v{k}") for k in range(rows)))
    db.close()
    return functools.partial(sqlite3.connect, str(path))


@contextmanager
def _postgres_table(rows: int) -> Iterator[tuple[Callable[[], Any], str]]:
    import psycopg

    dsn = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    table = f"reload_bench_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f'CREATE TABLE "{table}" (id BIGINT PRIMARY KEY, name TEXT, gen INT)')
        with db.cursor() as cursor:
            cursor.executemany(f'INSERT INTO "{table}" VALUES (%s, %s, 1)',
                               [(k, f"v{k}") for k in range(rows)])
    try:
        yield functools.partial(psycopg.connect, dsn), table
    finally:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute(f'DROP TABLE IF EXISTS "{table}"')


def _time_reload(handle: Any, threads: int, keys: int, yield_gil: bool) -> float:
    """Seconds of one reload with ``threads`` busy lookup threads."""
    import cache.full.snapshot as full_cache
    import lookup.runtime.full as full_caching

    stop = threading.Event()

    def work(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            handle.lookup_batch([(rng.randrange(keys),) for _ in range(rng.randint(1, 50))])

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    real_turns = full_caching.lookup_turn, full_cache.lookup_turn
    if not yield_gil:
        full_caching.lookup_turn = full_cache.lookup_turn = _no_turns  # type: ignore[assignment]
    try:
        for worker in workers:
            worker.start()
        started = time.perf_counter()
        handle.runtime.trigger_reload().result(timeout=600)
        return time.perf_counter() - started
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        full_caching.lookup_turn, full_cache.lookup_turn = real_turns  # type: ignore[assignment]


@contextmanager
def _no_turns(soon: bool = False) -> Iterator[None]:
    """``lookup_turn`` without turns: lookups free running during loads."""
    yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()

    from lookup import FullCachingLookupProvider, open_lookup
    from scan import SqlTableSource
    from triggers import PeriodicCacheReloadTrigger

    cases = {
        "a. no lookup thread": (0, True),
        f"b. {args.threads} busy lookup thread(s), taking turns": (args.threads, True),
        f"c. {args.threads} busy lookup thread(s), no turns": (args.threads, False),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory() as tmp, _source(args, Path(tmp)) as (factory, table):
        source = SqlTableSource(factory, table, schema=SCHEMA, chunk_size=2_500)
        provider = FullCachingLookupProvider.of(
            source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"], parallelism=2,
            share_across_workers=False)
        with open_lookup(provider) as handle:
            handle.lookup((0,))  # the first load
            for _ in range(args.repeats):
                for name, (threads, yield_gil) in cases.items():
                    times[name].append(_time_reload(handle, threads, args.rows, yield_gil))
    medians = {name: median(values) for name, values in times.items()}
    floor = medians["a. no lookup thread"]
    store = "PostgreSQL" if args.postgres else "SQLite"
    print(f"reload of {args.rows:,} rows from {store} (parallelism 2), median of "
          f"{args.repeats} interleaved rounds")
    for name, value in medians.items():
        print(f"{name:55} {value:9.3f} s {value / floor:9.1f}x (a)")
    path = write_result(
        "reload_under_load_pg" if args.postgres else "reload_under_load",
        {
            "args": vars(args),
            "command": " ".join([".venv/bin/python", "benchmarks/reload_under_load.py",
                                 *sys.argv[1:]]),
            "seconds": times,
            "median_seconds": medians,
            "load_average_end": os.getloadavg(),
        },
    )
    print(f"wrote {path}")


@contextmanager
def _source(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[Callable[[], Any], str]]:
    if args.postgres:
        with _postgres_table(args.rows) as made:
            yield made
    else:
        yield _sqlite_table(args.rows, workdir), "dim"


if __name__ == "__main__":
    main()
