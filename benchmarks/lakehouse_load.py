"""Full loads of a Delta Lake and an Iceberg table through ``scan.DeltaSource`` and
``scan.IcebergSource`` against the libraries' own readers, and what filters prune.

A table of ``--rows`` rows (``id`` bigint, ``name`` string, ``score`` double,
``updated_at`` timestamp UTC, ``region`` string, 4 values) is written in 4 commits of
equal id ranges, partitioned by ``region`` (so 16 data files), once with delta-rs
(``write_deltalake``) and once with pyiceberg (SQL catalog on SQLite), in a temporary
directory removed afterwards. In one process, interleaved and rotated each round, each
table is loaded whole at default settings:

- ``delta-rs``: ``DeltaTable(path).to_pyarrow_table()`` (the reference);
- ``DeltaSource``: ``scan.read_arrow(DeltaSource(path))`` (default parallelism);
- ``pyiceberg``: ``table.scan().to_arrow()`` (the reference);
- ``IcebergSource``: ``scan.read_arrow(IcebergSource(name, catalog=...))``.

Every load builds a fresh table object or source and checks its row count. The figure
is the median of ``--repeats`` rounds (5) after one warm-up round; the ratio is ours
over the reference's rows per second (> 1: faster).

Pruning: for a partition filter (``region = 'eu'``) and a statistics filter
(``id < rows / 8``, inside the first commit's id range), the data-file bytes of the
splits planned (the files a load opens) over those of the whole table, and the load
time of the filtered source over the whole one's (medians of the same rounds).

    .venv/bin/python benchmarks/lakehouse_load.py [--rows 4000000] [--repeats 5]
    .venv/bin/python benchmarks/lakehouse_load.py --quick    # 400,000 rows, 2 rounds
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks._util import write_result
from connectors.predicates import Predicate
from scan import DeltaSource, IcebergSource, plan_splits, read_arrow

REGIONS = ["eu", "us", "apac", "latam"]
COMMITS = 4


def part(start: int, rows: int) -> pa.Table:
    """Rows ``start`` to ``start + rows`` (built by Arrow, no Python object per row)."""
    ids = pa.array(np.arange(start, start + rows, dtype=np.int64))
    names = pc.binary_join_element_wise("customer-", pc.cast(ids, pa.string()), "")
    scores = pc.multiply(pc.cast(ids, pa.float64()), 0.25)
    base = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z in microseconds
    stamps = pc.add(pc.multiply(ids, 1_000_000), base).cast(pa.timestamp("us", tz="UTC"))
    regions = pa.array(np.array(REGIONS)[np.arange(start, start + rows) % len(REGIONS)])
    return pa.table({"id": ids, "name": names, "score": scores, "updated_at": stamps,
                     "region": regions})


def write_delta(path: str, rows: int) -> None:
    from deltalake import write_deltalake

    step = rows // COMMITS
    for commit in range(COMMITS):
        write_deltalake(path, part(commit * step, step), partition_by=["region"], mode="append")


def write_iceberg(where: str, rows: int) -> dict[str, str]:
    from pyiceberg.catalog import load_catalog

    catalog = {"type": "sql", "uri": f"sqlite:///{where}/catalog.db",
               "warehouse": f"file://{where}/warehouse"}
    lake = load_catalog("default", **catalog)
    lake.create_namespace("bench")
    step = rows // COMMITS
    table = lake.create_table("bench.customers", schema=part(0, 1).schema)
    with table.update_spec() as spec:
        spec.add_identity("region")
    for commit in range(COMMITS):
        table.append(part(commit * step, step))
    return catalog


def timed(load: Callable[[], pa.Table], rows: int | None) -> float:
    started = time.perf_counter()
    table = load()
    elapsed = time.perf_counter() - started
    if rows is not None:
        assert table.num_rows == rows, (table.num_rows, rows)
    return elapsed


def rounds(cases: dict[str, tuple[Callable[[], pa.Table], int | None]], repeats: int
           ) -> dict[str, list[float]]:
    """Seconds of every run, per case: one warm-up round, then ``repeats`` rounds, each
    in a rotated order."""
    names = list(cases)
    for name in names:
        timed(*cases[name])
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for number in range(repeats):
        order = names[number % len(names):] + names[:number % len(names)]
        for name in order:
            seconds[name].append(timed(*cases[name]))
    return seconds


def delta_bytes(path: str, source: DeltaSource) -> int:
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    sizes = dict(zip(actions.column("path").to_pylist(),
                     actions.column("size_bytes").to_pylist(), strict=True))
    total = 0
    for split in plan_splits(source):
        total += next(size for rel, size in sizes.items()
                      if split.file.endswith(rel) or split.file.endswith(rel.replace("%25", "%")))
    return total


def iceberg_bytes(catalog: dict[str, str], source: IcebergSource) -> int:
    from pyiceberg.catalog import load_catalog

    table = load_catalog("default", **catalog).load_table("bench.customers")
    sizes = {t.file.file_path: t.file.file_size_in_bytes for t in table.scan().plan_files()}
    return sum(sizes[split.file] for split in plan_splits(source))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="400,000 rows, 2 rounds")
    args = parser.parse_args()
    rows, repeats = (400_000, 2) if args.quick else (args.rows, args.repeats)
    rows -= rows % COMMITS

    from deltalake import DeltaTable
    from pyiceberg.catalog import load_catalog

    where = tempfile.mkdtemp(prefix="lakehouse-bench-")
    try:
        path = os.path.join(where, "delta")
        write_delta(path, rows)
        catalog = write_iceberg(where, rows)
        by_region = [Predicate("region", "=", "eu")]
        by_id = [Predicate("id", "<", rows // 8)]
        delta_cases = {
            "delta-rs": (lambda: DeltaTable(path).to_pyarrow_table(), rows),
            "DeltaSource": (lambda: read_arrow(DeltaSource(path)), rows),
            "DeltaSource region=eu": (lambda: read_arrow(DeltaSource(path, filters=by_region)),
                                      rows // 4),
            "DeltaSource id<rows/8": (lambda: read_arrow(DeltaSource(path, filters=by_id)),
                                      rows // 8),
        }

        def iceberg_table() -> Any:
            return load_catalog("default", **catalog).load_table("bench.customers")

        def iceberg(filters: list[Predicate] | None = None) -> IcebergSource:
            return IcebergSource("bench.customers", catalog=catalog, filters=filters)

        iceberg_cases = {
            "pyiceberg": (lambda: iceberg_table().scan().to_arrow(), rows),
            "IcebergSource": (lambda: read_arrow(iceberg()), rows),
            "IcebergSource region=eu": (lambda: read_arrow(iceberg(by_region)), rows // 4),
            "IcebergSource id<rows/8": (lambda: read_arrow(iceberg(by_id)), rows // 8),
        }
        # Same values before timing.
        ours = read_arrow(DeltaSource(path)).sort_by("id")
        assert ours.equals(DeltaTable(path).to_pyarrow_table().sort_by("id"))
        ours = read_arrow(iceberg()).sort_by("id")
        assert ours.equals(iceberg_table().scan().to_arrow().sort_by("id"))

        cases = {**delta_cases, **iceberg_cases}
        seconds = rounds(cases, repeats)
        whole_delta = delta_bytes(path, DeltaSource(path))
        whole_iceberg = iceberg_bytes(catalog, iceberg())
        pruned = {
            "DeltaSource region=eu": delta_bytes(path, DeltaSource(path, filters=by_region))
            / whole_delta,
            "DeltaSource id<rows/8": delta_bytes(path, DeltaSource(path, filters=by_id))
            / whole_delta,
            "IcebergSource region=eu": iceberg_bytes(catalog, iceberg(by_region)) / whole_iceberg,
            "IcebergSource id<rows/8": iceberg_bytes(catalog, iceberg(by_id)) / whole_iceberg,
        }
    finally:
        shutil.rmtree(where, ignore_errors=True)

    medians = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"{rows:,} rows, {COMMITS} commits x {len(REGIONS)} partitions; median of "
          f"{repeats} interleaved rounds; load average {os.getloadavg()}")
    print(f"{'case':<26} {'median s':>9} {'Mrows/s':>8}  vs reference")
    ratios: dict[str, float] = {}
    for name, median in medians.items():
        reference = "delta-rs" if name.startswith("Delta") else "pyiceberg"
        whole = name in ("DeltaSource", "IcebergSource")
        note = ""
        if whole:
            ratios[name] = medians[reference] / median
            note = f"{ratios[name]:.2f}x of {reference}"
        elif name in pruned:
            base = "DeltaSource" if name.startswith("Delta") else "IcebergSource"
            note = (f"bytes planned {pruned[name]:.3f} of the table's, "
                    f"time {median / medians[base]:.2f} of the whole load")
        loaded = cases[name][1] or 0
        print(f"{name:<26} {median:9.3f} {loaded / median / 1e6:8.2f}  {note}")
    write_result("lakehouse_load", {
        "rows": rows, "repeats": repeats, "seconds": seconds, "medians": medians,
        "ratios": ratios, "pruned_bytes": pruned, "loadavg": os.getloadavg(),
    })


if __name__ == "__main__":
    main()
