"""RedisLookupFunction: dimension rows kept in Redis hashes, JSON strings or plain strings."""

from __future__ import annotations

import json
import string
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

from cache.base import Key, Row, check_key
from cache.redis import check_redis_url, redact_url, redis_client_from_url
from lookup.connectors._types import (
    UnsupportedTypeError,
    ValueConversionError,
    from_json,
    from_text,
    key_coercer,
    normalize_key,
)
from lookup.function import LookupFunction
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError, ConnectorError
from spark_lookup.schema import SchemaLike, parse_schema

__all__ = ["RedisLookupFunction"]

_VALUE_TYPES = ("hash", "json", "string")

# A value of each key type, to try a template's format specs on at construction.
_SAMPLES: dict[type[T.DataType], Any] = {
    T.ByteType: 0, T.ShortType: 0, T.IntegerType: 0, T.LongType: 0,
    T.FloatType: 0.0, T.DoubleType: 0.0, T.DecimalType: Decimal(0),
    T.BooleanType: False, T.StringType: "", T.VarcharType: "", T.CharType: "",
    T.DateType: date(2000, 1, 1), T.TimestampType: datetime(2000, 1, 1),
    T.TimestampNTZType: datetime(2000, 1, 1),
}


def _parse_template(template: object, key_columns: Sequence[str]) -> str:
    if not isinstance(template, str):
        raise ConfigError(f"key_template must be a string, got {type(template).__name__}")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"key_template {template!r}: {exc}") from exc
    used = set()
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        # Only bare key-column names: '{id.__class__}' or '{0}' would reach into values.
        if field not in key_columns:
            raise ConfigError(
                f"key_template {template!r}: placeholder {{{field}}} is not a key column "
                f"{list(key_columns)}"
            )
        if conversion is not None or (spec and "{" in spec):
            raise ConfigError(
                f"key_template {template!r}: placeholder {{{field}}} may have a format spec "
                "but no conversion (!r, !s) or nested placeholder"
            )
        used.add(field)
    unused = [c for c in key_columns if c not in used]
    if unused:
        raise ConfigError(
            f"key_template {template!r} has no placeholder for key column(s) {unused}: "
            "different keys would read the same Redis key"
        )
    return template


