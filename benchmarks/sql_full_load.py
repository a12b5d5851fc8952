"""Full loads of a table through SqlTableSource at its DEFAULT settings next to each
driver alone: PostgreSQL over ADBC and psycopg, SQLite over sqlite3 and ADBC (issue 13,
9a and 9c; issue 27, item 2).

A table ``dim`` of ``--rows`` rows (id bigint primary key, name text, qty int, price
double precision, at timestamptz) in a PostgreSQL schema of its own (dropped at the end),
and the same rows in a SQLite file (``at`` as ISO text, read as TIMESTAMP). Timed,
interleaved, the order rotated each round, median of ``--repeats`` rounds after one
discarded warm-up round. Each source case is compared with its driver's own
``SELECT * FROM dim`` (the reference of its group):

- ``<driver> SELECT * alone``: ADBC: ``fetch_arrow_table()`` (the reference of the
  ADBC cases); DB-API: ``fetchall()`` into Python rows (the driver's own speed).
- ``<driver> SELECT * into Arrow``: DB-API: ``fetchall()``, then one ``pa.array`` per
  column (the reference of the DB-API cases: a load that ends in Arrow).
- ``default, p=N``: ``read_arrow(SqlTableSource(factory, "dim"), N)``, nothing tuned
  (one chunk per reader: N=1 reads one unbounded chunk, N=4 four key ranges).
- ``tuned: ...``: explicit settings beside the default, labelled with them:
  ``chunk_size=8192`` (the default before issue 27: 122 chunks with bound ranges) at
  1 and 4 readers, and ``checkpointable`` (``ReaderOptions`` allowing checkpoints,
  so chunks are read in key order: what ``LocalSourceRunner`` reads).
- ``full cache load (adbc, default, p=4)``: ``read_arrow`` with a full cache's default
  parallelism (4) plus ``FullSnapshot.build`` (the indexed, key-sorted snapshot).

Memory (9c): the default ADBC and psycopg loads and the full cache loads run once more
each in a fresh process (with ``--only``: those whose name holds its text), which
reports its peak resident set size during the load (``VmHWM``, reset just before it
through ``/proc/self/clear_refs``) above the one it had before (connections open,
modules imported), against the size of the loaded Arrow table; the target is at most
2x (one chunk of the whole table streams in batches).

    PYTHONPATH=. .venv/bin/python benchmarks/sql_full_load.py [--rows 1000000] [--repeats 5]
        [--quick] [--no-memory] [--no-sqlite] [--only TEXT]

``--only adbc`` runs only the cases whose name holds the text (and their references):
more rounds of fewer cases, for a machine whose load moves between rounds.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import write_result

DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")

Case = tuple[Callable[[], int], str]
"""A timed load returning its row count, and the name of its reference case."""


def adbc_connect() -> Any:
    import adbc_driver_postgresql.dbapi

    return adbc_driver_postgresql.dbapi.connect(DSN)


def adbc_sqlite_connect(path: str) -> Any:
    import adbc_driver_sqlite.dbapi

    return adbc_driver_sqlite.dbapi.connect(path)


def _alone_arrow(raw: Any, table: str) -> Callable[[], int]:
    def load() -> int:
        cursor = raw.cursor()
        cursor.execute(f"SELECT * FROM {table}")
        count = cursor.fetch_arrow_table().num_rows
        cursor.close()
        return int(count)

    return load


def _alone_rows(raw: Any, table: str) -> Callable[[], int]:
    def load() -> int:
        cursor = raw.cursor()
        cursor.execute(f"SELECT * FROM {table}")
        count = len(cursor.fetchall())
        cursor.close()
        return count

    return load


def _alone_rows_to_arrow(raw: Any, table: str) -> Callable[[], int]:
    import pyarrow as pa

    def load() -> int:
        cursor = raw.cursor()
        cursor.execute(f"SELECT * FROM {table}")
        rows = cursor.fetchall()
        cursor.close()
        return pa.table([pa.array(list(column)) for column in zip(*rows, strict=True)],
                        names=[f"c{i}" for i in range(len(rows[0]))]).num_rows

    return load


def _read(source: Any, parallelism: int, ordered: bool = False) -> Callable[[], int]:
    from scan import ReaderOptions, read_arrow

    source.read_plan()  # the catalog is read once, as on a driver
    options = ReaderOptions(records_per_poll=65_536) if ordered else None
    return lambda: read_arrow(source, parallelism, options=options).num_rows


def make_cases(table: str, rows: int, sqlite_path: str | None) -> dict[str, Case]:
    import psycopg

    from cache.full.snapshot import FullSnapshot
    from scan import SqlTableSource, read_arrow

    adbc = adbc_connect()
    adbc.adbc_connection.set_autocommit(True)
    pg_rows = psycopg.connect(DSN, autocommit=True)
    psycopg_factory = functools.partial(psycopg.connect, DSN)
    default = SqlTableSource(adbc_connect, table)
    default.read_plan()
    ref_adbc, ref_psycopg = "adbc SELECT * alone", "psycopg SELECT * into Arrow"

    def full_cache() -> int:
        return FullSnapshot.build(read_arrow(default, 4), ["id"], loaded_at=time.time(),
                                  version=1).num_rows

    cases: dict[str, Case] = {
        ref_adbc: (_alone_arrow(adbc, table), ref_adbc),
        "adbc default, p=1": (_read(default, 1), ref_adbc),
        "adbc default, p=4": (_read(default, 4), ref_adbc),
        "adbc tuned: checkpointable, p=1": (_read(default, 1, ordered=True), ref_adbc),
        "adbc tuned: chunk_size=8192, p=1": (
            _read(SqlTableSource(adbc_connect, table, chunk_size=8192), 1), ref_adbc),
        "adbc tuned: chunk_size=8192, p=4": (
            _read(SqlTableSource(adbc_connect, table, chunk_size=8192), 4), ref_adbc),
        "full cache load (adbc, default, p=4)": (full_cache, ref_adbc),
        "psycopg SELECT * alone": (_alone_rows(pg_rows, table), "psycopg SELECT * alone"),
        ref_psycopg: (_alone_rows_to_arrow(pg_rows, table), ref_psycopg),
        "psycopg default, p=1": (_read(SqlTableSource(psycopg_factory, table), 1), ref_psycopg),
        "psycopg default, p=4": (_read(SqlTableSource(psycopg_factory, table), 4), ref_psycopg),
    }
    if sqlite_path is not None:
        ref_sqlite3, ref_adbc_sqlite = "sqlite3 SELECT * into Arrow", "adbc-sqlite SELECT * alone"
        sqlite3_factory = functools.partial(sqlite3.connect, sqlite_path)
        adbc_sqlite_factory = functools.partial(adbc_sqlite_connect, sqlite_path)
        cases.update({
            "sqlite3 SELECT * alone": (_alone_rows(sqlite3_factory(), "dim"),
                                       "sqlite3 SELECT * alone"),
            ref_sqlite3: (_alone_rows_to_arrow(sqlite3_factory(), "dim"), ref_sqlite3),
            "sqlite3 default, p=1": (_read(SqlTableSource(sqlite3_factory, "dim"), 1),
                                     ref_sqlite3),
            ref_adbc_sqlite: (_alone_arrow(adbc_sqlite_factory(), "dim"), ref_adbc_sqlite),
            "adbc-sqlite default, p=1": (
                _read(SqlTableSource(adbc_sqlite_factory, "dim"), 1), ref_adbc_sqlite),
        })
    return cases


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
    catalog read, so only the load itself is measured); default settings."""
    import psycopg

    from cache.full.snapshot import FullSnapshot
    from scan import SqlTableSource, read_arrow

    adbc = SqlTableSource(adbc_connect, table)
    adbc.read_plan()
    generic = SqlTableSource(functools.partial(psycopg.connect, DSN), table)
    generic.read_plan()

    def snapshot(parallelism: int) -> Any:
        # As the full cache does: the loaded table handed straight to the build.
        return FullSnapshot.build(read_arrow(adbc, parallelism), ["id"],
                                  loaded_at=time.time(), version=1).table

    return {
        "adbc default, p=1": lambda: read_arrow(adbc, 1),
        "psycopg default, p=1": lambda: read_arrow(generic, 1),
        "full cache load (adbc, default, p=1)": lambda: snapshot(1),
        "full cache load (adbc, default, p=4)": lambda: snapshot(4),
    }


