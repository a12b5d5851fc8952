"""MySQL/MariaDB: full loads and batched lookups at default settings, side by side with
the fastest readers and hand-written statements found (issue 28, item 1).

A table of ``--rows`` rows (id BIGINT PRIMARY KEY, name VARCHAR(32), qty INT, price
DOUBLE, at DATETIME(6), amount DECIMAL(12,2), code VARCHAR(16) with an index) is made
in the database of ``MYSQL_URL`` under a name of its own, and dropped at the end.
Every case runs once per round, the order rotated each round, after one discarded
warm-up round; each figure is the median of ``--repeats`` rounds.

Full loads (into one Arrow table):

- ``connectorx read_sql`` (``return_type="arrow"``, ``SELECT *``): the fastest reader of
  the table into Arrow found; ``connectorx, partition_num=2`` its own split reading.
- ``pymysql SSCursor into Arrow`` / ``mysql-connector into Arrow``: each driver alone,
  ``fetchmany`` then one ``pa.array`` per column.
- ``default read_arrow(SqlTableSource, p)``: nothing tuned, pymysql's factory (the load
  goes through connectorx, installed with the ``mysql`` extra); ``driver only`` the same
  with connectorx left out (what a machine without it gets).

Batched lookups of ``--keys`` distinct keys (a fresh random sample each round):

- hand-written single statements on one pymysql connection: ``IN`` with literal
  integers, ``IN`` with bound values, ``JSON_TABLE`` of the keys joined with the table,
  a derived table of ``UNION ALL SELECT`` of the keys; ``fetchall()`` into Python rows;
- ``SqlLookupFunction.lookup_arrow``: the library's batched lookup, Arrow keys in,
  Arrow rows and key positions out (what the join path calls);
- the same for string keys (``code``) and a composite key (``id``, ``code``).

    PYTHONPATH=. .venv/bin/python benchmarks/mysql.py [--rows 1000000] [--keys 1000]
        [--repeats 5] [--quick] [--lookups-only]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

# This file's own directory first on the path would make it the "mysql" package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import pyarrow as pa  # noqa: E402

from benchmarks._util import write_result  # noqa: E402
from tests.conftest import mysql_params  # noqa: E402

URL = os.environ.get("MYSQL_URL", "mysql://root@127.0.0.1:3306/test")


def make_table(connect: Callable[[], Any], table: str, rows: int) -> None:
    conn = connect()
    cursor = conn.cursor()
    cursor.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name VARCHAR(32), qty INT, "
                   "price DOUBLE, at DATETIME(6), amount DECIMAL(12,2), code VARCHAR(16), "
                   "KEY (code))")
    step = 20_000
    for start in range(0, rows, step):
        cursor.execute(f"INSERT INTO {table} VALUES " + ", ".join(
            f"({i}, 'name-{i}', {i % 1000}, {i * 0.5}, "
            f"'2024-01-01 00:00:00.{i % 1_000_000:06d}', {i % 100_000}.25, 'C{i:07d}')"
            for i in range(start, min(rows, start + step))))
    conn.commit()
    cursor.execute(f"ANALYZE TABLE {table}")
    cursor.fetchall()
    conn.close()


def driver_arrow(connect: Callable[[], Any], sql: str, cursor_class: Any = None) -> pa.Table:
    conn = connect()
    cursor = conn.cursor(cursor_class) if cursor_class else conn.cursor()
    cursor.execute(sql)
    names = [d[0] for d in cursor.description]
    batches = []
    while True:
        rows = cursor.fetchmany(8192)
        if not rows:
            break
        batches.append(pa.record_batch([pa.array(c) for c in zip(*rows, strict=True)],
                                       names=names))
    # Inferred per batch (decimal precision varies): one schema, the widest.
    schema = pa.unify_schemas([b.schema for b in batches], promote_options="permissive")
    batches = [b.cast(schema) for b in batches]
    conn.close()
    return pa.Table.from_batches(batches)


def timed(cases: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    names = list(cases)
    times: dict[str, list[float]] = {n: [] for n in names}
    for round_ in range(repeats + 1):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            started = time.perf_counter()
            cases[name]()
            if round_:
                times[name].append(time.perf_counter() - started)
    return {n: statistics.median(t) for n, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--lookups-only", action="store_true",
                        help="skip the full loads (minutes at 1M rows)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 100_000, 3

    import connectorx
    import mysql.connector
    import pymysql
    import pymysql.cursors

    from connectors.sql.dialects.mysql import MysqlDialect
    from lookup import SqlLookupFunction
    from scan import SqlTableSource, read_arrow

    params = mysql_params(URL)
    connect = functools.partial(pymysql.connect, **params)
    connect_myc = functools.partial(mysql.connector.connect, **params)
    credentials = params["user"] + (f":{params['password']}" if params["password"] else "")
    cx_url = f"mysql://{credentials}@{params['host']}:{params['port']}/{params['database']}"
    table = f"bench_mysql_{uuid.uuid4().hex[:8]}"
    load1 = os.getloadavg()
    make_table(connect, table, args.rows)
    try:
        select = f"SELECT * FROM {table}"
        original = MysqlDialect.arrow_batches

        def driver_only(parallelism: int) -> Callable[[], Any]:
            def go() -> Any:
                MysqlDialect.arrow_batches = lambda *a: None  # type: ignore[method-assign]
                try:
                    return read_arrow(SqlTableSource(connect, table), parallelism)
                finally:
                    MysqlDialect.arrow_batches = original  # type: ignore[method-assign]
            return go

        load_times: dict[str, float] = {}
        fastest_name = None
        if not args.lookups_only:
            loads = {
                "connectorx read_sql (SELECT *)": lambda: connectorx.read_sql(
                    cx_url, select, return_type="arrow"),
                "connectorx, partition_num=2": lambda: connectorx.read_sql(
                    cx_url, select, return_type="arrow", partition_on="id", partition_num=2),
                "pymysql SSCursor into Arrow": lambda: driver_arrow(
                    connect, select, pymysql.cursors.SSCursor),
                "default read_arrow(SqlTableSource, 1)": lambda: read_arrow(
                    SqlTableSource(connect, table), 1),
                "default read_arrow(SqlTableSource, 4)": lambda: read_arrow(
                    SqlTableSource(connect, table), 4),
                "default, mysql-connector factory, p=1": lambda: read_arrow(
                    SqlTableSource(connect_myc, table), 1),
                "driver only (pymysql SSCursor), p=1": driver_only(1),
            }
            slow = {"mysql-connector into Arrow": lambda: driver_arrow(connect_myc, select)}
            load_times = timed(loads, args.repeats)
            load_times.update(timed(slow, 1))  # 20 s a round: one timed round
            fastest, fastest_name = min((v, k) for k, v in load_times.items()
                                        if not k.startswith(("default", "driver")))
            print(f"full load of {args.rows:,} rows (median of {args.repeats}):")
            for name, seconds in load_times.items():
                print(f"  {name:42s} {seconds:7.3f} s  {fastest / seconds:5.2f}x of {fastest_name}")

        # --- lookups
        conn = connect()
        conn.autocommit(True)
        cur = conn.cursor()
        sel = "*"
        samples: dict[str, list[int]] = {}

        def sample() -> list[int]:
            samples["ids"] = random.sample(range(args.rows), args.keys)
            return samples["ids"]

        def hand(sql_of: Callable[[list[int]], tuple[str, Any]]) -> Callable[[], Any]:
            def go() -> Any:
                sql, bound = sql_of(sample())
                cur.execute(sql, bound)
                rows = cur.fetchall()
                assert len(rows) == args.keys, len(rows)
                return rows
            return go

        def codes(ids: list[int]) -> list[str]:
            return [f"C{i:07d}" for i in ids]

        by_id = SqlLookupFunction(connect, table, key_columns=["id"])
        by_code = SqlLookupFunction(connect, table, key_columns=["code"])
        by_both = SqlLookupFunction(connect, table, key_columns=["id", "code"])
        for fn in (by_id, by_code, by_both):
            fn.open()

        def ours(fn: Any, arrays_of: Callable[[list[int]], list[pa.Array]]) -> Callable[[], Any]:
            def go() -> Any:
                _, batch = fn.lookup_arrow(arrays_of(sample()))
                assert batch.num_rows == args.keys, batch.num_rows
                return batch
            return go

        n = args.keys
        lookups = {
            "hand: id IN (literals)": hand(lambda ids: (
                f"SELECT {sel} FROM {table} WHERE id IN ({','.join(map(str, ids))})", None)),
            "hand: id IN (bound)": hand(lambda ids: (
                f"SELECT {sel} FROM {table} WHERE id IN ({','.join(['%s'] * n)})", ids)),
            "hand: JSON_TABLE join": hand(lambda ids: (
                f"SELECT j.i, t.* FROM JSON_TABLE(%s, '$[*]' COLUMNS (i FOR ORDINALITY, "
                f"k BIGINT PATH '$')) AS j JOIN {table} t ON t.id = j.k", [json.dumps(ids)])),
            "hand: UNION ALL derived table": hand(lambda ids: (
                "SELECT j.i, t.* FROM (" + " UNION ALL ".join(
                    f"SELECT {p} AS i, {k} AS k" for p, k in enumerate(ids))
                + f") AS j JOIN {table} t ON t.id = j.k", None)),
            "ours: lookup_arrow by id": ours(by_id, lambda ids: [pa.array(ids, pa.int64())]),
            "hand: code IN (bound)": hand(lambda ids: (
                f"SELECT {sel} FROM {table} WHERE code IN ({','.join(['%s'] * n)})",
                codes(ids))),
            "hand: code JSON_TABLE join": hand(lambda ids: (
                f"SELECT j.i, t.* FROM JSON_TABLE(%s, '$[*]' COLUMNS (i FOR ORDINALITY, "
                f"k VARCHAR(16) PATH '$')) AS j JOIN {table} t ON t.code = j.k",
                [json.dumps(codes(ids))])),
            "ours: lookup_arrow by code": ours(by_code, lambda ids: [pa.array(codes(ids))]),
            "hand: (id, code) IN (bound rows)": hand(lambda ids: (
                f"SELECT {sel} FROM {table} WHERE (id, code) IN ("
                + ",".join(["(%s,%s)"] * n) + ")",
                [v for i in ids for v in (i, f"C{i:07d}")])),
            "ours: lookup_arrow by (id, code)": ours(by_both, lambda ids: [
                pa.array(ids, pa.int64()), pa.array(codes(ids))]),
        }
        lookup_times = timed(lookups, args.repeats * 4)
        print(f"batched lookup of {args.keys} keys (median of {args.repeats * 4}):")
        for name, seconds in lookup_times.items():
            print(f"  {name:42s} {seconds * 1000:8.2f} ms")
        shapes = {  # each key shape: its hand-written statements, and ours
            "id": (["hand: id IN (literals)", "hand: id IN (bound)", "hand: JSON_TABLE join",
                    "hand: UNION ALL derived table"], "ours: lookup_arrow by id"),
            "code": (["hand: code IN (bound)", "hand: code JSON_TABLE join"],
                     "ours: lookup_arrow by code"),
            "id, code": (["hand: (id, code) IN (bound rows)"],
                         "ours: lookup_arrow by (id, code)"),
        }
        ratios = {}
        for shape, (hand_names, ours_name) in shapes.items():
            best = min(lookup_times[name] for name in hand_names)
            ratios[shape] = best / lookup_times[ours_name]
            print(f"  {shape}: ours {ratios[shape]:.2f}x of the fastest hand-written statement")
        for fn in (by_id, by_code, by_both):
            fn.close()
        conn.close()
        load2 = os.getloadavg()
        print(f"load average before {load1[0]:.2f}, after {load2[0]:.2f}")
        write_result("mysql", {
            "rows": args.rows, "keys": args.keys, "repeats": args.repeats,
            "load_seconds": load_times, "lookup_seconds": lookup_times,
            "fastest_reader": fastest_name, "lookup_ratios": ratios,
            "loadavg": [load1, load2],
        })
    finally:
        conn = connect()
        conn.cursor().execute(f"DROP TABLE IF EXISTS {table}")
        conn.close()


if __name__ == "__main__":
    main()
