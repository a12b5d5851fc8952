"""Lookup caches: partial (size/TTL), full (whole-table snapshot), Redis and tiered.

The full cache's snapshot and the host snapshot store it shares between processes are
the lookup runtime's machinery, not API: ``cache.full``, ``cache.shared_full`` and
``cache.snapshot_store`` hold them.
"""

from cache.base import Key, LookupCache, Row, Rows
from cache.default import DefaultLookupCache, DefaultLookupCacheBuilder
from cache.full import LookupFullCache
from cache.metrics import CacheMetrics
from cache.redis import RedisLookupCache
from cache.tiered import TieredLookupCache

__all__ = [
    "CacheMetrics",
    "DefaultLookupCache",
    "DefaultLookupCacheBuilder",
    "Key",
    "LookupCache",
    "LookupFullCache",
    "RedisLookupCache",
    "Row",
    "Rows",
    "TieredLookupCache",
]
