"""RedisKeyspaceChanges: the lookup keys whose Redis keys changed, by keyspace notifications.

Redis publishes an event on ``__keyspace@<db>__:<key>`` for every command that changes a
key (``SET``, ``HSET``, ``DEL``, ``EXPIRE``, a rename, an expiry...) when the server's
``notify-keyspace-events`` asks for it. Each Python worker that looks the table up
subscribes (``PSUBSCRIBE``) to the keys its key template can make, reads every changed
Redis key back through the template into the key's values, typed as the key columns,
and hands them to its caches. Pub/Sub delivers at most once: a connection that drops
loses what was published meanwhile, which the listener makes up for by flushing after
it has subscribed again (see `lookup.changes.feed`).

The server setting: ``K`` (keyspace channels) and the classes of the commands that
write the table: ``g`` (``DEL``, ``EXPIRE``, ``RENAME``...), ``$`` (strings), ``h``
(hashes), ``x`` (expiries); ``e`` (evictions) when keys may be evicted. ``KA`` covers
all of them (``CONFIG SET notify-keyspace-events KA``, or ``notify-keyspace-events KA``
in ``redis.conf``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from connectors.redis.client import check_redis_url, redact_url, redis_client_from_url
from connectors.redis.table import cast_key_parts
from connectors.redis.template import KeyTemplate
from lookup.changes.feed import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MIN_INTERVAL,
    Change,
    ChangeConnection,
    ChangeFeed,
)
from spark_lookup.errors import ConfigError, ConnectorError
from spark_lookup.options import as_timedelta
from spark_lookup.schema import SchemaLike, parse_schema, to_arrow_schema
from spark_lookup.type_families import INTEGER_TYPES

__all__ = ["RedisKeyspaceChanges"]

log = logging.getLogger("lookup")

_NEEDED = {"g": "generic commands (DEL, EXPIRE, RENAME)", "$": "strings",
           "h": "hashes", "x": "expiries"}
_ALL_CLASSES = set("g$lshzxetdnm")  # what the flag 'A' stands for, and more
# A spec that maps two values to one text would make the key read back stand for
# several lookup keys: only zero-padded widths of integers are allowed.
_REVERSIBLE_INT_SPEC = re.compile(r"0?\d*d?")
MAX_READINGS = 64
"""Readings of one changed Redis key past which a feed reports "everything"."""
# The commands that empty or swap whole databases, which publish no keyspace event: the
# subscription counts their calls (INFO commandstats) to notice them.
_WHOLE_DATABASE = ("flushdb", "flushall", "swapdb")


def keyspace_flags_missing(flags: str) -> list[str]:
    """What a ``notify-keyspace-events`` value lacks for a change feed (empty: none)."""
    have = set(flags)
    if "A" in have:
        have |= _ALL_CLASSES
    missing = [] if "K" in have else ["K (keyspace channels)"]
    missing += [f"{flag} ({what})" for flag, what in _NEEDED.items() if flag not in have]
    return missing


class RedisKeyspaceChanges(ChangeFeed):
    """A change feed of the Redis keys a key template makes (``"customer:{id}"``), from
    Redis keyspace notifications.

    Parameters
    ----------
    url
        The Redis URL (``redis://[[user]:password@]host:port/db``, ``rediss://`` for TLS);
        the database number selects the keyspace channels. The password is never shown.
    key_template
        The template of the table's Redis keys, as given to ``RedisLookupFunction``;
        its placeholders are the key columns.
    schema
        The table's schema (or only its key columns) as given to the lookup function:
        a changed Redis key is read back as values of the key columns' types.
    escape
        As the lookup function's ``escape`` (percent-encoded separators in key parts).
    check
        Check the server's ``notify-keyspace-events`` now, on the driver (default).
    min_interval, connect_timeout
        As [`ChangeFeed`][]'s.
    health_check_interval
        Seconds between the subscription's ``PING`` s when no event comes, so a silently
        dropped connection is noticed (default 10).
    flush_check_interval
        Seconds between checks for ``FLUSHDB``, ``FLUSHALL`` and ``SWAPDB``, which
        publish no keyspace event: the subscription reads the server's call counts of
        them (``INFO commandstats``) and, when one grew (or the counts were reset),
        reports that everything may have changed (default 1; 0 turns the check off).
        A server that refuses ``INFO`` is not checked (logged once).

    Raises
    ------
    ConfigError
        For a bad URL, template or schema; a format spec the feed cannot read back (only
        zero-padded integer widths such as ``{id:08d}``); or, with ``check``, a server
        whose ``notify-keyspace-events`` lacks what the feed needs (naming the flags and
        how to set them).
    ConnectorError
        With ``check``, when the server cannot be reached.
    """

    def __init__(self, url: str, key_template: str, schema: SchemaLike, *,
                 escape: bool = False, check: bool = True,
                 min_interval: timedelta | float = DEFAULT_MIN_INTERVAL,
                 connect_timeout: timedelta | float = DEFAULT_CONNECT_TIMEOUT,
                 health_check_interval: timedelta | float = 10.0,
                 flush_check_interval: timedelta | float = 1.0) -> None:
        self.url = check_redis_url(url, "url")
        struct = parse_schema(schema, "RedisKeyspaceChanges schema")
        names = struct.fieldNames()
        # The template's placeholders are the key columns; any name passes the parse here,
        # the schema says which are columns.
        placeholders = [field for _, field, _, _ in _parsed(key_template) if field]
        missing = [name for name in placeholders if name not in names]
        if missing:
            raise ConfigError(f"key_template {key_template!r} names {missing}, which the "
                              f"schema {names} lacks")
        self._template = KeyTemplate(key_template, placeholders, escape=escape)
        super().__init__(self._template.fields, min_interval=min_interval,
                         connect_timeout=connect_timeout)
        self.key_template = key_template
        self.escape = bool(escape)
        self.key_schema = T.StructType([struct[name] for name in self.key_columns])
        self._check_specs()
        self.health_check_interval = as_timedelta(health_check_interval,
                                                  "health_check_interval")
        self.flush_check_interval = as_timedelta(flush_check_interval, "flush_check_interval")
        if check:
            self.check_server()

    def _check_specs(self) -> None:
        for field in self.key_columns:
            spec = self._template.spec(field)
            if not spec:
                continue
            kind = self.key_schema[field].dataType
            integral = isinstance(kind, INTEGER_TYPES)
            if not (integral and _REVERSIBLE_INT_SPEC.fullmatch(spec)):
                raise ConfigError(
                    f"key_template {self.key_template!r}: the change feed cannot read placeholder "
                    f"{{{field}:{spec}}} back into one {kind.simpleString()} value (a format "
                    "spec may map several values to one text); use no spec, or a "
                    "zero-padded width of an integer column such as {id:08d}")

    def describe(self) -> str:
        return (f"RedisKeyspaceChanges({redact_url(self.url)!r}, {self.key_template!r})")

    def __repr__(self) -> str:
        return self.describe()

    def _client(self, socket_timeout: float | None) -> Any:
        return redis_client_from_url(
            self.url, socket_timeout=socket_timeout or 5.0,
            connect_timeout=self.connect_timeout.total_seconds() or 5.0)

    def check_server(self) -> None:
        """Refuse a server whose ``notify-keyspace-events`` lacks what the feed needs.
        A server that refuses ``CONFIG GET`` (managed services often do) is trusted, with
        a warning.

        Raises
        ------
        ConfigError
            Naming the missing flags and how to set them.
        ConnectorError
            When the server cannot be reached.
        """
        import redis

        client = self._client(5.0)
        try:
            try:
                flags = client.config_get("notify-keyspace-events").get(
                    "notify-keyspace-events", "")
            except redis.ResponseError as exc:
                log.warning("%s: cannot read notify-keyspace-events (%s); make sure it "
                            "holds KA (or K with g$hx)", self.describe(), exc)
                return
            except redis.RedisError as exc:
                raise ConnectorError(f"{self.describe()}: cannot reach Redis: "
                                     f"{type(exc).__name__}: {exc}") from None
        finally:
            client.close()
        if isinstance(flags, bytes):
            flags = flags.decode()
        missing = keyspace_flags_missing(flags)
        if missing:
            raise ConfigError(
                f"{self.describe()}: the server's notify-keyspace-events is {flags!r} and "
                f"lacks {', '.join(missing)}: run CONFIG SET notify-keyspace-events KA (or "
                "set notify-keyspace-events KA in redis.conf); without it no change is "
                "published")

    @property
    def channel_pattern(self) -> str:
        """The ``PSUBSCRIBE`` pattern: the keyspace channels of the template's keys."""
        from redis.connection import parse_url

        db = parse_url(self.url).get("db", 0)  # type: ignore[no-untyped-call]
        return f"__keyspace@{db}__:{self._template.glob}"

    def connect(self) -> ChangeConnection:
        return _Subscription(self)

    def keys_of(self, redis_keys: Sequence[str]) -> list[tuple[Any, ...]] | None:
        """The lookup keys (values of the key columns' types) of changed Redis keys; a
        Redis key no lookup key names (text that is no value of its column, or not the
        text a lookup would write) stands for none. Without ``escape`` a key whose parts
        may hold the separator stands for every key it can be read as (``ns:x:y:z`` of
        ``ns:{a}:{b}``: ``("x", "y:z")`` and ``("x:y", "z")``), or None (everything)
        when that is more than ``MAX_READINGS`` (64)."""
        template = self._template
        kept: list[tuple[str, dict[str, str]]] = []
        for key in redis_keys:
            readings = template.parse_all(key, MAX_READINGS)
            if readings is None:
                return None
            kept.extend((key, parts) for parts in readings)
        if not kept:
            return []
        arrow = to_arrow_schema(self.key_schema)
        columns = [cast_key_parts(pa.array([parts[field.name] for _, parts in kept], pa.string()),
                                  field.type).to_pylist() for field in arrow]
        keys: list[tuple[Any, ...]] = []
        for row, (redis_key, _) in enumerate(kept):
            values = tuple(column[row] for column in columns)
            if any(value is None for value in values):
                continue
            # Only the canonical text names the key: "user:007" is no lookup's key of 7.
            formatted, _ = template.format(dict(zip(self.key_columns, values, strict=True)))
            if formatted == redis_key:
                keys.append(values)
        return keys


def _parsed(template: str) -> list[tuple[str, str | None, str | None, str | None]]:
    import string

    try:
        return list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"key_template {template!r}: {exc}") from exc


