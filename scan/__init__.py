"""FLIP-27 split-based sources in Python, with a local runner that checkpoints.

A [`Source`][] is configuration that creates one [`SplitEnumerator`][] (which
discovers [`SourceSplit`][]s and hands them out on request) and a
[`SourceReader`][] per parallel subtask (which reads the splits it is given and
emits rows, or Arrow record batches with no Python object per row).
[`LocalSourceRunner`][] runs both in process, with checkpoints that restore
exactly-once at any parallelism (a split's position is a row offset, also inside a
fetched batch); [`read_arrow`][] is the bulk path a full cache loads through;
[`plan_splits`][] and [`read_split`][] split the work the way a Spark data source
does (plan on the driver, read on executors).

Depends on nothing of ours but the shared base ``spark_lookup``; no JVM is needed.
"""

from scan.enumerator import SplitEnumerator, SplitEnumeratorContext
from scan.reader import InputStatus, ReaderOptions, ReaderOutput, SourceReader, SourceReaderContext
from scan.runner import LocalSourceRunner, read_arrow
from scan.source import Boundedness, Source
from scan.sources import (
    CollectionSource,
    DeltaSource,
    FileSource,
    IcebergSource,
    RedisScanSource,
    SqlTableSource,
)
from scan.split import SourceSplit
from scan.standalone import plan_splits, read_split, read_split_arrow

# What a user of sources needs. Writing a connector: ``scan.connector`` (split readers,
# fetchers, emitters); the built-in splits: ``scan.sources``; split serializers:
# ``scan.serializers``.
__all__ = [
    "Boundedness",
    "CollectionSource",
    "DeltaSource",
    "FileSource",
    "IcebergSource",
    "InputStatus",
    "LocalSourceRunner",
    "ReaderOptions",
    "ReaderOutput",
    "RedisScanSource",
    "Source",
    "SourceReader",
    "SourceReaderContext",
    "SourceSplit",
    "SplitEnumerator",
    "SplitEnumeratorContext",
    "SqlTableSource",
    "plan_splits",
    "read_arrow",
    "read_split",
    "read_split_arrow",
    "register_data_source",
]


def __getattr__(name: str) -> object:
    # The Spark data source adapter imports PySpark's data source API; load it only when
    # asked for, so the scan layer stays importable and usable without Spark.
    if name == "register_data_source":
        from scan.spark import register_data_source

        return register_data_source
    raise AttributeError(f"module 'scan' has no attribute {name!r}")
