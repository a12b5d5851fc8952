"""A refreshed view of a table of versions (SCD2: valid_from/valid_to) exposes the
validity columns as they are, so SQL joins each row with its version itself; compared
with a reference computed here in plain Python (issue 45, item 3)."""

from __future__ import annotations

import datetime as dt
import functools
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lookup import RetryPolicy, ScheduledTableRefresh
from scan import SqlTableSource
from tests.lookup.spark.refresh_support import connect
from triggers import PeriodicCacheReloadTrigger

pytestmark = [pytest.mark.spark, pytest.mark.needs("PYTHON_DATA_SOURCE", "SESSION_TAGS")]

UTC = dt.timezone.utc
SCHEMA = "id BIGINT, cur STRING, rate DOUBLE, valid_from TIMESTAMP, valid_to TIMESTAMP"


def at(day: int, hour: int = 0) -> dt.datetime:
    return dt.datetime(2024, 1, day, hour, tzinfo=UTC)


# (cur, rate, valid_from, valid_to): EUR changes twice, the last open-ended; USD has a gap.
VERSIONS = [
    ("EUR", 1.10, at(1), at(5)),
    ("EUR", 1.20, at(5), at(10)),
    ("EUR", 1.30, at(10), None),
    ("USD", 0.90, at(2), at(4)),
    ("USD", 0.95, at(6), None),
]
# (order, cur, t): at a valid_from, at a valid_to, between, before the first version,
# in a gap, after the last change, an unknown currency.
ORDERS = [
    (1, "EUR", at(1)), (2, "EUR", at(5)), (3, "EUR", at(4, 23)), (4, "EUR", at(30)),
    (5, "EUR", dt.datetime(2023, 12, 31, tzinfo=UTC)), (6, "USD", at(4)), (7, "USD", at(3)),
    (8, "USD", at(6)), (9, "GBP", at(6)),
]


def _micros(value: dt.datetime | None) -> int | None:
    return None if value is None else int(value.timestamp()) * 1_000_000


def _text(value: dt.datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def reference() -> list[tuple[int, float | None]]:
    out = []
    for order, cur, t in ORDERS:
        match = [rate for c, rate, start, end in VERSIONS
                 if c == cur and start <= t and (end is None or t < end)]
        assert len(match) <= 1
        out.append((order, match[0] if match else None))
    return out


def test_a_refreshed_view_exposes_the_validity_columns_for_sql_to_join_on(
        spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "rates.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE rates (id INTEGER PRIMARY KEY, cur TEXT, rate REAL, "
                   "valid_from TIMESTAMP, valid_to TIMESTAMP)")
        db.executemany("INSERT INTO rates (cur, rate, valid_from, valid_to) VALUES (?,?,?,?)",
                       [(c, r, _text(s), _text(e)) for c, r, s, e in VERSIONS])
    source = SqlTableSource(functools.partial(connect, str(path)), "rates", chunk_size=2,
                            schema=SCHEMA)
    refresh = ScheduledTableRefresh(
        spark, source, PeriodicCacheReloadTrigger(timedelta(hours=1)), "rv_rates",
        retry_policy=RetryPolicy(max_retries=1, initial_backoff=timedelta(milliseconds=10)))
    orders = spark.createDataFrame(ORDERS, "order_id INT, cur STRING, t TIMESTAMP")
    orders.createOrReplaceTempView("rv_orders")
    with refresh:
        # The columns as they are: their type, and each version's instants.
        types = dict(spark.table("rv_rates").dtypes)
        assert (types["valid_from"], types["valid_to"]) == ("timestamp", "timestamp")
        held = spark.sql("SELECT cur, rate, unix_micros(valid_from) AS f, "
                         "unix_micros(valid_to) AS t FROM rv_rates").collect()
        assert sorted((r.cur, r.rate, r.f, r.t) for r in held) == sorted(
            (c, rate, _micros(s), _micros(e)) for c, rate, s, e in VERSIONS)
        joined = spark.sql(
            "SELECT o.order_id, v.rate FROM rv_orders o LEFT JOIN rv_rates v "
            "ON o.cur = v.cur AND o.t >= v.valid_from "
            "AND (v.valid_to IS NULL OR o.t < v.valid_to)").collect()
        assert sorted((r.order_id, r.rate) for r in joined) == reference()
