"""One partial cache per host (issue 44): what the host tier saves, at default settings.

A PostgreSQL dimension of ``--keys`` rows; a stream of ``--events`` rows whose keys
follow a Zipf law (``--zipf``) over it; ``lookup_join`` with a partial cache on
``local[--workers]`` (one Python worker per task slot), run twice side by side:

    shared:  the default (a host tier behind the workers' caches)
    private: ``share_across_workers=False`` (each worker caches alone)

Each cache holds up to ``--maximum-size`` keys (default ``--keys``: none evicts); the
tier has the same bound, so with a smaller one it holds one cache's worth for the
host where the private caches hold one each.

The runs go private first, shared second: a worker's cache outlives a run, so the
shared run is the one that could gain from the earlier's, and it cannot (another
provider). Reported per run: keys loaded from the source (``miss_count - num_host_hits``, from
the join's metrics) against what one worker alone loads for the same stream (its
distinct keys, the cache holding them all); the peak of connections to PostgreSQL
(``pg_stat_activity`` polled every 10 ms, by ``application_name``) against the budget
(``max_source_connections``, default 4); the bytes of the host tier (its files) beside
the private caches' ``num_cached_bytes`` summed over workers. Then, alone, the cost of
a host-tier hit: ``HostTier.get`` of 1,000 random keys of a tier holding ``--keys``
keys, median of 200.

    .venv/bin/python benchmarks/host_tier.py [--keys 1000000] [--events 400000]
        [--workers 8] [--maximum-size N] [--dsn postgresql://127.0.0.1:5432/test]

Writes ``benchmarks/out/host_tier.json``.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks._util import machine, median, write_result

APP = "spark_lookup_bench_host_tier"
SCHEMA_NAME = "bench_host_tier"


def _dimension(dsn: str, keys: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA_NAME} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA_NAME}")
        conn.execute(f"CREATE TABLE {SCHEMA_NAME}.dim (id BIGINT PRIMARY KEY, name TEXT, "
                     "score DOUBLE PRECISION)")
        conn.execute(f"INSERT INTO {SCHEMA_NAME}.dim SELECT g, 'name-' || g, g * 0.5 "
                     f"FROM generate_series(0, {keys - 1}) g")


def _peak_connections(dsn: str, app: str, stop: threading.Event, peak: list[int]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                               "WHERE application_name = %s", (app,)).fetchone()
            peak[0] = max(peak[0], int(row[0]) if row else 0)
            time.sleep(0.01)


def _run(spark: Any, df: Any, provider: Any, dsn: str, app: str) -> dict[str, Any]:
    from lookup import lookup_join, lookup_metrics

    stop, peak = threading.Event(), [0]
    poller = threading.Thread(target=_peak_connections, args=(dsn, app, stop, peak),
                              daemon=True)
    poller.start()
    started = time.perf_counter()
    try:
        lookup_join(df, provider, on={"key": "id"}, metrics=True).write.format("noop").mode(
            "overwrite").save()
    finally:
        stop.set()
        poller.join(5)
    seconds = time.perf_counter() - started
    metrics = lookup_metrics(provider)
    return {"seconds": round(seconds, 2), "keys_loaded": metrics.miss_count
            - metrics.num_host_hits, "loads": metrics.load_count,
            "host_hits": metrics.num_host_hits, "host_waits": metrics.num_host_waits,
            "private_cached_bytes": metrics.num_cached_bytes,
            "peak_connections": peak[0]}


def _host_hit_cost(keys: int) -> dict[str, float]:
    import pyarrow as pa

    from benchmarks.host_tier_bytes import fill, timed_gets
    from cache.host.tier import HostTier

    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
    directory = Path(tempfile.mkdtemp()) / "tier"
    tier = HostTier(directory, schema, ["id"], maximum_size=keys, write_ttl=None,
                    missing_ttl=None, cache_missing_key=True)
    tier.open()
    try:
        # The dimension's rows, put as a load of 10,000 keys brings them.
        ids = np.arange(keys, dtype=np.int64)
        fill(tier, ids, 10_000, lambda part: pa.table(
            {"id": part, "name": pa.array([f"name-{i}" for i in part]), "score": part * 0.5}))
        times, _ = timed_gets(tier, ids, 1_000, 200)
        return {"median_ms": round(median(times.tolist()), 3),
                "p95_ms": round(float(np.percentile(times, 95)), 3),
                "tier_bytes": tier.nbytes()}
    finally:
        tier.close()
        shutil.rmtree(directory.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--zipf", type=float, default=1.2)
    parser.add_argument("--maximum-size", type=int, default=0, metavar="N",
                        help="each cache's maximum_size (default: --keys, so no cache "
                             "evicts; smaller: the private caches fill, and so does the "
                             "tier, which has the same bound)")
    parser.add_argument("--uniform", type=int, default=0, metavar="N",
                        help="keys drawn uniformly from the first N instead (every worker "
                             "then sees most of them: the private caches overlap)")
    parser.add_argument("--dsn", default=os.environ.get(
        "POSTGRES_DSN", "postgresql://127.0.0.1:5432/test"))
    args = parser.parse_args()

    import psycopg

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from cache import DefaultLookupCache
    from lookup import PartialCachingLookupProvider, SqlLookupFunction

    _dimension(args.dsn, args.keys)
    rng = np.random.default_rng(7)
    keys = (rng.integers(0, args.uniform, args.events) if args.uniform
            else (rng.zipf(args.zipf, args.events) - 1) % args.keys)
    distinct = len(np.unique(keys))
    spark = (SparkSession.builder.master(f"local[{args.workers}]")
             .appName("spark-lookup-host-tier").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import pandas as pd

    df = spark.createDataFrame(pd.DataFrame({"event": np.arange(args.events), "key": keys}))
    df = df.repartition(args.workers * 4).cache()
    df.count()
    schema = "id BIGINT, name STRING, score DOUBLE"

    def provider(share: bool | None) -> Any:
        # Each run's connections by name: the Python workers keep the earlier run's
        # idle ones (a budget is per provider).
        connect = functools.partial(psycopg.connect, args.dsn,
                                    application_name=f"{APP}_{share}",
                                    options=f"-c search_path={SCHEMA_NAME}")
        return PartialCachingLookupProvider.of(
            SqlLookupFunction(connect, "dim", key_columns=["id"], schema=schema),
            DefaultLookupCache.new_builder().maximum_size(args.maximum_size or args.keys)
            .build(),
            share_across_workers=share)

    shared_provider = provider(None)
    results = {"private": _run(spark, df, provider(False), args.dsn, f"{APP}_False"),
               "shared": _run(spark, df, shared_provider, args.dsn, f"{APP}_None")}
    tier_dir = Path(tempfile.gettempdir()) / f"spark-lookup-partial-{os.getuid()}" / \
        shared_provider.provider_id
    results["shared"]["host_tier_bytes"] = sum(
        p.stat().st_blocks * 512 for p in tier_dir.rglob("*") if p.is_file())
    spark.stop()
    hit = _host_hit_cost(args.keys)
    payload = {
        "events": args.events, "keys": args.keys, "zipf": args.zipf, "uniform": args.uniform,
        "maximum_size": args.maximum_size or args.keys,
        "workers": args.workers, "distinct_keys_in_stream": distinct,
        "runs": results, "host_hit_1000_keys": hit,
        "loaded_vs_one_worker": {
            name: round(run["keys_loaded"] / distinct, 3) for name, run in results.items()},
        "budget": 4, "machine": machine(),
    }
    print(payload)
    write_result("host_tier" + (f"_uniform_{args.uniform}" if args.uniform else "")
                 + (f"_max_{args.maximum_size}" if args.maximum_size else ""), payload)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA_NAME} CASCADE")


if __name__ == "__main__":
    main()
