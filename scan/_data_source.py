"""The PySpark data source classes behind
[`register_data_source`][scan.register_data_source] (PySpark 4.0+:
``pyspark.sql.datasource``; imported only once the gate has passed, see
``spark_lookup.compat.PYTHON_DATA_SOURCE``). This is the only module of ``scan`` that
imports Spark's data source API.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from scan.source import Source
from scan.standalone import plan_splits, read_split_arrow
from spark_lookup.errors import ConfigError

__all__ = ["SourceDataSource"]


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


class SourceDataSource(DataSource):
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
