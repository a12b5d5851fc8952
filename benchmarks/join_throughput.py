"""Lookup join throughput on local[2] next to bare pass-throughs and a broadcast join.

One cached DataFrame (``--rows`` rows: ``id``, and ``key`` drawn uniformly from a
dimension of ``--keys`` keys, so 100% of the lookups hit) goes through these cases, run
interleaved (each round runs every case once), ``--repeats`` rounds after one untimed
warm-up round; the figure of a case is the median of its rounds:

    a. ``mapInPandas`` pass-through (``lambda it: it``): the baseline
    b. ``mapInArrow`` pass-through
    c. ``lookup_join``, full cache (default engine, ``mapInArrow``)
    d. ``lookup_join(..., engine="pandas")``, full cache
    e. ``lookup_join``, partial cache (SQLite ``SqlLookupFunction``), warm: 100% hits
    f. Spark's broadcast hash join of the same dimension (JVM only, a reference)
    g. ``lookup_join``, partial cache, ~90% hits: the same, over a table lacking every
       tenth key, with ``cache_missing_key(False)``: those 10% of the keys are looked up
       in SQLite in every batch (keys new to the dimension, say), the rest are hits
    h. ``mapInArrow`` returning every batch with the join's two added columns, sliced
       from arrays built once: what a join's output costs the JVM, with no lookup
    i. ``lookup_join(..., metrics=True)``, full cache: what the metrics channel costs
    j. ``lookup_join(..., metrics=True)``, partial cache (warm)

Every ``lookup_join`` case but (i) and (j) runs at default settings (metrics off). The
hits and misses printed at the end come from (i) and (j), the cases that report them.

Each run writes to the ``noop`` sink, which evaluates every row and collects nothing.
The joins add two columns (a string and a double) that the pass-throughs do not.

    .venv/bin/python benchmarks/join_throughput.py [--rows 2000000] [--repeats 5]
    .venv/bin/python benchmarks/join_throughput.py --quick   # CI smoke run, < 60 s

``--quick`` (20,000 rows, 1,000 keys, 1 round, a C1-only JVM) only checks that every case
runs; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import interleaved, local_spark, median, write_result

BASELINE = "a. mapInPandas pass-through"
HEADLINE = "c. lookup_join, full cache"


def _with_join_columns(batches: Iterator[Any]) -> Iterator[Any]:
    """Case (h): every batch back with the two columns a join adds (``name``, ``score``),
    their values sliced from arrays built once: what the JVM pays for a join's output,
    with no lookup at all."""
    import numpy as np
    import pyarrow as pa

    names = pa.array([f"name-{k}" for k in range(100_000, 110_000)])
    scores = pa.array(np.arange(10_000) * 0.5)
    for batch in batches:
        n = batch.num_rows
        reps = -(-n // len(names))
        name = names if reps == 1 else pa.concat_arrays([names] * reps)
        score = scores if reps == 1 else pa.concat_arrays([scores] * reps)
        yield pa.RecordBatch.from_arrays([*batch.columns, name.slice(0, n), score.slice(0, n)],
                                         names=[*batch.schema.names, "name", "score"])


def _pass_through(batches: Iterator[Any]) -> Iterator[Any]:
    """The pass-through of (a) and (b): every batch back unchanged."""
    yield from batches


def _versions() -> dict[str, str]:
    import pandas
    import pyarrow
    import pyspark

    return {"pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__,
            "pandas": pandas.__version__}


def _start_spark(quick: bool) -> Any:
    return local_spark("join-throughput", quick)


def _dimension(keys: int) -> list[tuple[int, str, float]]:
    return [(k, f"name-{k}", k * 0.5) for k in range(keys)]


def _sqlite_dimension(path: Path, rows: list[tuple[int, str, float]]) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (key INTEGER PRIMARY KEY, name TEXT, score REAL)")
        db.executemany("INSERT INTO dim VALUES (?, ?, ?)", rows)
    db.close()


def _cases(spark: Any, df: Any, rows_count: int, keys: int, workdir: Path,
           ) -> tuple[dict[str, Callable[[], int]], dict[str, Any]]:
    from pyspark.sql import functions as F

    from cache import DefaultLookupCache
    from lookup import (
        FullCachingLookupProvider,
        PartialCachingLookupProvider,
        SqlLookupFunction,
        lookup_join,
    )
    from scan import SqlTableSource
    from triggers import PeriodicCacheReloadTrigger

    schema = "key BIGINT, name STRING, score DOUBLE"
    rows = _dimension(keys)
    database = workdir / "dim.db"
    _sqlite_dimension(database, rows)
    # The full cache loads the SQLite table: its source ships a path to the workers, not
    # the rows (a CollectionSource would pickle the whole dimension into every task).
    full = FullCachingLookupProvider.of(
        SqlTableSource(functools.partial(sqlite3.connect, str(database)), "dim", schema=schema),
        PeriodicCacheReloadTrigger(timedelta(hours=1)), ["key"],
    )
    partial = PartialCachingLookupProvider.of(
        SqlLookupFunction(functools.partial(sqlite3.connect, str(database)), "dim",
                          key_columns=["key"], schema=schema),
        # Room for every key: after the warm-up round every lookup is a hit.
        DefaultLookupCache.new_builder().maximum_size(2 * keys).build(),
    )
    sparse = workdir / "dim90.db"
    _sqlite_dimension(sparse, [row for row in rows if row[0] % 10])
    partial90 = PartialCachingLookupProvider.of(
        SqlLookupFunction(functools.partial(sqlite3.connect, str(sparse)), "dim",
                          key_columns=["key"], schema=schema),
        # Absent keys are never cached: each batch asks SQLite for them again.
        DefaultLookupCache.new_builder().maximum_size(2 * keys).cache_missing_key(False)
        .build(),
    )
    # The same rows as _dimension(keys), built in the JVM (faster than from Python).
    dim_df = spark.range(0, keys, numPartitions=1).selectExpr(
        "id AS key", "concat('name-', id) AS name", "id * 0.5 AS score").cache()
    dim_df.count()

    def run(frame: Any) -> Callable[[], int]:
        def case() -> int:
            # A lookup_join is built per run: on a classic session its metrics are
            # observed for the first action of a DataFrame only.
            (frame() if callable(frame) else frame).write.format("noop").mode(
                "overwrite").save()
            return rows_count
        return case

    cases = {
        BASELINE: run(df.mapInPandas(_pass_through, df.schema)),
        "b. mapInArrow pass-through": run(df.mapInArrow(_pass_through, df.schema)),
        HEADLINE: run(lambda: lookup_join(df, full, on="key")),
        "d. lookup_join, full cache, engine=pandas": run(
            lambda: lookup_join(df, full, on="key", engine="pandas")),
        "e. lookup_join, partial cache (warm)": run(lambda: lookup_join(df, partial, on="key")),
        "f. broadcast hash join (JVM)": run(df.join(F.broadcast(dim_df), "key", "left")),
        "g. lookup_join, partial cache (~90% hits)": run(
            lambda: lookup_join(df, partial90, on="key")),
        "i. lookup_join, full cache, metrics=True": run(
            lambda: lookup_join(df, full, on="key", metrics=True)),
        "j. lookup_join, partial cache (warm), metrics=True": run(
            lambda: lookup_join(df, partial, on="key", metrics=True)),
        "h. mapInArrow + the join's two columns": run(df.mapInArrow(
            _with_join_columns, f"{df.schema.simpleString()[7:-1]}, name string, score double")),
    }
    return cases, {"full": full, "partial": partial}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: 20,000 rows, 1,000 keys, 1 repeat, no warm-up")
    parser.add_argument("--cases", default="abcdefghij",
                        help="cases to run, by letter (default all: abcdefghij; a always runs)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.keys, args.repeats = 20_000, 1_000, 1

    started = time.perf_counter()
    load_at_start = os.getloadavg()
    spark = _start_spark(args.quick)
    print(f"Spark started after {time.perf_counter() - started:.0f} s")
    try:
        from pyspark.sql import functions as F

        from lookup import lookup_metrics

        # Materialized once, in two partitions (one per core), so that the source costs
        # the same small amount in every case: reading cached columnar blocks.
        df = (spark.range(0, args.rows, numPartitions=2)
              .withColumn("key", F.floor(F.rand(seed=7) * args.keys).cast("bigint"))
              .cache())
        df.count()
        with tempfile.TemporaryDirectory() as tmp:
            cases, providers = _cases(spark, df, args.rows, args.keys, Path(tmp))
            cases = {name: case for name, case in cases.items()
                     if name == BASELINE or name[0] in args.cases}
            used = {"full": "i", "partial": "j"}  # the cases with metrics on
            providers = {name: provider for name, provider in providers.items()
                         if set(used[name]) & set(args.cases)}
            print(f"Spark and data ready after {time.perf_counter() - started:.0f} s")
            if not args.quick:  # a smoke run's figures mean nothing: no warm-up there
                interleaved(cases, 1)  # warm-up: JIT, Python workers, caches filled
                print(f"warm-up round done after {time.perf_counter() - started:.0f} s")
            # Without a warm-up no action has reported metrics yet: nothing to subtract.
            before = ({n: lookup_metrics(p, spark).as_dict() for n, p in providers.items()}
                      if not args.quick else {})
            rates = interleaved(cases, args.repeats)
            after = {n: lookup_metrics(p, spark).as_dict() for n, p in providers.items()}
        lookups = {
            name: {metric: after[name][metric] - before.get(name, {}).get(metric, 0)
                   for metric in ("hit_count", "miss_count", "load_count")}
            for name in providers
        }
    finally:
        spark.stop()

    medians = {name: median(values) for name, values in rates.items()}
    base = medians[BASELINE]
    # Also the median of the ratios within each round: the cases of one round ran a few
    # seconds apart, so a load change on a shared machine hits both sides of a ratio.
    paired = {name: median([r / b for r, b in zip(values, rates[BASELINE], strict=True)])
              for name, values in rates.items()}
    print(f"{args.rows:,} rows, {args.keys:,} keys, local[2], median of {args.repeats} "
          "interleaved runs")
    print(f"{'case':45} {'rows/s (median)':>16} {'vs a':>6} {'vs a, per round':>16}")
    for name, rate in medians.items():
        print(f"{name:45} {rate:16,.0f} {rate / base:6.2f} {paired[name]:16.2f}")
    if HEADLINE in medians:
        print(f"headline: (c) / (a) = {medians[HEADLINE] / base:.2f} "
              f"(median of per-round ratios: {paired[HEADLINE]:.2f})")
    print(f"lookups during the timed rounds (distinct keys per Arrow batch): {lookups}")
    hit_ratio = {name: counts["hit_count"] / max(1, counts["hit_count"] + counts["miss_count"])
                 for name, counts in lookups.items()}
    print("hit ratio during the timed rounds: "
          + ", ".join(f"{name} {ratio:.1%}" for name, ratio in hit_ratio.items()))
    path = write_result(
        "join_throughput_quick" if args.quick else (
            "join_throughput" if args.keys == 10_000 and args.cases == "abcdefghij"
            else f"join_throughput_{args.keys}_{args.cases}"),
        {
            "args": vars(args),
            "command": " ".join([".venv/bin/python", "benchmarks/join_throughput.py",
                                 *sys.argv[1:]]),
            "rows_per_s": rates,
            "median_rows_per_s": medians,
            "ratio_to_mapInPandas": {name: rate / base for name, rate in medians.items()},
            "median_per_round_ratio_to_mapInPandas": paired,
            "headline_c_over_a": medians[HEADLINE] / base if HEADLINE in medians else None,
            "lookups_in_timed_rounds": lookups,
            "hit_ratio_in_timed_rounds": hit_ratio,
            "load_average_start_end": [load_at_start, os.getloadavg()],
            "versions": _versions(),
            "seconds": time.perf_counter() - started,
        },
    )
    print(f"load average {load_at_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"wrote {path} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
