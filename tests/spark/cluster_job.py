"""A lookup join job on ``local-cluster[2,1,1024]`` (two executor JVMs), run by
test_local_cluster.py in its own process: a process can hold one SparkContext, and the
test session already has its local[2] one. Prints one JSON line of results."""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from tests.env import JVM_FAST_START


def main() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

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
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false")
             .config("spark.executor.memory", "512m")
             # Three JVMs start on 2 CPUs: these options start them about a third
             # faster (the job checks values, not speed).
             .config("spark.driver.extraJavaOptions", JVM_FAST_START)
             .config("spark.executor.extraJavaOptions", JVM_FAST_START)
             .getOrCreate())
    try:
        spark.sparkContext.setLogLevel("ERROR")
        stream = spark.range(0, 4000, numPartitions=8).selectExpr("id AS order_id",
                                                                  "id % 120 AS customer_id")
        results = {}
        for name, provider in (("partial", partial), ("full", full)):
            joined = lookup_join(stream, provider, on={"customer_id": "id"}, metrics=True)
            rows = joined.collect()
            matched = sum(1 for r in rows if r["name"] is not None)
            wrong = sum(1 for r in rows
                        if r["name"] is not None and r["name"] != f"customer-{r['customer_id']}")
            # Each executor JVM forks its Python workers from a daemon of its own, so the
            # workers' parent processes tell the executors apart.
            executors = joined.rdd.mapPartitions(
                lambda _: [os.getppid()]).distinct().collect()
            results[name] = {
                "rows": len(rows), "matched": matched, "wrong": wrong,
                "executors": sorted(executors),
                "metrics": lookup_metrics(provider).snapshot(),
            }
        print("RESULT " + json.dumps(results))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
