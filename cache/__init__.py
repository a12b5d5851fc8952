"""Lookup caches: partial (size/TTL), full (whole-table snapshot), Redis and tiered.

Depends on nothing of ours but the shared base ``spark_lookup``.
"""

from cache.base import Key, LookupCache, Row, Rows
from cache.default import DefaultLookupCache, DefaultLookupCacheBuilder
from cache.full import FullSnapshot, LookupFullCache
from cache.metrics import CacheMetrics
from cache.redis import RedisLookupCache
from cache.shared_full import SharedFullCache
from cache.snapshot_store import SnapshotStore, StoredSnapshot
from cache.tiered import TieredLookupCache

__all__ = [
    "CacheMetrics",
    "DefaultLookupCache",
    "DefaultLookupCacheBuilder",
    "FullSnapshot",
    "Key",
    "LookupCache",
    "LookupFullCache",
    "RedisLookupCache",
    "Row",
    "Rows",
    "SharedFullCache",
    "SnapshotStore",
    "StoredSnapshot",
    "TieredLookupCache",
]
