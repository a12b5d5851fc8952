"""The Spark data source adapter on sources that fetch Arrow: only the declared columns
of a wide file reach Spark (the others are never decoded), as batches of the declared
schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from scan import CollectionSource, FileSource, plan_splits, register_data_source
from tests.connectors.files.test_source import _corrupt_columns_except, _wide

pytestmark = [pytest.mark.spark, pytest.mark.every_line, pytest.mark.needs("PYTHON_DATA_SOURCE")]


def partitions(df: Any) -> int:
    """Spark partitions holding rows (every split has some here); on both session kinds."""
    from pyspark.sql.functions import spark_partition_id

    return int(df.select(spark_partition_id().alias("p")).distinct().count())


def test_a_wide_parquet_file_reaches_spark_as_its_declared_columns(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "wide.parquet"
    table = _wide(path, 90)
    _corrupt_columns_except(path, {"c1", "c48"})
    source = FileSource(path, schema="c48 BIGINT, c1 STRING")
    register_data_source(spark, "test_wide_parquet", source)
    df = spark.read.format("test_wide_parquet").load()
    assert df.schema.simpleString() == "struct<c48:bigint,c1:string>"
    assert partitions(df) == len(plan_splits(source)) == 3
    expected = zip(table.column("c48").to_pylist(), map(str, table.column("c1").to_pylist()),
                   strict=True)
    assert sorted(tuple(r) for r in df.collect()) == sorted(expected)


def test_a_table_collection_reaches_spark_as_its_declared_columns(spark: Any) -> None:
    table = pa.table({"id": list(range(100)), "skip": [b"x"] * 100,
                      "v": [f"v{i}" for i in range(100)]})
    register_data_source(spark, "test_table_collection",
                         CollectionSource(table, num_splits=3, schema="v STRING, id INT"))
    df = spark.read.format("test_table_collection").load()
    assert partitions(df) == 3
    assert sorted(tuple(r) for r in df.collect()) == sorted((f"v{i}", i) for i in range(100))
