"""Data and helpers of the SQL tests: small dimension tables behind partial and full
caches, and collecting results as sorted plain tuples."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cache import DefaultLookupCache
from lookup import FullCachingLookupProvider, LookupProvider, PartialCachingLookupProvider
from scan import CollectionSource
from tests.lookup.functions import DictLookup
from triggers import PeriodicCacheReloadTrigger

# Key 2 has two rows, and its first row does not sort first by value: "first match"
# must be the first row the runtime returns, not the smallest one.
CUSTOMERS = [(1, "one"), (2, "zeta"), (2, "alpha"), (3, "three")]
CUSTOMER_SCHEMA = "id BIGINT, name STRING"

# Composite key (region, code).
PLACES = [(1, "a", "1a"), (1, "b", "1b"), (2, "a", "2a"), (2, "a", "2a-again")]
PLACE_SCHEMA = "region INT, code STRING, label STRING"


def partial_cache() -> DefaultLookupCache:
    return DefaultLookupCache.new_builder().maximum_size(1000).build()


def hourly() -> PeriodicCacheReloadTrigger:
    return PeriodicCacheReloadTrigger(timedelta(hours=1))


def customers_provider(kind: str) -> LookupProvider:
    """The CUSTOMERS table behind a partial cache (DictLookup) or a full cache (one split,
    so the rows of a key keep their given order)."""
    if kind == "partial":
        return PartialCachingLookupProvider.of(DictLookup(CUSTOMERS), partial_cache())
    source = CollectionSource(CUSTOMERS, num_splits=1, schema=CUSTOMER_SCHEMA)
    return FullCachingLookupProvider.of(source, hourly(), ["id"])


def places_provider(kind: str) -> LookupProvider:
    if kind == "partial":
        function = DictLookup(PLACES, key_index=(0, 1), schema=PLACE_SCHEMA,
                              key_columns=["region", "code"])
        return PartialCachingLookupProvider.of(function, partial_cache())
    source = CollectionSource(PLACES, num_splits=1, schema=PLACE_SCHEMA)
    return FullCachingLookupProvider.of(source, hourly(), ["region", "code"])


def plain(value: Any) -> Any:
    """Rows and structs as tuples, recursively (``None`` stays ``None``)."""
    if isinstance(value, tuple):  # pyspark Row is a tuple
        return tuple(plain(v) for v in value)
    return value


def rows(df: Any) -> list[tuple[Any, ...]]:
    """The collected rows as plain tuples, sorted (nulls first)."""
    def order(value: Any) -> Any:
        if isinstance(value, tuple):
            return (1, tuple(order(v) for v in value))
        return (0, "") if value is None else (1, value)

    return sorted((plain(r) for r in df.collect()), key=order)
