"""Full caching under Python worker churn: per-process snapshots vs the host snapshot store.

A streaming query joins 10 micro-batches against a SQLite dimension table of ``--rows``
rows (``id`` primary key, name, category, score) through ``lookup_join`` with a
``FullCachingLookupProvider`` (``SqlTableSource``, parallelism 2, hourly
``PeriodicCacheReloadTrigger``). The script makes its own SparkSession: ``local[2]``,
``spark.python.worker.reuse=false``, so every task starts a new Python worker (what an
idle timeout of 60 s or a failed task does to a real query) -- 2 tasks, hence 2
workers, per micro-batch, 20 in all. The stream is a directory of 10 Parquet files of
``--batch-rows`` random keys, read one file per micro-batch (``maxFilesPerTrigger=1``,
``availableNow``), repartitioned to 2, joined, written to the ``noop`` sink.

The same query runs, in the same Spark session and run, ``--repeats`` times with each
of (in the order before, after, after, before, ... so that a drifting machine load
falls on both alike):

- ``before``: ``share_across_workers=False``: each worker loads the table itself
  (Flink's model: one snapshot per process);
- ``after``: ``share_across_workers=True`` (what Spark workers get by default): the host
  snapshot store, in a fresh directory, so its first micro-batch starts cold too;
- ``after-warm``: right after ``after``, the same provider in a new query (a restarted
  query of the same application): the store already holds the table.

Measured per mode:

- full scans of the source: counted by the source (one line in a counter file per
  enumerator created, i.e. per full scan, from any process);
- memory of each Python worker: a thread of this script samples ``/proc`` every
  ``--sample-ms`` ms for the Python workers of *this* Spark JVM (children of its
  ``pyspark.daemon``) and keeps each worker's peak ``VmHWM`` (resident), ``RssAnon``
  (private), ``RssFile`` (file pages: the mapped snapshot) and ``Pss`` (resident pages
  divided among the processes sharing them, from ``smaps_rollup``);
- latency: ``triggerExecution`` of micro-batch 0 (the first batch) and the median of
  batches 1-9, from the query's progress reports.

Each run starts cold: a new provider (so a new store directory for ``after``) and a new
checkpoint. One untimed micro-batch runs first, so that the first measured query does
not pay for warming the JVM and the streaming machinery. The summary is the median over
the runs of each mode.

    .venv/bin/python benchmarks/worker_churn.py [--rows 1000000] [--batch-rows 20000]
                                                [--repeats 2]

Writes a table to stdout and ``benchmarks/out/worker_churn.json``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._util import write_result  # noqa: E402
from scan import SqlTableSource  # noqa: E402

SCHEMA = "id BIGINT, name STRING, category INT, score DOUBLE"
BATCHES = 10
MODES = ("before", "after", "after-warm")


class CountingSqlSource(SqlTableSource):
    """The dimension table; appends a line to ``counter`` at every full scan (any process)."""

    def __init__(self, db: str, counter: str) -> None:
        super().__init__(functools.partial(sqlite3.connect, db), "dim", schema=SCHEMA,
                         chunk_size=25_000)
        self.counter = counter

    def create_enumerator(self, context: Any) -> Any:
        fd = os.open(self.counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        return super().create_enumerator(context)


def make_db(path: Path, rows: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT, category INTEGER, "
                     "score REAL)")
        conn.executemany("INSERT INTO dim VALUES (?, ?, ?, ?)",
                         ((i, f"customer-{i}", i % 97, i * 0.25) for i in range(rows)))


def make_stream(directory: Path, rows: int, batch_rows: int, batches: int = BATCHES) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir()
    rng = random.Random(7)
    for batch in range(batches):
        keys = [rng.randrange(rows + rows // 10) for _ in range(batch_rows)]  # ~9% misses
        table = pa.table({"order_id": pa.array(range(batch * batch_rows, (batch + 1) *
                                                     batch_rows), pa.int64()),
                          "key": pa.array(keys, pa.int64())})
        pq.write_table(table, directory / f"part-{batch:02d}.parquet")
        # Distinct modification times keep the file source's order stable.
        os.utime(directory / f"part-{batch:02d}.parquet", (1_000_000 + batch,) * 2)


# --- /proc sampling of this JVM's Python workers


def _status(pid: int) -> dict[str, int]:
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            name, _, rest = line.partition(":")
            if name in ("PPid", "VmHWM", "VmRSS", "RssAnon", "RssFile"):
                values[name] = int(rest.split()[0])
    return values


def _pss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as file:
        for line in file:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as file:
        return file.read().replace(b"\0", b" ").decode(errors="replace")


class WorkerSampler:
    """Samples the Python workers of one JVM (children of its ``pyspark.daemon``)."""

    def __init__(self, jvm_pid: int, interval: float) -> None:
        self.jvm_pid = jvm_pid
        self.interval = interval
        self.peaks: dict[int, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._daemons: set[int] = set()

    def start(self) -> WorkerSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def take(self) -> dict[int, dict[str, int]]:
        """The peaks recorded since the last call (by worker pid)."""
        peaks, self.peaks = self.peaks, {}
        return peaks

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                pid = int(entry)
                try:
                    status = _status(pid)
                    parent = status.get("PPid", 0)
                    if parent == self.jvm_pid and pid not in self._daemons:
                        if "pyspark.daemon" in _cmdline(pid):
                            self._daemons.add(pid)
                        continue
                    if parent not in self._daemons:
                        continue
                    status["Pss"] = _pss(pid)
                except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
                    continue  # exited meanwhile
                peak = self.peaks.setdefault(pid, {})
                for name in ("VmHWM", "RssAnon", "RssFile", "Pss"):
                    peak[name] = max(peak.get(name, 0), status.get(name, 0))


# --- the query


def new_provider(module: Any, work: Path, name: str, share: bool, run: int
                 ) -> tuple[Any, Path]:
    """A fresh provider (a new ``provider_id``, so a new store) and its scan counter."""
    from lookup import FullCachingLookupProvider
    from triggers import PeriodicCacheReloadTrigger

    counter = work / f"scans-{name}-{run}"
    options: dict[str, Any] = {"share_across_workers": share}
    if share:
        options["snapshot_dir"] = str(work / f"snapshots-{name}-{run}")
    provider = FullCachingLookupProvider.of(
        module.CountingSqlSource(str(work / "dim.db"), str(counter)),
        PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"], parallelism=2, **options)
    return provider, counter


def count_scans(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def run_mode(spark: Any, provider: Any, counter: Path, name: str, run: int, work: Path,
             sampler: WorkerSampler, stream_dir: Path) -> dict[str, Any]:
    """Run the query once with ``provider``; its figures."""
    from lookup import lookup_join

    scans_before = count_scans(counter)
    stream = (spark.readStream.schema("order_id BIGINT, key BIGINT")
              .option("maxFilesPerTrigger", 1).parquet(str(stream_dir)))
    joined = lookup_join(stream.repartition(2), provider, on={"key": "id"},
                         columns=["name", "score"])
    sampler.take()
    started = time.perf_counter()
    query = (joined.writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(work / f"checkpoint-{name}-{run}")).start())
    query.awaitTermination()
    wall = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    workers = sampler.take()
    latencies = [p["durationMs"]["triggerExecution"] for p in progress]
    scans = count_scans(counter) - scans_before

    def per_worker(metric: str) -> dict[str, float]:
        values = [peak[metric] / 1024 for peak in workers.values() if metric in peak]
        return {"mean": statistics.mean(values), "median": statistics.median(values),
                "max": max(values)} if values else {}

    return {
        "mode": name,
        "run": run,
        "micro_batches": len(progress),
        "input_rows": sum(p["numInputRows"] for p in progress),
        "full_scans": scans,
        "workers_sampled": len(workers),
        "first_batch_ms": latencies[0] if latencies else None,
        "later_batches_median_ms": statistics.median(latencies[1:]) if len(latencies) > 1
        else None,
        "batch_ms": latencies,
        "wall_s": wall,
        "worker_mib": {metric: per_worker(metric)
                       for metric in ("VmHWM", "RssAnon", "RssFile", "Pss")},
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over ``runs`` of every figure (per-worker memory: of the means)."""

    def median(key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    return {
        "mode": runs[0]["mode"],
        "run": "med",
        "full_scans": int(median("full_scans")),
        "workers_sampled": int(median("workers_sampled")),
        "first_batch_ms": median("first_batch_ms"),
        "later_batches_median_ms": median("later_batches_median_ms"),
        "wall_s": median("wall_s"),
        "worker_mib": {
            metric: {"mean": statistics.median(r["worker_mib"][metric]["mean"] for r in runs)}
            for metric in ("VmHWM", "RssAnon", "RssFile", "Pss")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-rows", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sample-ms", type=float, default=10.0)
    args = parser.parse_args()

    # Workers unpickle the source by its module's name, so it must not be __main__.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    module = importlib.import_module("benchmarks.worker_churn")

    from pyspark.sql import SparkSession

    work = Path(tempfile.mkdtemp(prefix="worker-churn-"))
    try:
        make_db(work / "dim.db", args.rows)
        make_stream(work / "stream", args.rows, args.batch_rows)
        spark = (SparkSession.builder.master("local[2]").appName("worker-churn")
                 .config("spark.python.worker.reuse", "false")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                 .config("spark.driver.memory", "1g")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        jvm_pid = spark.sparkContext._gateway.proc.pid
        sampler = WorkerSampler(jvm_pid, args.sample_ms / 1000).start()
        try:
            # Warm the JVM, the daemon and the streaming machinery with one untimed
            # micro-batch, so that the first measured query does not pay for them.
            make_stream(work / "warm-up", args.rows, 1_000, batches=1)
            run_mode(spark, *new_provider(module, work, "warm-up", False, 0), "warm-up", 0,
                     work, sampler, work / "warm-up")
            results = []
            for run in range(args.repeats):
                before = new_provider(module, work, "before", False, run)
                after = new_provider(module, work, "after", True, run)
                # "after, warm store": the same provider again (a restarted query of the
                # same application): its store already holds the table.
                order = [("before", before), ("after", after), ("after-warm", after)]
                if run % 2:
                    order = [*order[1:], order[0]]
                for name, (provider, counter) in order:
                    results.append(run_mode(spark, provider, counter, name, run, work,
                                            sampler, work / "stream"))
        finally:
            sampler.stop()
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"rows={args.rows} batch_rows={args.batch_rows} micro-batches={BATCHES} "
          f"repeats={args.repeats} local[2] spark.python.worker.reuse=false")
    print(f"{'mode':10} {'run':>4} {'scans':>5} {'workers':>7} {'1st batch ms':>12} "
          f"{'later ms':>9} {'HWM MiB':>8} {'anon MiB':>8} {'file MiB':>8} {'Pss MiB':>8} "
          f"{'wall s':>7}")
    summary = {name: summarize([r for r in results if r["mode"] == name])
               for name in MODES}
    for row in [*sorted(results, key=lambda r: (MODES.index(r["mode"]), r["run"])),
                *summary.values()]:
        mib = row["worker_mib"]
        print(f"{row['mode']:10} {row['run']:>4} {row['full_scans']:>5} "
              f"{row['workers_sampled']:>7} {row['first_batch_ms']:>12.0f} "
              f"{row['later_batches_median_ms']:>9.0f} {mib['VmHWM']['mean']:>8.0f} "
              f"{mib['RssAnon']['mean']:>8.0f} {mib['RssFile']['mean']:>8.0f} "
              f"{mib['Pss']['mean']:>8.0f} {row['wall_s']:>7.1f}")
    path = write_result("worker_churn", {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "rows": args.rows, "batch_rows": args.batch_rows, "micro_batches": BATCHES,
        "repeats": args.repeats, "summary": summary, "results": results,
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
