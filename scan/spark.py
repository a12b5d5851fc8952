"""Any bounded ``scan.Source`` as a PySpark Python data source.

``spark.read.format(name).load()`` plans the splits with the source's enumerator on the
driver ([`scan.plan_splits`][]), makes one Spark partition per split, and reads each
split on an executor with a fresh reader ([`scan.read_split_arrow`][]), yielding Arrow
record batches of the source's declared schema. Sources that fetch Arrow (files,
collections) hand their batches through unconverted (checked against the declared
schema, re-chunked to ``maxBatchRows`` by slicing and concatenation); row sources are
converted column by column. This is the only module of ``scan`` that imports Spark's
data source API.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from scan.source import Source, check_bounded
from scan.standalone import plan_splits, read_split_arrow
from spark_lookup._spark_types import AnySparkSession
from spark_lookup.errors import ConfigError
from spark_lookup.options import check_int
from spark_lookup.schema import parse_schema

__all__ = ["register_data_source"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}$")


class SplitPartition(InputPartition):
    """One Spark partition: one planned split (small and picklable)."""

    def __init__(self, index: int, split: Any) -> None:
        super().__init__(index)
        self.index = index
        self.split = split


class _SourceReader(DataSourceReader):
    def __init__(self, source: Source[Any, Any], max_batch_rows: int, parallelism: int
                 ) -> None:
        self.source = source
        self.max_batch_rows = max_batch_rows
        self.parallelism = parallelism

    def partitions(self) -> list[SplitPartition]:
        # Driver, at planning: the enumerator runs here, once per query.
        splits = plan_splits(self.source, self.parallelism)
        return [SplitPartition(i, split) for i, split in enumerate(splits)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Executor, per partition: a fresh reader for this split only; polls of a whole
        # batch (no checkpoint is taken here).
        assert isinstance(partition, SplitPartition)
        yield from read_split_arrow(
            self.source, partition.split, max_batch_rows=self.max_batch_rows
        )


class _SourceDataSource(DataSource):
    """Base of the per-registration data source classes built by register_data_source."""

    source: ClassVar[Any] = None
    registered_name: ClassVar[str] = ""
    struct: ClassVar[StructType | None] = None
    parallelism: ClassVar[int] = 1

    @classmethod
    def name(cls) -> str:
        return cls.registered_name

    def schema(self) -> StructType:
        assert self.struct is not None
        return self.struct

    def reader(self, schema: StructType) -> DataSourceReader:
        if schema != self.struct:
            raise ConfigError(
                f"data source {self.registered_name!r} reads {self.struct.simpleString()}; "  # type: ignore[union-attr]
                f"a user-specified schema {schema.simpleString()} is not supported"
            )
        rows = int(self.options.get("maxBatchRows", 65_536))
        if rows < 1:
            raise ConfigError(f"option maxBatchRows must be >= 1, got {rows}")
        parallelism = int(self.options.get("parallelism", self.parallelism))
        if parallelism < 1:
            raise ConfigError(f"option parallelism must be >= 1, got {parallelism}")
        return _SourceReader(self.source, rows, parallelism)


def _default_parallelism(spark: AnySparkSession) -> int:
    """``spark.default.parallelism`` when the session sets it, else the driver's CPUs
    (what local mode defaults it to); read through the conf, which both session kinds
    have."""
    configured = spark.conf.get("spark.default.parallelism", None)
    try:
        if configured is not None and int(configured) >= 1:
            return int(configured)
    except ValueError:
        pass
    return os.cpu_count() or 1


def register_data_source(spark: AnySparkSession, name: str, source: Source[Any, Any], *,
                         parallelism: int | None = None) -> type[DataSource]:
    """Register ``source`` under ``name`` for ``spark.read.format(name).load()``.

    Runs on the driver. The source is pickled with the data source class to the
    executors (it must be picklable; clients are opened by its readers there). Each
    query plans the splits anew, so a reload reads the table as it is then.

    Parameters
    ----------
    spark
        The SparkSession, classic or Spark Connect.
    name
        The format name (letters, digits, ``_``, ``.``, ``-``).
    source
        A bounded ``scan.Source`` declaring its ``schema``.
    parallelism
        The readers the splits are planned for (the enumerator's
        ``current_parallelism``; a ``SqlTableSource`` of default ``chunk_size`` plans one
        chunk, so one partition, per reader); default ``spark.default.parallelism`` if the
        session sets it, else the driver's CPU count. Option ``parallelism`` overrides it
        per read.

    Returns
    -------
    type
        The registered ``pyspark.sql.datasource.DataSource`` subclass.

    Raises
    ------
    ConfigError
        For a bad name, an unbounded source, or a source without a schema.

    Notes
    -----
    Option ``maxBatchRows`` (default 65536) bounds the rows of one Arrow batch. Unbounded
    sources are not exposed to ``readStream`` yet.

    Examples
    --------
    >>> source = SqlTableSource(connect, "countries")  # doctest: +SKIP
    >>> register_data_source(spark, "countries", source)  # doctest: +SKIP
    >>> spark.read.format("countries").load().count()  # doctest: +SKIP
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"invalid data source name {name!r}")
    check_bounded(source, "a batch data source")
    if parallelism is not None:
        check_int(parallelism, "parallelism")
    struct = parse_schema(source.schema, f"{type(source).__name__}.schema")
    cls = type(
        f"ScanDataSource_{re.sub(r'[^A-Za-z0-9_]', '_', name)}",
        (_SourceDataSource,),
        {"source": source, "registered_name": name, "struct": struct,
         "parallelism": parallelism or _default_parallelism(spark), "__module__": __name__},
    )
    spark.dataSource.register(cls)
    return cls
