"""register_lookup_join (issue 30): a whole lookup join as one SQL table function over a
table argument gives exactly lookup_join's rows, in every mode, left and inner,
one-to-many and with null keys, on both kinds of session."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    lookup_join,
    register_lookup_join,
)
from scan import CollectionSource
from spark_lookup.errors import ConfigError
from tests.lookup.functions import DictLookup
from tests.lookup.spark.sql_support import (
    CUSTOMERS,
    customers_provider,
    hourly,
    places_provider,
    rows,
)

pytestmark = [pytest.mark.spark, pytest.mark.needs("ARROW_UDTF_ANALYZE")]


@pytest.fixture(params=["none", "partial", "full"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def provider_of(mode: str) -> Any:
    if mode == "none":
        return LookupFunctionProvider.of(DictLookup(CUSTOMERS))
    return customers_provider(mode)


@pytest.mark.every_line
@pytest.mark.parametrize("how", ["left", "inner"])
def test_the_table_function_gives_lookup_joins_rows(
    spark: Any, orders: str, mode: str, how: str
) -> None:
    provider = provider_of(mode)
    register_lookup_join(spark, "enrich", provider, on="id", how=how)
    by_sql = spark.sql("SELECT * FROM enrich(TABLE(orders))")
    by_join = lookup_join(spark.table("orders"), provider, on="id", how=how)
    assert by_sql.schema == by_join.schema
    # One-to-many (2 has two rows), no match (4) and a null key: as lookup_join.
    assert sorted(rows(by_sql), key=str) == sorted(rows(by_join), key=str)
    expected = {(10, "one"), (11, "zeta"), (11, "alpha")} | (
        {(12, None), (13, None)} if how == "left" else set())
    assert {(r[0], r[-1]) for r in rows(by_sql)} == expected


def test_a_subquery_argument_columns_prefix_and_a_composite_key(
    spark: Any, orders: str, visits: str
) -> None:
    register_lookup_join(spark, "enrich_eu", customers_provider("full"), on="id",
                         columns=["name"], prefix="c_")
    filtered = spark.sql("SELECT * FROM enrich_eu(TABLE(SELECT order_id, id FROM orders "
                         "WHERE id > 1))")
    assert filtered.columns == ["order_id", "id", "c_name"]
    assert sorted(rows(filtered), key=str) == [(11, 2, "alpha"), (11, 2, "zeta"),
                                               (12, 4, None)]
    register_lookup_join(spark, "enrich_place", places_provider("full"),
                         on=["region", "code"], how="inner")
    places = spark.sql("SELECT visit, label FROM enrich_place(TABLE(visits))")
    assert sorted(rows(places)) == [(1, "1a"), (2, "2a"), (2, "2a-again")]


def test_exact_types_cross_the_table_function(spark: Any) -> None:
    schema = "id TINYINT, amount DECIMAL(20,4), day DATE, at TIMESTAMP, blob BINARY"
    at = dt.datetime(2024, 3, 31, 1, 30, 15, 123456, tzinfo=dt.timezone.utc)
    row = (7, Decimal("12345678901234.5678"), dt.date(2024, 2, 29), at, b"\x00\xff")
    provider = FullCachingLookupProvider.of(CollectionSource([row], schema=schema), hourly(),
                                            ["id"])
    register_lookup_join(spark, "typed_join", provider, on="id")
    stream = spark.createDataFrame([(7, at), (8, None)], "id TINYINT, seen TIMESTAMP")
    stream.createOrReplaceTempView("typed_stream")
    try:
        by_sql = spark.sql("SELECT id, seen, amount, day, unix_micros(at) AS at, blob "
                           "FROM typed_join(TABLE(typed_stream))")
        by_join = lookup_join(stream, provider, on="id").selectExpr(
            "id", "seen", "amount", "day", "unix_micros(at) AS at", "blob")
        assert sorted(rows(by_sql), key=str) == sorted(rows(by_join), key=str)
        assert by_sql.schema == by_join.schema
    finally:
        spark.catalog.dropTempView("typed_stream")


def test_a_bad_key_fails_the_querys_analysis_with_lookup_joins_message(
    spark: Any, orders: str
) -> None:
    register_lookup_join(spark, "enrich_text", customers_provider("full"), on={"id_text": "id"})
    with pytest.raises(Exception, match=r"stream column 'id_text' is string but dimension "
                                        r"key 'id' is bigint"):
        spark.sql("SELECT * FROM enrich_text(TABLE(orders))").schema  # noqa: B018
    register_lookup_join(spark, "enrich_missing", customers_provider("full"), on="nope")
    with pytest.raises(Exception, match=r"'nope' is not a column"):
        spark.sql("SELECT * FROM enrich_missing(TABLE(orders))").schema  # noqa: B018
    register_lookup_join(spark, "enrich_scalar", customers_provider("full"), on="id")
    with pytest.raises(Exception, match=r"takes one table argument"):
        spark.sql("SELECT * FROM enrich_scalar(1)").schema  # noqa: B018


def test_a_planning_error_is_the_first_line_the_user_reads(spark: Any, orders: str) -> None:
    """Spark's analysis error carries our message on its first line, after its own
    preamble, without the Python traceback (issue 42, item 8)."""
    register_lookup_join(spark, "enrich_first_line", customers_provider("full"), on="nope")
    with pytest.raises(Exception) as raised:  # AnalysisException of either kind
        spark.sql("SELECT * FROM enrich_first_line(TABLE(orders))").schema  # noqa: B018
    first = str(raised.value).strip().splitlines()[0]
    assert "TABLE_VALUED_FUNCTION_FAILED_TO_ANALYZE_IN_PYTHON" in first, first
    assert ("lookup join 'enrich_first_line': ConfigError: on: 'nope' is not a column of "
            "the table argument") in first, first
    assert "Traceback" not in str(raised.value)


def test_registration_refuses_what_it_can_check_now(spark: Any) -> None:
    provider = customers_provider("full")
    with pytest.raises(ConfigError, match="reports no metrics"):
        register_lookup_join(spark, "enrich_m", provider, on="id", metrics=True)
    with pytest.raises(ConfigError, match="how must be a left or an inner join"):
        register_lookup_join(spark, "enrich_h", provider, on="id", how="right")
    with pytest.raises(ConfigError, match="built-in"):
        register_lookup_join(spark, "explode", provider, on="id")
    with pytest.raises(ConfigError, match="must be a lookup provider"):
        register_lookup_join(spark, "enrich_p", "customers", on="id")  # type: ignore[arg-type]


def test_a_streaming_view_is_a_table_argument_too(spark: Any, tmp_path: Any) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "part-0.json").write_text("\n".join(
        f'{{"order_id": {i}, "id": {k}}}' for i, k in enumerate([1, 2, 4])))
    stream = spark.readStream.schema("order_id BIGINT, id BIGINT").json(str(inbox))
    stream.createOrReplaceTempView("order_stream")
    register_lookup_join(spark, "enrich_stream", customers_provider("full"), on="id")
    joined = spark.sql("SELECT * FROM enrich_stream(TABLE(order_stream))")
    assert joined.isStreaming
    query = joined.writeStream.format("memory").queryName("enriched_stream").start()
    try:
        query.processAllAvailable()
        assert sorted(rows(spark.table("enriched_stream")), key=str) == [
            (0, 1, "one"), (1, 2, "alpha"), (1, 2, "zeta"), (2, 4, None)]
    finally:
        query.stop()
        spark.catalog.dropTempView("order_stream")
