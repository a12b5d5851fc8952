"""The built-in sources: a collection, a SQL table, files, Delta Lake and Iceberg tables,
and Redis keys."""

from scan.sources.collection import CollectionSource, CollectionSplit
from scan.sources.delta import DeltaSource, DeltaSplit
from scan.sources.files import FileSource, FileSplit
from scan.sources.iceberg import IcebergSource, IcebergSplit
from scan.sources.redis_scan import RedisKeysSplit, RedisScanSource
from scan.sources.sql import SqlChunkSplit, SqlTableSource

__all__ = [
    "CollectionSource",
    "CollectionSplit",
    "DeltaSource",
    "DeltaSplit",
    "FileSource",
    "FileSplit",
    "IcebergSource",
    "IcebergSplit",
    "RedisKeysSplit",
    "RedisScanSource",
    "SqlChunkSplit",
    "SqlTableSource",
]
