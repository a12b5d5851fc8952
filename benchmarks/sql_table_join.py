"""SQL lookup joins (issue 30): the table-argument function against lookup_join and the
LATERAL table function, on local[2], into the ``noop`` sink.

One cached view ``events`` (``--rows`` rows: ``id`` and ``key`` drawn uniformly from a
dimension of ``--keys`` keys, 100% hits) enriched by, interleaved, ``--repeats`` rounds
after one untimed warm-up, median rows/s of each case:

    a. ``lookup_join(events, full, on="key")``
    b. ``SELECT * FROM enrich_full(TABLE(events))`` (``register_lookup_join``)
    c. ``lookup_join(events, partial, on="key")`` (warm SQLite partial cache)
    d. ``SELECT * FROM enrich_partial(TABLE(events))``
    e. ``SELECT e.*, d.name, d.score FROM events e, LATERAL dim_rows(e.key) d`` (the row
       table function, full cache), over the first ``--lateral-rows`` rows only (it is
       per row); its rate is comparable, its time is not

Default settings everywhere (metrics off).

    .venv/bin/python benchmarks/sql_table_join.py [--rows 2000000] [--keys 10000] [--repeats 5]
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

from benchmarks._util import median, write_result
from benchmarks.join_throughput import _dimension, _sqlite_dimension, _start_spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--lateral-rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.keys, args.lateral_rows, args.repeats = 20_000, 1_000, 2_000, 1
    load_at_start = os.getloadavg()
    spark = _start_spark(args.quick)
    try:
        from pyspark.sql import functions as F

        from cache import DefaultLookupCache
        from lookup import (
            FullCachingLookupProvider,
            PartialCachingLookupProvider,
            SqlLookupFunction,
            lookup_join,
            register_lookup_join,
            register_lookup_table_function,
        )
        from scan import SqlTableSource
        from triggers import PeriodicCacheReloadTrigger

        with tempfile.TemporaryDirectory() as tmp:
            database = Path(tmp) / "dim.db"
            _sqlite_dimension(database, _dimension(args.keys))
            connect = functools.partial(sqlite3.connect, str(database))
            schema = "key BIGINT, name STRING, score DOUBLE"
            full = FullCachingLookupProvider.of(
                SqlTableSource(connect, "dim", schema=schema),
                PeriodicCacheReloadTrigger(timedelta(hours=1)), ["key"])
            partial = PartialCachingLookupProvider.of(
                SqlLookupFunction(connect, "dim", key_columns=["key"], schema=schema),
                DefaultLookupCache.new_builder().maximum_size(2 * args.keys).build())
            events = (spark.range(0, args.rows, numPartitions=2)
                      .withColumn("key", F.floor(F.rand(seed=7) * args.keys).cast("bigint"))
                      .cache())
            events.count()
            events.createOrReplaceTempView("events")
            events.limit(args.lateral_rows).cache().createOrReplaceTempView("events_head")
            spark.table("events_head").count()
            register_lookup_join(spark, "enrich_full", full, on="key")
            register_lookup_join(spark, "enrich_partial", partial, on="key")
            register_lookup_table_function(spark, "dim_rows", full)

            def run(frame: Callable[[], Any], rows: int) -> Callable[[], float]:
                def case() -> float:
                    started = time.perf_counter()
                    frame().write.format("noop").mode("overwrite").save()
                    return rows / (time.perf_counter() - started)
                return case

            cases = {
                "a. lookup_join, full cache": run(
                    lambda: lookup_join(events, full, on="key"), args.rows),
                "b. SELECT * FROM f(TABLE(events)), full cache": run(
                    lambda: spark.sql("SELECT * FROM enrich_full(TABLE(events))"), args.rows),
                "c. lookup_join, partial cache": run(
                    lambda: lookup_join(events, partial, on="key"), args.rows),
                "d. SELECT * FROM f(TABLE(events)), partial cache": run(
                    lambda: spark.sql("SELECT * FROM enrich_partial(TABLE(events))"),
                    args.rows),
                "e. LATERAL dim_rows(key), full cache (rows/s)": run(
                    lambda: spark.sql("SELECT e.*, d.name, d.score FROM events_head e, "
                                      "LATERAL dim_rows(e.key) d"), args.lateral_rows),
            }
            for case in cases.values():  # warm-up: workers, caches, JIT
                case()
            rates: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.repeats):
                for name, case in cases.items():
                    rates[name].append(case())
    finally:
        spark.stop()
    medians = {name: median(values) for name, values in rates.items()}
    print(f"{args.rows:,} events, {args.keys:,} keys, local[2], noop sink, median of "
          f"{args.repeats} interleaved rounds (LATERAL over {args.lateral_rows:,} rows)")
    for name, rate in medians.items():
        print(f"{name:52} {rate:14,.0f} rows/s")
    pairs = {"full": ("b. SELECT * FROM f(TABLE(events)), full cache",
                      "a. lookup_join, full cache"),
             "partial": ("d. SELECT * FROM f(TABLE(events)), partial cache",
                         "c. lookup_join, partial cache")}
    ratios = {kind: median([x / y for x, y in zip(rates[sql], rates[join], strict=True)])
              for kind, (sql, join) in pairs.items()}
    lateral = medians["e. LATERAL dim_rows(key), full cache (rows/s)"]
    print("table function / lookup_join, median of same-round ratios: "
          + ", ".join(f"{kind} {ratio:.2f}x" for kind, ratio in ratios.items()))
    print(f"LATERAL / lookup_join (full), rows/s: "
          f"{lateral / medians['a. lookup_join, full cache']:.3f}x")
    print(f"load average {load_at_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    path = write_result("sql_table_join_quick" if args.quick else "sql_table_join", {
        "args": vars(args),
        "command": " ".join([".venv/bin/python", "benchmarks/sql_table_join.py", *sys.argv[1:]]),
        "rows_per_s": rates, "median_rows_per_s": medians, "same_round_ratios": ratios,
        "load_average_start_end": [load_at_start, os.getloadavg()]})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
