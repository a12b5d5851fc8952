"""A large dimension joined by a two-executor ``local-cluster`` job: what each Python
worker holds.

The dimension is the Parquet file of ``benchmarks/snapshot_open.py`` (``--dim-rows``
rows in random key order: ``k`` BIGINT spread over 7x its count, ``name`` STRING,
``score`` DOUBLE), behind ``FullCachingLookupProvider.of(FileSource(path), hourly
trigger, key_columns=["k"])``, shared across the workers of the host (the default in
Spark tasks). The stream is ``--stream-rows`` rows in ``--partitions`` partitions whose
keys all exist, joined with ``lookup_join`` (metrics on, to count loads) into the
``noop`` sink, on ``local-cluster[2,1,<--executor-mb>]``: two executor JVMs, one core
each, so a Python worker per executor at a time, and a new worker whenever Spark
replaces one. The job runs ``--runs`` times in one application (the first run loads and
publishes the snapshot, once for the host; the others map it).

A thread samples, every 50 ms, every Python worker of this application (found by a
marker variable in the executors' environment): ``/proc/<pid>/smaps_rollup``
Private_Clean + Private_Dirty (USS: private memory), Rss, Pss, and ``VmSize`` (address
space, what ``spark.executor.pyspark.memory`` limits), keeping each worker's peak.

    .venv/bin/python benchmarks/cluster_scale.py [--dim-rows 16000000]
        [--stream-rows 4000000] [--runs 3] [--pyspark-memory 4g]

Writes a table to stdout and ``benchmarks/out/cluster_scale.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._util import write_result
from benchmarks.snapshot_open import write_dimension

MARKER = "SPARK_LOOKUP_CLUSTER_SCALE"


def _workers(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as file:
                if f"{MARKER}={token}".encode() not in file.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                if b"python" not in file.read().split(b"\0")[0]:  # not an executor JVM
                    continue
        except OSError:
            continue
        found.append(int(entry))
    return found


def _memory(pid: int) -> dict[str, int] | None:
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as file:
            for line in file:
                name, _, value = line.partition(":")
                if name in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                    found[name] = int(value.split()[0]) * 1024
        with open(f"/proc/{pid}/status") as file:
            for line in file:
                name, _, value = line.partition(":")
                if name in ("VmSize", "RssAnon", "RssFile"):
                    found[name] = int(value.split()[0]) * 1024
        with open(f"/proc/{pid}/limits") as file:
            for line in file:
                if line.startswith("Max address space"):
                    limit = line.split()[3]  # soft limit: bytes, or "unlimited"
                    found["RLIMIT_AS"] = int(limit) if limit.isdigit() else 0
    except OSError:
        return None
    found["USS"] = found.get("Private_Clean", 0) + found.get("Private_Dirty", 0)
    return found


class Sampler(threading.Thread):
    def __init__(self, token: str) -> None:
        super().__init__(daemon=True)
        self.token = token
        self.peaks: dict[int, dict[str, int]] = {}
        self.last: dict[int, dict[str, int]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            for pid in _workers(self.token):
                now = _memory(pid)
                if now is None:
                    continue
                self.last[pid] = now
                peak = self.peaks.setdefault(pid, {})
                for name, value in now.items():
                    peak[name] = max(peak.get(name, 0), value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim-rows", type=int, default=16_000_000)
    parser.add_argument("--stream-rows", type=int, default=4_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--executor-mb", type=int, default=1024)
    parser.add_argument("--pyspark-memory", default=None,
                        help="spark.executor.pyspark.memory (default: unset)")
    parser.add_argument("--dir", default="/tmp/spark-lookup-open")
    args = parser.parse_args()
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = base / f"int-{args.dim_rows}.parquet"
    if not path.exists():
        write_dimension("int", args.dim_rows, path)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = root + os.pathsep + os.environ.get("PYTHONPATH", "")
    from pyspark.sql import SparkSession

    from lookup import FullCachingLookupProvider, lookup_join, lookup_metrics
    from scan import FileSource
    from triggers import PeriodicCacheReloadTrigger

    token = uuid.uuid4().hex
    builder = (SparkSession.builder.master(f"local-cluster[2,1,{args.executor_mb}]")
               .config("spark.ui.enabled", "false")
               .config("spark.executor.memory", f"{args.executor_mb // 2}m")
               .config(f"spark.executorEnv.{MARKER}", token)
               .config("spark.executorEnv.PYTHONPATH", root))
    if args.pyspark_memory:
        builder = builder.config("spark.executor.pyspark.memory", args.pyspark_memory)
    spark = builder.getOrCreate()
    sampler = Sampler(token)
    sampler.start()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as snapshots:
        provider = FullCachingLookupProvider.of(
            FileSource(str(path)), PeriodicCacheReloadTrigger(timedelta(hours=1)),
            key_columns=["k"], snapshot_dir=snapshots, snapshot_name="dim")
        try:
            spark.sparkContext.setLogLevel("ERROR")
            stream = spark.range(0, args.stream_rows, numPartitions=args.partitions).selectExpr(
                "id", f"(id * 7919 % {args.dim_rows}) * 7 + 3 AS k")
            for number in range(args.runs):
                start = time.perf_counter()
                joined = lookup_join(stream, provider, on="k", metrics=True)
                matched = joined.selectExpr("count(name) AS n").collect()[0]["n"]
                seconds = time.perf_counter() - start
                metrics = lookup_metrics(provider).as_dict()
                runs.append({"run": number + 1, "seconds": seconds, "matched": matched,
                             "loads": metrics["load_count"]})
                print(f"run {number + 1}: {seconds:.1f} s, {matched:,} of {args.stream_rows:,} "
                      f"matched, loads so far {metrics['load_count']}", flush=True)
        finally:
            time.sleep(0.2)
            sampler.done.set()
            sampler.join()
            spark.stop()
        files = {p.name: p.stat().st_size for p in (Path(snapshots) / "dim").glob("v*")}
    mb = 1e6
    print(f"dimension {args.dim_rows:,} rows; snapshot files {sum(files.values()) / mb:.0f} MB")
    print(f"{'process':>8} {'peak USS MB':>12} {'last USS MB':>12} {'peak RSS MB':>12} "
          f"{'peak PSS MB':>12} {'peak VmSize MB':>15} {'RLIMIT_AS MB':>13}")
    for pid, peak in sorted(sampler.peaks.items()):
        limit = peak.get("RLIMIT_AS", 0)
        print(f"{pid:>8} {peak.get('USS', 0) / mb:12.0f} "
              f"{sampler.last[pid].get('USS', 0) / mb:12.0f} {peak.get('Rss', 0) / mb:12.0f} "
              f"{peak.get('Pss', 0) / mb:12.0f} {peak.get('VmSize', 0) / mb:15.0f} "
              f"{limit / mb if limit else float('inf'):13.0f}")
    print("(the pyspark daemons and the Python workers of both executors; a worker's last "
          "figures are its last sample before it exited or the job ended)")
    print(f"load average: {os.getloadavg()}")
    write_result("cluster_scale", {"args": vars(args), "runs": runs, "files": files,
                                   "workers": sampler.peaks, "last": sampler.last,
                                   "loadavg": os.getloadavg()})


if __name__ == "__main__":
    main()