def make_sqlite(path: str, rows: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER, "
                   "price REAL, at TIMESTAMP)")
        db.execute(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?) "
            "INSERT INTO dim SELECT n, 'name-' || n, n % 1000, n * 0.5, "
            "datetime(1700000000 - n, 'unixepoch') FROM g", (rows,))


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--only", default="", help="run the cases whose name holds this")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 50_000, 2
    loadavg_start = os.getloadavg()
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    table = f"{schema}.dim"
    scratch = tempfile.TemporaryDirectory(prefix="sql_full_load_")
    sqlite_path = None if args.no_sqlite else os.path.join(scratch.name, "dim.db")
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text, qty int, "
                     "price double precision, at timestamptz)")
        conn.execute(f"INSERT INTO {table} SELECT g, 'name-' || g, g % 1000, g * 0.5, "
                     f"now() - g * interval '1 second' FROM generate_series(1, {args.rows}) g")
        conn.execute(f"VACUUM ANALYZE {table}")
    if sqlite_path is not None:
        make_sqlite(sqlite_path, args.rows)
    try:
        cases = make_cases(table, args.rows, sqlite_path)
        if args.only:
            kept = {name for name, (_, reference) in cases.items() if args.only in name
                    for name in (name, reference)}
            cases = {name: case for name, case in cases.items() if name in kept}
        names = list(cases)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for round_index in range(args.repeats + 1):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                count = cases[name][0]()
                elapsed = time.perf_counter() - start
                assert count == args.rows, (name, count)
                if round_index:
                    seconds[name].append(elapsed)
        medians = {name: statistics.median(values) for name, values in seconds.items()}
        speed = {name: medians[cases[name][1]] / medians[name] for name in names}
        # The ratio within each round (the same moment's load), then its median.
        same_round = {
            name: statistics.median(
                ref / run for ref, run in zip(seconds[cases[name][1]], seconds[name],
                                              strict=True))
            for name in names
        }
        loadavg_end = os.getloadavg()
        memory = {} if args.no_memory else {
            case: peak_memory(table, args.rows, case)
            for case in ("adbc default, p=1", "psycopg default, p=1",
                         "full cache load (adbc, default, p=1)",
                         "full cache load (adbc, default, p=4)")
            if args.only in case
        }
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        scratch.cleanup()
    result = {
        "arguments": vars(args),
        "median_seconds": {k: round(v, 4) for k, v in medians.items()},
        "speed_vs_reference": {k: round(v, 3) for k, v in speed.items()},
        "speed_vs_reference_same_round": {k: round(v, 3) for k, v in same_round.items()},
        "references": {k: v[1] for k, v in cases.items()},
        "runs": {k: [round(x, 4) for x in v] for k, v in seconds.items()},
        "memory": memory,
        "loadavg_start": loadavg_start,
        "loadavg_end": loadavg_end,
    }
    print(f"  load average: {loadavg_start[0]:.2f} at the start, {loadavg_end[0]:.2f} at the "
          f"end ({os.cpu_count()} CPUs)")
    for name in names:
        print(f"  {name:40s} {medians[name]:7.3f} s   {speed[name]:5.2f}x   "
              f"(same round {same_round[name]:5.2f}x)   vs {cases[name][1]}")
    for case, data in memory.items():
        print(f"  peak memory, {case}: {data['peak_growth'] / 2**20:.0f} MiB for a "
              f"{data['table_bytes'] / 2**20:.0f} MiB table ({data['ratio_to_table']}x)")
    print(write_result("sql_full_load", result))


if __name__ == "__main__":
    main()
