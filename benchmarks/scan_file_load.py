"""Full load of a Parquet file through ``scan.FileSource`` against pyarrow alone.

A Parquet file of ``--rows`` rows (``id`` bigint, ``name`` string, ``score`` double,
``updated_at`` timestamp with time zone UTC), in row groups of ``--row-group-size``
rows, is written to a temporary directory (removed afterwards). In one process,
interleaved and rotated each round, it is loaded whole:

- ``pq.read_table``: ``pyarrow.parquet.read_table(path)``: the reference (pyarrow's
  own multi-threaded reader, every row group at once);
- ``row group by row group``: ``ParquetFile.read_row_group(g)`` for each row group in
  turn, then one table: what a reader that decodes one row group at a time (as one
  FileSource reader does, a split per row group) can reach at best; the gap to
  ``pq.read_table`` is decoding one row group's columns in parallel instead of every
  row group's;
- ``read_arrow p=N``: ``scan.read_arrow(FileSource(path), N)``: one split per row
  group, read by N readers (each with its fetcher thread), ending in one Arrow table:
  what a full cache loads through.

Every load builds a fresh ``FileSource`` (its schema is read from the footer) and is
checked for its row count; before timing, both tables are checked to hold the same
values. The figure is the median of ``--repeats`` rounds after one warm-up round.
Ratios to ``pq.read_table`` are given both as the ratio of medians and as the median of
the same-round ratios (steadier on a shared machine); > 1 means faster than pyarrow.

    .venv/bin/python benchmarks/scan_file_load.py [--rows 4000000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks._util import write_result
from scan import FileSource, read_arrow

REFERENCE = "pq.read_table"


def write_file(path: str, rows: int, row_group_size: int) -> int:
    """Write the table (built by Arrow, no Python object per row); its size in bytes."""
    ids = pa.array(np.arange(rows, dtype=np.int64))
    names = pc.binary_join_element_wise("customer-", pc.cast(ids, pa.string()), "")
    scores = pc.multiply(pc.cast(ids, pa.float64()), 0.25)
    start = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z in microseconds
    stamps = pc.add(pc.multiply(ids, 1_000_000), start).cast(pa.timestamp("us", tz="UTC"))
    table = pa.table({"id": ids, "name": names, "score": scores, "updated_at": stamps})
    pq.write_table(table, path, row_group_size=row_group_size)
    return os.path.getsize(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--row-group-size", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--parallelism", default="1,4", help="comma-separated, e.g. 1,4")
    parser.add_argument("--quick", action="store_true", help="400,000 rows, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.row_group_size, args.repeats = 400_000, 50_000, 3
    levels = [int(p) for p in args.parallelism.split(",")]

    with tempfile.TemporaryDirectory(prefix="bench_scan_file_") as directory:
        path = os.path.join(directory, "dim.parquet")
        size = write_file(path, args.rows, args.row_group_size)
        groups = pq.ParquetFile(path).metadata.num_row_groups
        print(f"{args.rows:,} rows, {groups} row groups, {size / 1e6:.1f} MB", flush=True)

        reference = pq.read_table(path)
        for p in levels:
            # Rows of different row groups interleave (several readers, or one reading
            # two splits side by side): compared in the file's order.
            loaded = read_arrow(FileSource(path), p).sort_by("id")
            if not loaded.equals(reference, check_metadata=False):
                raise SystemExit(f"read_arrow p={p} read other values than pq.read_table")
        del reference, loaded

        def read_table() -> int:
            return int(pq.read_table(path).num_rows)

        def by_row_group() -> int:
            parquet = pq.ParquetFile(path)
            groups = [parquet.read_row_group(g) for g in range(parquet.num_row_groups)]
            return int(pa.concat_tables(groups).num_rows)

        def bulk(parallelism: int) -> Callable[[], int]:
            return lambda: int(read_arrow(FileSource(path), parallelism).num_rows)

        cases: dict[str, Callable[[], int]] = {REFERENCE: read_table}
        cases["row group by row group"] = by_row_group
        for p in levels:
            cases[f"read_arrow p={p}"] = bulk(p)

        load_before = os.getloadavg()
        seconds: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for round_ in range(args.repeats + 1):
            # Rotate the order each round so no case always runs first (or after another).
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                count = cases[name]()
                elapsed = time.perf_counter() - start
                if count != args.rows:
                    raise SystemExit(f"{name} read {count} rows, expected {args.rows}")
                if round_ > 0:  # round 0 warms up the page cache and imports
                    seconds[name].append(elapsed)
        load_after = os.getloadavg()

    baseline = statistics.median(seconds[REFERENCE])
    print(
        f"\nload average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f}, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{'load':<24}{'median s':>10}{'rows/s':>15}{'vs read_table':>15}{'same-round':>12}"
        f"{'min s':>9}{'max s':>9}"
    )
    results = {}
    for name, values in seconds.items():
        med = statistics.median(values)
        same_round = statistics.median(
            r / v for r, v in zip(seconds[REFERENCE], values, strict=True)
        )
        results[name] = {
            "seconds": values,
            "median_seconds": med,
            "rows_per_second": args.rows / med,
            "relative_to_read_table": baseline / med,
            "median_same_round_ratio_to_read_table": same_round,
        }
        print(
            f"{name:<24}{med:>10.3f}{args.rows / med:>15,.0f}{baseline / med:>14.2f}x"
            f"{same_round:>11.2f}x{min(values):>9.3f}{max(values):>9.3f}"
        )
    out = write_result(
        "scan_file_load",
        {
            "command": "benchmarks/scan_file_load.py " + " ".join(sys.argv[1:]),
            "rows": args.rows,
            "row_group_size": args.row_group_size,
            "row_groups": groups,
            "file_bytes": size,
            "repeats": args.repeats,
            "load_average_before_after": [load_before, load_after],
            "versions": {"pyarrow": pa.__version__},
            "results": results,
        },
    )
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
