"""Bytes per cached row: DefaultLookupCache's estimate against measured memory, and Arrow.

For each N of ``--rows``, N dimension rows shaped like the other benchmarks' table
(``id`` int, ``name`` str ``"customer-<id>"``, ``category`` int 0..96, ``score`` float,
``updated_at`` UTC datetime) are held in these ways, measured in child processes (one
for all the traced measurements of an N, which count live allocations only, and a fresh
one for each RSS measurement, so none inherits another's freed memory); every
measurement follows an untraced one of 200 rows, so that first-use allocations of the
libraries are not counted as the rows':

- ``DefaultLookupCache`` bounded by size only (an LRU store), and bounded by size with
  expire-after-write (a TTL store), filled with ``put_all`` in chunks of 1,000 the way
  the lookup runtime fills it: key ``(id,)`` (its int a distinct object from the row's,
  as when keys come from a Spark batch and rows from a database), rows ``[row]``. For
  each: the cache's own ``num_cached_bytes`` (``estimate_entry_bytes``: ``getsizeof`` of
  key, rows tuple, row tuples and their values), the growth of memory traced by
  ``tracemalloc`` from before the rows were built to after the fill, with only the cache
  holding them (everything Python allocates for them: values, tuples, entries, the
  store's dict and links), and, in a second child without tracemalloc, the growth of the
  process's resident set (RSS; includes allocator slack);
- a ``pyarrow.Table`` of the same rows (``int64, string, int32, float64,
  timestamp[us, UTC]``): ``Table.nbytes``, and the growth of Arrow's memory pool;
- a ``FullSnapshot`` built from that table (what a full cache holds: the table sorted by
  ``id``, the offsets array and a pandas index of the keys): ``FullSnapshot.nbytes``, and
  the measured growth (Arrow pool + tracemalloc, which traces numpy and pandas), with the
  input table released.

    .venv/bin/python benchmarks/cache_memory.py [--rows 10000,100000,1000000] [--quick]

``--quick`` (CI): 20,000 rows, and no RSS children.

Writes a table to stdout and ``benchmarks/out/cache_memory.json``
(``cache_memory_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import write_result

KINDS = ("objects", "cache_lru", "cache_ttl", "arrow", "snapshot")
BASE_TIME = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def make_row(i: int) -> tuple[Any, ...]:
    return (i, f"customer-{i}", i % 97, i * 0.25, BASE_TIME + dt.timedelta(seconds=i))


def fill_cache(kind: str, n: int) -> Any:
    from cache import DefaultLookupCache

    builder = DefaultLookupCache.new_builder().maximum_size(n)
    if kind == "cache_ttl":
        builder = builder.expire_after_write(dt.timedelta(hours=1))
    cache = builder.build()
    cache.open()
    for first in range(0, n, 1000):
        # A key's int is not the row's int: keys come from the stream, rows from the source.
        cache.put_all({(int(str(i)),): [make_row(i)] for i in range(first, min(first + 1000, n))})
    return cache


def arrow_table(n: int) -> Any:
    import pyarrow as pa

    rows = [make_row(i) for i in range(n)]
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in range(5)]
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("category", pa.int32()),
                        ("score", pa.float64()), ("updated_at", pa.timestamp("us", tz="UTC"))])
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema,
                                                                          strict=True)],
                                schema=schema)


def child(kind: str, n: int, traced: bool) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    import pyarrow as pa

    from cache import FullSnapshot
    from cache._size import estimate_entry_bytes

    gc.collect()
    if traced:
        tracemalloc.start()
    rss_before = rss()
    pool_before = pa.total_allocated_bytes()
    traced_before = tracemalloc.get_traced_memory()[0] if traced else 0
    out: dict[str, Any] = {"kind": kind, "rows": n}
    keep: Any
    if kind.startswith("cache"):
        keep = fill_cache(kind, n)
        out["estimate_bytes"] = keep.metrics.snapshot()["num_cached_bytes"]
        out["records"] = keep.metrics.snapshot()["num_cached_records"]
    elif kind == "objects":
        # The same keys and rows in a plain list, no cache: what the estimate describes.
        keep = [((int(str(i)),), (make_row(i),)) for i in range(n)]
        out["estimate_bytes"] = sum(estimate_entry_bytes(k, r) for k, r in keep)
        out["container_bytes"] = sys.getsizeof(keep)
    elif kind == "arrow":
        keep = arrow_table(n)
        out["nbytes"] = keep.nbytes
    else:
        table = arrow_table(n)
        out["table_nbytes"] = table.nbytes
        keep = FullSnapshot.build(table, ["id"], loaded_at=time.time())
        del table
        out["nbytes"] = keep.nbytes
    gc.collect()
    out["pool_bytes"] = pa.total_allocated_bytes() - pool_before
    if traced:
        out["traced_bytes"] = tracemalloc.get_traced_memory()[0] - traced_before
        tracemalloc.stop()
    else:
        out["rss_bytes"] = rss() - rss_before
    del keep
    return out


def measure(kinds: list[str], n: int, traced: bool) -> dict[str, dict[str, Any]]:
    """Measure ``kinds`` in one fresh child process, one after the other."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", ",".join(kinds), str(n),
         "traced" if traced else "rss"],
        check=True, capture_output=True, text=True,
    )
    result: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def children(kinds: list[str], n: int, traced: bool) -> dict[str, dict[str, Any]]:
    """In the child: every kind, each after an untraced warm-up of 200 rows (first-use
    allocations of the libraries are not the rows')."""
    out = {}
    for kind in kinds:
        child(kind, 200, traced=False)
        out[kind] = child(kind, n, traced)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", help="comma-separated row counts (default 10000,100000,1000000)")
    parser.add_argument("--quick", action="store_true",
                        help="CI: 20000 rows unless given, no RSS measurement")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kinds, n, mode = args.child
        print(json.dumps(children(kinds.split(","), int(n), mode == "traced")))
        return
    text = args.rows or ("20000" if args.quick else "10000,100000,1000000")
    sizes = [int(part) for part in text.split(",")]
    if any(n < 1 for n in sizes):
        raise SystemExit("--rows must be positive")

    started = time.perf_counter()
    load_before = os.getloadavg()
    results: list[dict[str, Any]] = []
    for n in sizes:
        # tracemalloc counts live allocations only, so the kinds can share one process;
        # RSS cannot (freed memory stays resident): one process per kind.
        traced = measure(list(KINDS), n, traced=True)
        resident = {} if args.quick else {
            kind: measure([kind], n, traced=False)[kind] for kind in ("cache_lru", "cache_ttl")}
        row: dict[str, Any] = {"rows": n}
        for kind in ("cache_lru", "cache_ttl"):
            estimate = traced[kind]["estimate_bytes"]
            row[kind] = {
                "estimate_bytes": estimate,
                "tracemalloc_bytes": traced[kind]["traced_bytes"],
                "rss_bytes": resident[kind]["rss_bytes"] if resident else None,
                "estimate_over_tracemalloc": estimate / traced[kind]["traced_bytes"],
                "records": traced[kind]["records"],
            }
        objects = traced["objects"]
        row["objects"] = {
            "estimate_bytes": objects["estimate_bytes"],
            # The list holding them is not part of the rows.
            "tracemalloc_bytes": objects["traced_bytes"] - objects["container_bytes"],
        }
        for kind in ("cache_lru", "cache_ttl"):
            row[kind]["store_overhead_bytes"] = (row[kind]["tracemalloc_bytes"]
                                                 - row["objects"]["tracemalloc_bytes"])
        row["arrow"] = {"nbytes": traced["arrow"]["nbytes"],
                        "pool_bytes": traced["arrow"]["pool_bytes"]}
        snapshot = traced["snapshot"]
        row["full_snapshot"] = {
            "nbytes": snapshot["nbytes"],
            "measured_bytes": snapshot["pool_bytes"] + snapshot["traced_bytes"],
            "pool_bytes": snapshot["pool_bytes"],
            "tracemalloc_bytes": snapshot["traced_bytes"],
        }
        results.append(row)
        print(f"{n:,} rows measured after {time.perf_counter() - started:.0f} s", flush=True)
    load_after = os.getloadavg()

    print("\nbytes per cached row")
    print(f"{'':>10} | {'keys+rows':>17} | {'DefaultLookupCache, LRU':^40} | "
          f"{'DefaultLookupCache, TTL':^32} | {'full cache':^25}")
    print(f"{'rows':>10} | {'est.':>8}{'traced':>9} | {'num_c_b':>8}{'traced':>8}{'RSS':>8}"
          f"{'est/tr':>8}{'store':>8} | {'traced':>8}{'RSS':>8}{'est/tr':>8}{'store':>8} | "
          f"{'Arrow':>7}{'snapshot':>9}{'measured':>9}")
    for row in results:
        n = row["rows"]
        objects = row["objects"]
        cells = []
        for kind in ("cache_lru", "cache_ttl"):
            c = row[kind]
            rss_cell = f"{c['rss_bytes'] / n:>8.0f}" if c["rss_bytes"] else f"{'-':>8}"
            cells.append(f"{c['tracemalloc_bytes'] / n:>8.0f}{rss_cell}"
                         f"{c['estimate_over_tracemalloc']:>8.2f}"
                         f"{c['store_overhead_bytes'] / n:>8.0f}")
        snap = row["full_snapshot"]
        print(f"{n:>10,} | {objects['estimate_bytes'] / n:>8.0f}"
              f"{objects['tracemalloc_bytes'] / n:>9.0f} | "
              f"{row['cache_lru']['estimate_bytes'] / n:>8.0f}{cells[0]} | {cells[1]} | "
              f"{row['arrow']['nbytes'] / n:>7.1f}{snap['nbytes'] / n:>9.1f}"
              f"{snap['measured_bytes'] / n:>9.1f}")
    print(f"keys+rows: the key and row objects alone (est.: estimate_entry_bytes); num_c_b: "
          f"num_cached_bytes; traced: tracemalloc growth; RSS: resident growth (no "
          f"tracemalloc); store: cache traced - keys+rows traced; Arrow: Table.nbytes; "
          f"snapshot: FullSnapshot.nbytes; measured: its Arrow pool + tracemalloc growth. "
          f"Load average {load_before[0]:.1f} / "
          f"{load_after[0]:.1f}.")
    import pyarrow as pa

    path = write_result(
        "cache_memory_quick" if args.quick else "cache_memory",
        {
            "command": " ".join([".venv/bin/python", "benchmarks/cache_memory.py",
                                 *sys.argv[1:]]),
            "row": "(id int, name str 'customer-<id>', category int 0..96, score float, "
                   "updated_at UTC datetime)",
            "results": results,
            "load_average_before_after": [load_before, load_after],
            "versions": {"pyarrow": pa.__version__},
            "seconds_total": time.perf_counter() - started,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
