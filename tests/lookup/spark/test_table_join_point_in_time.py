"""register_lookup_join(..., as_of=) (issue 45): the SQL table function gives each row
the version valid at its own time, with no cache, a partial cache and a full cache, on
both kinds of session; compared with the reference of the point-in-time tests (times
exactly at valid_from and valid_to, NULL, before the first version, a gap, a composite
key). Without as_of, "now" against TIMESTAMP_NTZ versions is the query's session time
zone's wall clock."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lookup import lookup_join, register_lookup_join
from spark_lookup.errors import ConfigError
from tests.fixtures.rates import EVENTS, expected, prices_changing_ahead, provider
from tests.lookup.spark.sql_support import customers_provider
from tests.lookup.spark.test_join_point_in_time import _connect

pytestmark = [pytest.mark.spark, pytest.mark.needs("ARROW_UDTF_ANALYZE")]

_ZONE = "spark.sql.session.timeZone"


@pytest.fixture
def events(spark: Any) -> Iterator[str]:
    spark.createDataFrame(
        EVENTS, "order BIGINT, cur STRING, region INT, order_time TIMESTAMP"
    ).repartition(2).createOrReplaceTempView("rate_events")
    yield "rate_events"
    spark.catalog.dropTempView("rate_events")


@pytest.mark.parametrize("kind", ["none", "partial", "full"])
def test_each_row_joins_the_version_valid_at_its_time(spark: Any, tmp_path: Path,
                                                      events: str, kind: str) -> None:
    rates = provider(kind, _connect(tmp_path), tmp_path)
    for how in ("left", "inner"):
        name = f"rate_at_{kind}_{how}"
        register_lookup_join(spark, name, rates, on=["cur", "region"], how=how,
                             columns=["rate"], as_of="order_time")
        by_sql = spark.sql(f"SELECT * FROM {name}(TABLE({events}))")
        assert by_sql.columns == ["order", "cur", "region", "order_time", "rate"]
        got = sorted((row["order"], row["rate"]) for row in by_sql.collect())
        assert got == expected(how)
        by_join = lookup_join(spark.table(events), rates, on=["cur", "region"], how=how,
                              columns=["rate"], as_of="order_time")
        assert by_sql.schema == by_join.schema


def test_as_of_is_checked_in_the_querys_analysis(spark: Any, tmp_path: Path) -> None:
    rates = provider("full", _connect(tmp_path), tmp_path)
    spark.createDataFrame([(1, "EUR", 1, dt.datetime(2024, 1, 1))],
                          "order BIGINT, cur STRING, region INT, order_time TIMESTAMP_NTZ"
                          ).createOrReplaceTempView("wall_events")
    try:
        register_lookup_join(spark, "rate_wall", rates, on=["cur", "region"],
                             as_of="order_time")
        with pytest.raises(Exception, match=r"ConfigError: as_of: stream column 'order_time' "
                                            r"is timestamp_ntz .* only through a time zone"):
            spark.sql("SELECT * FROM rate_wall(TABLE(wall_events))").schema  # noqa: B018
        register_lookup_join(spark, "rate_shipped", rates, on=["cur", "region"],
                             as_of="shipped")
        with pytest.raises(Exception, match=r"as_of: 'shipped' is not a column of the table "
                                            r"argument"):
            spark.sql("SELECT * FROM rate_shipped(TABLE(wall_events))").schema  # noqa: B018
    finally:
        spark.catalog.dropTempView("wall_events")


def test_registration_refuses_an_as_of_it_can_check_now(spark: Any) -> None:
    with pytest.raises(ConfigError, match="has no validity"):
        register_lookup_join(spark, "enrich_asof", customers_provider("full"), on="id",
                             as_of="order_time")
    with pytest.raises(ConfigError, match="as_of must be a column name"):
        register_lookup_join(spark, "enrich_asof", customers_provider("full"), on="id",
                             as_of=3)  # type: ignore[arg-type]


def test_now_is_the_query_session_time_zones_wall_clock(spark: Any) -> None:
    # A new price from 7 hours ahead of UTC's wall clock: already valid on Kiritimati's
    # (UTC+14), not yet on UTC's or on UTC-12's.
    prices = prices_changing_ahead(hours=7)
    register_lookup_join(spark, "price_now", prices, on="id", columns=["price"])
    spark.createDataFrame([(1,)], "id BIGINT").createOrReplaceTempView("price_keys")
    before = spark.conf.get(_ZONE)
    try:
        for zone, price in (("Pacific/Kiritimati", 2.0), ("Etc/GMT+12", 1.0), ("UTC", 1.0)):
            spark.conf.set(_ZONE, zone)
            got = spark.sql("SELECT price FROM price_now(TABLE(price_keys))").collect()
            assert [row["price"] for row in got] == [price], zone
    finally:
        spark.conf.set(_ZONE, before)
        spark.catalog.dropTempView("price_keys")
