"""What push-down saves a full cache of a wide table (issue 13, item 8).

A PostgreSQL table of ``--rows`` rows and ``--columns`` columns (an id, then text,
double, bigint and timestamptz columns in turn, and a ``region`` of four values) in a
schema of its own. A full cache is loaded (``read_arrow`` + ``FullSnapshot.build``,
through adbc-driver-postgresql, one split) three ways, interleaved, median of
``--repeats``:

1. every column;
2. the four columns a join uses (``columns=[...]``: only they are selected);
3. those four columns and ``filters=[Predicate("region", "=", "eu")]`` (a quarter of
   the rows; evaluated by PostgreSQL, the value bound).

Reported: load seconds and the snapshot's bytes (what every worker maps), and the
ratios to case 1.

    .venv/bin/python benchmarks/pushdown_wide.py [--rows 200000] [--columns 40] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import write_result

DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
_KINDS = [("text", "'t' || g"), ("double precision", "g * 0.25"), ("bigint", "g * 7"),
          ("timestamptz", "now() - g * interval '1 second'")]


def main() -> None:
    import adbc_driver_postgresql.dbapi
    import psycopg

    from cache.full.snapshot import FullSnapshot
    from connectors import Predicate
    from scan import SqlTableSource, read_arrow

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--columns", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 20_000, 2
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    table = f"{schema}.wide"
    definitions = ["id bigint PRIMARY KEY", "region text"]
    values = ["g", "(ARRAY['eu', 'us', 'apac', 'latam'])[g % 4 + 1]"]
    for i in range(args.columns - 2):
        kind, value = _KINDS[i % len(_KINDS)]
        definitions.append(f"c{i} {kind}")
        values.append(value)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f"CREATE TABLE {table} ({', '.join(definitions)})")
        conn.execute(f"INSERT INTO {table} SELECT {', '.join(values)} "
                     f"FROM generate_series(1, {args.rows}) g")
        conn.execute(f"ANALYZE {table}")

    def connect() -> Any:
        return adbc_driver_postgresql.dbapi.connect(DSN)

    used = ["id", "region", "c0", "c1"]
    sources = {
        "every column": SqlTableSource(connect, table, chunk_size=args.rows + 1),
        "4 columns": SqlTableSource(connect, table, columns=used, chunk_size=args.rows + 1),
        "4 columns, region = 'eu'": SqlTableSource(
            connect, table, columns=used, chunk_size=args.rows + 1,
            filters=[Predicate("region", "=", "eu")]),
    }
    try:
        for source in sources.values():
            source.read_plan()
        seconds: dict[str, list[float]] = {name: [] for name in sources}
        nbytes: dict[str, int] = {}
        rows: dict[str, int] = {}
        names = list(sources)
        for round_index in range(args.repeats + 1):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                loaded = read_arrow(sources[name], 1)
                snapshot = FullSnapshot.build(loaded, ["id"], loaded_at=time.time(), version=1)
                elapsed = time.perf_counter() - start
                nbytes[name], rows[name] = snapshot.nbytes, snapshot.num_rows
                if round_index:
                    seconds[name].append(elapsed)
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    medians = {name: statistics.median(v) for name, v in seconds.items()}
    base = names[0]
    result = {
        "arguments": vars(args),
        "median_seconds": {k: round(v, 4) for k, v in medians.items()},
        "snapshot_bytes": nbytes,
        "rows": rows,
        "load_time_vs_every_column": {k: round(v / medians[base], 3) for k, v in medians.items()},
        "bytes_vs_every_column": {k: round(v / nbytes[base], 3) for k, v in nbytes.items()},
        "loadavg": os.getloadavg(),
    }
    for name in names:
        print(f"  {name:26s} {medians[name]:7.3f} s ({medians[name] / medians[base]:5.2f}x)  "
              f"{nbytes[name] / 2**20:8.1f} MiB ({nbytes[name] / nbytes[base]:5.3f}x)  "
              f"{rows[name]} rows")
    print(write_result("pushdown_wide", result))


if __name__ == "__main__":
    main()
