"""Lookup caches: partial (size/TTL), Redis and tiered.

The full cache (``cache.full.snapshot.LookupFullCache``), its snapshot and the host snapshot
store it shares between processes are the full-caching runtime's machinery, not API:
only that runtime builds one (``FullCachingLookupProvider``), and it refuses ``put``
and ``invalidate``. ``cache.full.snapshot``, ``cache.full.shared`` and ``cache.full.store``
hold them.
"""

from cache.base import Key, LookupCache, Row, Rows
from cache.default.cache import DefaultLookupCache, DefaultLookupCacheBuilder
from cache.metrics import CacheMetrics, MetricsAsOf
from cache.redis import RedisLookupCache
from cache.tiered import TieredLookupCache

__all__ = [
    "CacheMetrics",
    "DefaultLookupCache",
    "DefaultLookupCacheBuilder",
    "Key",
    "LookupCache",
    "MetricsAsOf",
    "RedisLookupCache",
    "Row",
    "Rows",
    "TieredLookupCache",
]
