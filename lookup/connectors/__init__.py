"""Real lookup connectors: SQL tables over DB-API 2.0 and Redis, and PostgreSQL change feeds.

Drivers are imported where connections are made, so ``import lookup`` needs neither
redis-py nor psycopg.
"""

from lookup.connectors.postgres_changes import PostgresChanges
from lookup.connectors.redis import RedisLookupFunction
from lookup.connectors.redis_changes import RedisKeyspaceChanges
from lookup.connectors.sql import SqlLookupFunction

__all__ = ["PostgresChanges", "RedisKeyspaceChanges", "RedisLookupFunction", "SqlLookupFunction"]
