"""A refreshed temp view joined by Spark next to ``lookup_join`` with a full cache.

One small dimension table (``--keys`` rows: ``key``, a string, a double) lives in SQLite.
It is served three ways, each loaded through the same ``SqlTableSource``:

    a. ``ScheduledTableRefresh``, LOCAL: the view is a local relation; ``df.join(view)``
       is Spark's broadcast hash join
    b. ``ScheduledTableRefresh``, CACHE: the view is a cached DataFrame (small, so Spark
       broadcasts it too)
    c. ``lookup_join`` with ``FullCachingLookupProvider`` (``mapInArrow``, the snapshot
       loaded in each Python worker)

The probe side is one cached DataFrame of ``--rows`` rows whose ``key`` is drawn
uniformly from the dimension's keys (every row matches), joined left. Each run writes to
the ``noop`` sink, which evaluates every row and collects nothing. The views are resolved
anew for each run (``spark.table``), as a query would. The cases run interleaved (each
round runs every case once), ``--repeats`` rounds after one untimed warm-up round (none
with ``--quick``, a smoke run whose figures mean nothing); a case's figure is the median
of its rounds, next to the median of its per-round ratios to (c). The view's reload time
(``RefreshStatus.last_load_time``) is measured too, over ``--reloads`` explicit reloads
of each view.

    .venv/bin/python benchmarks/refresh_vs_lookup.py [--rows 2000000] [--keys 10000]
    .venv/bin/python benchmarks/refresh_vs_lookup.py --quick   # CI smoke run, 2-3 min
"""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import interleaved, local_spark, median, write_result

LOCAL = "a. refreshed view (LOCAL), broadcast join"
CACHED = "b. refreshed view (CACHE), broadcast join"
LOOKUP = "c. lookup_join, full cache"
SCHEMA = "key BIGINT, name STRING, score DOUBLE"


def _connect(path: str) -> sqlite3.Connection:
    # Pickled with this script (by value), so a Spark Python worker that unpickles it
    # imports sqlite3; functools.partial(sqlite3.connect, ...) pickles as
    # _sqlite3.connect and leaves the sqlite3 module unimported there.
    return sqlite3.connect(path)


def _start_spark() -> Any:
    return local_spark("refresh-vs-lookup")


