"""Point-in-time lookups (issue 45) at default settings, on local[2], against the plain
joins they must keep up with.

One cached DataFrame (``--rows`` rows: ``id``; ``key`` uniform over ``--keys`` keys;
``as_of``, a TIMESTAMP uniform over the span of the dimension's versions) goes through
these cases, run interleaved (each round runs every case once), ``--repeats`` rounds
after one untimed warm-up round (caches filled, full caches loaded); the figure of a case
is the median of its rounds:

    a. ``mapInPandas`` pass-through: the baseline, for reference
    b. ``lookup_join``, full cache, plain: a Parquet file (``FileSource``) of ``--keys``
       keys with one version each
    c. ``lookup_join(..., as_of="as_of")``, full cache: a Parquet file of ``--keys`` keys
       with ``--versions`` versions each (``Validity("valid_from", "valid_to")``)
    d. ``lookup_join``, partial cache (SQLite ``SqlLookupFunction``), warm: 100% hits, the
       one-version table
    e. ``lookup_join(..., as_of="as_of")``, partial cache, warm: the versioned table
       (``maximum_size`` room for every version of every key)

Both dimensions have the same columns (``key``, ``name`` STRING, ``score`` DOUBLE,
``valid_from`` and ``valid_to`` TIMESTAMP) and every join adds the same two (``name``,
``score``). A key's versions follow each other a day apart (each starting at its own
second of the day, so the starts are many distinct values), the last one open-ended;
the one-version table's versions are all open-ended. The targets of issue 45: (c)/(b)
and (e)/(d) at least 0.8.

Then, in this process (no Spark): a Delta table of ``--delta-keys`` keys with its change
data feed and ``--delta-history`` commits each updating a tenth of the keys, behind
``FullCachingLookupProvider.of(DeltaSource(path, history=True, key_columns=["id"]),
...)``: the initial build (the cache's first load: the feed from version 0), then
``--delta-repeats`` times a commit updating 100 rows and the cache's reload, with the
feed's commit ranges read (``DeltaSource.history_reads``; a reload after commit ``v``
must read ``(v, v)``), and a fresh source's build of the whole history at the end, for
reference.

Each Spark run writes to the ``noop`` sink, which evaluates every row and collects
nothing.

    .venv/bin/python benchmarks/point_in_time.py [--rows 2000000] [--repeats 5]
    .venv/bin/python benchmarks/point_in_time.py --quick   # CI smoke run, < 60 s

``--quick`` (20,000 rows, 1,000 keys, 1 round and no warm-up, a C1-only JVM, a Delta
table of 2,000 keys) only checks that every case runs; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import interleaved, local_spark, median, write_result

BASELINE = "a. mapInPandas pass-through"
FULL_PLAIN = "b. lookup_join, full cache, plain"
FULL_AS_OF = "c. lookup_join, full cache, as_of"
PARTIAL_PLAIN = "d. lookup_join, partial cache (warm), plain"
PARTIAL_AS_OF = "e. lookup_join, partial cache (warm), as_of"

T0_MICROS = 1_704_067_200_000_000  # 2024-01-01 00:00:00 UTC
DAY_MICROS = 86_400_000_000
SCHEMA = "key BIGINT, name STRING, score DOUBLE, valid_from TIMESTAMP, valid_to TIMESTAMP"


def _pass_through(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def _versions() -> dict[str, str]:
    import deltalake
    import pandas
    import pyarrow
    import pyspark

    return {"pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__,
            "pandas": pandas.__version__, "deltalake": deltalake.__version__}


def _start_spark(quick: bool) -> Any:
    return local_spark("point-in-time", quick, **{"spark.sql.session.timeZone": "UTC"})


def dimension(keys: int, versions: int) -> Any:
    """``versions`` versions of each of ``keys`` keys, sorted by key then valid_from:
    version ``v`` of key ``k`` from day ``v`` (at a second of that day of its own) to the
    next version's start; the last one open-ended."""
    import numpy as np
    import pyarrow as pa

    key = np.repeat(np.arange(keys, dtype=np.int64), versions)
    version = np.tile(np.arange(versions, dtype=np.int64), keys)
    second = (key * 7919 + version * 104_729) % 86_400
    start = T0_MICROS + version * DAY_MICROS + second * 1_000_000
    end = np.empty_like(start)
    end[:-1] = start[1:]
    last = version == versions - 1
    stamp = pa.timestamp("us", "UTC")
    names = pa.array(np.char.add(np.char.add("name-", key.astype(str)),
                                 np.char.add("-", version.astype(str))).astype(object),
                     pa.string())
    return pa.table({
        "key": pa.array(key),
        "name": names,
        "score": pa.array(key * 0.5 + version),
        "valid_from": pa.array(start, stamp),
        "valid_to": pa.array(end, stamp, mask=last),
    })


