"""Freshness without load: how stale PostgreSQL change feeds leave a partial and a full
cache, how many source queries they cost, and how far notifications lag at 10,000
changed keys a second.

A table ``dim`` (id bigint primary key, name text, version bigint) of ``--rows`` rows
is created in a schema of its own (dropped at the end) with ``PostgresChanges``'
triggers. Measured through ``open_lookup`` handles in ``--readers`` Python processes
(spawned; what Spark's Python workers are), and with ``--spark`` through a Structured
Streaming ``lookup_join``:

1. Staleness. Each reader opens a partial cache (``SqlLookupFunction``, psycopg,
   ``DefaultLookupCache`` expiring 1 h after write: without the feed a change could
   stay unseen for an hour) warmed with every row, and a full cache (``SqlTableSource``,
   reloaded every hour, shared by the readers through one snapshot store) over the
   table, both with the feed (``min_interval`` ``--min-interval``). The writer (this
   process) commits ``--updates`` single-row UPDATEs spread evenly over ``--duration``
   seconds, each setting a key's ``version``, and tells every reader the key, version
   and commit time (after ``COMMIT`` returned). A reader looks its pending keys up in
   both caches every 0.5 ms until it sees the new version: staleness = seen - commit.
   Reported: p50/p99/max per cache over every (reader, update); the partial caches'
   keys loaded per update (O(changed keys): 1 a reader is the floor), the full
   caches' whole-table loads for the host (the first; then only for what cannot be
   read by key) and their keys read by key per update (each reader reads the changed
   key into its overlay: 1 a reader).
2. Notification lag. ``--readers`` readers, each its partial cache warmed with every
   row, also subscribe a timing sink to the feed's listener after their cache (the listener calls
   them in that order, so the sink's time is after the keys were dropped). The writer
   updates ``--rate`` keys a second for ``--lag-seconds`` in transactions of
   ``--batch`` keys (every key once); lag = sink time - the transaction's commit
   time. Reported: p50/p99/max, the rate reached, and the keys invalidated.
3. With ``--spark``: a Structured Streaming ``lookup_join`` on local[2]. A rate stream
   (``--stream-rate`` rows a second, 100 ms micro-batches) of ``--hot`` keys is joined
   with both caches (each worker its own partial cache; the full cache shared by the
   workers); ``--stream-updates`` UPDATEs of those keys over ``--stream-duration``
   seconds. Each output row is stamped, in the Python worker right after both joins,
   with the time its batch was looked up (``looked_up_at``, a ``mapInArrow`` after the
   joins: later than the lookups themselves, so stale answers count as late as can be).
   Three figures per update and cache: *stale served*, the cache's staleness, how long
   after the commit a lookup still answered an older version (the latest such lookup
   minus the commit; 0 when every lookup after the commit saw the new one); *first
   fresh*, the first lookup that answered the new version minus the commit (it also
   waits for the key's next lookup, the next micro-batch); *output*, the end of the
   first micro-batch whose output (``foreachBatch``, on the driver) shows the new
   version, minus the commit (the micro-batch's own latency included). The joins
   report their metrics (``metrics=True``): the source work of both caches over the
   run.

    .venv/bin/python benchmarks/change_feed.py [--rows 100000] [--readers 2]
        [--updates 1000] [--duration 60] [--min-interval 1] [--rate 10000]
        [--lag-seconds 10] [--batch 100] [--spark [--hot 200] [--stream-rate 2000]
        [--stream-updates 300] [--stream-duration 30]] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import write_result

DEFAULT_DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "id BIGINT, name STRING, version BIGINT"
POLL_SECONDS = 0.0005
TIMEOUT = 120.0


def _connect(dsn: str, schema: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, options=f"-c search_path={schema}")


def _providers(dsn: str, schema: str, min_interval: float, store: str) -> tuple[Any, Any, Any]:
    from cache import DefaultLookupCache
    from lookup import (
        FullCachingLookupProvider,
        PartialCachingLookupProvider,
        PostgresChanges,
        SqlLookupFunction,
    )
    from scan import SqlTableSource
    from triggers import PeriodicCacheReloadTrigger

    connect = functools.partial(_connect, dsn, schema)
    feed = PostgresChanges(connect, f"{schema}.dim", key_columns=["id"],
                           min_interval=min_interval)
    partial = PartialCachingLookupProvider.of(
        SqlLookupFunction(connect, "dim", "id", schema=SCHEMA),
        DefaultLookupCache.new_builder().expire_after_write(timedelta(hours=1)).build(),
        changes=feed)
    full = FullCachingLookupProvider.of(
        SqlTableSource(connect, "dim", schema=SCHEMA),
        PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"], changes=feed,
        snapshot_dir=store, snapshot_name="dim")
    return feed, partial, full


def _warm(handle: Any, rows: int) -> None:
    for start in range(1, rows + 1, 10_000):
        handle.lookup_batch([(k,) for k in range(start, min(start + 10_000, rows + 1))])


# --- reader processes


def _reader(args: dict[str, Any], inbox: Any, outbox: Any) -> None:
    """Staleness: look pending keys up until their new version shows, in both caches."""
    from lookup import open_lookup

    _, partial, full = _providers(args["dsn"], args["schema"], args["min_interval"],
                                  args["store"])
    with open_lookup(partial) as cached, open_lookup(full) as loaded:
        _warm(cached, args["rows"])
        loaded.lookup((1,))
        before = cached.metrics.as_dict()
        outbox.put("ready")
        pending: dict[str, dict[int, tuple[int, float]]] = {"partial": {}, "full": {}}
        stale: dict[str, list[float]] = {"partial": [], "full": []}
        stopping = False
        deadline = None
        while True:
            while not inbox.empty():
                message = inbox.get()
                if message == "stop":
                    stopping = True
                    deadline = time.monotonic() + TIMEOUT
                    continue
                key, version, committed = message
                for waiting in pending.values():
                    waiting[key] = (version, committed)
            for name, handle in (("partial", cached), ("full", loaded)):
                waiting = pending[name]
                if not waiting:
                    continue
                found = handle.lookup_batch([(key,) for key in waiting])
                now = time.time()
                for (key,), rows in found.items():
                    version, committed = waiting[key]
                    if rows and rows[0][2] >= version:
                        stale[name].append(now - committed)
                        del waiting[key]
            if stopping and not any(pending.values()):
                break
            if deadline is not None and time.monotonic() > deadline:
                break  # reported as unseen
            time.sleep(POLL_SECONDS)
        after_partial = cached.metrics.as_dict()
        after_full = loaded.metrics.as_dict()
    outbox.put({
        "stale": stale, "unseen": {name: len(keys) for name, keys in pending.items()},
        "partial_keys_loaded": after_partial["miss_count"] - before["miss_count"],
        "partial_loads": after_partial["load_count"] - before["load_count"],
        "partial_invalidated": after_partial["num_keys_invalidated"],
        "full_loads": after_full["load_count"],
        "full_change_reads": after_full["num_change_reads"],
        "full_notifications": after_full["num_notifications"],
    })


class _TimingSink:
    """Records when each changed key reached the listener (after the cache's sink)."""

    def __init__(self) -> None:
        self.arrived: list[tuple[int, float]] = []

    def changes(self, changes: Any) -> None:
        now = time.time()
        self.arrived.extend((key[0], now) for change in changes for key in change.keys)

    def connected(self, reconnected: bool) -> None:
        pass

    def disconnected(self) -> None:
        pass


def _lag_reader(args: dict[str, Any], inbox: Any, outbox: Any) -> None:
    from lookup import open_lookup
    from lookup.changes.listener import subscribe

    feed, partial, _ = _providers(args["dsn"], args["schema"], args["min_interval"],
                                  args["store"])
    with open_lookup(partial) as cached:
        _warm(cached, args["rows"])
        sink = _TimingSink()
        subscription = subscribe(feed, sink)
        try:
            outbox.put("ready")
            expected = inbox.get(timeout=TIMEOUT + args["lag_seconds"])
            deadline = time.monotonic() + TIMEOUT
            while len(sink.arrived) < expected and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            subscription.close()
        metrics = cached.metrics.as_dict()
    outbox.put({"arrived": sink.arrived, "invalidated": metrics["num_keys_invalidated"],
                "notifications": metrics["num_notifications"]})


# --- the writer and the table


@contextmanager
def _table(dsn: str, rows: int) -> Iterator[str]:
    import psycopg

    schema = f"bench_changes_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f'CREATE SCHEMA "{schema}"')
        db.execute(f'CREATE TABLE "{schema}".dim (id bigint PRIMARY KEY, name text, '
                   f"version bigint NOT NULL)")
        db.execute(f"""INSERT INTO "{schema}".dim
                       SELECT g, 'name ' || g, 0 FROM generate_series(1, %s) AS g""", (rows,))
        db.execute(f'ANALYZE "{schema}".dim')
    try:
        yield schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _start(target: Any, count: int, args: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
    spawn = multiprocessing.get_context("spawn")
    started = []
    for _ in range(count):
        inbox, outbox = spawn.Queue(), spawn.Queue()
        process = spawn.Process(target=target, args=(args, inbox, outbox), daemon=True)
        process.start()
        started.append((process, inbox, outbox))
    for _, _, outbox in started:
        assert outbox.get(timeout=TIMEOUT * 5) == "ready"
    return started


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(values)
    return {"count": len(ordered),
            "p50_ms": round(statistics.median(ordered) * 1000, 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1),
            "max_ms": round(ordered[-1] * 1000, 1)}


def staleness(args: argparse.Namespace, shared: dict[str, Any]) -> dict[str, Any]:
    import psycopg

    readers = _start(_reader, args.readers, shared)
    chooser = random.Random(31)
    step = args.duration / args.updates
    started = time.monotonic()
    try:
        with psycopg.connect(args.dsn, autocommit=True,
                             options=f"-c search_path={shared['schema']}") as writer:
            for version in range(1, args.updates + 1):
                wait = started + (version - 1) * step - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                key = chooser.randint(1, args.rows)
                writer.execute("UPDATE dim SET version = %s WHERE id = %s", (version, key))
                committed = time.time()
                for _, inbox, _ in readers:
                    inbox.put((key, version, committed))
        for _, inbox, _ in readers:
            inbox.put("stop")
        results = [outbox.get(timeout=TIMEOUT * 2) for _, _, outbox in readers]
    finally:
        for process, _, _ in readers:
            process.join(TIMEOUT)
            if process.is_alive():
                process.kill()
    return {
        "updates": args.updates, "duration_s": args.duration, "readers": args.readers,
        "partial": {
            **_percentiles([s for r in results for s in r["stale"]["partial"]]),
            "unseen": sum(r["unseen"]["partial"] for r in results),
            "keys_loaded_per_update_per_reader": round(
                statistics.mean(r["partial_keys_loaded"] for r in results) / args.updates, 3),
            "queries_per_update_per_reader": round(
                statistics.mean(r["partial_loads"] for r in results) / args.updates, 3),
            "keys_invalidated": [r["partial_invalidated"] for r in results],
        },
        "full": {
            **_percentiles([s for r in results for s in r["stale"]["full"]]),
            "unseen": sum(r["unseen"]["full"] for r in results),
            "host_loads": sum(r["full_loads"] for r in results),
            "loads_by_reader": [r["full_loads"] for r in results],
            # Keys read by key for the overlay: O(changed keys), 1 an update a reader
            # (a key changed twice while unread is read once).
            "keys_read_per_update_per_reader": round(
                statistics.mean(r["full_change_reads"] for r in results) / args.updates, 3),
        },
    }


def notification_lag(args: argparse.Namespace, shared: dict[str, Any]) -> dict[str, Any]:
    import psycopg

    readers = _start(_lag_reader, args.readers, shared)
    batches = int(args.rate * args.lag_seconds / args.batch)
    keys = list(range(1, args.rows + 1))
    random.Random(7).shuffle(keys)
    committed: dict[int, float] = {}
    period = args.batch / args.rate
    try:
        with psycopg.connect(args.dsn, autocommit=True,
                             options=f"-c search_path={shared['schema']}") as writer:
            started = time.monotonic()
            for number in range(batches):
                wait = started + number * period - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                batch = keys[number * args.batch % len(keys):][: args.batch]
                writer.execute("UPDATE dim SET version = version + 1 WHERE id = ANY(%s)",
                               (batch,))
                now = time.time()
                committed.update(dict.fromkeys(batch, now))
            elapsed = time.monotonic() - started
        for _, inbox, _ in readers:
            inbox.put(len(committed))
        results = [outbox.get(timeout=TIMEOUT * 2) for _, _, outbox in readers]
    finally:
        for process, _, _ in readers:
            process.join(TIMEOUT)
            if process.is_alive():
                process.kill()
    lags = [arrived - committed[key] for result in results
            for key, arrived in result["arrived"] if key in committed]
    return {"rate_asked": args.rate, "rate_reached": round(len(committed) / elapsed),
            "keys": len(committed), "batch": args.batch, "readers": len(readers),
            **_percentiles(lags),
            "keys_invalidated": [result["invalidated"] for result in results],
            "notifications": [result["notifications"] for result in results]}


def streaming(args: argparse.Namespace, shared: dict[str, Any]) -> dict[str, Any]:
    """A Structured Streaming lookup_join on local[2]: a rate stream of ``--hot`` keys,
    joined with both caches; the writer updates those keys; staleness = the micro-batch
    whose output (``foreachBatch``, on the driver) first shows the new version, minus
    the commit."""
    import threading

    import psycopg

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lookup import lookup_join, lookup_metrics

    spark = (SparkSession.builder.master("local[2]").appName("spark-lookup-change-feed")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    _, partial, full = _providers(args.dsn, shared["schema"], args.min_interval,
                                  shared["store"])
    # Per cache, the updates not yet seen in an output: key -> (version, commit time).
    pending: dict[str, dict[int, tuple[int, float]]] = {"partial": {}, "full": {}}
    stale: dict[str, list[float]] = {"partial": [], "full": []}
    first_fresh: dict[str, list[float]] = {"partial": [], "full": []}
    # Per cache, each key's latest update, seen or not: stale answers are counted after
    # its first fresh one too (another worker may still answer the older version).
    latest: dict[str, dict[int, tuple[int, float]]] = {"partial": {}, "full": {}}
    # Every update: (cache, key, version, commit) -> the latest lookup after the commit
    # that answered an older version (the commit itself when none did).
    served_stale: dict[tuple[str, int, int, float], float] = {}
    lock = threading.Lock()
    batches = [0]

    def seen(frame: Any, _batch: int) -> None:
        rows = frame.collect()
        now = time.time()
        batches[0] += 1
        with lock:
            for row in rows:
                at = row["looked_up_at"]
                for name, version in (("partial", row["version"]), ("full", row["f_version"])):
                    update = latest[name].get(row["id"])
                    if update is None or version is None:
                        continue
                    if version < update[0]:
                        if at > update[1]:
                            key = (name, row["id"], *update)
                            served_stale[key] = max(served_stale[key], at)
                    elif pending[name].pop(row["id"], None) is not None:
                        stale[name].append(now - update[1])
                        first_fresh[name].append(max(at - update[1], 0.0))

    keys = (spark.readStream.format("rate").option("rowsPerSecond", args.stream_rate).load()
            .select(((F.col("value") % args.hot) + 1).alias("id")))
    joined = lookup_join(keys, partial, on="id", columns=["version"], metrics=True)
    joined = lookup_join(joined, full, on="id", columns=["version"], prefix="f_",
                         metrics=True)

    def stamp(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        for batch in batches:
            at = pa.array(np.full(batch.num_rows, time.time()))
            yield pa.RecordBatch.from_arrays([*batch.columns, at],
                                             names=[*batch.schema.names, "looked_up_at"])

    from pyspark.sql import types as T

    stamped = T.StructType([*joined.schema.fields, T.StructField("looked_up_at", T.DoubleType())])
    joined = joined.mapInArrow(stamp, stamped)
    query = (joined.writeStream.foreachBatch(seen).trigger(processingTime="100 milliseconds")
             .start())
    try:
        deadline = time.monotonic() + TIMEOUT * 5
        while batches[0] < 3:  # both caches loaded, the workers' feeds listening
            assert time.monotonic() < deadline, "the stream did not start"
            time.sleep(0.1)
        chooser = random.Random(5)
        step = args.stream_duration / args.stream_updates
        started = time.monotonic()
        with psycopg.connect(args.dsn, autocommit=True,
                             options=f"-c search_path={shared['schema']}") as writer:
            for number in range(args.stream_updates):
                wait = started + number * step - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                key = chooser.randint(1, args.hot)
                version = 1_000_000 + number
                writer.execute("UPDATE dim SET version = %s WHERE id = %s", (version, key))
                committed = time.time()
                with lock:
                    for name, waiting in pending.items():
                        # An update not yet seen when the next of its key commits has no
                        # staleness of its own: only the later one is measured.
                        superseded = waiting.get(key)
                        if superseded is not None:
                            served_stale.pop((name, key, *superseded), None)
                        waiting[key] = latest[name][key] = (version, committed)
                        served_stale[(name, key, version, committed)] = committed
        deadline = time.monotonic() + TIMEOUT
        while any(pending.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        progress = query.recentProgress
        time.sleep(1.0)  # the latest micro-batches' reports
        sources = {name: lookup_metrics(provider).as_dict()
                   for name, provider in (("partial", partial), ("full", full))}
    finally:
        query.stop()
        spark.stop()
    durations = [p["durationMs"].get("triggerExecution", 0) for p in progress[-50:]]
    served = {name: [at - commit for (cache, _, _, commit), at in served_stale.items()
                     if cache == name] for name in ("partial", "full")}
    return {"updates": args.stream_updates, "duration_s": args.stream_duration,
            "hot_keys": args.hot, "rows_per_s": args.stream_rate,
            "micro_batch_ms_median": statistics.median(durations) if durations else None,
            "stale_served": {name: _percentiles(values) for name, values in served.items()},
            "first_fresh": {name: _percentiles(values) for name, values in first_fresh.items()},
            "output": {name: _percentiles(values) for name, values in stale.items()},
            "partial": {**_percentiles(stale["partial"]), "unseen": len(pending["partial"]),
                        "keys_loaded": sources["partial"]["miss_count"],
                        "queries": sources["partial"]["load_count"]},
            "full": {**_percentiles(stale["full"]), "unseen": len(pending["full"]),
                     "table_loads": sources["full"]["load_count"],
                     "keys_read_by_key": sources["full"]["num_change_reads"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--min-interval", type=float, default=1.0)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--lag-seconds", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--spark", action="store_true",
                        help="also a Structured Streaming lookup_join on local[2]")
    parser.add_argument("--hot", type=int, default=200)
    parser.add_argument("--stream-rate", type=int, default=2000)
    parser.add_argument("--stream-updates", type=int, default=300)
    parser.add_argument("--stream-duration", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true",
                        help="smoke sizes: 20k rows, 100 updates over 5 s, 2 s of lag")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.updates, args.duration, args.lag_seconds = 20_000, 100, 5.0, 2.0
        args.stream_updates, args.stream_duration = 30, 5.0
    with _table(args.dsn, args.rows) as schema, tempfile.TemporaryDirectory() as store:
        shared = {"dsn": args.dsn, "schema": schema, "rows": args.rows, "store": store,
                  "min_interval": args.min_interval, "lag_seconds": args.lag_seconds}
        from lookup import PostgresChanges

        PostgresChanges(functools.partial(_connect, args.dsn, schema), f"{schema}.dim",
                        key_columns=["id"]).install()
        result: dict[str, Any] = {"staleness": staleness(args, shared),
                                  "notification_lag": notification_lag(args, shared)}
        if args.spark:
            result["streaming"] = streaming(args, shared)
        result.update(args=vars(args), load_average=os.getloadavg())
    path = write_result("change_feed", result)
    import json

    print(json.dumps({k: v for k, v in result.items() if k != "args"}, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
