"""The job of test_connection_limit_local6.py, run by it as its own process: a classic
SparkSession on ``local[6]`` (the suite's shared one is ``local[2]``) joins a stream of
events with a PostgreSQL table read by a role with CONNECTION LIMIT 2, once per run the
test asks for, and prints one line ``RESULT <json>``: for each run the rows checked
against the table's ``id -> name``, the failed tasks Spark counted, and the metrics.

Argument: a JSON object ``{"dsn", "schema", "role", "keys", "events", "runs"}``, each
run ``{"name", "options"}`` (``options``: keywords of ``PartialCachingLookupProvider.of``).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from typing import Any

PARTITIONS = 6
METRICS = ("num_connection_waits", "connection_wait_ms", "num_load_failures",
           "num_retries", "miss_count", "load_count", "num_host_hits", "num_host_waits")


def _failed_tasks(spark: Any, group: str) -> int:
    """The failed task attempts of the jobs of ``group``, as Spark's status tracker
    counts them (a stage's info it no longer keeps counts nothing)."""
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            failed += stage.numFailedTasks if stage is not None else 0
    return failed


def _run(spark: Any, config: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    import psycopg

    from cache import DefaultLookupCache
    from lookup import PartialCachingLookupProvider, SqlLookupFunction, lookup_join, lookup_metrics

    keys, events = config["keys"], config["events"]
    connect = functools.partial(psycopg.connect, config["dsn"], user=config["role"],
                                options=f"-c search_path={config['schema']}",
                                connect_timeout=10)
    cache = DefaultLookupCache.new_builder().maximum_size(keys).build()
    provider = PartialCachingLookupProvider.of(
        SqlLookupFunction(connect, "dim", "id", schema="id BIGINT, name STRING"), cache,
        **run["options"])
    # Keys scattered over the partitions: every task asks for most of the keys.
    stream = spark.range(0, events, numPartitions=PARTITIONS) \
        .selectExpr(f"(id * 7919) % {keys} AS id", "id AS event")
    spark.sparkContext.setJobGroup(run["name"], run["name"])
    started = time.monotonic()
    try:
        rows = lookup_join(stream, provider, on="id", metrics=True) \
            .select("id", "event", "name").collect()
        error = None
    except Exception as exc:  # reported to the test with the failed tasks
        rows, error = [], f"{type(exc).__name__}: {str(exc)[:3000]}"
    seconds = round(time.monotonic() - started, 2)
    failed = _failed_tasks(spark, run["name"])
    result: dict[str, Any] = {
        "error": error, "seconds": seconds, "failed_tasks": failed, "rows": len(rows),
        "events": sorted(row["event"] for row in rows) == list(range(events)),
        "wrong": sum(1 for row in rows if row["name"] != f"n{row['id']}"),
    }
    if error is None:
        values = lookup_metrics(provider).as_dict()
        result["metrics"] = {name: values[name] for name in METRICS}
    return result


def main(argument: str) -> None:
    from pyspark.sql import SparkSession

    config = json.loads(argument)
    spark = (SparkSession.builder.master(f"local[{PARTITIONS}]")
             .appName("spark-lookup-connection-limit")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "1g")
             .config("spark.driver.extraJavaOptions", config["java_options"])
             # local[N] tries a task once: any failed task fails the job; said anyway.
             .config("spark.task.maxFailures", "1")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             # Batches of 500 rows: each task loads many times, so the tasks' loads overlap.
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
             .getOrCreate())
    try:
        results = {run["name"]: _run(spark, config, run) for run in config["runs"]}
    finally:
        spark.stop()
    print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
