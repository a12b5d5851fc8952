"""The naive per-row UDF users write, against ``lookup_join`` with a partial cache.

Same servers, same DataFrame, same output rows, one Spark session (``local[2]``), one run.

A dimension of ``--keys`` rows (``id`` 1..keys, ``name`` text, ``category`` integer,
``score`` double) is written to PostgreSQL (table ``dim`` in a schema of its own) and to
Redis (one hash per id, ``<prefix>:<id>`` with fields name/category/score, under a key
prefix of its own); both are removed at the end. The stream is a cached DataFrame in 2
partitions (``id``, and ``key`` uniform over 1..keys: every key exists) of ``--rows``
rows for the naive UDFs and ``--join-rows`` rows (default 2,000,000) for ``lookup_join``
and the pass-through: each run then lasts seconds, so Spark's fixed cost of an action
(about 0.2 s here, what a pass-through of 20,000 rows takes) does not decide the
ratio; the naive UDFs at 200,000 rows already run for seconds. Rates (rows/s) are
compared. The cases, all enriching every row with ``name``, ``category`` and ``score``:

- ``naive udf, PostgreSQL``: a row-at-a-time ``@udf`` that runs
  ``SELECT name, category, score FROM dim WHERE id = %s`` for its row, on a psycopg 3
  connection opened at the first row of the task and reused for the others (autocommit;
  psycopg prepares the statement itself after 5 executions);
- ``naive pandas_udf, PostgreSQL``: a ``pandas_udf`` (Arrow transfer) with the same
  query in a loop over the rows of its batch, on a connection reused the same way;
- ``naive udf, Redis``: a row-at-a-time ``@udf`` running ``HGETALL <prefix>:<key>`` for
  its row on a redis-py client reused the same way, converting the fields;
- ``lookup_join, PostgreSQL, cold`` / ``... warm``: ``lookup_join`` with a
  ``PartialCachingLookupProvider`` over ``SqlLookupFunction`` (psycopg 3) and a
  ``DefaultLookupCache`` (room for every key). "cold" is the first run of a provider built
  fresh for the round (empty caches in both Python workers: each Arrow batch loads its
  misses in one query); "warm" is the second run of that same provider (100% hits);
- ``lookup_join, Redis, cold`` / ``... warm``: the same over ``RedisLookupFunction``
  (hashes, one pipelined round trip of ``HGETALL`` per batch of misses);
- ``mapInPandas pass-through``: every batch back unchanged, no enrichment: the ceiling of
  a Python pass over the rows.

One untimed warm-up (every case; the naive ones on a 10th of the rows; none with
``--quick``, a smoke run on a C1-only JVM whose figures mean nothing), then
``--repeats`` rounds; each round runs every case once, the order rotated from round to
round (a cold run is always followed by its warm run). A run is one action:
``count(*)``, ``count(name)``, ``sum(category)``, ``sum(score)`` and
``sum(crc32(name))`` over the enriched rows, so every row and column is computed; every
run's checksum must equal the one of Spark's broadcast join of the same dimension
(computed once, untimed), or the script fails. rows/s = rows / seconds of the action;
ratios to the naive PostgreSQL UDF are given of the medians and as the median of the
same-round ratios. Hit ratios and loads come from ``lookup_metrics``.

    .venv/bin/python benchmarks/naive_vs_lookup.py [--rows 200000] [--join-rows 2000000]
        [--keys 10000] [--repeats 3] [--quick]

Writes a table to stdout and ``benchmarks/out/naive_vs_lookup.json``
(``naive_vs_lookup_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import local_spark, write_result

DEFAULT_DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
DEFAULT_REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
DIM_SCHEMA = "id BIGINT, name STRING, category INT, score DOUBLE"
RESULT_TYPE = "name STRING, category INT, score DOUBLE"
NAIVE_SQL = "SELECT name, category, score FROM dim WHERE id = %s"

NAIVE_PG = "naive udf, PostgreSQL"
NAIVE_PG_PANDAS = "naive pandas_udf, PostgreSQL"
NAIVE_REDIS = "naive udf, Redis"
OURS_PG_COLD = "lookup_join, PostgreSQL, cold"
OURS_PG_WARM = "lookup_join, PostgreSQL, warm"
OURS_REDIS_COLD = "lookup_join, Redis, cold"
OURS_REDIS_WARM = "lookup_join, Redis, warm"
PASS = "mapInPandas pass-through"
ORDER = (NAIVE_PG, NAIVE_PG_PANDAS, NAIVE_REDIS, OURS_PG_COLD, OURS_PG_WARM,
         OURS_REDIS_COLD, OURS_REDIS_WARM, PASS)
BASELINE = NAIVE_PG


# --- the naive UDFs (pickled by value with the function; state lives per task) ---------


def naive_pg_row(dsn: str, schema: str) -> Callable[[int], Any]:
    """The per-row function of the naive ``@udf``: one query per row."""
    state: dict[str, Any] = {}

    def lookup(key):  # type: ignore[no-untyped-def]  # no hints: Spark would infer from them
        conn = state.get("conn")
        if conn is None:  # first row of this task: connect, then reuse
            conn = state["conn"] = psycopg.connect(
                dsn, autocommit=True, options=f"-c search_path={schema}")
        return conn.execute(NAIVE_SQL, (key,)).fetchone()

    return lookup


def naive_pg_batch(dsn: str, schema: str) -> Callable[[Any], Any]:
    """The function of the naive ``pandas_udf``: a loop of one query per row of a batch."""
    state: dict[str, Any] = {}

    def lookup(keys: pd.Series) -> pd.DataFrame:
        conn = state.get("conn")
        if conn is None:
            conn = state["conn"] = psycopg.connect(
                dsn, autocommit=True, options=f"-c search_path={schema}")
        rows = []
        for key in keys.tolist():
            row = conn.execute(NAIVE_SQL, (key,)).fetchone()
            rows.append(row if row is not None else (None, None, None))
        return pd.DataFrame(rows, columns=["name", "category", "score"])

    return lookup


def naive_redis_row(url: str, prefix: str) -> Callable[[int], Any]:
    """The per-row function of the naive Redis ``@udf``: one HGETALL per row."""
    state: dict[str, Any] = {}

    def lookup(key):  # type: ignore[no-untyped-def]  # no hints: Spark would infer from them
        client = state.get("client")
        if client is None:
            client = state["client"] = redis.Redis.from_url(url)
        fields = client.hgetall(f"{prefix}:{key}")
        if not fields:
            return None
        return (fields[b"name"].decode(), int(fields[b"category"]), float(fields[b"score"]))

    return lookup


def _pass_through(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


# --- servers ----------------------------------------------------------------------------


def create_pg(dsn: str, schema: str, keys: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".dim (id bigint PRIMARY KEY, name text, '
                     "category integer, score double precision)")
        conn.execute(f"INSERT INTO \"{schema}\".dim SELECT g, 'customer-' || g, g %% 97, "
                     "g * 0.25 FROM generate_series(1, %s) AS g", [keys])
        conn.execute(f'VACUUM ANALYZE "{schema}".dim')


def drop_pg(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '30s'")
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def create_redis(url: str, prefix: str, keys: int) -> None:
    client = redis.Redis.from_url(url)
    try:
        for first in range(1, keys + 1, 5000):
            pipe = client.pipeline(transaction=False)
            for i in range(first, min(first + 5000, keys + 1)):
                pipe.hset(f"{prefix}:{i}", mapping={
                    "name": f"customer-{i}", "category": i % 97, "score": repr(i * 0.25)})
            pipe.execute()
    finally:
        client.close()


def drop_redis(url: str, prefix: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        removed = 0
        batch: list[bytes] = []
        for name in client.scan_iter(match=f"{prefix}:*", count=5000):
            batch.append(name)
            if len(batch) >= 5000:
                removed += client.delete(*batch)
                batch = []
        if batch:
            removed += client.delete(*batch)
        return removed
    finally:
        client.close()


# --- Spark ------------------------------------------------------------------------------


def start_spark(quick: bool) -> Any:
    return local_spark("naive-vs-lookup", quick)


def checksum(frame: Any) -> tuple[Any, ...]:
    """The action every case runs: computes every output row and column."""
    from pyspark.sql import functions as F

    row = frame.agg(
        F.count(F.lit(1)), F.count("name"), F.sum("category"), F.sum("score"),
        F.sum(F.crc32(F.col("name").cast("binary"))),
    ).collect()[0]
    return tuple(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int,
                        help="stream rows of the naive UDFs (default 200000)")
    parser.add_argument("--join-rows", type=int,
                        help="stream rows of lookup_join and the pass-through "
                             "(default 2000000; with --quick, --rows)")
    parser.add_argument("--keys", type=int, help="distinct keys = dimension rows (default 10000)")
    parser.add_argument("--repeats", type=int, help="timed rounds (default 3)")
    parser.add_argument("--quick", action="store_true",
                        help="CI: 2000 rows, 500 keys, 1 round, no warm-up unless given")
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=None,
                        help="run the untimed warm-up (default: yes, no with --quick)")
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS)
    args = parser.parse_args()
    defaults = (2_000, 500, 1) if args.quick else (200_000, 10_000, 3)
    warmup = args.warmup if args.warmup is not None else not args.quick
    rows = args.rows if args.rows is not None else defaults[0]
    keys = args.keys if args.keys is not None else defaults[1]
    repeats = args.repeats if args.repeats is not None else defaults[2]
    join_rows = args.join_rows if args.join_rows is not None else (
        rows if args.quick else 2_000_000)
    if rows < 10 or join_rows < 10 or keys < 1 or repeats < 1:
        raise SystemExit("--rows and --join-rows must be >= 10, --keys and --repeats >= 1")

    started = time.perf_counter()
    load_before = os.getloadavg()
    tag = uuid.uuid4().hex[:10]
    schema = f"bench_naive_{tag}"
    prefix = f"bench_naive_{tag}"
    print(f"{rows:,} rows (naive UDFs), {join_rows:,} rows (lookup_join, pass-through), "
          f"{keys:,} keys; PostgreSQL schema {schema}, Redis prefix {prefix}", flush=True)
    spark = None
    seconds: dict[str, list[float]] = {name: [] for name in ORDER}
    metrics: dict[str, list[dict[str, int]]] = {
        name: [] for name in (OURS_PG_COLD, OURS_PG_WARM, OURS_REDIS_COLD, OURS_REDIS_WARM)}
    try:
        create_pg(args.dsn, schema, keys)
        create_redis(args.redis_url, prefix, keys)
        spark = start_spark(args.quick)

        from pyspark.sql import functions as F

        from cache import CacheMetrics, DefaultLookupCache
        from lookup import (
            PartialCachingLookupProvider,
            RedisLookupFunction,
            SqlLookupFunction,
            lookup_join,
            lookup_metrics,
        )
        from spark_lookup.errors import MetricsUnavailableError

        def stream(count: int) -> Any:
            frame = (spark.range(0, count, numPartitions=2)
                     .withColumn("key", (F.floor(F.rand(seed=7) * keys) + 1).cast("bigint"))
                     .cache())
            frame.count()
            return frame

        df = stream(rows)
        big = stream(join_rows) if join_rows != rows else df
        small = stream(max(10, rows // 10)) if warmup else df
        dim = spark.range(1, keys + 1, numPartitions=1).selectExpr(
            "id AS key", "concat('customer-', id) AS name", "CAST(id % 97 AS INT) AS category",
            "id * 0.25 AS score")
        expected = checksum(df.join(F.broadcast(dim), "key", "left"))
        expected_big = (checksum(big.join(F.broadcast(dim), "key", "left"))
                        if big is not df else expected)
        expected_small = (checksum(small.join(F.broadcast(dim), "key", "left")) if warmup
                          else expected)
        print(f"reference checksum (broadcast join): {expected}", flush=True)

        pg_udf = F.udf(naive_pg_row(args.dsn, schema), RESULT_TYPE)
        pg_pandas = F.pandas_udf(naive_pg_batch(args.dsn, schema), RESULT_TYPE)
        redis_udf = F.udf(naive_redis_row(args.redis_url, prefix), RESULT_TYPE)

        def naive(frame: Any, function: Any) -> Any:
            return frame.withColumn("_dim", function("key")).select(
                "id", "key", "_dim.name", "_dim.category", "_dim.score")

        factory = functools.partial(psycopg.connect, args.dsn,
                                    options=f"-c search_path={schema}")

        def provider(source: str) -> PartialCachingLookupProvider:
            function: Any
            if source == "pg":
                function = SqlLookupFunction(factory, "dim", ["id"], schema=DIM_SCHEMA)
            else:
                function = RedisLookupFunction(args.redis_url, f"{prefix}:{{id}}", DIM_SCHEMA,
                                               ["id"], "hash")
            cache = (DefaultLookupCache.new_builder().maximum_size(2 * keys)
                     .expire_after_write(timedelta(hours=1)).build())
            return PartialCachingLookupProvider.of(function, cache)

        def timed(name: str, frame: Any, want: tuple[Any, ...]) -> float:
            start = time.perf_counter()
            got = checksum(frame)
            spent = time.perf_counter() - start
            if got != want:
                raise SystemExit(f"{name}: checksum {got} differs from the reference {want}")
            return spent

        def counts(fresh: Any) -> dict[str, int]:
            try:
                return lookup_metrics(fresh).as_dict()
            except MetricsUnavailableError:  # nothing has run with it yet
                return CacheMetrics().as_dict()

        def ours(cold: str, warm: str, source: str, record: bool) -> None:
            fresh = provider(source)
            for name in (cold, warm):
                # A DataFrame per run: on a classic session, the metrics of a lookup_join
                # DataFrame are observed for its first action only. Metrics on (not the
                # default): the hit ratios below come from them; they cost a partial
                # cache a few percent.
                joined = lookup_join(big, fresh, on={"key": "id"}, metrics=True)
                before = counts(fresh)
                spent = timed(name, joined, expected_big)
                after = counts(fresh)
                if record:
                    seconds[name].append(spent)
                    metrics[name].append({m: after[m] - before[m] for m in
                                          ("hit_count", "miss_count", "load_count")})

        naive_frames = {NAIVE_PG: pg_udf, NAIVE_PG_PANDAS: pg_pandas, NAIVE_REDIS: redis_udf}
        units: list[Callable[[bool], None]] = []
        for name, function in naive_frames.items():
            def unit(record: bool, name: str = name, function: Any = function) -> None:
                frame, want = (df, expected) if record else (small, expected_small)
                spent = timed(name, naive(frame, function), want)
                if record:
                    seconds[name].append(spent)
            units.append(unit)
        units.append(lambda record: ours(OURS_PG_COLD, OURS_PG_WARM, "pg", record))
        units.append(lambda record: ours(OURS_REDIS_COLD, OURS_REDIS_WARM, "redis", record))
        passing = big.mapInPandas(_pass_through, big.schema)

        def pass_unit(record: bool) -> None:
            start = time.perf_counter()
            passing.write.format("noop").mode("overwrite").save()
            if record:
                seconds[PASS].append(time.perf_counter() - start)
        units.append(pass_unit)

        if warmup:
            for unit in units:  # JIT, Python workers, server buffers
                unit(False)
            print(f"warm-up done after {time.perf_counter() - started:.0f} s", flush=True)
        for round_ in range(repeats):
            shift = round_ % len(units)
            for unit in units[shift:] + units[:shift]:
                unit(True)
            print(f"round {round_ + 1}/{repeats} done after "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
        with psycopg.connect(args.dsn) as conn:
            server = conn.execute("SHOW server_version").fetchone()
        redis_client = redis.Redis.from_url(args.redis_url)
        redis_version = redis_client.info("server").get("redis_version")
        redis_client.close()
    finally:
        if spark is not None:
            spark.stop()  # first: the workers' connections go with it
        drop_pg(args.dsn, schema)
        removed = drop_redis(args.redis_url, prefix)
        print(f"dropped schema {schema} and {removed:,} Redis keys", flush=True)
    load_after = os.getloadavg()

    # Rates, not seconds, are compared: the naive UDFs and the joins read different
    # numbers of rows (each enough for Spark's fixed cost of an action to stay small).
    rows_of = {name: rows if name in (NAIVE_PG, NAIVE_PG_PANDAS, NAIVE_REDIS) else join_rows
               for name in ORDER}
    rates = {name: [rows_of[name] / s for s in seconds[name]] for name in ORDER}
    base = rows / statistics.median(seconds[BASELINE])
    results: dict[str, dict[str, Any]] = {}
    print(f"\n{'case':34}{'rows/s':>10}{'vs naive PG':>13}{'per round':>11}{'hits':>7}"
          f"{'loads':>7}")
    for name in ORDER:
        med = statistics.median(seconds[name])
        rate = rows_of[name] / med
        per_round = statistics.median(
            r / b for b, r in zip(rates[BASELINE], rates[name], strict=True))
        hits = None
        loads = None
        if name in metrics:
            total_hits = sum(m["hit_count"] for m in metrics[name])
            total = total_hits + sum(m["miss_count"] for m in metrics[name])
            hits = total_hits / total if total else None
            loads = statistics.median(m["load_count"] for m in metrics[name])
        results[name] = {
            "seconds": seconds[name],
            "median_seconds": med,
            "rows": rows_of[name],
            "rows_per_second": rate,
            "rows_per_second_runs": rates[name],
            "relative_to_naive_pg": rate / base,
            "relative_to_naive_pg_median_of_rounds": per_round,
            "hit_ratio": hits,
            "loads_per_run": loads,
            "lookups": metrics.get(name),
        }
        print(f"{name:34}{rate:>10,.0f}{rate / base:>12.1f}x{per_round:>10.1f}x"
              f"{'-' if hits is None else f'{hits:.0%}':>7}"
              f"{'-' if loads is None else f'{loads:,.0f}':>7}")
    naive_redis = rows / statistics.median(seconds[NAIVE_REDIS])
    vs_redis = {name: join_rows / statistics.median(seconds[name]) / naive_redis
                for name in (OURS_REDIS_COLD, OURS_REDIS_WARM)}
    vs_redis_rounds = {
        name: statistics.median(r / b for b, r in zip(rates[NAIVE_REDIS], rates[name],
                                                      strict=True))
        for name in (OURS_REDIS_COLD, OURS_REDIS_WARM)}
    print(f"\nvs naive udf, Redis: cold {vs_redis[OURS_REDIS_COLD]:.1f}x "
          f"({vs_redis_rounds[OURS_REDIS_COLD]:.1f}x per round), warm "
          f"{vs_redis[OURS_REDIS_WARM]:.1f}x ({vs_redis_rounds[OURS_REDIS_WARM]:.1f}x per round)")
    print(f"median of {repeats} rounds; 'per round': median of same-round ratios; every run's "
          f"checksum matched the broadcast join's. Load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after ({os.cpu_count()} CPUs).")
    path = write_result(
        "naive_vs_lookup_quick" if args.quick else "naive_vs_lookup",
        {
            "command": " ".join([".venv/bin/python", "benchmarks/naive_vs_lookup.py",
                                 *sys.argv[1:]]),
            "rows": rows,
            "join_rows": join_rows,
            "keys": keys,
            "repeats": repeats,
            "warmup": warmup,
            "reference_checksum": list(expected),
            "results": results,
            "relative_to_naive_redis": vs_redis,
            "relative_to_naive_redis_median_of_rounds": vs_redis_rounds,
            "load_average_before_after": [load_before, load_after],
            "versions": {
                "psycopg": psycopg.__version__,
                "redis_py": redis.__version__,
                "postgresql": server[0] if server else None,
                "redis": redis_version,
            },
            "seconds_total": time.perf_counter() - started,
        },
    )
    print(f"wrote {path} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
