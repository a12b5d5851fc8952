"""The built-in sources: a collection, a SQL table, files, Delta Lake and Iceberg tables,
and Redis keys."""

from typing import TYPE_CHECKING

from scan.collection import CollectionSource, CollectionSplit
from spark_lookup.lazy import lazy_attributes

if TYPE_CHECKING:
    from connectors.files.delta import DeltaHistorySplit, DeltaSource, DeltaSplit
    from connectors.files.iceberg import IcebergSource, IcebergSplit
    from connectors.files.source import FileSource, FileSplit
    from connectors.redis.source import RedisKeysSplit, RedisScanSource
    from connectors.sql.source import SqlChunkSplit, SqlTableSource

__all__ = [
    "CollectionSource",
    "CollectionSplit",
    "DeltaHistorySplit",
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

# Backends import this package's modules, so they load on first use (PEP 562), not
# here (a cycle); the TYPE_CHECKING imports above give mypy and the docs their types.
__getattr__ = lazy_attributes(__name__, {
    "DeltaHistorySplit": "connectors.files.delta",
    "DeltaSource": "connectors.files.delta",
    "DeltaSplit": "connectors.files.delta",
    "FileSource": "connectors.files.source",
    "FileSplit": "connectors.files.source",
    "IcebergSource": "connectors.files.iceberg",
    "IcebergSplit": "connectors.files.iceberg",
    "RedisKeysSplit": "connectors.redis.source",
    "RedisScanSource": "connectors.redis.source",
    "SqlChunkSplit": "connectors.sql.source",
    "SqlTableSource": "connectors.sql.source",
})
