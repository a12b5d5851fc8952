"""What a new Python worker itself does before its first join: import the library and
open a full cache from a warm host snapshot store, then one ``lookup_batch``.

Builds a 1,000,000-row SQLite table in ``--work`` (once), lets a first process load and
publish its snapshot, then starts ``--processes`` fresh interpreters, each timing its
imports and its open plus one 1,004-key ``lookup_batch``; prints the medians. Run it in
two trees to compare them (``worker_churn.py`` measures the same inside Spark, where
Spark's own start dominates).

    .venv/bin/python benchmarks/worker_open.py --work /tmp/worker-open --processes 7
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import functools, sqlite3, sys, time
started = time.perf_counter()
from datetime import timedelta
from lookup import FullCachingLookupProvider, open_lookup
from scan import SqlTableSource
from triggers import PeriodicCacheReloadTrigger
imported = time.perf_counter()
source = SqlTableSource(functools.partial(sqlite3.connect, sys.argv[1]), "dim",
                        schema="id BIGINT, name STRING, n BIGINT, x DOUBLE")
provider = FullCachingLookupProvider.of(
    source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
    snapshot_dir=sys.argv[2], snapshot_name="worker-open")
with open_lookup(provider) as handle:
    handle.lookup_batch([(k,) for k in range(0, 1_000_000, 997)])
print(f"{(imported - started) * 1000:.0f} {(time.perf_counter() - imported) * 1000:.0f}")
"""


def _table(path: Path) -> None:
    if path.exists():
        return
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT, n INTEGER, x REAL)")
        db.executemany("INSERT INTO dim VALUES (?, ?, ?, ?)",
                       ((i, f"name{i}", i, i * 0.5) for i in range(1_000_000)))
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/spark-lookup-worker-open"))
    parser.add_argument("--processes", type=int, default=7)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    _table(args.work / "dim.db")

    def run() -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", _CHILD, str(args.work / "dim.db"),
                              str(args.work / "store")],
                             capture_output=True, text=True, check=True).stdout.split()
        return int(out[0]), int(out[1])

    first = run()
    print(f"first process (loads and publishes): import {first[0]} ms, open {first[1]} ms")
    imports, opens = zip(*(run() for _ in range(args.processes)), strict=True)
    middle = args.processes // 2
    print(f"warm store, {args.processes} processes: import {sorted(imports)[middle]} ms, "
          f"open + lookup_batch {sorted(opens)[middle]} ms (medians)")


if __name__ == "__main__":
    main()
