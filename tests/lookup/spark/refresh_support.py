"""Helpers of the refreshed-view tests: a SQLite reference table, its source, waiting."""

from __future__ import annotations

import functools
import sqlite3
import time
from pathlib import Path
from typing import Any

from scan import SqlTableSource

COUNTRIES = [(1, "nl", "Netherlands"), (2, "fr", "France"), (3, "de", "Germany")]
SCHEMA = "id BIGINT, code STRING, name STRING"


def make_db(path: Path) -> Path:
    """A SQLite file with a ``countries`` table of three rows."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE countries (id INTEGER PRIMARY KEY, code TEXT, name TEXT)")
        conn.executemany("INSERT INTO countries VALUES (?, ?, ?)", COUNTRIES)
    return path


def connect(path: str) -> sqlite3.Connection:
    """``sqlite3.connect``, by way of this module.

    ``functools.partial(sqlite3.connect, path)`` pickles as ``_sqlite3.connect``, so a
    fresh Python worker planning the read has no ``sqlite3`` module imported, and
    ````connectors.sql.flavor.flavor_of`` (which looks at the driver module of the connection)
    cannot tell its paramstyle. Importing this module imports ``sqlite3``.
    """
    return sqlite3.connect(path)


def gated_connect(path: str, gate: str) -> sqlite3.Connection:
    """``connect`` once the file ``gate`` exists (a load held open, across processes)."""
    deadline = time.monotonic() + 120
    while not Path(gate).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} never opened")
        time.sleep(0.05)
    return sqlite3.connect(path)


def countries(db: Path, gate: Path | None = None) -> SqlTableSource:
    """The table as a split-based source (two rows per split, so several splits); with
    ``gate``, every connection waits for that file to exist."""
    factory = (functools.partial(connect, str(db)) if gate is None
               else functools.partial(gated_connect, str(db), str(gate)))
    return SqlTableSource(factory, "countries", chunk_size=2, schema=SCHEMA)


def execute(db: Path, sql: str, *params: object) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(sql, params)


def names(df: Any) -> list[str]:
    return sorted(row["name"] for row in df.collect())
