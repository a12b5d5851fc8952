"""lookup_join(..., as_of=) on Spark: each order joins the exchange rate valid at its
own time, with no cache, a partial cache and a full cache, on both engines; compared
with a reference computed in plain Python (issue 45). The events cover a time exactly
at valid_from and at valid_to, NULL, before the first version, an open-ended version,
a composite key and DATE version columns."""

from __future__ import annotations

import datetime as dt
import functools
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cache import DefaultLookupCache
from connectors.sql.lookup_function import SqlLookupFunction
from connectors.sql.source import SqlTableSource
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingLookupProvider,
    Validity,
    lookup_join,
)
from spark_lookup.errors import ConfigError
from tests.fixtures.rates import (
    EVENTS,
    expected,
    provider,
    rates_table,
)
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.spark

KINDS = ["none", "partial", "full"]


def _connect(tmp_path: Path) -> Any:
    return rates_table(tmp_path / "rates.sqlite")


@pytest.mark.every_line
@pytest.mark.parametrize("engine", ["arrow", "pandas"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_order_joins_the_rate_valid_at_its_time(spark: Any, tmp_path: Path, kind: str,
                                                     engine: str) -> None:
    rates = provider(kind, _connect(tmp_path), tmp_path)
    orders = spark.createDataFrame(
        EVENTS, "order BIGINT, cur STRING, region INT, order_time TIMESTAMP").repartition(2)
    for how in ("left", "inner"):
        out = lookup_join(orders, rates, on=["cur", "region"], how=how, columns=["rate"],
                          as_of="order_time", engine=engine)
        assert out.columns == ["order", "cur", "region", "order_time", "rate"]
        got = sorted((row["order"], row["rate"]) for row in out.collect())
        assert got == expected(how)


@pytest.mark.parametrize("kind", KINDS)
def test_date_versions_against_dates_and_wall_clock_times(spark: Any, tmp_path: Path,
                                                          kind: str) -> None:
    path = tmp_path / "days.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE prices (id INTEGER PRIMARY KEY, sku TEXT, price REAL, "
                   "valid_from DATE)")
        # No valid_to: each version holds until the key's next one.
        db.executemany("INSERT INTO prices (sku, price, valid_from) VALUES (?,?,?)",
                       [("a", 1.0, "2024-01-01"), ("a", 2.0, "2024-01-05"),
                        ("b", 5.0, "2024-01-03")])
    connect = functools.partial(sqlite3.connect, str(path))
    schema = "id BIGINT, sku STRING, price DOUBLE, valid_from DATE"
    validity = Validity("valid_from")
    if kind == "full":
        prices: Any = FullCachingLookupProvider.of(
            SqlTableSource(connect, "prices", schema=schema),
            PeriodicCacheReloadTrigger(dt.timedelta(hours=1)), ["sku"], validity=validity)
    else:
        function = SqlLookupFunction(connect, "prices", ["sku"], schema=schema)
        prices = (LookupFunctionProvider.of(function, validity=validity) if kind == "none"
                  else PartialCachingLookupProvider.of(
                      function, DefaultLookupCache.new_builder().maximum_size(9).build(),
                      validity=validity))
    sales = [(1, "a", dt.date(2023, 12, 31), dt.datetime(2023, 12, 31, 23)),
             (2, "a", dt.date(2024, 1, 1), dt.datetime(2024, 1, 1)),
             (3, "a", dt.date(2024, 1, 4), dt.datetime(2024, 1, 4, 23, 59)),
             (4, "a", dt.date(2024, 1, 5), dt.datetime(2024, 1, 5)),
             (5, "b", dt.date(2024, 2, 1), None), (6, "c", dt.date(2024, 2, 1), None)]
    df = spark.createDataFrame(sales, "sale INT, sku STRING, day DATE, at TIMESTAMP_NTZ")
    want = {1: None, 2: 1.0, 3: 1.0, 4: 2.0, 5: 5.0, 6: None}
    by_day = lookup_join(df, prices, on="sku", columns=["price"], as_of="day")
    assert dict(sorted((r["sale"], r["price"]) for r in by_day.collect())) == want
    by_time = lookup_join(df, prices, on="sku", columns=["price"], as_of="at")
    assert dict(sorted((r["sale"], r["price"]) for r in by_time.collect())) == {
        **want, 5: None}  # a NULL as_of matches nothing


def test_as_of_is_checked_on_the_driver(spark: Any, tmp_path: Path) -> None:
    rates = provider("none", _connect(tmp_path), tmp_path)
    orders = spark.createDataFrame(
        [(1, "EUR", 1, dt.datetime(2024, 1, 1))],
        "order BIGINT, cur STRING, region INT, order_time TIMESTAMP_NTZ")
    with pytest.raises(ConfigError, match="only through a time zone"):
        lookup_join(orders, rates, on=["cur", "region"], as_of="order_time")
    with pytest.raises(ConfigError, match="'shipped' is not a column"):
        lookup_join(orders, rates, on=["cur", "region"], as_of="shipped")


def test_without_as_of_the_version_valid_now(spark: Any, tmp_path: Path) -> None:
    # EUR/1's last version is open-ended from 2024-01-10: the one valid now.
    rates = provider("partial", _connect(tmp_path), tmp_path)
    orders = spark.createDataFrame([(1, "EUR", 1), (2, "EUR", 2), (3, "GBP", 1)],
                                   "order BIGINT, cur STRING, region INT")
    out = lookup_join(orders, rates, on=["cur", "region"], columns=["rate"])
    assert sorted((r["order"], r["rate"]) for r in out.collect()) == [
        (1, 1.30), (2, 2.20), (3, None)]
