"""Fixtures of the cache tests: the private redis-server processes of the connector tests
(the Redis and tiered caches are tested against real servers, and killed ones)."""

from __future__ import annotations

from tests.connectors.conftest import redis_server, shared_private_redis

__all__ = ["redis_server", "shared_private_redis"]
