"""Bytes per cached row: DefaultLookupCache's columnar store against the same rows in Arrow.

For each N of ``--rows``, N dimension rows shaped like the other benchmarks' table
(``id`` int, ``name`` str ``"customer-<id>"``, ``category`` int 0..96, ``score`` float,
``updated_at`` UTC datetime) are held in these ways, each measured in one child process
after an untraced warm-up of 200 rows (first-use allocations of the libraries are not
the rows'):

- ``arrow``: a ``pyarrow.Table`` of the rows (``int64, string, int32, float64,
  timestamp[us, UTC]``): the reference, ``Table.nbytes``;
- ``cache_arrow``: a ``DefaultLookupCache`` (``maximum_size`` N, expire-after-write 1 h)
  bound to that schema and filled the way the lookup runtime fills it: ``put_arrow`` of
  1,000 keys and their rows at a time;
- ``cache_put_all``: the same cache unbound, filled through the per-key API
  (``put_all`` of 1,000 Python keys and rows at a time; its types are inferred, so
  ``category`` is an ``int64`` there);
- ``snapshot``: a ``FullSnapshot`` built from the table (what a full cache holds).

For each: ``num_cached_bytes`` (the cache's own count, from its Arrow buffers and numpy
arrays) or ``nbytes``, and the measured growth: Arrow's memory pool plus everything
``tracemalloc`` traces (numpy's arrays and Python's objects) from before the rows were
built to after, with only the store holding them.

    .venv/bin/python benchmarks/cache_memory.py [--rows 10000,100000,1000000] [--quick]

``--quick`` (CI): 20,000 rows. Writes a table to stdout and
``benchmarks/out/cache_memory.json`` (``cache_memory_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import write_result

KINDS = ("arrow", "cache_arrow", "cache_put_all", "snapshot")
BASE_TIME = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def make_row(i: int) -> tuple[Any, ...]:
    return (i, f"customer-{i}", i % 97, i * 0.25, BASE_TIME + dt.timedelta(seconds=i))


def arrow_table(first: int, n: int) -> Any:
    import pyarrow as pa

    rows = [make_row(i) for i in range(first, first + n)]
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in range(5)]
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, _schema(),
                                                                          strict=True)],
                                schema=_schema())


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("name", pa.string()), ("category", pa.int32()),
                      ("score", pa.float64()), ("updated_at", pa.timestamp("us", tz="UTC"))])


def fill_cache(kind: str, n: int) -> Any:
    import pyarrow as pa

    from cache import DefaultLookupCache

    cache = (DefaultLookupCache.new_builder().maximum_size(n)
             .expire_after_write(dt.timedelta(hours=1)).build())
    if kind == "cache_arrow":
        cache.bind(_schema(), ["id"])
    cache.open()
    for first in range(0, n, 1000):
        size = min(1000, n - first)
        if kind == "cache_arrow":
            table = arrow_table(first, size)
            cache.put_arrow([table.column("id").combine_chunks()],
                            pa.array(range(size), pa.int64()), table)
        else:
            cache.put_all({(i,): [make_row(i)] for i in range(first, first + size)})
    return cache


def child(kind: str, n: int) -> dict[str, Any]:
    """One measurement, in this process."""
    import pyarrow as pa

    from cache.full.snapshot import FullSnapshot

    gc.collect()
    tracemalloc.start()
    pool_before = pa.total_allocated_bytes()
    traced_before = tracemalloc.get_traced_memory()[0]
    out: dict[str, Any] = {"kind": kind, "rows": n}
    keep: Any
    if kind.startswith("cache"):
        keep = fill_cache(kind, n)
        snapshot = keep.metrics.as_dict()
        out["bytes"] = snapshot["num_cached_bytes"]
        out["records"] = snapshot["num_cached_records"]
    elif kind == "arrow":
        keep = arrow_table(0, n)
        out["bytes"] = keep.nbytes
    else:
        table = arrow_table(0, n)
        keep = FullSnapshot.build(table, ["id"], loaded_at=time.time())
        del table
        out["bytes"] = keep.nbytes
    gc.collect()
    out["measured_bytes"] = (pa.total_allocated_bytes() - pool_before
                             + tracemalloc.get_traced_memory()[0] - traced_before)
    tracemalloc.stop()
    del keep
    return out


def measure(kind: str, n: int) -> dict[str, Any]:
    """Measure ``kind`` in a fresh child process."""
    done = subprocess.run([sys.executable, __file__, "--child", kind, str(n)],
                          check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", help="comma-separated row counts (default 10000,100000,1000000)")
    parser.add_argument("--quick", action="store_true", help="CI: 20000 rows unless given")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, n = args.child
        child(kind, 200)
        print(json.dumps(child(kind, int(n))))
        return
    text = args.rows or ("20000" if args.quick else "10000,100000,1000000")
    sizes = [int(part) for part in text.split(",")]
    if any(n < 1 for n in sizes):
        raise SystemExit("--rows must be positive")
    started = time.perf_counter()
    results = []
    print(f"{'rows':>10} | {'kind':<14} | {'bytes/row':>9} {'measured':>9} | "
          f"{'x Arrow':>7} {'measured':>9}")
    for n in sizes:
        row = {kind: measure(kind, n) for kind in KINDS}
        arrow = row["arrow"]["bytes"]
        for kind in KINDS:
            m = row[kind]
            m["over_arrow"] = m["bytes"] / arrow
            m["measured_over_arrow"] = m["measured_bytes"] / arrow
            print(f"{n:>10,} | {kind:<14} | {m['bytes'] / n:>9.1f} {m['measured_bytes'] / n:>9.1f}"
                  f" | {m['over_arrow']:>7.2f} {m['measured_over_arrow']:>9.2f}", flush=True)
        results.append({"rows": n, **row})
    print("bytes/row: num_cached_bytes (caches) or nbytes (Arrow, snapshot); measured: "
          "Arrow pool + tracemalloc growth; x Arrow: over the Arrow table's nbytes.")
    import pyarrow as pa

    path = write_result(
        "cache_memory_quick" if args.quick else "cache_memory",
        {
            "command": " ".join([".venv/bin/python", "benchmarks/cache_memory.py",
                                 *sys.argv[1:]]),
            "row": "(id int, name str 'customer-<id>', category int 0..96, score float, "
                   "updated_at UTC datetime)",
            "results": results,
            "versions": {"pyarrow": pa.__version__},
            "seconds_total": time.perf_counter() - started,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
