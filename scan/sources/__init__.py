"""The built-in sources: a collection, a SQL table, files, and Redis keys."""

from scan.sources.collection import CollectionSource, CollectionSplit
from scan.sources.files import FileSource, FileSplit
from scan.sources.redis_scan import RedisKeysSplit, RedisScanSource
from scan.sources.sql import SqlChunkSplit, SqlTableSource

__all__ = [
    "CollectionSource",
    "CollectionSplit",
    "FileSource",
    "FileSplit",
    "RedisKeysSplit",
    "RedisScanSource",
    "SqlChunkSplit",
    "SqlTableSource",
]
