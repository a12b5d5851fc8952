"""lookup_join on Spark Connect vs a classic session: the same job, the same JVM, one run.

One driver JVM serves both kinds of session: this process starts a classic ``local[2]``
session with the Spark Connect server plugin, and a child process connects to that
server as a Spark Connect client. Both build the same jobs on the same data and write
them to the ``noop`` sink (every row evaluated, nothing collected):

    full            ``lookup_join``, full cache (CollectionSource, ``--keys`` keys)
    partial         ``lookup_join``, partial cache (SQLite ``SqlLookupFunction``), warm:
                    every key cached after the warm-up round, so 100% hits
    full, no metrics / partial, no metrics
                    the same with ``metrics=False``: a bare ``mapInArrow``, without the
                    report rows, the observation and the filter (the metrics' cost)

The input is ``--rows`` rows (``id``, and ``key`` uniform over the dimension's keys) in
two partitions, cached by each session before the first round. Every run builds its
``lookup_join`` anew (as a job would; on a classic session an ``Observation`` reports
the first action of its DataFrame only). After one untimed warm-up round, ``--repeats``
rounds run every case on both kinds, interleaved (classic then Connect, the order
swapped every other round); the figure of a case is its median. The Connect time is the
client's: from the action's call to its return, gRPC included.

    .venv/bin/python benchmarks/connect_vs_classic.py [--rows 2000000] [--repeats 7]
    .venv/bin/python benchmarks/connect_vs_classic.py --quick   # smoke run, < 2 min
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import median, write_result

CASES = ("full", "partial", "full, no metrics", "partial, no metrics")
SCHEMA = "key BIGINT, name STRING, score DOUBLE"


def _dimension(keys: int) -> list[tuple[int, str, float]]:
    return [(k, f"name-{k}", k * 0.5) for k in range(keys)]


def _sqlite_dimension(path: Path, keys: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (key INTEGER PRIMARY KEY, name TEXT, score REAL)")
        db.executemany("INSERT INTO dim VALUES (?, ?, ?)", _dimension(keys))
    db.close()


def build_cases(spark: Any, rows: int, keys: int, database: Path) -> dict[str, Callable[[], float]]:
    """The cases on ``spark`` (either kind): each runs its job once, returns seconds."""
    from pyspark.sql import functions as F

    from cache import DefaultLookupCache
    from lookup import (
        FullCachingLookupProvider,
        PartialCachingLookupProvider,
        SqlLookupFunction,
        lookup_join,
    )
    from scan import CollectionSource
    from triggers import PeriodicCacheReloadTrigger

    full = FullCachingLookupProvider.of(
        CollectionSource(_dimension(keys), num_splits=2, schema=SCHEMA),
        PeriodicCacheReloadTrigger(timedelta(hours=1)), ["key"])
    partial = PartialCachingLookupProvider.of(
        SqlLookupFunction(functools.partial(sqlite3.connect, str(database)), "dim",
                          key_columns=["key"], schema=SCHEMA),
        DefaultLookupCache.new_builder().maximum_size(2 * keys).build())
    df = (spark.range(0, rows, numPartitions=2)
          .withColumn("key", F.floor(F.rand(seed=7) * keys).cast("bigint"))
          .cache())
    df.count()

    def case(provider: Any, metrics: bool) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            joined = lookup_join(df, provider, on="key", metrics=metrics)
            joined.write.format("noop").mode("overwrite").save()
            return time.perf_counter() - start
        return run

    return {"full": case(full, True), "partial": case(partial, True),
            "full, no metrics": case(full, False), "partial, no metrics": case(partial, False)}


# --- the Connect client (a child process) ------------------------------------------------


def client_main(url: str, rows: int, keys: int, database: Path) -> None:
    """Serve ``run <case>`` lines on stdin with one line of seconds on stdout."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    cases = build_cases(spark, rows, keys, database)
    print("ready", flush=True)
    for line in sys.stdin:
        command, _, name = line.strip().partition(" ")
        if command != "run":
            break
        print(f"{cases[name]():.6f}", flush=True)
    spark.stop()