def _sqlite(path: Path, table: Any, unique: bool) -> None:
    """``table`` into a SQLite table ``dim``, times as UTC text (what SqlLookupFunction
    reads as TIMESTAMP)."""
    import pyarrow.compute as pc

    def text(column: Any) -> Any:
        return pc.strftime(column, format="%Y-%m-%d %H:%M:%S", locale="C").to_pylist()

    rows = zip(table.column("key").to_pylist(), table.column("name").to_pylist(),
               table.column("score").to_pylist(), text(table.column("valid_from")),
               text(table.column("valid_to")), strict=True)
    with sqlite3.connect(path) as db:
        key = "key INTEGER PRIMARY KEY" if unique else "key INTEGER NOT NULL"
        db.execute(f"CREATE TABLE dim ({key}, name TEXT, score REAL, valid_from TIMESTAMP, "
                   "valid_to TIMESTAMP)")
        db.executemany("INSERT INTO dim VALUES (?, ?, ?, ?, ?)", rows)
        if not unique:
            db.execute("CREATE INDEX dim_key ON dim (key)")


def _cases(spark: Any, df: Any, rows_count: int, keys: int, versions: int,
           workdir: Path) -> dict[str, Callable[[], int]]:
    import pyarrow.parquet as pq

    from cache import DefaultLookupCache
    from lookup import (
        FullCachingLookupProvider,
        PartialCachingLookupProvider,
        SqlLookupFunction,
        Validity,
        lookup_join,
    )
    from scan import FileSource
    from triggers import PeriodicCacheReloadTrigger

    validity = Validity("valid_from", "valid_to")
    history = dimension(keys, versions)
    plain = dimension(keys, 1)
    paths = {}
    for name, table, unique in (("versions", history, False), ("plain", plain, True)):
        pq.write_table(table, workdir / f"{name}.parquet")
        _sqlite(workdir / f"{name}.db", table, unique)
        paths[name] = workdir / f"{name}.db"

    def full(name: str, **kw: Any) -> Any:
        return FullCachingLookupProvider.of(
            FileSource(str(workdir / f"{name}.parquet")),
            PeriodicCacheReloadTrigger(timedelta(hours=1)), ["key"], **kw)

    def partial(name: str, size: int, **kw: Any) -> Any:
        return PartialCachingLookupProvider.of(
            SqlLookupFunction(functools.partial(sqlite3.connect, str(paths[name])), "dim",
                              key_columns=["key"], schema=SCHEMA),
            # Room for every version of every key: after the warm-up round, all hits.
            DefaultLookupCache.new_builder().maximum_size(2 * size).build(), **kw)

    providers = {
        FULL_PLAIN: (full("plain"), None),
        FULL_AS_OF: (full("versions", validity=validity), "as_of"),
        PARTIAL_PLAIN: (partial("plain", keys), None),
        PARTIAL_AS_OF: (partial("versions", keys * versions, validity=validity), "as_of"),
    }

    def run(frame: Any) -> Callable[[], int]:
        def case() -> int:
            # Built per run: a classic session observes a join's metrics on its first
            # action only (as join_throughput.py does).
            (frame() if callable(frame) else frame).write.format("noop").mode(
                "overwrite").save()
            return rows_count
        return case

    cases = {BASELINE: run(df.mapInPandas(_pass_through, df.schema))}
    for name, (provider, as_of) in providers.items():
        cases[name] = run(functools.partial(
            lookup_join, df, provider, on="key", columns=["name", "score"], as_of=as_of))
    return cases


