"""Redis: key templates, value codecs, and the table every mode reads through."""

from connectors.redis.table import VALUE_TYPES, RedisTable
from connectors.redis.template import KeyTemplate

__all__ = ["VALUE_TYPES", "KeyTemplate", "RedisTable"]
