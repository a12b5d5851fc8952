"""Lookup functions and change feeds over real stores: SQL tables (ADBC or DB-API 2.0),
Redis, PostgreSQL and Redis change notifications.

Drivers are imported where connections are made, so ``import lookup`` needs neither
redis-py nor psycopg.
"""

from lookup.stores.postgres_changes import PostgresChanges
from lookup.stores.redis import RedisLookupFunction
from lookup.stores.redis_changes import RedisKeyspaceChanges
from lookup.stores.sql import SqlLookupFunction

__all__ = ["PostgresChanges", "RedisKeyspaceChanges", "RedisLookupFunction", "SqlLookupFunction"]
