"""Soak: a partial cache under a key space ten times its size, for minutes; memory stays bounded.

One process, the lookup runtime as a join drives it: batches of ``--batch`` stream keys
drawn from ``--keys`` distinct keys (10x ``--cache-size``, skewed so that some keys come
back: a Zipf-like draw) go through ``LookupRuntime.probe``; misses are loaded from a
SQLite table of ``--keys`` rows (``key BIGINT, name STRING, score DOUBLE``) and put in
the cache (``maximum_size`` ``--cache-size``, expire-after-write 10 min). Every
``--every`` seconds it records the process's resident set (RSS), the cache's keys and
``num_cached_bytes``, and the hit rate; at the end it reports peak RSS, the RSS after
the first minute and at the end, and checks that the cache never held more than its
bound after a batch.

    .venv/bin/python benchmarks/cache_soak.py [--seconds 600] [--keys 1000000]
        [--cache-size 100000] [--batch 10000]

Writes ``benchmarks/out/cache_soak.json``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import write_result

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--cache-size", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--every", type=float, default=10)
    args = parser.parse_args()

    import numpy as np
    import pyarrow as pa

    from cache import DefaultLookupCache
    from lookup import PartialCachingLookupProvider, SqlLookupFunction, open_lookup
    from lookup.spark.assemble import factorize

    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "dim.db"
        with sqlite3.connect(database) as db:
            db.execute("CREATE TABLE dim (key INTEGER PRIMARY KEY, name TEXT, score REAL)")
            db.executemany("INSERT INTO dim VALUES (?, ?, ?)",
                           ((k, f"name-{k}", k * 0.5) for k in range(args.keys)))
        db.close()
        provider = PartialCachingLookupProvider.of(
            SqlLookupFunction(functools.partial(sqlite3.connect, str(database)), "dim",
                              key_columns=["key"], schema="key BIGINT, name STRING, score DOUBLE"),
            DefaultLookupCache.new_builder().maximum_size(args.cache_size)
            .expire_after_write(timedelta(minutes=10)).build(),
        )
        rng = np.random.default_rng(11)
        samples: list[dict[str, Any]] = []
        over_bound = 0
        batches = 0
        started = time.perf_counter()
        next_sample = started
        with open_lookup(provider) as handle:
            runtime, metrics = handle.runtime, handle.metrics
            cache = provider.cache
            while True:
                now = time.perf_counter()
                if now >= next_sample:
                    snap = metrics.as_dict()
                    asked = snap["hit_count"] + snap["miss_count"]
                    samples.append({
                        "seconds": round(now - started, 1), "rss_bytes": rss(),
                        "cached_keys": snap["num_cached_records"],
                        "cached_bytes": snap["num_cached_bytes"],
                        "hit_rate": snap["hit_count"] / asked if asked else None,
                        "batches": batches,
                    })
                    last = samples[-1]
                    print(f"{last['seconds']:>7.1f} s  RSS {last['rss_bytes'] / 2**20:7.1f} MiB  "
                          f"keys {last['cached_keys']:>7,}  bytes "
                          f"{last['cached_bytes'] / 2**20:6.1f} MiB  hit rate "
                          f"{(last['hit_rate'] or 0):.2f}", flush=True)
                    next_sample += args.every
                    if now - started >= args.seconds:
                        break
                # A Zipf-like draw: low ranks come back often, the tail rarely.
                ranks = np.minimum(rng.zipf(1.1, args.batch), args.keys) - 1
                keys = pa.array(((ranks * 2654435761) % args.keys).astype(np.int64))
                _, uniques = factorize([keys])
                runtime.probe(uniques)
                batches += 1
                if cache.size() > args.cache_size:
                    over_bound += 1
    peak = max(s["rss_bytes"] for s in samples)
    after_minute = next((s["rss_bytes"] for s in samples if s["seconds"] >= 60),
                        samples[-1]["rss_bytes"])
    result = {
        "command": " ".join([".venv/bin/python", "benchmarks/cache_soak.py", *sys.argv[1:]]),
        "args": vars(args), "batches": batches, "batches_over_bound": over_bound,
        "peak_rss_bytes": peak, "rss_after_first_minute_bytes": after_minute,
        "final_rss_bytes": samples[-1]["rss_bytes"], "samples": samples,
    }
    print(f"{batches} batches; peak RSS {peak / 2**20:.1f} MiB, after 1 min "
          f"{after_minute / 2**20:.1f} MiB, at the end {samples[-1]['rss_bytes'] / 2**20:.1f} MiB; "
          f"batches leaving more than {args.cache_size:,} keys: {over_bound}")
    print(f"wrote {write_result('cache_soak', result)}")


if __name__ == "__main__":
    main()
