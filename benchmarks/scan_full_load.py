"""Full-load throughput of a PostgreSQL table through ``scan.SqlTableSource``.

A table of ``--rows`` rows (id bigint primary key, name text, category integer, score
double precision, updated_at timestamptz) is created in a schema of its own (dropped
afterwards). In one process, interleaved and rotated each round, it is loaded whole:

- ``select *``: one ``SELECT * FROM dim`` on one connection with psycopg (the same
  driver), ``fetchall()`` into tuples: the reference;
- ``select * (binary)``: the same with a binary-protocol cursor (psycopg 3's faster
  loaders for a single big result; the source's readers use the default cursor);
- ``select * -> arrow``: the default fetch, then the same column-by-column Arrow
  conversion the bulk path does: the reference for a load that ends in Arrow;
- ``run() p=N``: ``LocalSourceRunner(source, N).run()``: rows as tuples, chunks of
  ``--chunk-size`` rows read by N readers on N connections;
- ``read_arrow p=N``: ``scan.read_arrow(source, N)``: the bulk path a full cache uses,
  readers on N threads, ending in one Arrow table.

Every load builds a fresh source (the catalog lookup counts), and every load is checked
for its row count. The figure is the median of ``--repeats`` rounds after one warm-up
round; rows/s = rows / seconds. Ratios to ``select *`` are given both as the ratio of
medians and as the median of the same-round ratios (steadier on a shared machine).

    .venv/bin/python benchmarks/scan_full_load.py [--rows 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
import pyarrow as pa

from benchmarks._util import write_result
from scan import LocalSourceRunner, SqlTableSource, read_arrow
from scan.arrow import rows_to_record_batch
from spark_lookup.schema import to_arrow_schema

DEFAULT_DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "id BIGINT NOT NULL, name STRING, category INT, score DOUBLE, updated_at TIMESTAMP"


def create_table(dsn: str, schema: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(
            f'CREATE TABLE "{schema}".dim (id bigint PRIMARY KEY, name text, '
            "category integer, score double precision, updated_at timestamptz)"
        )
        conn.execute(
            f"INSERT INTO \"{schema}\".dim SELECT g, 'customer-' || g, g %% 97, g * 0.25, "
            "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second' "
            "FROM generate_series(1, %s) AS g",
            [rows],
        )
        conn.execute(f'VACUUM ANALYZE "{schema}".dim')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--parallelism", default="1,4", help="comma-separated, e.g. 1,4")
    parser.add_argument("--chunk-size", type=int, default=8192)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    levels = [int(p) for p in args.parallelism.split(",")]

    schema = f"bench_scan_{uuid.uuid4().hex[:10]}"
    factory = functools.partial(psycopg.connect, args.dsn, options=f"-c search_path={schema}")
    arrow_schema = to_arrow_schema(SCHEMA)

    def source() -> SqlTableSource:
        return SqlTableSource(factory, "dim", chunk_size=args.chunk_size, schema=SCHEMA)

    def select_star() -> int:
        with factory() as conn, conn.cursor() as cursor:
            cursor.execute("SELECT * FROM dim")
            return len(cursor.fetchall())

    def select_star_arrow() -> int:
        with factory() as conn, conn.cursor() as cursor:
            cursor.execute("SELECT * FROM dim")
            rows = cursor.fetchall()
        batches = [
            rows_to_record_batch(rows[i : i + 65_536], arrow_schema, "select *")
            for i in range(0, len(rows), 65_536)
        ]
        return pa.Table.from_batches(batches, schema=arrow_schema).num_rows

    def runner(parallelism: int) -> Callable[[], int]:
        def load() -> int:
            with LocalSourceRunner(source(), parallelism) as run:
                return len(run.run())

        return load

    def bulk(parallelism: int) -> Callable[[], int]:
        return lambda: read_arrow(source(), parallelism).num_rows

    def select_star_binary() -> int:
        with factory() as conn, conn.cursor(binary=True) as cursor:
            cursor.execute("SELECT * FROM dim")
            return len(cursor.fetchall())

    cases: dict[str, Callable[[], int]] = {"select *": select_star}
    cases["select * (binary)"] = select_star_binary
    cases["select * -> arrow"] = select_star_arrow
    for p in levels:
        cases[f"run() p={p}"] = runner(p)
    for p in levels:
        cases[f"read_arrow p={p}"] = bulk(p)

    print(f"creating {args.rows:,} rows in schema {schema} ...", flush=True)
    load_before = os.getloadavg()
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    try:
        create_table(args.dsn, schema, args.rows)
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
                if round_ > 0:  # round 0 warms up caches and imports
                    seconds[name].append(elapsed)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    load_after = os.getloadavg()
    baseline = statistics.median(seconds["select *"])
    print(
        f"\nload average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f}, "
        f"{os.cpu_count()} CPUs (the server runs on the same machine)"
    )
    print(
        f"{'load':<22}{'median s':>10}{'rows/s':>14}{'vs select *':>13}{'same-round':>12}"
        f"{'min s':>9}{'max s':>9}"
    )
    results = {}
    for name, values in seconds.items():
        med = statistics.median(values)
        # On a shared machine, the ratio within one round (both loads under the same
        # background load) is steadier than the ratio of medians.
        same_round = statistics.median(
            s / v for s, v in zip(seconds["select *"], values, strict=True)
        )
        results[name] = {
            "seconds": values,
            "median_seconds": med,
            "rows_per_second": args.rows / med,
            "relative_to_select_star": baseline / med,
            "median_same_round_ratio_to_select_star": same_round,
        }
        print(
            f"{name:<22}{med:>10.3f}{args.rows / med:>14,.0f}{baseline / med:>12.2f}x"
            f"{same_round:>11.2f}x{min(values):>9.3f}{max(values):>9.3f}"
        )
    with psycopg.connect(args.dsn) as conn:
        server = conn.execute("SHOW server_version").fetchone()
    path = write_result(
        "scan_full_load",
        {
            "command": "benchmarks/scan_full_load.py " + " ".join(sys.argv[1:]),
            "rows": args.rows,
            "repeats": args.repeats,
            "chunk_size": args.chunk_size,
            "load_average_before_after": [load_before, load_after],
            "schema": SCHEMA,
            "versions": {
                "psycopg": psycopg.__version__,
                "pyarrow": pa.__version__,
                "postgresql": server[0] if server else None,
            },
            "results": results,
        },
    )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
