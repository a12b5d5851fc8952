"""RedisLookupFunction: dimension rows kept in Redis hashes, JSON strings or plain strings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa

from cache.base import Key
from connectors.keys import EncodedKeys, KeyCodec
from connectors.policy import BadValuePolicy
from connectors.predicates import Predicate
from connectors.redis import RedisTable
from connectors.redis.client import redact_url
from lookup.keyed import KeyedLookupFunction
from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.schema import SchemaLike

__all__ = ["RedisLookupFunction"]


class RedisLookupFunction(KeyedLookupFunction):
    """Looks dimension rows up in Redis, one Redis key per lookup key.

    Built on the driver and pickled as its configuration (URL, template, schema); the
    client is created where the function runs, in [`open`][] (or at the first lookup),
    and is shared by the threads of the worker. Nothing read from Redis is ever
    unpickled: values are Redis hashes, JSON text or plain strings.

    Keys. The Redis key of a lookup key is ``key_template`` formatted with the key values
    by key column name (``"user:{id}"``, ``"stock:{shop}:{sku:08d}"``). Values are read as
    their column's Spark type first (`connectors.keys`), so a float ``7.0`` from a
    pandas column forms ``user:7``, as the integer does; a key holding None or NaN is
    never sent. Two different keys never read each other's row: a part holding the
    literal text between the template's placeholders (``"a:b"`` in ``"{t}:{id}"``) is
    looked up only if the stored value carries the key columns, and a row whose stored
    key differs from the looked-up key is no match; where the value cannot carry them
    (``value_type="string"``) such a key is a [`ConfigError`][spark_lookup.ConfigError], unless
    ``escape=True`` percent-encodes separators in parts (write keys with
    [`redis_key`][] then). See `connectors.redis.template`.

    Values, as ``value_type`` says, read through [`connectors`][] exactly as
    ``scan.RedisScanSource`` reads them for full caches (docs/types.md):

    - ``"hash"``: one row per hash; only the schema's fields are read (``HMGET``), each
      field's text read as its column's type. A hash holding none of them is no row.
    - ``"json"``: a JSON object is one row, a JSON array of objects many (``[]`` none);
      members are columns (``null`` or missing is None); numbers exact, dates and
      timestamps ISO strings, binary base64, arrays/maps/structs nested JSON.
    - ``"string"``: the whole value is the one non-key column of the schema.

    A key column absent from the stored value takes the key's value. A value that
    cannot be read as its column's type follows ``mode`` (PERMISSIVE: null; DROPMALFORMED:
    no row; FAILFAST: [`BadValueError`][spark_lookup.BadValueError] naming the Redis key and
    field) and is counted ([`bad_value_count`][lookup.RedisLookupFunction.bad_value_count]).

    A batch is one round trip: pipelined ``HMGET`` commands, or ``MGET`` (in commands
    of at most ``max_keys_per_command`` keys, pipelined together). Not for Redis
    Cluster, whose ``MGET`` cannot span slots.

    Parameters
    ----------
    url : str
        ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` for TLS,
        ``unix:///path.sock``; passwords and TLS options travel in the URL.
    key_template : str
        Redis key with ``{column}`` placeholders; every key column must appear, with
        literal text between placeholders.
    schema : str or StructType
        The dimension schema.
    key_columns : str or sequence of str
        The key columns, in key order.
    value_type : {"hash", "json", "string"}
        How values hold rows (default ``"hash"``).
    escape : bool
        Percent-encode ``%`` and the template's separators inside key parts.
    filters : list of Predicate, optional
        Conditions rows must meet (the same as a full cache's).
    mode : {"PERMISSIVE", "DROPMALFORMED", "FAILFAST"}
        The bad-value policy.
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

    _COUNTED_BY = "_redis"

    def __init__(
        self,
        url: str,
        key_template: str,
        schema: SchemaLike,
        key_columns: str | Sequence[str],
        value_type: str = "hash",
        *,
        escape: bool = False,
        filters: Sequence[Predicate] | None = None,
        mode: BadValuePolicy | str = BadValuePolicy.PERMISSIVE,
        socket_timeout: timedelta | float = 5.0,
        connect_timeout: timedelta | float = 5.0,
        retries: int = 1,
        max_keys_per_command: int = 1000,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        # The table checks every argument; the function keeps the checked values.
        self._redis = RedisTable(
            url, schema, value_type, key_template=key_template, key_columns=key_columns,
            escape=escape, filters=filters, mode=mode, socket_timeout=socket_timeout,
            connect_timeout=connect_timeout, retries=retries,
            max_keys_per_command=max_keys_per_command, client_options=client_options,
        )
        self.schema = schema
        self.key_columns = list(self._redis.key_columns)
        self._struct = self._redis.schema
        keys = self.key_fields()  # what every lookup function's keys must be: some, distinct
        self._codec = KeyCodec(keys, [self._struct[k].dataType for k in keys], "Redis")

    def __repr__(self) -> str:
        template = self._redis.template
        return (
            f"RedisLookupFunction(url={redact_url(self._redis.url)!r}, "
            f"key_template={template.template if template else None!r}, "
            f"value_type={self._redis.value_type!r})"
        )

    # --- lifecycle

    def open(self) -> None:
        """Create the client (connections are made at the first command)."""
        self._redis.client()

    def close(self) -> None:
        """Close the client and its connections."""
        self._redis.close()

    def limit_connections(self, budget: ConnectionBudget | None) -> bool:
        """Open this process's connections under ``budget`` (a slot of the host each,
        held only while a lookup uses it or shortly after); True: they are."""
        self._redis.limit_connections(budget)
        return True

    # --- keys

    def redis_key(self, key: Key) -> str | None:
        """The Redis key read for ``key`` (escaped as configured), or None when ``key``
        can never match; writers use it to name keys the same way.

        Raises
        ------
        ConfigError
            For a key of the wrong length, or a value of the wrong kind.
        """
        normalized = self._codec.normalize(key)
        if normalized is None:
            return None
        return self._redis.redis_key(dict(zip(self.key_columns, normalized, strict=True)))[0]

    # --- lookups

    def _query(self, encoded: EncodedKeys) -> tuple[pa.Int64Array, pa.RecordBatch]:
        return self._redis.lookup(encoded, self.key_columns)
