"""``'connector' = 'redis'``: the options of a Redis table, read into what builds a
`RedisLookupFunction` or a `RedisScanSource`."""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar
from urllib.parse import urlsplit

from connectors.redis.client import check_redis_url
from connectors.redis.lookup_function import RedisLookupFunction
from connectors.redis.source import RedisScanSource
from lookup.function import LookupFunction
from lookup.table_options import Keys, TableOptions, non_empty_text, one_of
from spark_lookup import options as opts
from spark_lookup.credentials import redact_credentials
from spark_lookup.errors import ConfigError
from spark_lookup.options import ConfigOption
from spark_lookup.schema import SchemaLike

__all__ = ["RedisTableOptions"]


def _redis_url(value: object, key: str) -> str:
    url = check_redis_url(value, f"option {key!r}")
    if "password=" in urlsplit(url).query.lower():
        # Only a password in the authority is redacted wherever the URL is shown.
        raise ConfigError(f"option {key!r}: {redact_credentials(url)!r}: give the password in the "
                          "URL's authority (redis://:password@host:6379/0), not as a parameter")
    return url


REDIS_URL: ConfigOption[str] = ConfigOption(
    "url", _redis_url, None, "redis://[[user]:password@]host[:port][/db], rediss:// (TLS)")
KEY_TEMPLATE: ConfigOption[str] = ConfigOption(
    "key-template", non_empty_text, None, "the Redis key of a lookup key: 'user:{id}'")
VALUE_TYPE: ConfigOption[str] = ConfigOption(
    "value-type", one_of("hash", "json", "string"), "hash", "hash, json or string")
ESCAPE: ConfigOption[bool] = ConfigOption(
    "escape", opts.parse_bool, False, "percent-encode separators inside key parts")
SOCKET_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "socket-timeout", opts.positive_duration, None,
    "bound of one command (default 5 s; 30 s for a FULL load)")
CONNECT_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "connect-timeout", opts.positive_duration, None, "bound of connecting (default 5 s)")
RETRIES: ConfigOption[int] = ConfigOption(
    "retries", opts.non_negative_int, None,
    "immediate retries of a command after a connection error")
MAX_KEYS: ConfigOption[int] = ConfigOption(
    "max-keys-per-command", opts.positive_int, None, "keys per MGET (default 1000)")


@dataclass(frozen=True)
class RedisTableOptions(TableOptions):
    """``'connector' = 'redis'``: the options of ``lookup.RedisLookupFunction`` (and of
    ``scan.RedisScanSource`` for a full cache), hyphenated. Redis values carry no
    types: the provider needs ``schema``."""

    connector: ClassVar[str] = "redis"
    OPTIONS: ClassVar[tuple[ConfigOption[Any], ...]] = (
        REDIS_URL, KEY_TEMPLATE, VALUE_TYPE, ESCAPE, SOCKET_TIMEOUT, CONNECT_TIMEOUT, RETRIES,
        MAX_KEYS)
    FOREIGN: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(("host", "port", "database", "password", "redis-mode"),
                        "this connector reads the server from 'url' = "
                        "'redis://[:password@]host[:port][/db]' (the option is another Flink "
                        "Redis connector's)"),
        **dict.fromkeys(("command", "value.data.structure"),
                        "'key-template' ('user:{id}') and 'value-type' (hash, json or string) "
                        "say how rows are kept here (the option is another Flink Redis "
                        "connector's)"),
    }

    url: str | None
    key_template: str | None
    value_type: str
    escape: bool
    socket_timeout: timedelta | None
    connect_timeout: timedelta | None
    retries: int | None
    max_keys_per_command: int | None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RedisTableOptions:
        template = KEY_TEMPLATE.get(options)
        if template is not None:
            _placeholders(template)
        value_type, escape = VALUE_TYPE.get(options), ESCAPE.get(options)
        assert value_type is not None  # both have defaults
        assert escape is not None
        return cls(REDIS_URL.get(options), template, value_type, escape,
                   SOCKET_TIMEOUT.get(options), CONNECT_TIMEOUT.get(options),
                   RETRIES.get(options), MAX_KEYS.get(options))

    def __repr__(self) -> str:
        url = None if self.url is None else redact_credentials(self.url)
        return (f"RedisTableOptions(url={url!r}, key_template={self.key_template!r}, "
                f"value_type={self.value_type!r})")

    def key_columns(self, given: Keys, schema: SchemaLike | None) -> list[str]:
        """``given``, else the key template's placeholders in order."""
        if given is not None:
            return super().key_columns(given, schema)
        return _placeholders(self.required(self.key_template, KEY_TEMPLATE))

    def _schema(self, schema: SchemaLike | None) -> SchemaLike:
        if schema is None:
            raise ConfigError("connector 'redis' needs schema= (the table's columns): Redis "
                              "values carry no types")
        return schema

    def function(self, key_columns: Keys, schema: SchemaLike | None) -> LookupFunction:
        extra: dict[str, Any] = {name: value for name, value in (
            ("socket_timeout", self.socket_timeout), ("connect_timeout", self.connect_timeout),
            ("retries", self.retries), ("max_keys_per_command", self.max_keys_per_command),
        ) if value is not None}
        return RedisLookupFunction(
            self.required(self.url, REDIS_URL), self.required(self.key_template, KEY_TEMPLATE),
            self._schema(schema), self.key_columns(key_columns, schema), self.value_type,
            escape=self.escape, **extra)

    def source(self, key_columns: list[str], schema: SchemaLike | None) -> RedisScanSource:
        extra: dict[str, Any] = ({} if self.socket_timeout is None
                                 else {"socket_timeout": self.socket_timeout})
        return RedisScanSource(
            self.required(self.url, REDIS_URL), value_type=self.value_type,
            schema=self._schema(schema), key_template=self.required(self.key_template,
                                                                    KEY_TEMPLATE),
            key_columns=key_columns, escape=self.escape, **extra)


def _placeholders(template: str) -> list[str]:
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ConfigError(f"option {KEY_TEMPLATE.key!r}: {template!r}: {exc}") from exc
    if not fields:
        raise ConfigError(f"option {KEY_TEMPLATE.key!r}: {template!r} has no {{column}} "
                          "placeholder")
    return fields
