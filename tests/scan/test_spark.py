"""scan sources read by Spark as Python data sources: splits planned on the driver, one
partition per split, Arrow batches of the declared schema read on executors."""

from __future__ import annotations

import datetime as dt
import functools
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scan import CollectionSource, FileSource, SqlTableSource, plan_splits, register_data_source
from spark_lookup.errors import ConfigError

pytestmark = [pytest.mark.spark, pytest.mark.needs("PYTHON_DATA_SOURCE")]


def partitions(df: Any) -> int:
    """Spark partitions that hold rows (``df.rdd`` is not on Spark Connect)."""
    from pyspark.sql import functions as F

    return int(df.select(F.spark_partition_id()).distinct().count())


def test_collection_source_one_partition_per_split(spark: Any) -> None:
    rows = [(i, f"name-{i}", Decimal(i) / 4, dt.date(2026, 1, 1 + i % 28)) for i in range(1000)]
    source = CollectionSource(rows, num_splits=4,
                              schema="id BIGINT, name STRING, amount DECIMAL(10,2), day DATE")
    register_data_source(spark, "test_collection", source)
    df = spark.read.format("test_collection").load()
    assert df.schema.simpleString() == (
        "struct<id:bigint,name:string,amount:decimal(10,2),day:date>")
    assert partitions(df) == 4
    assert sorted(tuple(r) for r in df.collect()) == sorted(rows)


@pytest.mark.every_line
def test_sql_table_source_reads_the_table_as_it_is_at_each_query(spark: Any,
                                                                   tmp_path: Path) -> None:
    db = tmp_path / "ref.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE countries (id INTEGER PRIMARY KEY, code TEXT, name TEXT)")
        conn.executemany("INSERT INTO countries VALUES (?, ?, ?)",
                         [(i, f"c{i}", f"Country {i}") for i in range(1, 501)])
    source = SqlTableSource(functools.partial(sqlite3.connect, str(db)), "countries",
                            chunk_size=100, schema="id BIGINT, code STRING, name STRING")
    assert len(plan_splits(source)) >= 5
    register_data_source(spark, "test_countries", source)
    df = spark.read.format("test_countries").load()
    assert df.count() == 500
    assert partitions(df) == len(plan_splits(source))
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO countries VALUES (501, 'new', 'New Country')")
    again = spark.read.format("test_countries").load()
    assert again.count() == 501
    assert again.filter("code = 'new'").first()["name"] == "New Country"


def test_sql_table_source_default_plans_one_partition_per_reader(spark: Any,
                                                                  tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        conn.execute("WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g "
                     "WHERE n < 400000) INSERT INTO t SELECT n, 'v' || n FROM g")
    source = SqlTableSource(functools.partial(sqlite3.connect, str(db)), "t",
                            schema="id BIGINT, v STRING")
    register_data_source(spark, "test_default_chunks", source, parallelism=3)
    df = spark.read.format("test_default_chunks").load()
    assert partitions(df) == 3
    assert df.count() == 400_000  # 6 chunks of 65,536 rows at most: 3 and 5 readers
    assert partitions(spark.read.format("test_default_chunks").option("parallelism", 5)
                      .load()) == 5
    with pytest.raises(ConfigError, match="parallelism"):
        register_data_source(spark, "test_bad_parallelism", source, parallelism=0)


def test_parquet_file_source_by_row_group(spark: Any, tmp_path: Path) -> None:
    table = pa.table({"id": pa.array(range(100), pa.int64()),
                      "v": pa.array([f"v{i}" for i in range(100)])})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=25)
    source = FileSource([str(tmp_path / "a.parquet")], format="parquet",
                        schema="id BIGINT, v STRING")
    register_data_source(spark, "test_parquet", source)
    df = spark.read.format("test_parquet").load()
    assert partitions(df) == 4
    assert sorted(tuple(r) for r in df.collect()) == [(i, f"v{i}") for i in range(100)]


def test_registration_errors(spark: Any) -> None:
    source = CollectionSource([(1,)], schema="id BIGINT")
    with pytest.raises(ConfigError, match="invalid data source name"):
        register_data_source(spark, "bad name!", source)
    with pytest.raises(ConfigError, match="scan.Source"):
        register_data_source(spark, "x", object())  # type: ignore[arg-type]
    register_data_source(spark, "test_schema", source)
    with pytest.raises(Exception, match="user-specified schema"):
        spark.read.format("test_schema").schema("other STRING").load().collect()
