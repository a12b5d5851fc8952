"""The Spark text a refreshed view reads where PySpark has no structured API, pinned on
both kinds of session: the class of a source's error in the worker's traceback, and a
cached relation's size in ``EXPLAIN COST``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.errors import PySparkException

from spark_lookup.compat import PYTHON_DATA_SOURCE, pyspark_version

if not PYTHON_DATA_SOURCE.available():
    pytest.skip(f"PySpark {pyspark_version()} lacks {PYTHON_DATA_SOURCE.mechanism} "
                f"({PYTHON_DATA_SOURCE.since}+), which refreshed views read through",
                allow_module_level=True)

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from lookup.spark.refresh import _retryable, _summary, _worker_error_line
from lookup.spark.view_versions import _cached_size
from spark_lookup import errors

pytestmark = [pytest.mark.spark, pytest.mark.needs("PYTHON_DATA_SOURCE", "SESSION_TAGS")]


class _FailingReader(DataSourceReader):
    def __init__(self, error: str, where: str) -> None:
        self.error = error
        self.where = where

    def _fail(self) -> None:
        raise getattr(errors, self.error)(f"boom in {self.where}")

    def partitions(self) -> list[InputPartition]:
        if self.where == "plan":
            self._fail()
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        self._fail()
        yield (1,)


class _FailingSource(DataSource):
    """Fails with the error class of option ``error``, where option ``where`` says:
    planning the splits (on the driver's Python worker) or reading one (an executor's)."""

    @classmethod
    def name(cls) -> str:
        return "spark_lookup_failing_source"

    def schema(self) -> str:
        return "id BIGINT"

    def reader(self, schema: Any) -> DataSourceReader:
        return _FailingReader(self.options["error"], self.options["where"])


def _failure(spark: Any, error: str, where: str) -> PySparkException:
    spark.dataSource.register(_FailingSource)
    reader = spark.read.format(_FailingSource.name()).option("error", error)
    with pytest.raises(PySparkException) as failure:
        reader.option("where", where).load().collect()
    return failure.value


# Every class where the driver plans; where executors read (another wrapping of the
# worker's error), one class that is retried and one that is not: a failed read is a
# failed task, 1-5 s on a loaded machine, a failed plan a tenth of that.
@pytest.mark.parametrize(("error", "retried", "where"), [
    ("TransientConnectorError", True, "plan"), ("ConnectorError", False, "plan"),
    ("BadValueError", False, "plan"), ("ConfigError", False, "plan"),
    ("SourceError", False, "plan"),
    ("TransientConnectorError", True, "read"), ("BadValueError", False, "read"),
])
def test_a_source_error_is_classified_by_its_class(
    spark: Any, where: str, error: str, retried: bool
) -> None:
    exc = _failure(spark, error, where)
    assert _worker_error_line(exc) == f"spark_lookup.errors.{error}: boom in {where}"
    assert _retryable(exc) is retried
    assert _summary(exc).endswith(f"... spark_lookup.errors.{error}: boom in {where}")


def test_the_size_of_a_cached_dataframe_is_read(spark: Any) -> None:
    df = spark.range(1000).selectExpr("id", "CAST(id AS STRING) AS s").persist()
    try:
        df.count()
        size = _cached_size(spark, df)
        assert size is not None
        assert 1000 < size < 100_000  # about 8 bytes a BIGINT and a few per short text
        assert df.storageLevel.useMemory  # the probe did not uncache it
    finally:
        df.unpersist(blocking=True)
