"""JVM-free DDL parsing (spark_lookup.schema) and SQL identifiers (spark_lookup.identifiers)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from spark_lookup.errors import ConfigError
from spark_lookup.identifiers import qualified_name, quote_identifier
from spark_lookup.schema import parse_schema, to_arrow_schema


def test_parse_schema_covers_dimension_types() -> None:
    struct = parse_schema(
        "id BIGINT NOT NULL, `odd name` STRING COMMENT 'x', price DECIMAL(10, 2), "
        "tags ARRAY<STRING>, attrs MAP<STRING, INT>, addr STRUCT<city: STRING, zip: INT>, "
        "born DATE, seen TIMESTAMP, local TIMESTAMP_NTZ, ok BOOLEAN, f FLOAT, d DOUBLE, "
        "b BINARY, s SMALLINT, t TINYINT, i INT, v VARCHAR(5)"
    )
    assert struct.fieldNames()[:3] == ["id", "odd name", "price"]
    assert struct["id"].nullable is False
    assert struct["price"].dataType == T.DecimalType(10, 2)
    assert struct["addr"].dataType == T.StructType(
        [T.StructField("city", T.StringType()), T.StructField("zip", T.IntegerType())]
    )
    assert parse_schema("a: int, b: string") == parse_schema("a INT, b STRING")
    assert parse_schema("struct<a:int>") == parse_schema("a INT")
    assert parse_schema(struct) is struct


@pytest.mark.parametrize(
    "ddl",
    ["", "id", "id FOO", "id INT,", "id INT, id STRING", "a DECIMAL(50, 2)", "a ARRAY<INT",
     "a INT b INT", "1a INT"],
)
def test_parse_schema_errors(ddl: str) -> None:
    with pytest.raises(ConfigError):
        parse_schema(ddl)


def test_parse_schema_rejects_non_schemas() -> None:
    with pytest.raises(ConfigError, match="DDL string or a pyspark StructType"):
        parse_schema(42)


def test_to_arrow_schema_matches_spark_arrow_types() -> None:
    schema = to_arrow_schema(
        "id BIGINT NOT NULL, name STRING, d DATE, ts TIMESTAMP, p DECIMAL(5,1)"
    )
    assert schema == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("d", pa.date32()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("p", pa.decimal128(5, 1)),
        ]
    )


@pytest.mark.parametrize(
    "name", ["", "1abc", "a b", 'a"b', "a;drop table x", "x" * 64, "a-b", None, 5]
)
def test_invalid_identifiers_are_refused(name: Any) -> None:
    with pytest.raises(ConfigError):
        quote_identifier(name, "column")


def test_quoting_and_qualified_names() -> None:
    assert quote_identifier("customer_id") == '"customer_id"'
    assert qualified_name("public.customers") == '"public"."customers"'
    with pytest.raises(ConfigError, match="table name"):
        qualified_name("a.b.c.d")
    with pytest.raises(ConfigError, match="table name"):
        qualified_name("x; DROP TABLE y")


def test_an_identifier_is_refused_with_a_trailing_newline() -> None:
    for name in ("customers\n", "id\n", "a\nb"):
        with pytest.raises(ConfigError, match="invalid"):
            quote_identifier(name)
