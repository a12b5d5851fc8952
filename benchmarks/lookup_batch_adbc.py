"""Batched lookups through the connector layer next to the driver alone (issue 13, 9b).

PostgreSQL: a table ``dim`` of ``--rows`` rows (id bigint primary key, name text, qty int,
price double precision, at timestamptz), in a schema of its own (dropped at the end).
Every round draws ``--keys`` random ids (all present) and times, interleaved, in one
process on warm connections:

1. ``adbc = ANY($1) alone``: the reference of the issue: one statement
   ``SELECT * FROM dim WHERE id = ANY($1)`` through adbc-driver-postgresql, the ids
   bound as one Arrow list, ``fetch_arrow_table()``; no key checks, no mapping back.
2. ``open_lookup(...).lookup_batch (adbc, no cache)``: the per-key API of the runtime
   (issue 27, item 3): ``open_lookup(LookupFunctionProvider.of(SqlLookupFunction(adbc,
   "dim", "id"))).lookup_batch(keys)``, Python key tuples in, a dict of key to Python
   row tuples out: keys checked and encoded as Arrow arrays, one ``lookup_arrow``
   statement, only the answer turned into Python rows.
3. ``open_lookup(...).lookup_batch (adbc, partial cache, 100% hits)``: the same over a
   ``PartialCachingLookupProvider`` with a ``DefaultLookupCache`` (1M keys, expire-after-
   write 1 h) holding every key of every round (warmed before the first, untimed): no
   statement, the rows come out of the columnar cache.
4. ``SqlLookupFunction.lookup_batch (adbc)``: the function's own per-key API, with no
   runtime (no cache, retries or metrics).
5. ``SqlLookupFunction.lookup_arrow (adbc)``: the batched lookup in Arrow: the keys as
   one Arrow array in, the position of each row's key and an Arrow record batch out (no
   Python object per key or row; what a columnar cache takes).
6. ``SqlLookupFunction.lookup_batch (psycopg)``: the generic DB-API path.

SQLite (``--sqlite-rows`` rows, the same columns), the batch statement chosen by
measuring, each through sqlite3 and adbc-driver-sqlite where it applies:
``VALUES`` join (what the connector sends), ``json_each`` join (one text parameter), and
ADBC's per-row binding of a ``WHERE id = ?`` statement (one execution per key, in C).

Figures: median milliseconds per batch over ``--repeats`` rounds (round 0 discarded),
and ratios to the reference measured in the same rounds: the ratio of the medians, and
the median of the ratios within each round (steadier on a shared machine).

    .venv/bin/python benchmarks/lookup_batch_adbc.py [--rows 1000000] [--keys 1000]
        [--repeats 41] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import write_result
from cache import DefaultLookupCache
from lookup import (
    LookupFunctionProvider,
    LookupHandle,
    PartialCachingLookupProvider,
    SqlLookupFunction,
    open_lookup,
)

DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def timed(cases: dict[str, Callable[[list[int]], int]], draws: list[list[int]]
          ) -> dict[str, list[float]]:
    """Milliseconds per call of every case, interleaved, the order rotated each round."""
    names = list(cases)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index, ids in enumerate(draws):
        order = names[round_index % len(names):] + names[: round_index % len(names)]
        for name in order:
            start = time.perf_counter()
            found = cases[name](ids)
            elapsed = (time.perf_counter() - start) * 1000
            assert found == len(ids), (name, found, len(ids))
            if round_index:
                times[name].append(elapsed)
    return times


def postgres(rows: int, keys: int, repeats: int) -> dict[str, Any]:
    import adbc_driver_postgresql.dbapi
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".dim (id bigint PRIMARY KEY, name text, '
                     "qty int, price double precision, at timestamptz)")
        conn.execute(f'INSERT INTO "{schema}".dim SELECT g, \'name-\' || g, g % 1000, '
                     f"g * 0.5, now() - g * interval '1 second' "
                     f"FROM generate_series(1, {rows}) g")
        conn.execute(f'VACUUM ANALYZE "{schema}".dim')  # a dimension table at rest
    try:
        raw = adbc_driver_postgresql.dbapi.connect(DSN)
        raw.adbc_connection.set_autocommit(True)
        cursor = raw.cursor()

        def alone(ids: list[int]) -> int:
            batch = pa.record_batch(
                [pa.ListArray.from_arrays(pa.array([0, len(ids)], pa.int32()),
                                          pa.array(ids, pa.int64()))], names=["p"])
            cursor.execute(f'SELECT * FROM "{schema}".dim WHERE id = ANY($1)', batch)
            return int(cursor.fetch_arrow_table().num_rows)

        adbc_fn = SqlLookupFunction(lambda: adbc_driver_postgresql.dbapi.connect(DSN),
                                    f"{schema}.dim", "id")
        generic_fn = SqlLookupFunction(functools.partial(psycopg.connect, DSN),
                                       f"{schema}.dim", "id")
        adbc_fn.open()
        generic_fn.open()
        rng = random.Random(7)
        draws = [rng.sample(range(1, rows + 1), keys) for _ in range(repeats + 1)]
        plain = open_lookup(LookupFunctionProvider.of(SqlLookupFunction(
            lambda: adbc_driver_postgresql.dbapi.connect(DSN), f"{schema}.dim", "id")))
        cache = (DefaultLookupCache.new_builder().maximum_size(1_000_000)
                 .expire_after_write(timedelta(hours=1)).build())
        cached = open_lookup(PartialCachingLookupProvider.of(SqlLookupFunction(
            lambda: adbc_driver_postgresql.dbapi.connect(DSN), f"{schema}.dim", "id"), cache))
        for ids in draws:  # every key of every round cached: 100% hits
            cached.lookup_batch([(i,) for i in ids])

        def lookup_batch(fn: SqlLookupFunction | LookupHandle) -> Callable[[list[int]], int]:
            def run(ids: list[int]) -> int:
                found = fn.lookup_batch([(i,) for i in ids])
                return sum(len(rows) for rows in found.values())
            return run

        def arrow_path(ids: list[int]) -> int:
            _index, batch = adbc_fn.lookup_arrow([pa.array(ids, pa.int64())])
            return int(batch.num_rows)

        cases = {
            "adbc = ANY($1) alone": alone,
            "open_lookup(...).lookup_batch (adbc, no cache)": lookup_batch(plain),
            "open_lookup(...).lookup_batch (adbc, partial cache, 100% hits)":
                lookup_batch(cached),
            "SqlLookupFunction.lookup_batch (adbc)": lookup_batch(adbc_fn),
            "SqlLookupFunction.lookup_arrow (adbc)": arrow_path,
            "SqlLookupFunction.lookup_batch (psycopg)": lookup_batch(generic_fn),
        }
        times = timed(cases, draws)
        plain.close()
        cached.close()
        adbc_fn.close()
        generic_fn.close()
        cursor.close()
        raw.close()
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return summarize(times, "adbc = ANY($1) alone")


def sqlite_strategies(rows: int, keys: int, repeats: int) -> dict[str, Any]:
    import adbc_driver_sqlite.dbapi

    path = Path(tempfile.mkdtemp()) / "bench.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER, "
                   "price REAL, at TEXT)")
        db.executemany("INSERT INTO dim VALUES (?, ?, ?, ?, ?)",
                       ((i, f"name-{i}", i % 1000, i * 0.5, "2024-01-01 00:00:00")
                        for i in range(1, rows + 1)))
    plain = sqlite3.connect(path)
    adbc = adbc_driver_sqlite.dbapi.connect(str(path))
    adbc.adbc_connection.set_autocommit(True)

    def values_sql(count: int) -> str:
        slots = ", ".join(f"({i}, ?)" for i in range(count))
        return (f'WITH k(i, v) AS (VALUES {slots}) SELECT k.i, d.* FROM k '
                "JOIN dim AS d ON d.id = k.v")

    json_sql = ("SELECT j.key, d.* FROM json_each(?) AS j JOIN dim AS d ON d.id = j.value")

    def values_sqlite3(ids: list[int]) -> int:
        return len(plain.execute(values_sql(len(ids)), ids).fetchall())

    def json_sqlite3(ids: list[int]) -> int:
        return len(plain.execute(json_sql, (json.dumps(ids),)).fetchall())

    def values_adbc(ids: list[int]) -> int:
        cursor = adbc.cursor()
        cursor.execute(values_sql(len(ids)), tuple(ids))
        count = cursor.fetch_arrow_table().num_rows
        cursor.close()
        return int(count)

    def json_adbc(ids: list[int]) -> int:
        cursor = adbc.cursor()
        cursor.execute(json_sql, (json.dumps(ids),))
        count = cursor.fetch_arrow_table().num_rows
        cursor.close()
        return int(count)

    def per_row_adbc(ids: list[int]) -> int:
        cursor = adbc.cursor()
        bound = pa.record_batch([pa.array(range(len(ids)), pa.int64()),
                                 pa.array(ids, pa.int64())], names=["i", "k"])
        cursor.execute("SELECT ?, d.* FROM dim AS d WHERE d.id = ?", bound)
        count = cursor.fetch_arrow_table().num_rows
        cursor.close()
        return int(count)

    connector = SqlLookupFunction(functools.partial(sqlite3.connect, str(path)), "dim", "id")
    connector_adbc = SqlLookupFunction(
        lambda: adbc_driver_sqlite.dbapi.connect(str(path)), "dim", "id")

    def through(fn: SqlLookupFunction) -> Callable[[list[int]], int]:
        def run(ids: list[int]) -> int:
            return sum(len(r) for r in fn.lookup_batch([(i,) for i in ids]).values())
        return run

    cases = {
        "VALUES join (sqlite3)": values_sqlite3,
        "json_each join (sqlite3)": json_sqlite3,
        "VALUES join (adbc)": values_adbc,
        "json_each join (adbc)": json_adbc,
        "per-row binding (adbc)": per_row_adbc,
        "SqlLookupFunction.lookup_batch (sqlite3)": through(connector),
        "SqlLookupFunction.lookup_batch (adbc)": through(connector_adbc),
    }
    rng = random.Random(11)
    draws = [rng.sample(range(1, rows + 1), keys) for _ in range(repeats + 1)]
    times = timed(cases, draws)
    plain.close()
    adbc.close()
    connector.close()
    connector_adbc.close()
    return summarize(times, "VALUES join (sqlite3)")


def summarize(times: dict[str, list[float]], reference: str) -> dict[str, Any]:
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians[reference]
    # The ratio within each round (the cases ran side by side), then their median:
    # steadier than the ratio of the medians on a shared machine.
    same_round = {
        name: statistics.median(r / v for r, v in zip(times[reference], values, strict=True))
        for name, values in times.items()
    }
    return {
        "reference": reference,
        "median_ms": {name: round(value, 3) for name, value in medians.items()},
        "speed_vs_reference": {name: round(base / value, 3) for name, value in medians.items()},
        "speed_vs_reference_same_round": {name: round(v, 3) for name, v in same_round.items()},
        "runs": {name: [round(v, 3) for v in values] for name, values in times.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sqlite-rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.sqlite_rows, args.repeats = 20_000, 20_000, 3
    load_at_start = os.getloadavg()
    result = {
        "postgres": postgres(args.rows, args.keys, args.repeats),
        "sqlite": sqlite_strategies(args.sqlite_rows, args.keys, args.repeats),
        "arguments": vars(args),
        "load_average": {"start": load_at_start, "end": os.getloadavg()},
    }
    for backend in ("postgres", "sqlite"):
        print(f"{backend} (reference: {result[backend]['reference']}; median ms, ratio of "
              "the medians, median of the same-round ratios)")
        for name, value in result[backend]["median_ms"].items():
            ratio = result[backend]["speed_vs_reference"][name]
            same = result[backend]["speed_vs_reference_same_round"][name]
            print(f"  {name:64s} {value:8.3f} ms  {ratio:5.2f}x  {same:5.2f}x")
    print(f"load average (1 min): {load_at_start[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(write_result("lookup_batch_adbc", result))


if __name__ == "__main__":
    main()