class _Subscription(ChangeConnection):
    """One ``PSUBSCRIBE`` of a feed, confirmed before `RedisKeyspaceChanges.connect`
    returns."""

    _POLL = 0.2  # seconds between checks for interrupt()

    def __init__(self, feed: RedisKeyspaceChanges) -> None:
        self._feed = feed
        self._interrupted = threading.Event()
        health = feed.health_check_interval.total_seconds()
        # Reads wait in get_message's select, not on the socket: the timeout only bounds
        # a reply that stopped halfway.
        self._client = redis_client_from_url(
            feed.url, socket_timeout=max(30.0, 3 * health),
            connect_timeout=feed.connect_timeout.total_seconds() or 5.0,
            client_options={"health_check_interval": health})
        self._pubsub = self._client.pubsub(ignore_subscribe_messages=False)
        self._flush_every = feed.flush_check_interval.total_seconds()
        self._stats: Any = None
        try:
            if self._flush_every > 0:
                # Counted before subscribing: a flush from here on is noticed.
                self._stats = feed._client(5.0)
                self._whole = self._whole_database_calls()
            self._next_check = time.monotonic() + self._flush_every
            pattern = feed.channel_pattern
            self._prefix = pattern[: pattern.index(":") + 1]
            self._pubsub.psubscribe(pattern)
            deadline = time.monotonic() + (feed.connect_timeout.total_seconds() or 10.0)
            while True:  # events published from the confirmation on are delivered
                message = self._pubsub.get_message(timeout=0.1)
                if message is not None and message["type"] == "psubscribe":
                    break
                if time.monotonic() > deadline:
                    raise ConnectorError(f"{feed.describe()}: the subscription was not "
                                         "confirmed in time")
        except BaseException:
            self.close()
            raise

    def _whole_database_calls(self) -> tuple[int, ...] | None:
        """How often FLUSHDB, FLUSHALL and SWAPDB have run on the server (None: the
        server refuses INFO, and is not checked)."""
        import redis

        try:
            stats = self._stats.info("commandstats")
        except redis.ResponseError as exc:
            log.warning("%s: INFO commandstats refused (%s): FLUSHDB, FLUSHALL and SWAPDB, "
                        "which publish no keyspace event, go unnoticed", self._feed.describe(),
                        exc)
            self._stats.close()
            self._stats = None
            return None
        return tuple(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
                     for name in _WHOLE_DATABASE)

    def _flushed(self) -> bool:
        """Whether a whole database was emptied or swapped since the last check."""
        self._next_check = time.monotonic() + self._flush_every
        if self._stats is None:
            return False
        calls = self._whole_database_calls()
        if calls is None or calls == self._whole:
            return False
        self._whole = calls
        return True

    def receive(self, timeout: float) -> list[Change]:
        deadline = time.monotonic() + timeout
        redis_keys: list[str] = []
        while not self._interrupted.is_set():
            if self._stats is not None and time.monotonic() >= self._next_check \
                    and self._flushed():
                return [Change(everything=True, reason="FLUSHDB, FLUSHALL or SWAPDB ran "
                               "(they publish no keyspace event)")]
            wait = 0.0 if redis_keys else min(self._POLL, max(0.0, deadline - time.monotonic()))
            message = self._pubsub.get_message(timeout=wait)
            if message is None:
                if redis_keys or time.monotonic() >= deadline:
                    break
                continue
            if message["type"] != "pmessage":
                continue
            channel = message["channel"]
            if isinstance(channel, bytes):
                try:
                    channel = channel.decode("utf-8")
                except UnicodeDecodeError:
                    continue  # a key no template of text makes
            redis_keys.append(channel[len(self._prefix):])
        self._interrupted.clear()
        if not redis_keys:
            return []
        keys = self._feed.keys_of(list(dict.fromkeys(redis_keys)))
        if keys is None:
            return [Change(everything=True, reason="a changed Redis key reads as more than "
                           f"{MAX_READINGS} lookup keys (key parts holding separators)")]
        return [Change(tuple(keys))] if keys else []

    def interrupt(self) -> None:
        self._interrupted.set()

    def close(self) -> None:
        try:
            self._pubsub.close()
        finally:
            self._client.close()
            if self._stats is not None:
                self._stats.close()
