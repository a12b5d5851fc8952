"""What the host tier costs per key, and how fast it answers: no Spark, no servers.

A `HostTier` in a temporary directory over a table ``(id BIGINT, name STRING)`` (names
like ``n12345``) takes ``--keys`` keys in random order, ``--batch`` keys a put (the
shape of a lookup join's loads); then:

- bytes per key: ``HostTier.nbytes()`` (index and rows) over the keys;
- a get of ``--batch`` random keys among them: median and p95 of ``--gets`` gets (ms);
- a put of ``--batch`` keys: the fill's time over its puts (ms; compactions and merges
  included, as a load pays them).

With ``--changes``, the tier tracks a change feed's changes (a provider with
``changes=``), and the same figures come with what a feed's notes cost: `HostTier.changed`
of 1, 10, 100 and 1,000 random keys (median of 50 each: what a worker's listener
spends on a notification), the puts then checked against those notes.

Times are elapsed, then (in parentheses) on the process's CPU: on a busy machine the
latter compare runs better.

    .venv/bin/python benchmarks/host_tier_bytes.py [--keys 1000000] [--batch 1000]
        [--gets 200] [--changes]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa

from cache.host.tier import HostTier

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _rows(keys: np.ndarray) -> pa.Table:
    return pa.table({"id": pa.array(keys, pa.int64()),
                     "name": pa.array([f"n{k}" for k in keys.tolist()], pa.string())})


def fill(tier: HostTier, keys: np.ndarray, batch: int,
         rows_of: Callable[[np.ndarray], pa.Table] = _rows) -> tuple[float, float]:
    """Put ``keys`` ``batch`` at a time (their rows from ``rows_of``); seconds spent in
    the puts (rows built before), elapsed and on this process's CPU."""
    spent = cpu = 0.0
    for start in range(0, len(keys), batch):
        part = keys[start: start + batch]
        rows = rows_of(part)
        began, began_cpu = time.perf_counter(), time.process_time()
        tier.put([pa.array(part)], np.arange(len(part)), rows)
        spent += time.perf_counter() - began
        cpu += time.process_time() - began_cpu
    return spent, cpu


def timed_gets(tier: HostTier, keys: np.ndarray, batch: int, times: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """Milliseconds of each of ``times`` gets of ``batch`` random ``keys`` (all held),
    elapsed and on this process's CPU."""
    rng = np.random.default_rng(2)
    spent, cpu = [], []
    for _ in range(times):
        asked = pa.array(rng.choice(keys, batch, replace=False))
        began, began_cpu = time.perf_counter(), time.process_time()
        answer = tier.get([asked])
        spent.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
        assert answer.hit.all()
    return np.asarray(spent) * 1000, np.asarray(cpu) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--gets", type=int, default=200)
    parser.add_argument("--changes", action="store_true",
                        help="a tier tracking changes, and what noting them costs")
    args = parser.parse_args()
    keys = np.random.default_rng(1).permutation(args.keys).astype(np.int64)
    notes: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as directory:
        tier = HostTier(Path(directory) / "tier", SCHEMA, ["id"], maximum_size=None,
                        write_ttl=None, missing_ttl=None, cache_missing_key=True,
                        tracks_changes=args.changes)
        tier.open()
        try:
            if args.changes:
                tier.flush(tier.now_ms() - 1)  # as a feed's first connection does
            put_seconds, put_cpu = fill(tier, keys, args.batch)
            nbytes = tier.nbytes()
            gets, gets_cpu = timed_gets(tier, keys, args.batch, args.gets)
            if args.changes:
                notes = _noting(tier, keys)
        finally:
            tier.close()
    puts = -(-args.keys // args.batch)
    print(f"keys {args.keys:,} in puts of {args.batch:,}")
    print(f"bytes per key      {nbytes / args.keys:.1f}  ({nbytes:,} bytes)")
    print(f"get of {args.batch:,} keys    median {np.median(gets):.2f} ms, "
          f"p95 {np.percentile(gets, 95):.2f} ms  (CPU: median {np.median(gets_cpu):.2f}, "
          f"p95 {np.percentile(gets_cpu, 95):.2f})")
    print(f"put of {args.batch:,} keys    {put_seconds / puts * 1000:.2f} ms  "
          f"(CPU: {put_cpu / puts * 1000:.2f})")
    for count, seconds in notes.items():
        print(f"note {count:,} changed keys  median {seconds * 1000:.2f} ms")


def _noting(tier: HostTier, keys: np.ndarray) -> dict[int, float]:
    """Median seconds of `HostTier.changed` of 1, 10, 100 and 1,000 random keys held."""
    rng = np.random.default_rng(3)
    medians = {}
    for count in (1, 10, 100, 1_000):
        spent = []
        for _ in range(50):
            changed = pa.array(rng.choice(keys, count, replace=False))
            began = time.perf_counter()
            tier.changed([changed], tier.now_ms())
            spent.append(time.perf_counter() - began)
        medians[count] = float(np.median(spent))
    return medians


if __name__ == "__main__":
    main()
