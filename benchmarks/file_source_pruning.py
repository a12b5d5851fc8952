"""``scan.FileSource`` with and without a selective filter: the row groups that Parquet
statistics rule out are not read; and a plain read against ``pq.read_table``.

A Parquet file of ``--rows`` rows (``benchmarks/scan_file_load.py``'s: ``id`` bigint in
file order, ``name`` string, ``score`` double, ``updated_at`` timestamp UTC), in row
groups of ``--row-group-size`` rows, is written to a temporary directory (removed
afterwards). The filter keeps ``--selectivity`` of the rows, an id range that starts
inside one row group (``id >= a AND id < b``). In one process, interleaved and rotated
each round, with default settings (one reader unless ``p=4`` is named):

- ``pq.read_table``: the reference, pyarrow's own multi-threaded reader;
- ``FileSource``: ``scan.read_arrow(FileSource(path))``, the whole file;
- ``FileSource p=4``: the same with 4 readers (what a full cache's load uses);
- ``pq.read_table + filter``: pyarrow's reader given the filter as a dataset
  expression (statistics and rows);
- ``FileSource + filter``: ``read_arrow(FileSource(path, filters=[...]))``;
- ``FileSource + filter, no statistics``: the same with the planner's pruning turned
  off (every row group read and filtered after decoding: FileSource before it was
  built on ``pyarrow.dataset``).

Each load builds a fresh source and is checked for its row count (the filtered ones
against Python's count of the range); before timing, the filtered loads are checked to
equal ``pq.read_table`` filtered by Arrow. Bytes read: the growth of ``rchar`` in
``/proc/self/io`` over the load (every byte this process read through ``read`` calls,
page cache hits too: footers, the column chunks). Figures: the median of ``--repeats``
rounds after one warm-up round; ratios to ``pq.read_table`` as the ratio of medians
and as the median of same-round ratios.

    .venv/bin/python benchmarks/file_source_pruning.py [--rows 4000000] [--repeats 7]
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
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks._util import write_result
from benchmarks.scan_file_load import write_file
from connectors import Predicate
from scan import FileSource, plan_splits, read_arrow

REFERENCE = "pq.read_table"


def read_bytes() -> int:
    """Bytes this process has read through ``read`` system calls so far."""
    with open("/proc/self/io") as file:
        for line in file:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise SystemExit("no rchar in /proc/self/io")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--row-group-size", type=int, default=250_000)
    parser.add_argument("--selectivity", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="400,000 rows, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.row_group_size, args.repeats = 400_000, 25_000, 3
    low = int(args.rows * 0.3) + args.row_group_size // 2  # inside a row group
    high = low + int(args.rows * args.selectivity)
    filters = [Predicate("id", ">=", low), Predicate("id", "<", high)]
    expression = (pc.field("id") >= low) & (pc.field("id") < high)

    with tempfile.TemporaryDirectory(prefix="bench_file_pruning_") as directory:
        path = os.path.join(directory, "dim.parquet")
        size = write_file(path, args.rows, args.row_group_size)
        metadata = pq.read_metadata(path)
        groups = metadata.num_row_groups
        planned = [split.row_group for split in plan_splits(FileSource(path, filters=filters))]
        planned_bytes = sum(metadata.row_group(g).total_byte_size for g in planned
                            if g is not None)
        print(f"{args.rows:,} rows, {groups} row groups, {size / 1e6:.1f} MB; the filter "
              f"keeps ids [{low:,}, {high:,}): {high - low:,} rows, row groups {planned} "
              f"planned", flush=True)

        def no_statistics() -> Any:
            return mock.patch("connectors.files.source.predicates_to_pruning", return_value=None)

        # A bulk load's row groups come side by side, in no set order: compared by id.
        reference = pq.read_table(path)
        expected = reference.filter(expression)
        for name, table in (
            ("FileSource", read_arrow(FileSource(path))),
            ("FileSource + filter", read_arrow(FileSource(path, filters=filters))),
        ):
            wanted = expected if "filter" in name else reference
            if not table.sort_by("id").equals(wanted, check_metadata=False):
                raise SystemExit(f"{name} read other values than pyarrow")
        with no_statistics():
            if not read_arrow(FileSource(path, filters=filters)).sort_by("id").equals(expected):
                raise SystemExit("the read without statistics read other values")
        del reference, expected

        def unpruned() -> int:
            with no_statistics():
                return int(read_arrow(FileSource(path, filters=filters)).num_rows)

        cases: dict[str, tuple[Callable[[], int], int]] = {
            REFERENCE: (lambda: int(pq.read_table(path).num_rows), args.rows),
            "FileSource": (lambda: int(read_arrow(FileSource(path)).num_rows), args.rows),
            "FileSource p=4": (lambda: int(read_arrow(FileSource(path), 4).num_rows), args.rows),
            "pq.read_table + filter": (
                lambda: int(pq.read_table(path, filters=expression).num_rows), high - low),
            "FileSource + filter": (
                lambda: int(read_arrow(FileSource(path, filters=filters)).num_rows), high - low),
            "FileSource + filter, no statistics": (unpruned, high - low),
        }

        load_before = os.getloadavg()
        seconds: dict[str, list[float]] = {name: [] for name in cases}
        read: dict[str, list[int]] = {name: [] for name in cases}
        names = list(cases)
        for round_ in range(args.repeats + 1):
            shift = round_ % len(names)  # no case always first, or after the same one
            for name in names[shift:] + names[:shift]:
                case, rows = cases[name]
                bytes_before = read_bytes()
                start = time.perf_counter()
                count = case()
                elapsed = time.perf_counter() - start
                if count != rows:
                    raise SystemExit(f"{name} read {count} rows, expected {rows}")
                if round_ > 0:  # round 0 warms up the page cache and imports
                    seconds[name].append(elapsed)
                    read[name].append(read_bytes() - bytes_before)
        load_after = os.getloadavg()

    baseline = statistics.median(seconds[REFERENCE])
    print(f"\nload average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'load':<36}{'rows':>11}{'MB read':>9}{'median s':>10}{'rows/s':>13}"
          f"{'vs read_table':>15}{'same-round':>12}")
    results = {}
    for name, values in seconds.items():
        rows = cases[name][1]
        med = statistics.median(values)
        same_round = statistics.median(
            r / v for r, v in zip(seconds[REFERENCE], values, strict=True))
        megabytes = statistics.median(read[name]) / 1e6
        results[name] = {
            "rows": rows,
            "seconds": values,
            "median_seconds": med,
            "rows_per_second": rows / med,
            "bytes_read": read[name],
            "median_bytes_read": statistics.median(read[name]),
            "relative_to_read_table": baseline / med,
            "median_same_round_ratio_to_read_table": same_round,
        }
        print(f"{name:<36}{rows:>11,}{megabytes:>9.1f}{med:>10.3f}{rows / med:>13,.0f}"
              f"{baseline / med:>14.2f}x{same_round:>11.2f}x")
    out = write_result("file_source_pruning", {
        "command": "benchmarks/file_source_pruning.py " + " ".join(sys.argv[1:]),
        "rows": args.rows,
        "row_group_size": args.row_group_size,
        "row_groups": groups,
        "file_bytes": size,
        "filter": [low, high],
        "row_groups_planned": planned,
        "planned_uncompressed_bytes": planned_bytes,
        "repeats": args.repeats,
        "load_average_before_after": [load_before, load_after],
        "versions": {"pyarrow": pa.__version__},
        "results": results,
    })
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