class _Client:
    def __init__(self, url: str, args: argparse.Namespace, database: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--client", url, "--rows", str(args.rows),
             "--keys", str(args.keys), "--database", str(database)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self._read() != "ready":
            raise SystemExit("the Connect client did not start")

    def _read(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the Connect client exited ({self.process.wait()})")
        return line.strip()

    def run(self, name: str) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(f"run {name}\n")
        self.process.stdin.flush()
        return float(self._read())

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("quit\n")
        self.process.stdin.close()
        self.process.wait(timeout=120)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _versions() -> dict[str, str]:
    import pyarrow
    import pyspark

    return {"pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 50,000 rows, 1,000 keys, 1 round")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--database", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args.client, args.rows, args.keys, args.database)
        return
    if args.quick:
        args.rows, args.keys, args.repeats = 50_000, 1_000, 1

    started = time.perf_counter()
    load_at_start = os.getloadavg()
    # Python workers must run this interpreter (it has the project installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    port = _free_port()
    spark = (SparkSession.builder.master("local[2]")
             .appName("spark-lookup-connect-vs-classic")
             .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
             .config("spark.connect.grpc.binding.port", str(port))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    client = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            database = Path(tmp) / "dim.db"
            _sqlite_dimension(database, args.keys)
            classic = build_cases(spark, args.rows, args.keys, database)
            client = _Client(f"sc://127.0.0.1:{port}", args, database)
            print(f"both sessions ready after {time.perf_counter() - started:.0f} s")
            kinds: dict[str, Callable[[str], float]] = {
                "classic": lambda name: classic[name](), "connect": client.run}
            seconds: dict[str, dict[str, list[float]]] = {
                kind: {name: [] for name in CASES} for kind in kinds}
            for round_number in range(args.repeats + 1):  # round 0: warm-up
                order = list(kinds) if round_number % 2 else list(reversed(kinds))
                for name in CASES:
                    for kind in order:
                        spent = kinds[kind](name)
                        if round_number:
                            seconds[kind][name].append(spent)
                print(f"round {round_number} done after {time.perf_counter() - started:.0f} s"
                      f"{' (warm-up)' if not round_number else ''}")
    finally:
        if client is not None:
            client.close()
        spark.stop()

    rates = {kind: {name: [args.rows / s for s in values] for name, values in cases.items()}
             for kind, cases in seconds.items()}
    medians = {kind: {name: median(values) for name, values in cases.items()}
               for kind, cases in rates.items()}
    connect_over_classic = {name: medians["connect"][name] / medians["classic"][name]
                            for name in CASES}
    paired = {name: statistics.median(
        [c / k for c, k in zip(rates["connect"][name], rates["classic"][name], strict=True)])
        for name in CASES}
    metrics_cost = {kind: {base: medians[kind][base] / medians[kind][f"{base}, no metrics"]
                           for base in ("full", "partial")} for kind in medians}
    print(f"{args.rows:,} rows, {args.keys:,} keys, local[2], one JVM; median of "
          f"{args.repeats} interleaved rounds (rows/s)")
    print(f"{'case':22} {'classic':>12} {'connect':>12} {'connect/classic':>16} "
          f"{'same round':>11}")
    for name in CASES:
        print(f"{name:22} {medians['classic'][name]:12,.0f} {medians['connect'][name]:12,.0f} "
              f"{connect_over_classic[name]:16.3f} {paired[name]:11.3f}")
    for kind, costs in metrics_cost.items():
        print(f"{kind}: with metrics / without: full {costs['full']:.3f}, "
              f"partial {costs['partial']:.3f}")
    path = write_result(
        "connect_vs_classic_quick" if args.quick else "connect_vs_classic",
        {
            "args": {k: v for k, v in vars(args).items() if k not in ("client", "database")},
            "command": " ".join([".venv/bin/python", "benchmarks/connect_vs_classic.py",
                                 *sys.argv[1:]]),
            "seconds_per_run": seconds,
            "rows_per_s": rates,
            "median_rows_per_s": medians,
            "connect_over_classic": connect_over_classic,
            "median_per_round_connect_over_classic": paired,
            "with_metrics_over_without": metrics_cost,
            "load_average_start_end": [load_at_start, os.getloadavg()],
            "versions": _versions(),
            "seconds": time.perf_counter() - started,
        },
    )
    print(f"load average {load_at_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"wrote {path} ({time.perf_counter() - started:.0f} s)")
    print(json.dumps({"connect_over_classic": connect_over_classic}))


if __name__ == "__main__":
    main()
