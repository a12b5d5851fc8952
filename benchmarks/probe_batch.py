"""One batch probe, single thread: the partial cache against the full cache.

A dimension of ``--keys`` rows (``key BIGINT, name STRING, score DOUBLE``) is held by
a full cache (a ``FullCachingLookupProvider`` over a ``CollectionSource``) and by a
warm partial cache (a ``PartialCachingLookupProvider`` over a SQLite table, every key
loaded once before timing, so every probe is a hit). A batch of ``--batch`` stream keys
drawn uniformly from the dimension (about 95% distinct at 10k of 100k) is factorized as
a join does, and its distinct keys go to ``LookupRuntime.probe`` of each runtime: the
time of that call is what is compared (median of ``--repeats`` calls, interleaved).
Also measured: the same probe with a string key (``name``) for both.

    .venv/bin/python benchmarks/probe_batch.py [--keys 100000] [--batch 10000] [--repeats 51]

Writes ``benchmarks/out/probe_batch.json``.
"""

from __future__ import annotations

import argparse
import functools
import sqlite3
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import median, write_result


def _providers(keys: int, key_column: str, database: Path) -> tuple[Any, Any]:
    from cache import DefaultLookupCache
    from lookup import FullCachingLookupProvider, PartialCachingLookupProvider, SqlLookupFunction
    from scan import CollectionSource
    from triggers import PeriodicCacheReloadTrigger

    schema = "key BIGINT, name STRING, score DOUBLE"
    rows = [(k, f"name-{k}", k * 0.5) for k in range(keys)]
    full = FullCachingLookupProvider.of(
        CollectionSource(rows, num_splits=1, schema=schema),
        PeriodicCacheReloadTrigger(timedelta(hours=1)), [key_column],
    )
    if not database.exists():
        with sqlite3.connect(database) as db:
            db.execute("CREATE TABLE dim (key INTEGER PRIMARY KEY, name TEXT UNIQUE, score REAL)")
            db.executemany("INSERT INTO dim VALUES (?, ?, ?)", rows)
        db.close()
    partial = PartialCachingLookupProvider.of(
        SqlLookupFunction(functools.partial(sqlite3.connect, str(database)), "dim",
                          key_columns=[key_column], schema=schema),
        DefaultLookupCache.new_builder().maximum_size(2 * keys)
        .expire_after_write(timedelta(hours=1)).build(),
    )
    return full, partial


def measure(keys: int, batch: int, repeats: int, key_column: str, workdir: Path
            ) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa

    from lookup import open_lookup
    from lookup.spark.assemble import factorize

    full, partial = _providers(keys, key_column, workdir / "dim.db")
    rng = np.random.default_rng(7)
    with open_lookup(full) as full_handle, open_lookup(partial) as partial_handle:
        full_runtime, partial_runtime = full_handle.runtime, partial_handle.runtime
        everything = pa.array(np.arange(keys, dtype=np.int64))
        if key_column == "name":
            everything = pa.array([f"name-{k}" for k in range(keys)])
        for start in range(0, keys, 50_000):  # warm the partial cache with every key
            partial_runtime.probe([everything.slice(start, 50_000)])
        full_runtime.probe([everything.slice(0, 10)])
        batches = []
        for _ in range(repeats):
            picks = rng.integers(0, keys, batch)
            column = everything.take(pa.array(picks))
            _, uniques = factorize([column])
            batches.append(uniques)
        times: dict[str, list[float]] = {"full": [], "partial": []}
        for uniques in batches:
            for name, runtime in (("full", full_runtime), ("partial", partial_runtime)):
                started = time.perf_counter()
                probe = runtime.probe(uniques)
                times[name].append(time.perf_counter() - started)
                assert int((probe.groups >= 0).sum()) == len(uniques[0]), name
        distinct = float(np.mean([len(u[0]) for u in batches]))
    full_ms = median(times["full"]) * 1e3
    partial_ms = median(times["partial"]) * 1e3
    return {"key": key_column, "keys": keys, "batch": batch, "distinct_per_batch": distinct,
            "full_ms": full_ms, "partial_ms": partial_ms, "partial_over_full": partial_ms / full_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=51)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for key_column in ("key", "name"):
            result = measure(args.keys, args.batch, args.repeats, key_column, Path(tmp))
            results.append(result)
            print(f"{key_column:>5} key: {result['distinct_per_batch']:.0f} distinct keys a batch; "
                  f"full {result['full_ms']:.2f} ms, partial {result['partial_ms']:.2f} ms: "
                  f"partial/full {result['partial_over_full']:.2f}x", flush=True)
    path = write_result("probe_batch", {
        "command": " ".join([".venv/bin/python", "benchmarks/probe_batch.py", *sys.argv[1:]]),
        "results": results,
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
