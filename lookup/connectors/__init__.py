"""Real lookup connectors: SQL tables over DB-API 2.0 and Redis.

Drivers are imported where connections are made, so ``import lookup`` needs neither
redis-py nor psycopg.
"""

from lookup.connectors.redis import RedisLookupFunction
from lookup.connectors.sql import SqlLookupFunction

__all__ = ["RedisLookupFunction", "SqlLookupFunction"]
