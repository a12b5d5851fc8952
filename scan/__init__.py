"""FLIP-27 split-based sources in Python, with a local runner that checkpoints.

A [`Source`][] is configuration that creates one [`SplitEnumerator`][] (which
discovers [`SourceSplit`][]s and hands them out on request) and a
[`SourceReader`][] per parallel subtask (which reads the splits it is given and
emits rows, or Arrow record batches with no Python object per row).
[`LocalSourceRunner`][] runs both in process, with checkpoints that restore
exactly-once at any parallelism (a split's position is a row offset, also inside a
fetched batch); [`read_arrow`][] is the bulk path a full cache loads through;
[`plan_splits`][] and [`read_split`][] split the work the way a Spark data source
does (plan on the driver, read on executors). A source of your own extends
[`SplitListSource`][]: its schema, its splits and how one is read.

Builds on the shared base ``spark_lookup`` and on the connector engine's Arrow values
(``connectors.convert``, ``connectors.rows``). The built-in sources but
[`CollectionSource`][] are adapters in ``connectors`` that build on this package: it
names them by module only, loaded on first use. No JVM is needed.
"""

from typing import TYPE_CHECKING

from scan.collection import CollectionSource
from scan.enumerator import SplitEnumerator, SplitEnumeratorContext
from scan.pull import SplitListSource
from scan.reader import InputStatus, ReaderOptions, ReaderOutput, SourceReader, SourceReaderContext
from scan.runner import LocalSourceRunner, read_arrow
from scan.source import Boundedness, Source
from scan.split import SourceSplit
from scan.standalone import plan_splits, read_split, read_split_arrow
from spark_lookup.lazy import lazy_attributes

if TYPE_CHECKING:
    from connectors.files.delta import DeltaSource
    from connectors.files.iceberg import IcebergSource
    from connectors.files.source import FileSource
    from connectors.redis.source import RedisScanSource
    from connectors.sql.source import SqlTableSource
    from scan.spark import register_data_source

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
    "SplitListSource",
    "SqlTableSource",
    "plan_splits",
    "read_arrow",
    "read_split",
    "read_split_arrow",
    "register_data_source",
]

# Backends import this package's modules, so they load on first use (PEP 562), not
# here (a cycle). register_data_source is lazy for another reason: it adapts a source to
# PySpark's Python data source API (pyspark.sql.datasource, PySpark 4.0+), which
# nothing else here needs, so reading a source never loads it. The TYPE_CHECKING
# imports above give mypy and the docs their types.
__getattr__ = lazy_attributes(__name__, {
    "DeltaSource": "connectors.files.delta",
    "FileSource": "connectors.files.source",
    "IcebergSource": "connectors.files.iceberg",
    "RedisScanSource": "connectors.redis.source",
    "SqlTableSource": "connectors.sql.source",
    "register_data_source": "scan.spark",
})