def _sqlite_dimension(path: Path, keys: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (key INTEGER PRIMARY KEY, name TEXT, score REAL)")
        db.executemany("INSERT INTO dim VALUES (?, ?, ?)",
                       ((k, f"name-{k}", k * 0.5) for k in range(keys)))
    db.close()


def _versions() -> dict[str, str]:
    import pyarrow
    import pyspark

    return {"pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__,
            "sqlite": sqlite3.sqlite_version}


def _is_broadcast(frame: Any) -> bool:
    return "BroadcastHashJoin" in frame._jdf.queryExecution().executedPlan().toString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reloads", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: 20,000 rows, 1,000 keys, 1 repeat, no warm-up, "
                             "2 reloads")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.keys, args.repeats, args.reloads = 20_000, 1_000, 1, 2

    started = time.perf_counter()
    load_at_start = os.getloadavg()
    spark = _start_spark()
    print(f"Spark started after {time.perf_counter() - started:.0f} s")
    try:
        from pyspark.sql import functions as F

        from lookup import FullCachingLookupProvider, ScheduledTableRefresh, lookup_join
        from scan import SqlTableSource
        from triggers import PeriodicCacheReloadTrigger

        # Cached in two partitions (one per core), so that every case reads the probe
        # side the same way: cached columnar blocks.
        df = (spark.range(0, args.rows, numPartitions=2)
              .withColumn("key", F.floor(F.rand(seed=7) * args.keys).cast("bigint"))
              .cache())
        df.count()
        with tempfile.TemporaryDirectory() as tmp:
            database = Path(tmp) / "dim.db"
            _sqlite_dimension(database, args.keys)

            def source() -> SqlTableSource:
                return SqlTableSource(functools.partial(_connect, str(database)), "dim",
                                      schema=SCHEMA)

            def hourly() -> PeriodicCacheReloadTrigger:
                # Loads on open; the benchmark reloads explicitly.
                return PeriodicCacheReloadTrigger(timedelta(hours=1))

            full = FullCachingLookupProvider.of(source(), hourly(), ["key"])
            with ScheduledTableRefresh(spark, source(), hourly(), "dim_local",
                                       materialization="LOCAL") as local_view, \
                 ScheduledTableRefresh(spark, source(), hourly(), "dim_cached",
                                       materialization="CACHE") as cached_view:

                def run(build: Callable[[], Any]) -> Callable[[], int]:
                    def case() -> int:
                        build().write.format("noop").mode("overwrite").save()
                        return args.rows
                    return case

                cases = {
                    LOCAL: run(lambda: df.join(spark.table("dim_local"), "key", "left")),
                    CACHED: run(lambda: df.join(spark.table("dim_cached"), "key", "left")),
                    LOOKUP: run(lambda: lookup_join(df, full, on="key")),
                }
                broadcast = {
                    LOCAL: _is_broadcast(df.join(spark.table("dim_local"), "key", "left")),
                    CACHED: _is_broadcast(df.join(spark.table("dim_cached"), "key", "left")),
                }
                print(f"Spark and data ready after {time.perf_counter() - started:.0f} s")
                if not args.quick:  # a smoke run's figures mean nothing: no warm-up there
                    interleaved(cases, 1)  # warm-up: JIT, Python workers, full cache loaded
                    print(f"warm-up round done after {time.perf_counter() - started:.0f} s")
                rates = interleaved(cases, args.repeats)
                reload_ms: dict[str, list[float]] = {LOCAL: [], CACHED: []}
                for _ in range(args.reloads):
                    for name, view in ((LOCAL, local_view), (CACHED, cached_view)):
                        status = view.trigger_reload().result(600)
                        reload_ms[name].append(status.last_load_time or 0.0)
                statuses = {LOCAL: local_view.status(), CACHED: cached_view.status()}
    finally:
        spark.stop()

    medians = {name: median(values) for name, values in rates.items()}
    base = medians[LOOKUP]
    # Also the median of the ratios within each round: the cases of one round ran
    # seconds apart, so a load change on a shared machine hits both sides of a ratio.
    paired = {name: median([r / b for r, b in zip(values, rates[LOOKUP], strict=True)])
              for name, values in rates.items()}
    print(f"{args.rows:,} probe rows, {args.keys:,} dimension rows, local[2], median of "
          f"{args.repeats} interleaved runs")
    print(f"{'case':45} {'rows/s (median)':>16} {'vs c':>6} {'vs c, per round':>16}")
    for name, rate in medians.items():
        print(f"{name:45} {rate:16,.0f} {rate / base:6.2f} {paired[name]:16.2f}")
    for name, times in reload_ms.items():
        status = statuses[name]
        print(f"reload of {name[:25]}: median {median(times):,.0f} ms over {len(times)} "
              f"({status.rows:,} rows, {status.bytes:,} bytes, broadcast={broadcast[name]})")
    path = write_result(
        "refresh_vs_lookup_quick" if args.quick else "refresh_vs_lookup",
        {
            "args": vars(args),
            "command": " ".join([".venv/bin/python", "benchmarks/refresh_vs_lookup.py",
                                 *sys.argv[1:]]),
            "rows_per_s": rates,
            "median_rows_per_s": medians,
            "ratio_to_lookup_join": {name: rate / base for name, rate in medians.items()},
            "median_per_round_ratio_to_lookup_join": paired,
            "broadcast_hash_join": broadcast,
            "reload_ms": reload_ms,
            "view_status": {name: {"rows": s.rows, "bytes": s.bytes,
                                   "materialization": s.materialization}
                            for name, s in statuses.items()},
            "load_average_start_end": [load_at_start, os.getloadavg()],
            "versions": _versions(),
            "seconds": time.perf_counter() - started,
        },
    )
    print(f"load average {load_at_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"wrote {path} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