def matched(spark: Any, df: Any, workdir: Path, keys: int, versions: int) -> dict[str, Any]:
    """Rows of a sample of the stream matched by the versioned full-cache join, and
    whether each got the version its as_of falls in (computed here, not by the join)."""
    from lookup import FullCachingLookupProvider, Validity, lookup_join
    from scan import FileSource
    from triggers import PeriodicCacheReloadTrigger

    provider = FullCachingLookupProvider.of(
        FileSource(str(workdir / "versions.parquet")),
        PeriodicCacheReloadTrigger(timedelta(hours=1)), ["key"],
        validity=Validity("valid_from", "valid_to"))
    sample = df.limit(2_000)
    got = lookup_join(sample, provider, on="key", columns=["name", "valid_from", "valid_to"],
                      as_of="as_of").collect()
    right = sum(1 for r in got if r["name"] is not None
                and r["valid_from"] <= r["as_of"]
                and (r["valid_to"] is None or r["as_of"] < r["valid_to"]))
    unmatched = sum(1 for r in got if r["name"] is None)
    return {"rows": len(got), "matched_in_interval": right, "unmatched": unmatched}


# --- Delta history ------------------------------------------------------------------------


def delta_history(workdir: Path, keys: int, history: int, repeats: int) -> dict[str, Any]:
    """The initial build and the reloads after one commit of a full cache over a Delta
    table's history (``DeltaSource(history=True)``), with the feed's ranges read."""
    import numpy as np
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from lookup import FullCachingLookupProvider, open_lookup
    from lookup.runtime.full import FullCachingRuntime
    from scan import DeltaSource, read_arrow
    from triggers import PeriodicCacheReloadTrigger

    path = str(workdir / "delta")
    ids = np.arange(keys, dtype=np.int64)
    write_deltalake(path, pa.table({"id": ids, "name": [f"name-{i}" for i in ids.tolist()],
                                    "score": ids * 0.5}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    for step in range(history):
        time.sleep(0.003)  # commit timestamps are milliseconds: one each
        DeltaTable(path).update(updates={"score": f"score + {step + 1}"},
                                predicate=f"id % 10 = {step % 10}")
    built_at = DeltaTable(path).version()
    source = DeltaSource(path, history=True, key_columns=["id"])
    provider = FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
        validity=source.history_validity)
    reloads: list[dict[str, Any]] = []
    changed = 100
    with open_lookup(provider) as handle:
        started = time.perf_counter()
        handle.lookup((0,))  # the first lookup waits for the initial load
        initial = time.perf_counter() - started
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        history_source = _source_of(runtime)
        initial_reads = history_source.history_reads
        rows_built = runtime.cache.current().table.num_rows  # type: ignore[union-attr]
        for round_ in range(repeats):
            first = (round_ * changed) % max(keys - changed, 1)
            time.sleep(0.003)
            DeltaTable(path).update(updates={"name": f"concat(name, '-r{round_}')"},
                                    predicate=f"id >= {first} AND id < {first + changed}")
            commit = DeltaTable(path).version()
            started = time.perf_counter()
            runtime.trigger_reload().result(timeout=600)
            seconds = time.perf_counter() - started
            reads = history_source.history_reads
            reloads.append({"commit": commit, "read": list(reads[-1]), "seconds": seconds,
                            "only_that_commit": tuple(reads[-1]) == (commit, commit),
                            "versions": runtime.cache.current().table.num_rows})  # type: ignore[union-attr]
        last_versions = handle.lookup((first,))
    fresh = DeltaSource(path, history=True, key_columns=["id"])
    started = time.perf_counter()
    scratch_rows = read_arrow(fresh).num_rows
    scratch = time.perf_counter() - started
    return {
        "keys": keys,
        "history_commits": history,
        "initial_version": built_at,
        "initial_build_seconds": initial,
        "initial_reads": [list(r) for r in initial_reads],
        "initial_versions": rows_built,
        "changed_rows_per_commit": changed,
        "reloads": reloads,
        "median_reload_seconds": median([r["seconds"] for r in reloads]),
        "every_reload_read_only_its_commit": all(r["only_that_commit"] for r in reloads),
        "versions_of_a_changed_key": len(last_versions),
        "fresh_source_build_seconds": scratch,
        "fresh_source_reads": [list(r) for r in fresh.history_reads],
        "fresh_source_versions": scratch_rows,
    }


def _source_of(runtime: Any) -> Any:
    """The DeltaSource a full cache's runtime loads from (its own copy: the provider's
    was pickled to it)."""
    from scan import DeltaSource

    seen: set[int] = set()
    todo = [(runtime, 0)]
    while todo:
        obj, depth = todo.pop()
        if isinstance(obj, DeltaSource):
            return obj
        if id(obj) in seen or depth > 3 or not hasattr(obj, "__dict__"):
            continue
        seen.add(id(obj))
        todo += [(value, depth + 1) for value in vars(obj).values()]
    raise LookupError("no DeltaSource in the runtime")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--delta-keys", type=int, default=100_000)
    parser.add_argument("--delta-history", type=int, default=10)
    parser.add_argument("--delta-repeats", type=int, default=5)
    parser.add_argument("--no-delta", action="store_true", help="skip the Delta part")
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: 20,000 rows, 1,000 keys, 1 round, no warm-up, "
                             "Delta 2,000 keys")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.keys, args.repeats = 20_000, 1_000, 1
        args.delta_keys, args.delta_history, args.delta_repeats = 2_000, 3, 2

    started = time.perf_counter()
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        delta = None if args.no_delta else delta_history(
            workdir, args.delta_keys, args.delta_history, args.delta_repeats)
        if delta is not None:
            print(f"Delta history done after {time.perf_counter() - started:.0f} s: "
                  f"initial build {delta['initial_build_seconds']:.2f} s "
                  f"(read {delta['initial_reads']}, {delta['initial_versions']:,} versions); "
                  f"reload after one commit of 100 rows, median "
                  f"{delta['median_reload_seconds']:.3f} s, read "
                  f"{[r['read'] for r in delta['reloads']]}; a fresh source's build "
                  f"{delta['fresh_source_build_seconds']:.2f} s")
        spark = _start_spark(args.quick)
        print(f"Spark started after {time.perf_counter() - started:.0f} s")
        try:
            from pyspark.sql import functions as F

            span = args.versions * DAY_MICROS
            df = (spark.range(0, args.rows, numPartitions=2)
                  .withColumn("key", F.floor(F.rand(seed=7) * args.keys).cast("bigint"))
                  .withColumn("as_of", F.timestamp_micros(
                      (F.lit(T0_MICROS) + F.floor(F.rand(seed=11) * span)).cast("bigint")))
                  .cache())
            df.count()
            cases = _cases(spark, df, args.rows, args.keys, args.versions, workdir)
            print(f"Spark and data ready after {time.perf_counter() - started:.0f} s")
            if not args.quick:  # a smoke run's figures mean nothing: no warm-up there
                interleaved(cases, 1)  # warm-up: caches filled, full caches loaded
                print(f"warm-up round done after {time.perf_counter() - started:.0f} s")
            rates = interleaved(cases, args.repeats)
            check = matched(spark, df, workdir, args.keys, args.versions)
        finally:
            spark.stop()

    medians = {name: median(values) for name, values in rates.items()}
    base = medians[BASELINE]

    def per_round(top: str, bottom: str) -> float:
        return median([t / b for t, b in zip(rates[top], rates[bottom], strict=True)])

    ratios = {
        "full_as_of_vs_full_plain": medians[FULL_AS_OF] / medians[FULL_PLAIN],
        "full_as_of_vs_full_plain_per_round": per_round(FULL_AS_OF, FULL_PLAIN),
        "partial_as_of_vs_partial_plain": medians[PARTIAL_AS_OF] / medians[PARTIAL_PLAIN],
        "partial_as_of_vs_partial_plain_per_round": per_round(PARTIAL_AS_OF, PARTIAL_PLAIN),
    }
    print(f"{args.rows:,} rows, {args.keys:,} keys x {args.versions} versions, local[2], "
          f"median of {args.repeats} interleaved rounds")
    print(f"{'case':48} {'rows/s (median)':>16} {'vs a':>6} {'vs a, per round':>16}")
    for name, rate in medians.items():
        print(f"{name:48} {rate:16,.0f} {rate / base:6.2f} {per_round(name, BASELINE):16.2f}")
    for name, value in ratios.items():
        print(f"{name:48} {value:6.2f}")
    print(f"a sample of the as_of join: {check}")
    path = write_result(
        "point_in_time_quick" if args.quick else "point_in_time",
        {
            "args": vars(args),
            "command": " ".join([".venv/bin/python", "benchmarks/point_in_time.py",
                                 *sys.argv[1:]]),
            "rows_per_s": rates,
            "median_rows_per_s": medians,
            "ratio_to_mapInPandas": {name: rate / base for name, rate in medians.items()},
            "ratios": ratios,
            "sample_check": check,
            "delta_history": delta,
            "load_average_start_end": [load_at_start, os.getloadavg()],
            "versions": _versions(),
            "seconds": time.perf_counter() - started,
        },
    )
    print(f"load average {load_at_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"wrote {path} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
