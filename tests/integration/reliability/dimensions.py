"""Dimension tables of the bad-input tests, with the rows a correct lookup returns."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tests.connectors.conftest import PgFactory, pg_exec

BIG_KEY = "k" * 1_000_000  # 1 MB
BIG_VALUE = "v" * 1_000_000
ABSENT_BIG_KEY = "z" * 1_000_000

MEASURES: list[tuple[float, str]] = [
    (1.5, "one and a half"), (0.0, "zero"), (math.nan, "not a number"),
    (math.inf, "infinity"), (-math.inf, "minus infinity"),
]
"""Keyed by a DOUBLE: PostgreSQL's NaN equals NaN, but a NaN key must never match."""

WORDS: list[tuple[str, str]] = [
    ("😀", "grinning face"),
    ("👨\u200d👩\u200d👧", "family (zero-width joiners)"),
    ("שלום", "peace (Hebrew, right to left)"),
    ("مرحبا", "hello (Arabic, right to left)"),
    ("e\u0301", "e + combining acute"),
    ("é", "precomposed e acute"),  # a different key: no Unicode normalization
    ("a", "plain a"),
    ("a ", "a and a space"),
    (BIG_KEY, "a 1 MB key"),
    ("big value", BIG_VALUE),
    ("quote ' and \"", "SQL quotes are values, bound as parameters"),
]

UNMATCHED_WORDS = [
    "a\x00b",  # PostgreSQL text cannot hold NUL: never sent, never matches
    ABSENT_BIG_KEY,
    "A",
    "",
]

CUSTOMERS: list[tuple[int, str]] = [(i, f"c{i}") for i in range(1, 21)]


def create_tables(pg: PgFactory) -> None:
    """``measures``, ``words`` (a hash index: a btree cannot hold a 1 MB key) and
    ``customers`` in the test's schema."""
    pg_exec(pg.dsn, pg.schema, """
        CREATE TABLE measures (x double precision PRIMARY KEY, label text);
        CREATE TABLE words (w text NOT NULL, meaning text NOT NULL);
        CREATE INDEX ON words USING hash (w);
        CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL);
    """)
    pg_exec(pg.dsn, pg.schema,
            "INSERT INTO measures SELECT * FROM unnest(%s::float8[], %s::text[])",
            [x for x, _ in MEASURES], [label for _, label in MEASURES])
    pg_exec(pg.dsn, pg.schema, "INSERT INTO words SELECT * FROM unnest(%s::text[], %s::text[])",
            [w for w, _ in WORDS], [m for _, m in WORDS])
    pg_exec(pg.dsn, pg.schema,
            "INSERT INTO customers SELECT * FROM unnest(%s::bigint[], %s::text[])",
            [i for i, _ in CUSTOMERS], [n for _, n in CUSTOMERS])


def measure_rows(x: Any) -> tuple[tuple[float, str], ...]:
    """What a lookup of ``x`` must return: NaN and None never match; -0.0 equals 0.0."""
    if x is None or x is pd.NA or x != x:
        return ()
    return tuple((k, label) for k, label in MEASURES if k == x)


def word_rows(w: str | None) -> tuple[tuple[str, str], ...]:
    return tuple(row for row in WORDS if row[0] == w)