class RedisLookupFunction(LookupFunction):
    """Looks dimension rows up in Redis, one Redis key per lookup key.

    Built on the driver and pickled as its configuration (URL, template, schema); the
    client is created where the function runs, in :meth:`open` (or at the first lookup),
    and is shared by the threads of the worker. Nothing read from Redis is ever
    unpickled: values are Redis hashes, JSON text or plain strings.

    The Redis key of a lookup key is ``key_template`` formatted with the key values
    by key column name (``"user:{id}"``, ``"stock:{shop}:{sku:08d}"``). Values are
    normalized to their column's type first, so a float ``7.0`` from a pandas column
    forms ``user:7``, as the integer does. A key holding None or NaN is never sent.

    ``value_type`` says how a Redis value holds rows:

    - ``"hash"``: one row per hash (``HGETALL``); each field is the column of the same
      name, its text read as the column's type (integers in decimal, booleans
      ``true``/``false``/``1``/``0``, dates and timestamps in ISO 8601, binary raw).
      Missing fields are None.
    - ``"json"``: a JSON object is one row, a JSON array of objects many (``[]`` none);
      members are columns (``null`` or missing is None); dates and timestamps are ISO
      strings, binary base64, arrays/maps/structs nested JSON.
    - ``"string"``: the whole value is the one non-key column of the schema.

    A key column absent from the stored value takes the key's value. A value that
    cannot be read as its column's type raises :class:`ConnectorError` naming the Redis
    key and the field.

    A batch is one round trip: pipelined ``HGETALL`` commands, or ``MGET`` (in commands
    of at most ``max_keys_per_command`` keys, pipelined together). Not for Redis
    Cluster, whose ``MGET`` cannot span slots.

    Parameters
    ----------
    url : str
        ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` for TLS,
        ``unix:///path.sock``; passwords and TLS options travel in the URL.
    key_template : str
        Redis key with ``{column}`` placeholders; every key column must appear.
    schema : str or StructType
        The dimension schema.
    key_columns : str or sequence of str
        The key columns, in key order.
    value_type : {"hash", "json", "string"}
        How values hold rows (default ``"hash"``).
    socket_timeout, connect_timeout : timedelta or float
        Per-command and connect timeouts (default 5 s each).
    retries : int
        Immediate retries of a command after a connection error (default 1, so a
        dropped idle connection is replaced transparently; the lookup runtime owns
        retries with backoff).
    max_keys_per_command : int
        Keys per ``MGET`` (default 1000).
    client_options : mapping, optional
        Further ``redis.Redis`` keyword arguments; picklable.

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an invalid URL, template, value type, or a schema the
        value type cannot hold.

    Examples
    --------
    >>> users = RedisLookupFunction("redis://localhost:6379/0", "user:{id}",
    ...                             "id BIGINT, name STRING, tier INT", ["id"])
    >>> users.redis_key((7,))
    'user:7'
    """

    def __init__(
        self,
        url: str,
        key_template: str,
        schema: SchemaLike,
        key_columns: str | Sequence[str],
        value_type: str = "hash",
        *,
        socket_timeout: timedelta | float = 5.0,
        connect_timeout: timedelta | float = 5.0,
        retries: int = 1,
        max_keys_per_command: int = 1000,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._url = check_redis_url(url)
        if value_type not in _VALUE_TYPES:
            raise ConfigError(f"value_type must be one of {_VALUE_TYPES}, got {value_type!r}")
        for name, value in (("retries", retries), ("max_keys_per_command", max_keys_per_command)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} must be a non-negative int, got {value!r}")
        if max_keys_per_command < 1:
            raise ConfigError("max_keys_per_command must be at least 1")
        self.schema = schema
        self.key_columns = [key_columns] if isinstance(key_columns, str) else list(key_columns)
        self._struct = parse_schema(schema, "RedisLookupFunction schema")
        keys = self.key_fields()
        self._template = _parse_template(key_template, keys)
        self._value_type = value_type
        self._socket_timeout = opts.as_timedelta(socket_timeout, "socket_timeout")
        self._connect_timeout = opts.as_timedelta(connect_timeout, "connect_timeout")
        self._retries = retries
        self._max_keys = max_keys_per_command
        self._client_options = dict(client_options or {})

        fields = self._struct.fields
        self._key_positions = {name: keys.index(name) for name in keys}
        self._coercers = []
        samples = {}
        for name in keys:
            data_type = self._struct[name].dataType
            try:
                self._coercers.append(key_coercer(data_type))
            except UnsupportedTypeError as exc:
                raise ConfigError(f"key column {name!r}: {exc}") from exc
            if type(data_type) not in _SAMPLES:
                raise ConfigError(
                    f"key column {name!r}: {data_type.simpleString()} values do not format "
                    "into Redis keys"
                )
            samples[name] = _SAMPLES[type(data_type)]
        try:
            self._template.format_map(samples)
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"key_template {key_template!r} does not format the key columns' types: {exc}"
            ) from exc

        self._value_column: int | None = None
        converters: list[Callable[[Any], Any]] = []
        try:
            if value_type == "string":
                others = [i for i, f in enumerate(fields) if f.name not in keys]
                if len(others) != 1:
                    raise ConfigError(
                        "value_type 'string' needs exactly one non-key column in the schema, "
                        f"got {[fields[i].name for i in others]}"
                    )
                self._value_column = others[0]
                converters = [from_text(f.dataType) for f in fields]
            elif value_type == "hash":
                converters = [from_text(f.dataType) for f in fields]
            else:
                converters = [from_json(f.dataType) for f in fields]
        except UnsupportedTypeError as exc:
            raise ConfigError(f"value_type {value_type!r}: {exc}") from exc
        self._converters = converters
        self._names = [f.name for f in fields]
        self._lock = threading.Lock()
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # Configuration only: the client is per process.
        return {
            "url": self._url,
            "key_template": self._template,
            "schema": self.schema,
            "key_columns": list(self.key_columns),
            "value_type": self._value_type,
            "socket_timeout": self._socket_timeout,
            "connect_timeout": self._connect_timeout,
            "retries": self._retries,
            "max_keys_per_command": self._max_keys,
            "client_options": self._client_options,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __repr__(self) -> str:
        return (
            f"RedisLookupFunction(url={redact_url(self._url)!r}, "
            f"key_template={self._template!r}, value_type={self._value_type!r})"
        )

    @property
    def struct(self) -> T.StructType:
        """The dimension schema as a ``StructType``."""
        return self._struct

    # --- lifecycle

    def open(self) -> None:
        """Create the client (connections are made at the first command)."""
        self._get_client()

    def close(self) -> None:
        """Close the client and its connections."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _get_client(self) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = redis_client_from_url(
                        self._url,
                        socket_timeout=self._socket_timeout.total_seconds(),
                        connect_timeout=self._connect_timeout.total_seconds(),
                        retries=self._retries,
                        client_options=self._client_options,
                    )
                client = self._client
        return client

    # --- keys

    def _normalize(self, key: Key) -> tuple[Any, ...] | None:
        return normalize_key(key, self.key_columns, self._coercers, "for Redis")

    def redis_key(self, key: Key) -> str | None:
        """The Redis key read for ``key``, or None when ``key`` can never match.

        Raises
        ------
        ConfigError
            For a key of the wrong length, or a value of the wrong kind.
        """
        check_key(key)
        if len(key) != len(self.key_columns):
            raise ConfigError(
                f"key {key!r:.80} has {len(key)} value(s); expected {len(self.key_columns)}: "
                f"{list(self.key_columns)}"
            )
        if None in key:
            return None
        normalized = self._normalize(key)
        if normalized is None:
            return None
        return self._template.format_map(dict(zip(self.key_columns, normalized, strict=True)))

    # --- lookups

    def lookup(self, key: Key) -> Sequence[Row]:
        """The rows of ``key``; one round trip. Raises as :meth:`lookup_batch` does."""
        return self.lookup_batch([key])[key]

    def lookup_batch(self, keys: Sequence[Key]) -> Mapping[Key, Sequence[Row]]:
        """The rows of every key of ``keys`` (an entry for each, empty for no match), in
        one round trip.

        Runs on executors, possibly from several threads.

        Raises
        ------
        ConfigError
            For a key of the wrong length or a value of the wrong kind.
        ConnectorError
            If Redis fails, or a stored value cannot be read; names the Redis key.
        """
        result: dict[Key, list[Row]] = {}
        askers: dict[str, list[Key]] = {}
        for key in keys:
            redis_key = self.redis_key(key)
            result[key] = []
            if redis_key is not None:
                askers.setdefault(redis_key, []).append(key)
        if not askers:
            return result
        names = list(askers)
        values = self._fetch(names)
        for name, value in zip(names, values, strict=True):
            if value is None or value == {}:
                continue
            asking = askers[name]
            # The key's own values fill key columns the stored value lacks.
            rows = self._rows(name, value, self._normalize(asking[0]) or ())
            for key in asking:
                result[key] = rows
        return result

    def _fetch(self, names: list[str]) -> list[Any]:
        client = self._get_client()
        import redis  # installed: the client exists

        try:
            pipe = client.pipeline(transaction=False)
            if self._value_type == "hash":
                for name in names:
                    pipe.hgetall(name)
                return list(pipe.execute())
            for start in range(0, len(names), self._max_keys):
                pipe.mget(names[start : start + self._max_keys])
            return [value for reply in pipe.execute() for value in reply]
        except (redis.RedisError, OSError) as exc:
            raise ConnectorError(
                f"Redis lookup of {len(names)} key(s) (first {names[0]!r:.80}) at "
                f"{redact_url(self._url)} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _rows(self, name: str, value: Any, key: tuple[Any, ...]) -> list[Row]:
        if self._value_type == "hash":
            fields = {
                (k.decode("utf-8", "replace") if isinstance(k, bytes) else k): v
                for k, v in value.items()
            }
            return [self._row(name, fields, key)]
        if self._value_type == "string":
            assert self._value_column is not None
            return [self._row(name, {self._names[self._value_column]: value}, key)]
        try:
            document = json.loads(value, parse_float=Decimal)
        except (ValueError, RecursionError) as exc:
            raise ConnectorError(f"Redis key {name!r:.120} does not hold JSON: {exc}") from exc
        objects = document if isinstance(document, list) else [document]
        rows = []
        for obj in objects:
            if not isinstance(obj, dict):
                raise ConnectorError(
                    f"Redis key {name!r:.120} holds {type(obj).__name__} JSON; expected an "
                    "object (one row) or an array of objects (rows)"
                )
            rows.append(self._row(name, obj, key))
        return rows

    def _row(self, name: str, fields: Mapping[str, Any], key: tuple[Any, ...]) -> Row:
        row = []
        for column, convert in zip(self._names, self._converters, strict=True):
            if column in fields:
                raw = fields[column]
                try:
                    row.append(None if raw is None else convert(raw))
                except ValueConversionError as exc:
                    raise ConnectorError(
                        f"Redis key {name!r:.120}, field {column!r}: {exc}"
                    ) from exc
            elif column in self._key_positions and key:
                row.append(key[self._key_positions[column]])
            else:
                row.append(None)
        return tuple(row)
