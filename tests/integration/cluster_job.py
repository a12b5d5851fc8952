"""A lookup join job on ``local-cluster[2,1,1024]`` (two executor JVMs), deployed as a
user deploys one: ``spark-submit --py-files spark_lookup.zip cluster_job.py``, with
executors whose Python does not have spark-lookup installed (test_local_cluster.py
makes that interpreter and the archive, and runs this script by its path, so that
nothing of the checkout is on any path). Prints one JSON line of results.

It imports nothing of the test suite: the executors must not find the checkout.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import sys
import tempfile
from datetime import timedelta
from pathlib import Path


def _where() -> tuple[int, str, str]:
    """In an executor's Python worker: its parent (the executor's daemon), where
    ``lookup`` was imported from, and the interpreter."""
    import lookup

    return os.getppid(), str(lookup.__file__), sys.executable


def main() -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from cache import DefaultLookupCache
    from lookup import (
        FullCachingLookupProvider,
        PartialCachingLookupProvider,
        SqlLookupFunction,
        lookup_join,
        lookup_metrics,
    )
    from scan import SqlTableSource
    from triggers import PeriodicCacheReloadTrigger

    db = Path(tempfile.mkdtemp()) / "dim.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?)",
                         [(i, f"customer-{i}") for i in range(100)])
    connect = functools.partial(sqlite3.connect, str(db))
    partial = PartialCachingLookupProvider.of(
        SqlLookupFunction(connect, "customers", key_columns=["id"],
                          schema="id BIGINT, name STRING"),
        DefaultLookupCache.new_builder().maximum_size(10_000).build(),
    )
    full = FullCachingLookupProvider.of(
        SqlTableSource(connect, "customers", schema="id BIGINT, name STRING"),
        PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
    )
    spark = SparkSession.builder.getOrCreate()  # master and options: spark-submit's
    try:
        spark.sparkContext.setLogLevel("ERROR")
        where = F.udf(_where, "struct<ppid: int, imported_from: string, python: string>"
                      ).asNondeterministic()
        stream = spark.range(0, 4000, numPartitions=8).selectExpr("id AS order_id",
                                                                  "id % 120 AS customer_id")
        results: dict[str, object] = {}
        # One engine per cache: the engines run the same library code (the archive's),
        # and each join costs the three JVMs of this 2-CPU test seconds.
        for name, provider, engine in (("partial", partial, "pandas"), ("full", full, "arrow")):
            joined = lookup_join(stream, provider, on={"customer_id": "id"},
                                 engine=engine, metrics=True)
            # Each row also says which Python worker, of which executor, computed it (a
            # UDF of the same task): each executor JVM forks its Python workers from a
            # daemon of its own, so the workers' parent processes tell the executors apart.
            rows = joined.withColumn("worker", where()).collect()
            matched = sum(1 for r in rows if r["name"] is not None)
            wrong = sum(1 for r in rows if r["name"] is not None
                        and r["name"] != f"customer-{r['customer_id']}")
            workers = {tuple(r["worker"]) for r in rows}
            results[f"{name}-{engine}"] = {
                "rows": len(rows), "matched": matched, "wrong": wrong,
                "executors": sorted({w[0] for w in workers}),
                "imported_from": sorted({w[1] for w in workers}),
                "pythons": sorted({w[2] for w in workers}),
                "metrics": lookup_metrics(provider).as_dict(),
            }
        print("RESULT " + json.dumps(results))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
