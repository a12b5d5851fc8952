"""register_lookup_function and register_lookup_table_function over a provider with a
validity (issue 45): without as_of, the version valid now (an injected clock; the
query's session time zone against TIMESTAMP_NTZ versions); with as_of=True, the
version valid at the last argument, compared with the reference of the point-in-time
tests, with no cache, a partial cache and a full cache, on both kinds of session."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lookup import (
    LookupFunctionProvider,
    Validity,
    open_lookup,
    register_lookup_function,
    register_lookup_table_function,
)
from lookup.spark.sql_functions import _point_in_time, _StructLookup
from spark_lookup.errors import ConfigError
from tests.fixtures.rates import EVENTS, at, expected, prices_changing_ahead, provider
from tests.lookup.functions import DictLookup
from tests.lookup.spark.sql_support import customers_provider
from tests.lookup.spark.test_join_point_in_time import _connect

pytestmark = [pytest.mark.spark, pytest.mark.needs("UDTF_ANALYZE")]
NEEDS_ARROW_UDF = pytest.mark.needs("ARROW_UDF")

_ZONE = "spark.sql.session.timeZone"
KINDS = ["none", "partial", "full"]


@pytest.fixture
def events(spark: Any) -> Iterator[str]:
    spark.createDataFrame(
        EVENTS, "order BIGINT, cur STRING, region INT, order_time TIMESTAMP"
    ).repartition(2).createOrReplaceTempView("fn_rate_events")
    yield "fn_rate_events"
    spark.catalog.dropTempView("fn_rate_events")


def _pairs(frame: Any) -> list[tuple[Any, Any]]:
    return sorted(((row[0], row[1]) for row in frame.collect()), key=lambda p: p[0])


@pytest.mark.every_line
@NEEDS_ARROW_UDF
@pytest.mark.parametrize("kind", KINDS)
def test_scalar_as_of_answers_the_version_at_the_last_argument(
        spark: Any, tmp_path: Path, events: str, kind: str) -> None:
    rates = provider(kind, _connect(tmp_path), tmp_path)
    register_lookup_function(spark, f"rate_at_{kind}", rates, as_of=True)
    got = spark.sql(f"SELECT order, rate_at_{kind}(cur, region, order_time).rate "
                    f"FROM {events}")
    assert _pairs(got) == expected("left")
    # A NULL literal as the time: no version.
    literal = spark.sql(f"SELECT rate_at_{kind}('EUR', 1, NULL) AS r").collect()
    assert literal[0]["r"] is None


@pytest.mark.parametrize("kind", KINDS)
def test_table_function_as_of_yields_the_version_at_the_last_argument(
        spark: Any, tmp_path: Path, events: str, kind: str) -> None:
    rates = provider(kind, _connect(tmp_path), tmp_path)
    register_lookup_table_function(spark, f"rates_at_{kind}", rates, as_of=True)
    left = spark.sql(f"SELECT e.order, r.rate FROM {events} e LEFT JOIN LATERAL "
                     f"rates_at_{kind}(e.cur, e.region, e.order_time) r ON true")
    assert _pairs(left) == expected("left")
    inner = spark.sql(f"SELECT e.order, r.rate FROM {events} e, LATERAL "
                      f"rates_at_{kind}(e.cur, e.region, e.order_time) r")
    assert _pairs(inner) == expected("inner")


@pytest.mark.parametrize("kind", KINDS)
def test_without_as_of_both_answer_the_version_valid_now(
        spark: Any, tmp_path: Path, events: str, kind: str) -> None:
    rates = provider(kind, _connect(tmp_path), tmp_path)
    now = at(7).timestamp()
    register_lookup_table_function(spark, f"rates_now_{kind}", rates, clock=lambda: now)
    # Each key once, however many versions it has: the one valid on 7 January.
    want = [(1, 1.20), (7, 2.20), (11, 0.90), (14, None), (15, None)]
    lateral = spark.sql(
        f"SELECT e.order, r.rate FROM {events} e LEFT JOIN LATERAL "
        f"rates_now_{kind}(e.cur, e.region) r ON true WHERE e.order IN (1, 7, 11, 14, 15)")
    assert _pairs(lateral) == want
    from spark_lookup.compat import ARROW_UDF

    if ARROW_UDF.available():
        register_lookup_function(spark, f"rate_now_{kind}", rates, clock=lambda: now)
        scalar = spark.sql(f"SELECT order, rate_now_{kind}(cur, region).rate FROM {events} "
                           "WHERE order IN (1, 7, 11, 14, 15)")
        assert _pairs(scalar) == want


def test_now_is_the_query_session_time_zones_wall_clock(spark: Any) -> None:
    # A new price from 7 hours ahead of UTC's wall clock: already valid on Kiritimati's
    # (UTC+14), not yet on UTC's or on UTC-12's.
    prices = prices_changing_ahead(hours=7)
    from spark_lookup.compat import ARROW_UDF

    scalar = ARROW_UDF.available()
    if scalar:
        register_lookup_function(spark, "price_now_fn", prices)
    register_lookup_table_function(spark, "price_now_rows", prices)
    before = spark.conf.get(_ZONE)
    try:
        for zone, price in (("Pacific/Kiritimati", 2.0), ("Etc/GMT+12", 1.0), ("UTC", 1.0)):
            spark.conf.set(_ZONE, zone)
            got = spark.sql("SELECT price FROM price_now_rows(1)").collect()
            assert [row["price"] for row in got] == [price], zone
            if scalar:
                got = spark.sql("SELECT price_now_fn(1).price AS price").collect()
                assert [row["price"] for row in got] == [price], zone
    finally:
        spark.conf.set(_ZONE, before)


def test_wall_clock_times_and_dates_pick_wall_clock_versions(spark: Any) -> None:
    prices = LookupFunctionProvider.of(
        DictLookup([(1, 1.0, dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 5, 12)),
                    (1, 2.0, dt.datetime(2024, 1, 5, 12), None)],
                   schema="id BIGINT, price DOUBLE, valid_from TIMESTAMP_NTZ, "
                          "valid_to TIMESTAMP_NTZ"),
        validity=Validity("valid_from", "valid_to"))
    register_lookup_table_function(spark, "price_wall_rows", prices, as_of=True)
    query = ("SELECT t.n, p.price FROM VALUES (1, {}), (2, {}), (3, {}) AS t(n, at) "
             "LEFT JOIN LATERAL price_wall_rows(1, t.at) p ON true ORDER BY t.n")
    ntz = query.format("TIMESTAMP_NTZ'2024-01-05 11:59:59'", "TIMESTAMP_NTZ'2024-01-05 12:00:00'",
                       "TIMESTAMP_NTZ'2023-12-31 23:00:00'")
    assert [tuple(r) for r in spark.sql(ntz).collect()] == [(1, 1.0), (2, 2.0), (3, None)]
    dates = query.format("DATE'2024-01-05'", "DATE'2024-01-06'", "DATE'2023-12-31'")
    assert [tuple(r) for r in spark.sql(dates).collect()] == [(1, 1.0), (2, 2.0), (3, None)]
    from spark_lookup.compat import ARROW_UDF

    if ARROW_UDF.available():
        register_lookup_function(spark, "price_wall_fn", prices, as_of=True)
        got = spark.sql("SELECT price_wall_fn(1, DATE'2024-01-06').price AS p, "
                        "price_wall_fn(1, TIMESTAMP_NTZ'2024-01-02 00:00:00').price AS q")
        assert tuple(got.collect()[0]) == (2.0, 1.0)


def test_as_of_is_refused_or_checked(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="has no validity"):
        register_lookup_table_function(spark, "no_versions", customers_provider("full"),
                                       as_of=True)
    with pytest.raises(ConfigError, match="as_of must be True or False"):
        register_lookup_table_function(spark, "no_versions", customers_provider("full"),
                                       as_of="order_time")  # type: ignore[arg-type]
    rates = provider("none", _connect(tmp_path), tmp_path)
    register_lookup_table_function(spark, "rates_checked", rates, as_of=True)
    # A TIMESTAMP_NTZ against TIMESTAMP versions fails the query's analysis.
    with pytest.raises(Exception, match=r"the time argument \(the last\) is timestamp_ntz"):
        spark.sql("SELECT * FROM rates_checked('EUR', 1, "
                  "TIMESTAMP_NTZ'2024-01-05 00:00:00')").collect()
    with pytest.raises(Exception, match=r"takes 2 key argument\(s\) .* and a time, got 2"):
        spark.sql("SELECT * FROM rates_checked('EUR', 1)").collect()
    from spark_lookup.compat import ARROW_UDF

    if ARROW_UDF.available():
        register_lookup_function(spark, "rate_checked", rates, as_of=True)
        with pytest.raises(Exception, match=r"the time argument \(the last\) is date"):
            spark.sql("SELECT rate_checked('EUR', 1, DATE'2024-01-05')").collect()


def test_scalar_rows_older_than_the_retention_are_null_and_counted(tmp_path: Path) -> None:
    # Without Spark: the worker side of the scalar function over a shared runtime, so
    # that its metrics can be read.
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    rows = [(1, 1.0, now - dt.timedelta(days=100), now - dt.timedelta(days=10)),
            (1, 2.0, now - dt.timedelta(days=10), None)]
    prices = LookupFunctionProvider.of(
        DictLookup(rows, schema="id BIGINT, price DOUBLE, valid_from TIMESTAMP, "
                                "valid_to TIMESTAMP"),
        validity=Validity("valid_from", "valid_to", retention=dt.timedelta(days=30)))

    class _Conf:
        def get(self, _: str) -> str:
            return "UTC"

    spark = type("Spark", (), {"conf": _Conf()})()
    function = _StructLookup("price_at", prices, _point_in_time(spark, "price_at", prices, True))
    times = [now - dt.timedelta(days=50), now - dt.timedelta(days=20), now, None]
    with open_lookup(prices) as handle:
        out = function.lookup_batch(
            [pa.array([1, 1, 1, 1], pa.int64()), pa.array(times, pa.timestamp("us", "UTC"))],
            handle.runtime)
        assert [None if v is None else v["price"] for v in out.to_pylist()] == [
            None, 1.0, 2.0, None]
        assert handle.metrics.num_out_of_retention == 1
