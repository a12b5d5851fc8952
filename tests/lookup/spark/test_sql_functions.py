"""register_lookup_function and register_lookup_table_function on a local Spark session:
struct lookups, LATERAL joins, metrics, errors, with partial and full caches."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from lookup import (
    FullCachingLookupProvider,
    lookup_join,
    lookup_metrics,
    register_lookup_function,
    register_lookup_table_function,
)
from scan import CollectionSource
from spark_lookup.compat import ARROW_UDF, UDTF_ANALYZE
from spark_lookup.errors import ConfigError, MetricsUnavailableError
from tests.lookup.spark.sql_support import (
    CUSTOMERS,
    customers_provider,
    hourly,
    places_provider,
    plain,
    rows,
)

pytestmark = pytest.mark.spark
NEEDS_ARROW_UDF = pytest.mark.needs("ARROW_UDF")  # register_lookup_function: PySpark 4.1+


# --- scalar function ------------------------------------------------------------------


@NEEDS_ARROW_UDF
def test_scalar_returns_the_first_matching_row_as_a_struct(
    spark: Any, orders: str, kind: str
) -> None:
    register_lookup_function(spark, "customer", customers_provider(kind))
    result = spark.sql(
        "SELECT order_id, customer(id) AS c, customer(id).name AS name, "
        "customer(CAST(id AS INT)).name AS by_int FROM orders"
    )
    assert result.schema.simpleString() == (
        "struct<order_id:bigint,c:struct<id:bigint,name:string>,name:string,by_int:string>"
    )
    # 2 has the rows "zeta" then "alpha": the first the runtime returns wins: the
    # function's first for a partial cache, the least by value for a full cache (the
    # same after every reload, whatever order the splits came in). No match (4) and a
    # null key give NULL.
    first = "zeta" if kind == "partial" else "alpha"
    assert rows(result) == [
        (10, (1, "one"), "one", "one"),
        (11, (2, first), first, first),
        (12, None, None, None),
        (13, None, None, None),
    ]


@NEEDS_ARROW_UDF
def test_scalar_struct_expands_with_star_in_an_outer_query(spark: Any, orders: str) -> None:
    function = register_lookup_function(spark, "customer", customers_provider("full"))
    expected = [(None, None), (None, None), (1, "one"), (2, "alpha")]
    # Spark SQL does not parse customer(id).*; an outer query (or DataFrame) expands it.
    assert rows(spark.sql("SELECT c.* FROM (SELECT customer(id) AS c FROM orders)")) == expected
    frame = spark.table("orders").select(function("id").alias("c")).select("c.*")
    assert frame.columns == ["id", "name"]
    assert rows(frame) == expected


@NEEDS_ARROW_UDF
def test_composite_key(spark: Any, visits: str, kind: str) -> None:
    provider = places_provider(kind)
    register_lookup_function(spark, "place", provider)
    register_lookup_table_function(spark, "place_rows", provider)
    scalar = spark.sql(
        "SELECT visit, p.* FROM (SELECT visit, place(region, code) AS p FROM visits)"
    )
    assert rows(scalar) == [
        (1, 1, "a", "1a"),
        (2, 2, "a", "2a"),  # first of two rows
        (3, None, None, None),  # no match
        (4, None, None, None),  # a null in either part of the key: NULL
        (5, None, None, None),
    ]
    literal = spark.sql("SELECT place(1, 'b').label AS label, place(2, NULL) AS p")
    assert plain(literal.collect()) == [("1b", None)]
    lateral = spark.sql(
        "SELECT v.visit, p.label FROM visits v "
        "LEFT JOIN LATERAL place_rows(v.region, v.code) p ON true"
    )
    assert rows(lateral) == [
        (1, "1a"), (2, "2a"), (2, "2a-again"), (3, None), (4, None), (5, None)
    ]


@pytest.mark.every_line
@NEEDS_ARROW_UDF
def test_scalar_keeps_exact_types(spark: Any) -> None:
    schema = (
        "id TINYINT, amount DECIMAL(20,4), day DATE, at TIMESTAMP, blob BINARY, "
        "ratio FLOAT, flag BOOLEAN"
    )
    at = dt.datetime(2024, 3, 31, 1, 30, 15, 123456, tzinfo=dt.timezone.utc)
    row = (7, Decimal("12345678901234.5678"), dt.date(2024, 2, 29), at, b"\x00\xff", 0.25, True)
    source = CollectionSource([row], schema=schema)
    provider = FullCachingLookupProvider.of(source, hourly(), ["id"])
    register_lookup_function(spark, "typed", provider)
    register_lookup_table_function(spark, "typed_rows", provider)
    query = (
        "SELECT d.id, d.amount, d.day, unix_micros(d.at) AS at, d.blob, d.ratio, d.flag FROM {}"
    )
    scalar = spark.sql(query.format("(SELECT typed(CAST(7 AS BIGINT)) AS d)"))
    table = spark.sql(query.format("typed_rows(7) d"))
    expected_row = (*row[:3], int(at.timestamp()) * 1_000_000 + 123456, *row[4:])
    for result in (scalar, table):
        assert plain(result.collect()) == [expected_row]
    assert spark.sql("SELECT typed(7) AS d").schema["d"].dataType.simpleString() == (
        "struct<id:tinyint,amount:decimal(20,4),day:date,at:timestamp,blob:binary,"
        "ratio:float,flag:boolean>"
    )


# --- table function --------------------------------------------------------------------


@pytest.mark.every_line
def test_lateral_gives_every_matching_row(spark: Any, orders: str, kind: str) -> None:
    register_lookup_table_function(spark, "customer_rows", customers_provider(kind))
    inner = [(10, 1, "one"), (11, 2, "alpha"), (11, 2, "zeta")]
    for query in (
        "SELECT o.order_id, c.* FROM orders o, LATERAL customer_rows(o.id) c",
        "SELECT o.order_id, c.* FROM orders o JOIN LATERAL customer_rows(o.id) c",
        # Without ON true, even LEFT JOIN LATERAL gives inner results (Spark's behavior).
        "SELECT o.order_id, c.* FROM orders o LEFT JOIN LATERAL customer_rows(o.id) c",
    ):
        assert rows(spark.sql(query)) == inner, query
    left = spark.sql(
        "SELECT o.order_id, c.* FROM orders o "
        "LEFT JOIN LATERAL customer_rows(o.id) c ON true"
    )
    assert rows(left) == [*inner, (12, None, None), (13, None, None)]


# --- metrics ---------------------------------------------------------------------------


@NEEDS_ARROW_UDF
def test_sql_functions_report_no_metrics_of_their_own(spark: Any, orders: str) -> None:
    provider = customers_provider("partial")
    register_lookup_function(spark, "customer", provider)
    register_lookup_table_function(spark, "customer_rows", provider)

    spark.sql("SELECT customer(id) FROM orders").collect()
    spark.sql("SELECT c.* FROM orders o, LATERAL customer_rows(o.id) c").collect()
    # A function call in a query has no plan node to observe: nothing reaches the driver,
    # and lookup_metrics says so rather than answering zeros.
    with pytest.raises(MetricsUnavailableError, match="SQL functions report none"):
        lookup_metrics(provider)

    lookup_join(spark.table("orders"), provider, on="id", metrics=True).collect()
    total = lookup_metrics(provider)
    # The join's one task reports its worker's runtime, which the SQL lookups share:
    # 3 distinct keys per run, for each earlier run that ran in the same worker too (a
    # run in a fresh worker loads them: the table function one key per load).
    assert total.hit_count + total.miss_count in (3, 6, 9)
    assert total.miss_count in (3, 6, 9)
    assert 1 <= total.load_count <= total.miss_count
    assert total.num_load_failures == 0


# --- errors ----------------------------------------------------------------------------


@NEEDS_ARROW_UDF
def test_scalar_bad_key_type_fails_naming_function_argument_and_types(
    spark: Any, orders: str
) -> None:
    from pyspark.errors import PythonException

    register_lookup_function(spark, "customer", customers_provider("full"))
    message = "customer: argument 1 is string but the key column 'id' is bigint"
    with pytest.raises(PythonException, match=message):
        spark.sql("SELECT customer(id_text) FROM orders").collect()
    with pytest.raises(PythonException, match=r"customer takes 1 key argument\(s\)"):
        spark.sql("SELECT customer(id, id) FROM orders").collect()


@pytest.mark.needs("UDTF_ANALYZE")
def test_table_function_bad_key_type_fails_at_analysis(spark: Any, orders: str) -> None:
    from pyspark.errors import AnalysisException

    register_lookup_table_function(spark, "customer_rows", customers_provider("full"))
    message = "customer_rows: argument 1 is string but the key column 'id' is bigint"
    with pytest.raises(AnalysisException, match=message):
        spark.sql("SELECT * FROM orders o, LATERAL customer_rows(o.id_text) c")  # no action
    with pytest.raises(AnalysisException, match=r"customer_rows takes 1 key argument\(s\)"):
        spark.sql("SELECT * FROM customer_rows(1, 2)")


@pytest.mark.skipif(UDTF_ANALYZE.available(),
                    reason="with UDTF analyze the key types fail the query's analysis "
                           "(tests/lookup/spark/test_sql_functions.py)")
def test_without_analyze_the_table_function_checks_keys_at_the_first_row(
        spark: Any, orders: str) -> None:
    from pyspark.errors import PythonException

    register_lookup_table_function(spark, "customer_rows", customers_provider("full"))
    lateral = "SELECT o.order_id, c.name FROM orders o, LATERAL customer_rows({}) c"
    assert sorted(tuple(r) for r in spark.sql(lateral.format("o.id")).collect()) == [
        (10, "one"), (11, "alpha"), (11, "zeta")]
    with pytest.raises(PythonException, match=r"customer_rows takes 1 key argument\(s\)"):
        spark.sql(lateral.format("o.id, o.id")).collect()
    with pytest.raises(PythonException, match="KeyKindError"):
        spark.sql(lateral.format("o.id_text")).collect()


@pytest.mark.parametrize(
    ("name", "provider", "message"),
    [
        ("1st", "full", "invalid SQL function name"),
        ("a-b", "full", "invalid SQL function name"),
        ("db.fn", "full", "invalid SQL function name"),
        ("lower", "full", "built-in"),
        ("explode", "full", "built-in"),
        ("fine", CUSTOMERS, "must be a lookup provider"),
    ],
)
def test_registration_is_validated_on_the_driver(
    spark: Any, name: str, provider: Any, message: str
) -> None:
    if provider == "full":
        provider = customers_provider("full")
    registers = [register_lookup_table_function]
    if ARROW_UDF.available():  # else refused first: tests/spark_lookup/test_compat.py
        registers.append(register_lookup_function)
    for register in registers:
        with pytest.raises(ConfigError, match=message):
            register(spark, name, provider)


# --- sharing with lookup_join (in this process, as a Python worker runs it) ------------


def test_sql_and_lookup_join_share_the_worker_runtime(spark: Any, orders: str) -> None:
    from lookup.runtime import worker as _worker
    from lookup.spark.join import plan_join
    from lookup.spark.join_worker import JoinFunction
    from lookup.spark.report import REPORT_COLUMN, metrics_report, parse_report
    from lookup.spark.sql_functions import _StructLookup

    provider = customers_provider("partial")
    function = provider.function  # type: ignore[attr-defined]
    stream = pa.record_batch({"id": pa.array([1, 2, 4, None], pa.int64())})
    plan = plan_join(spark.table("orders").select("id").schema, provider, on="id")
    try:
        joined = list(JoinFunction(provider, plan.shape, (True,))(iter([stream])))
        struct = list(_StructLookup("customer", provider)(iter([stream["id"]])))
        handler = register_lookup_table_function(spark, "customer_rows", provider).func
        table_function = handler()
        lateral = [table_function.eval(2), table_function.eval(None), table_function.eval(2)]
        last = parse_report(metrics_report(provider))
    finally:
        _worker._reset_for_tests()
    assert function.batch_calls == [[(1,), (2,), (4,)]]  # one load, for all three users
    (rows,) = joined
    assert rows.num_rows == 5
    reports = rows.column(REPORT_COLUMN)
    assert reports.null_count == 4
    # A left join writes its worker's metrics after each batch on the batch's first row.
    at_join = parse_report(reports[0].as_py())
    assert at_join is not None
    assert (at_join.values["hit_count"], at_join.values["miss_count"]) == (0, 3)
    assert struct[0].to_pylist() == [
        {"id": 1, "name": "one"}, {"id": 2, "name": "zeta"}, None, None
    ]
    assert lateral == [((2, "zeta"), (2, "alpha")), (), ((2, "zeta"), (2, "alpha"))]
    # The shared runtime's cumulative metrics: 3 misses, then hits for every user.
    assert last is not None
    assert (last.values["hit_count"], last.values["miss_count"],
            last.values["load_count"]) == (4, 3, 1)
