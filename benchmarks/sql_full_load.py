"""Full loads of a PostgreSQL table through SqlTableSource next to the driver alone
(issue 13, 9a and 9c).

A table ``dim`` of ``--rows`` rows (id bigint primary key, name text, qty int, price
double precision, at timestamptz) in a schema of its own (dropped at the end). Timed,
interleaved, the order rotated each round, median of ``--repeats`` rounds after one
discarded warm-up round:

1. ``adbc SELECT * alone``: adbc-driver-postgresql, ``SELECT * FROM dim`` and
   ``fetch_arrow_table()``: the reference of the issue.
2. ``SqlTableSource adbc, 1 split``: ``read_arrow(source, 1)`` with ``chunk_size`` above
   the row count, so the table is one split (one unbounded chunk, which the ADBC driver
   streams through ``COPY``).
3. ``SqlTableSource adbc, 4 splits``: ``chunk_size = rows / 4``, four readers.
4. ``SqlTableSource psycopg, 1 split``: the generic DB-API path.
5. ``full cache load (adbc)``: ``read_arrow`` plus ``FullSnapshot.build`` (the indexed,
   key-sorted snapshot a full cache serves).

Memory (9c): each of cases 2 and 5 runs once more in a fresh process, which reports its
peak resident set size during the load (``VmHWM``, reset just before it through
``/proc/self/clear_refs``) above the one it had before (connections open, modules
imported), against the size of the loaded Arrow table; the target is at most 2x.

    .venv/bin/python benchmarks/sql_full_load.py [--rows 1000000] [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import write_result

DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def adbc_connect() -> Any:
    import adbc_driver_postgresql.dbapi

    return adbc_driver_postgresql.dbapi.connect(DSN)


def make_cases(table: str, rows: int) -> dict[str, Callable[[], int]]:
    import psycopg

    from cache.full import FullSnapshot
    from scan import SqlTableSource, read_arrow

    raw = adbc_connect()
    raw.adbc_connection.set_autocommit(True)

    def alone() -> int:
        cursor = raw.cursor()
        cursor.execute(f"SELECT * FROM {table}")
        count = cursor.fetch_arrow_table().num_rows
        cursor.close()
        return int(count)

    one = SqlTableSource(adbc_connect, table, chunk_size=rows + 1)
    four = SqlTableSource(adbc_connect, table, chunk_size=rows // 4 + 1)
    generic = SqlTableSource(functools.partial(psycopg.connect, DSN), table,
                             chunk_size=rows + 1)
    for source in (one, four, generic):
        source.read_plan()  # the catalog is read once, as on a driver

    def full_cache() -> int:
        return FullSnapshot.build(read_arrow(one, 1), ["id"], loaded_at=time.time(),
                                  version=1).num_rows

    return {
        "adbc SELECT * alone": alone,
        "SqlTableSource adbc, 1 split": lambda: read_arrow(one, 1).num_rows,
        "SqlTableSource adbc, 4 splits": lambda: read_arrow(four, 4).num_rows,
        "SqlTableSource psycopg, 1 split": lambda: read_arrow(generic, 1).num_rows,
        "full cache load (adbc)": full_cache,
    }


def peak_memory(table: str, rows: int, case: str) -> dict[str, Any]:
    """Run ``case`` once in a fresh process: its peak RSS growth against the table."""
    code = f"""
import json, resource, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from benchmarks.sql_full_load import loaders
load = loaders({table!r}, {rows})[{case!r}]
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as reset:  # the peak (VmHWM) starts again here
    reset.write("5")
loaded = load()
peak = status("VmHWM")
print(json.dumps({{"rss_before": before, "peak_before": 0, "peak": peak,
                  "table_bytes": loaded.nbytes, "rows": loaded.num_rows}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    growth = data["peak"] - max(data["rss_before"], data["peak_before"])
    data["peak_growth"] = growth
    data["ratio_to_table"] = round(growth / data["table_bytes"], 2)
    return data


def loaders(table: str, rows: int) -> dict[str, Callable[[], Any]]:
    """The loads measured for memory, each returning what it loaded (warmed up: the
    catalog read, a tiny read done, so only the load itself is measured)."""
    from cache.full import FullSnapshot
    from scan import SqlTableSource, read_arrow

    one = SqlTableSource(adbc_connect, table, chunk_size=rows + 1)
    one.read_plan()

    def snapshot() -> Any:
        # As the full cache does: the loaded table handed straight to the build.
        return FullSnapshot.build(read_arrow(one, 1), ["id"], loaded_at=time.time(),
                                  version=1).table

    return {
        "SqlTableSource adbc, 1 split": lambda: read_arrow(one, 1),
        "full cache load (adbc)": snapshot,
    }


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--no-memory", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 50_000, 2
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    table = f"{schema}.dim"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text, qty int, "
                     "price double precision, at timestamptz)")
        conn.execute(f"INSERT INTO {table} SELECT g, 'name-' || g, g % 1000, g * 0.5, "
                     f"now() - g * interval '1 second' FROM generate_series(1, {args.rows}) g")
        conn.execute(f"ANALYZE {table}")
    try:
        cases = make_cases(table, args.rows)
        names = list(cases)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for round_index in range(args.repeats + 1):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                count = cases[name]()
                elapsed = time.perf_counter() - start
                assert count == args.rows, (name, count)
                if round_index:
                    seconds[name].append(elapsed)
        medians = {name: statistics.median(values) for name, values in seconds.items()}
        reference = medians["adbc SELECT * alone"]
        memory = {} if args.no_memory else {
            case: peak_memory(table, args.rows, case)
            for case in ("SqlTableSource adbc, 1 split", "full cache load (adbc)")
        }
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    result = {
        "arguments": vars(args),
        "median_seconds": {k: round(v, 4) for k, v in medians.items()},
        "speed_vs_adbc_alone": {k: round(reference / v, 3) for k, v in medians.items()},
        "runs": {k: [round(x, 4) for x in v] for k, v in seconds.items()},
        "memory": memory,
        "loadavg": os.getloadavg(),
    }
    for name in names:
        print(f"  {name:35s} {medians[name]:7.3f} s   {reference / medians[name]:5.2f}x")
    for case, data in memory.items():
        print(f"  peak memory, {case}: {data['peak_growth'] / 2**20:.0f} MiB for a "
              f"{data['table_bytes'] / 2**20:.0f} MiB table ({data['ratio_to_table']}x)")
    print(write_result("sql_full_load", result))


if __name__ == "__main__":
    main()
