"""plan_join on the driver: Spark's names for the join kinds, and errors that say what
is wrong with ``on``."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from lookup import LookupFunctionProvider
from lookup.spark.join import plan_join
from spark_lookup.errors import ConfigError
from tests.lookup.functions import DictLookup

STREAM = T.StructType([T.StructField("cust_id", T.LongType()),
                       T.StructField("amount", T.DoubleType())])


def provider() -> LookupFunctionProvider:
    return LookupFunctionProvider.of(DictLookup([(1, "Ada")]))


@pytest.mark.parametrize(("how", "kind"), [
    ("left", "left"), ("LEFT", "left"), ("left_outer", "left"), ("leftouter", "left"),
    ("Left_Outer", "left"), ("inner", "inner"), ("INNER", "inner"),
])
def test_spark_join_type_aliases_are_accepted(how: str, kind: str) -> None:
    assert plan_join(STREAM, provider(), {"cust_id": "id"}, how=how).shape.how == kind


@pytest.mark.parametrize("how", ["right", "full_outer", "cross", "left_semi", "", None, 1])
def test_other_join_types_are_refused_with_the_accepted_names(how: object) -> None:
    with pytest.raises(ConfigError, match="how must be a left or an inner join.*'left_outer'"):
        plan_join(STREAM, provider(), {"cust_id": "id"}, how=how)  # type: ignore[arg-type]


def test_a_stream_column_named_like_no_key_says_how_to_map_it() -> None:
    with pytest.raises(ConfigError, match=r"'cust_id' is not a column of the provider's schema "
                                          r"\['id', 'name'\]; the provider is keyed by "
                                          r"\['id'\].*on=\{stream_column: 'id'\}"):
        plan_join(STREAM, provider(), "cust_id")


def test_a_stream_column_that_does_not_exist_is_named_with_the_stream_columns() -> None:
    with pytest.raises(ConfigError, match=r"'custid' is not a column of the stream DataFrame "
                                          r"\['cust_id', 'amount'\]"):
        plan_join(STREAM, provider(), {"custid": "id"})


def test_a_name_on_neither_side_is_reported_as_missing_from_the_stream() -> None:
    with pytest.raises(ConfigError, match=r"on: 'custid' is not a column of the stream "
                                          r"DataFrame \['cust_id', 'amount'\]"):
        plan_join(STREAM, provider(), "custid")


def test_a_dimension_column_missing_from_the_schema_is_named_with_the_schema() -> None:
    with pytest.raises(ConfigError, match=r"'ident' is not a column of the provider's schema "
                                          r"\['id', 'name'\]; the provider is keyed by "
                                          r"\['id'\]\.$"):
        plan_join(STREAM, provider(), {"cust_id": "ident"})


def test_a_dimension_column_that_is_no_key_is_named_as_such() -> None:
    with pytest.raises(ConfigError, match=r"'name' is not a key column of the provider; the "
                                          r"provider is keyed by \['id'\]"):
        plan_join(STREAM, provider(), {"cust_id": "name"})


def test_a_key_column_left_out_or_named_twice_is_named() -> None:
    composite = LookupFunctionProvider.of(
        DictLookup(schema="a BIGINT, b BIGINT, v STRING", key_columns=["a", "b"]))
    stream = T.StructType([T.StructField("x", T.LongType()), T.StructField("y", T.LongType())])
    with pytest.raises(ConfigError, match=r"key column 'b' is not named; the provider is keyed "
                                          r"by \['a', 'b'\]"):
        plan_join(stream, composite, {"x": "a"})
    with pytest.raises(ConfigError, match=r"'a' is named more than once"):
        plan_join(stream, composite, {"x": "a", "y": "a"})
