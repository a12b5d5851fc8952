"""``lookup_batch`` throughput (keys/s) against PostgreSQL, next to one query per key.

A table ``dim`` of ``--rows`` rows (id bigint primary key, name text, category integer,
score double precision, updated_at timestamptz) is created in a schema of its own and
dropped at the end. Every round builds one key sequence: ``--batches`` batches of
``--keys`` distinct ids, each batch 10% "hot" ids (a fixed set of 2 x ``--keys`` ids,
walked in turn) and 90% "fresh" ids taken once from a shuffled pool, so no fresh id
appears twice in the run. Every id exists in the table. All four cases run over that
same sequence, in one process, batch by batch: each batch goes to every case in turn,
the order rotated from one batch to the next:

1. ``lookup_batch, 100% hits``: ``open_lookup`` of a ``PartialCachingLookupProvider``
   over ``SqlLookupFunction`` with a ``DefaultLookupCache``, warmed (untimed, each
   round) with every key of the sequence;
2. ``lookup_batch, 10% hits``: the same, with a cache that holds the hot ids but has
   never seen a fresh one; its misses (90% of each batch) are loaded in one query per
   batch and put. Both caches are bounded (``--cache-size`` keys, default 25 x
   ``--keys``, expire-after-write 1 h) and case 2's is filled to that bound before the
   first round, so every put evicts an entry; the hot ids, used every 20 batches, stay;
3. ``one query per key``: ``SELECT ... FROM dim WHERE id = %s`` for each key, psycopg 3
   on one autocommit connection (like the function's), a server-side prepared statement
   (``execute(..., prepare=True)``), ``fetchall()`` per key into a dict: the reference;
4. ``lookup_batch, no cache``: ``open_lookup`` of a ``LookupFunctionProvider``: every
   key a miss, one query per batch: the gain of batching alone.

Round 0 warms up (PostgreSQL buffers, prepared statements, imports) and is discarded;
the figure is the median of ``--repeats`` rounds. keys/s = keys asked / seconds spent
in the case's calls; ratios to case 3 are given of the medians and as the median of
the same-round ratios (steadier on a shared machine). Every case is checked to find
one row for every key; the hit ratio and the queries per batch of the lookup cases are
read from the runtime's metrics.

    .venv/bin/python benchmarks/lookup_batch_pg.py [--rows 100000] [--keys 1000]
        [--batches 10] [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

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

DEFAULT_DSN = os.environ.get("POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = "id BIGINT, name STRING, category INT, score DOUBLE, updated_at TIMESTAMP"
NAIVE_SQL = "SELECT id, name, category, score, updated_at FROM dim WHERE id = %s"
HOT_SHARE = 0.10
HOT_CYCLE = 20  # batches between two uses of one hot id

ALL_HITS = "lookup_batch, 100% hits"
TEN_HITS = "lookup_batch, 10% hits"
NAIVE = "one query per key"
NO_CACHE = "lookup_batch, no cache"

Batches = list[list[tuple[int]]]


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
        # Read table and index once, so round 0 does not pay for cold pages alone.
        conn.execute(f'SELECT count(*), sum(score) FROM "{schema}".dim').fetchone()
        conn.execute(f'SELECT count(*) FROM "{schema}".dim WHERE id > 0').fetchone()


@dataclass
class Sequences:
    """The hot ids and the shuffled pool fresh ids are drawn from, in order."""

    hot: list[int]
    fresh: list[int]
    per_batch_hot: int
    next_fresh: int = 0
    next_batch: int = 0

    def round(self, batches: int, keys: int) -> Batches:
        rng = random.Random(self.next_batch)
        out: Batches = []
        for _ in range(batches):
            start = self.next_batch * self.per_batch_hot
            hot = [self.hot[(start + i) % len(self.hot)] for i in range(self.per_batch_hot)]
            count = keys - len(hot)
            fresh = self.fresh[self.next_fresh : self.next_fresh + count]
            self.next_fresh += count
            batch = [(k,) for k in hot + fresh]
            rng.shuffle(batch)
            out.append(batch)
            self.next_batch += 1
        return out


def filler_rows(count: int) -> dict[tuple[int], tuple[tuple[Any, ...], ...]]:
    """Cache entries shaped like the table's rows, under ids no batch asks for."""
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    return {
        (-i,): ((-i, f"customer-{i}", i % 97, i * 0.25, base + dt.timedelta(seconds=i)),)
        for i in range(1, count + 1)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, help="dimension rows (default 100000)")
    parser.add_argument("--keys", type=int, default=1_000, help="keys per batch")
    parser.add_argument("--batches", type=int, help="batches per case and round (default 10)")
    parser.add_argument("--repeats", type=int, help="timed rounds (default 5)")
    parser.add_argument("--cache-size", type=int, help="cache bound (default 25 x keys)")
    parser.add_argument("--quick", action="store_true",
                        help="CI: 20000 rows, 4 batches, 3 repeats unless given")
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    defaults = (20_000, 4, 3) if args.quick else (100_000, 10, 5)
    rows = args.rows if args.rows is not None else defaults[0]
    batches = args.batches if args.batches is not None else defaults[1]
    repeats = args.repeats if args.repeats is not None else defaults[2]
    keys = args.keys
    cache_size = args.cache_size if args.cache_size is not None else 25 * keys
    if keys < 10 or batches < 1 or repeats < 1:
        raise SystemExit("--keys must be >= 10, --batches and --repeats >= 1")

    per_batch_hot = max(1, round(keys * HOT_SHARE))
    hot_count = per_batch_hot * HOT_CYCLE
    rounds = repeats + 1
    fresh_needed = rounds * batches * (keys - per_batch_hot)
    if hot_count + fresh_needed > rows:
        raise SystemExit(
            f"{rounds} rounds x {batches} batches need {hot_count + fresh_needed:,} distinct "
            f"ids (fresh ones are never reused); raise --rows above {rows:,} or lower "
            "--batches / --repeats"
        )
    if batches * keys > cache_size or HOT_CYCLE * keys + hot_count > cache_size:
        raise SystemExit(
            f"--cache-size {cache_size:,} must hold one round ({batches * keys:,} keys) and "
            f"the hot ids between two uses (~{HOT_CYCLE * keys + hot_count:,} keys)"
        )
    ids = list(range(1, rows + 1))
    random.Random(5).shuffle(ids)  # ids spread over the table's pages
    sequences = Sequences(ids[:hot_count], ids[hot_count:], per_batch_hot)

    schema = f"bench_lookup_{uuid.uuid4().hex[:10]}"
    factory = functools.partial(psycopg.connect, args.dsn, options=f"-c search_path={schema}")

    def cache() -> DefaultLookupCache:
        return (DefaultLookupCache.new_builder().maximum_size(cache_size)
                .expire_after_write(dt.timedelta(hours=1)).build())

    def function() -> SqlLookupFunction:
        return SqlLookupFunction(factory, "dim", ["id"], schema=SCHEMA)

    print(f"creating {rows:,} rows in schema {schema} ...", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in (ALL_HITS, TEN_HITS, NAIVE, NO_CACHE)}
    hit_ratio: dict[str, list[float]] = {ALL_HITS: [], TEN_HITS: [], NO_CACHE: []}
    queries_per_batch: dict[str, list[float]] = {ALL_HITS: [], TEN_HITS: [], NO_CACHE: []}
    cached_records: dict[str, int] = {}
    handles: list[LookupHandle] = []
    naive_conn: psycopg.Connection[Any] | None = None
    try:
        create_table(args.dsn, schema, rows)
        all_hits = open_lookup(PartialCachingLookupProvider.of(function(), cache()))
        handles.append(all_hits)
        ten_cache = cache()
        ten_hits = open_lookup(PartialCachingLookupProvider.of(function(), ten_cache))
        handles.append(ten_hits)
        no_cache = open_lookup(LookupFunctionProvider.of(function()))
        handles.append(no_cache)
        naive_conn = factory(autocommit=True)
        # Case 2's cache: full to its bound (filler, then the hot ids, loaded for real).
        ten_cache.put_all(filler_rows(cache_size - hot_count))
        for first in range(0, hot_count, keys):
            ten_hits.lookup_batch([(k,) for k in sequences.hot[first : first + keys]])

        def batched(handle: LookupHandle) -> Callable[[list[tuple[int]]], int]:
            def go(batch: list[tuple[int]]) -> int:
                return sum(len(found) for found in handle.lookup_batch(batch).values())

            return go

        def naive(batch: list[tuple[int]]) -> int:
            assert naive_conn is not None
            result = {}
            with naive_conn.cursor() as cursor:
                for key in batch:
                    cursor.execute(NAIVE_SQL, key, prepare=True)
                    result[key] = cursor.fetchall()
            return sum(len(found) for found in result.values())

        cases: dict[str, Callable[[list[tuple[int]]], int]] = {
            ALL_HITS: batched(all_hits),
            TEN_HITS: batched(ten_hits),
            NAIVE: naive,
            NO_CACHE: batched(no_cache),
        }
        metered = {ALL_HITS: all_hits, TEN_HITS: ten_hits, NO_CACHE: no_cache}
        names = list(cases)
        step = 0
        for round_ in range(rounds):
            run = sequences.round(batches, keys)
            for batch in run:  # untimed: case 1's cache learns every key of the round
                all_hits.lookup_batch(batch)
            spent = dict.fromkeys(names, 0.0)
            before = {name: handle.metrics.as_dict() for name, handle in metered.items()}
            for batch in run:
                # Every case takes the same batch in turn, the order rotated each time, so
                # the load of the (shared) machine falls on all cases alike.
                shift = step % len(names)
                step += 1
                for name in names[shift:] + names[:shift]:
                    start = time.perf_counter()
                    found = cases[name](batch)
                    spent[name] += time.perf_counter() - start
                    if found != len(batch):
                        raise SystemExit(f"{name} found {found} rows for {len(batch)} keys")
            if round_ == 0:  # warm-up
                continue
            for name in names:
                seconds[name].append(spent[name])
            for name, handle in metered.items():
                after = handle.metrics.as_dict()
                hits = after["hit_count"] - before[name]["hit_count"]
                misses = after["miss_count"] - before[name]["miss_count"]
                hit_ratio[name].append(hits / (hits + misses))
                loads = after["load_count"] - before[name]["load_count"]
                queries_per_batch[name].append(loads / batches)
        for name, handle in metered.items():
            cached_records[name] = handle.metrics.num_cached_records
        with psycopg.connect(args.dsn) as conn:
            server = conn.execute("SHOW server_version").fetchone()
    finally:
        for handle in handles:
            handle.close()
        if naive_conn is not None:
            naive_conn.close()
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    total = batches * keys
    baseline = statistics.median(seconds[NAIVE])
    print()
    print(f"{'case':<26}{'keys/s':>10}{'vs (3)':>9}{'per round':>11}{'hits':>6}"
          f"{'queries/batch':>15}{'min keys/s':>12}{'max keys/s':>12}")
    results: dict[str, dict[str, Any]] = {}
    for number, name in enumerate((ALL_HITS, TEN_HITS, NAIVE, NO_CACHE), start=1):
        med = statistics.median(seconds[name])
        # Same-round ratios: each against the baseline's time of that very round.
        per_round = statistics.median(
            n / s for n, s in zip(seconds[NAIVE], seconds[name], strict=True)
        )
        ratio = statistics.median(hit_ratio[name]) if name in hit_ratio else None
        queries = (statistics.median(queries_per_batch[name]) if name in queries_per_batch
                   else float(keys))
        results[name] = {
            "case": number,
            "seconds": seconds[name],
            "median_seconds": med,
            "keys_per_second": total / med,
            "keys_per_second_runs": [total / s for s in seconds[name]],
            "relative_to_one_query_per_key": baseline / med,
            "relative_to_one_query_per_key_median_of_rounds": per_round,
            "hit_ratio": ratio,
            "queries_per_batch": queries,
            "cached_records_at_end": cached_records.get(name),
        }
        print(
            f"({number}) {name:<22}{total / med:>10,.0f}{baseline / med:>8.2f}x"
            f"{per_round:>10.2f}x{'-' if ratio is None else f'{ratio:.0%}':>6}{queries:>15,.0f}"
            f"{total / max(seconds[name]):>12,.0f}{total / min(seconds[name]):>12,.0f}"
        )
    print(f"\n{batches} batches x {keys:,} keys per case and round, median of {repeats} "
          f"rounds; 'vs (3)': ratio of the medians; 'per round': median of the same-round "
          f"ratios.\nCache bound {cache_size:,} keys (case 2's holds "
          f"{cached_records[TEN_HITS]:,} at the end: every put evicted one).")
    path = write_result(
        "lookup_batch_pg",
        {
            "command": "benchmarks/lookup_batch_pg.py " + " ".join(sys.argv[1:]),
            "rows": rows,
            "keys_per_batch": keys,
            "batches": batches,
            "repeats": repeats,
            "cache_size": cache_size,
            "hot_ids": hot_count,
            "hot_per_batch": per_batch_hot,
            "naive": "psycopg 3, one autocommit connection, server-side prepared "
                     "statement (prepare=True), fetchall per key",
            "versions": {
                "psycopg": psycopg.__version__,
                "libpq_impl": psycopg.pq.__impl__,
                "postgresql": server[0] if server else None,
            },
            "results": results,
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
