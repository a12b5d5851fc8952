"""Lookup joins: functions, providers, the caching runtime, connectors, change feeds,
Spark joins and SQL."""

from typing import TYPE_CHECKING

from lookup.changes.feed import ChangeFeed
from lookup.function import AsyncLookupFunction, LookupFunction, LookupFunctionBase
from lookup.options import LookupOptions
from lookup.providers import (
    AsyncLookupFunctionProvider,
    FullCachingLookupProvider,
    LookupFunctionProvider,
    LookupProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
)
from lookup.retry import MissRetry, RetryPolicy
from lookup.runtime.registry import LookupHandle, open_lookup
from lookup.spark.join import lookup_join
from lookup.spark.metrics import lookup_metrics
from lookup.spark.refresh import Materialization, RefreshStatus, ScheduledTableRefresh
from lookup.spark.sql_functions import register_lookup_function, register_lookup_table_function
from lookup.spark.table_join import register_lookup_join
from lookup.validity import Validity
from spark_lookup.lazy import lazy_attributes

if TYPE_CHECKING:
    from connectors.redis.keyspace_changes import RedisKeyspaceChanges
    from connectors.redis.lookup_function import RedisLookupFunction
    from connectors.sql.lookup_function import SqlLookupFunction
    from connectors.sql.postgres_changes import PostgresChanges

__all__ = [
    "AsyncLookupFunction",
    "AsyncLookupFunctionProvider",
    "ChangeFeed",
    "FullCachingLookupProvider",
    "LookupFunction",
    "LookupFunctionBase",
    "LookupFunctionProvider",
    "LookupHandle",
    "LookupOptions",
    "LookupProvider",
    "Materialization",
    "MissRetry",
    "PartialCachingAsyncLookupProvider",
    "PartialCachingLookupProvider",
    "PostgresChanges",
    "RedisKeyspaceChanges",
    "RedisLookupFunction",
    "RefreshStatus",
    "RetryPolicy",
    "ScheduledTableRefresh",
    "SqlLookupFunction",
    "Validity",
    "lookup_join",
    "lookup_metrics",
    "open_lookup",
    "register_lookup_function",
    "register_lookup_join",
    "register_lookup_table_function",
]

# Backends import this package's modules, so they load on first use (PEP 562), not
# here (a cycle); the TYPE_CHECKING imports above give mypy and the docs their types.
__getattr__ = lazy_attributes(__name__, {
    "PostgresChanges": "connectors.sql.postgres_changes",
    "RedisKeyspaceChanges": "connectors.redis.keyspace_changes",
    "RedisLookupFunction": "connectors.redis.lookup_function",
    "SqlLookupFunction": "connectors.sql.lookup_function",
})
