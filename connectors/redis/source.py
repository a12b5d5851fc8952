"""Redis keys matching a pattern, found with SCAN and read as rows."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from connectors.policy import BadValuePolicy, CountsBadValues
from connectors.predicates import Predicate
from connectors.redis import RedisTable
from connectors.redis.client import redact_url, redis_client_from_url
from scan.planners import SplitPlanner
from scan.pull import PullSource, QueueSplitReader
from scan.serializers import JsonVersionedSerializer, SimpleVersionedSerializer
from scan.split import SourceSplit
from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import ConfigError, ConnectorError, SourceError
from spark_lookup.options import check_int
from spark_lookup.schema import SchemaLike, parse_schema

__all__ = ["RedisKeysSplit", "RedisScanSource"]

Row = tuple[Any, ...]

# Keys read per round trip (one pipeline) on a reader.
_READ_BATCH = 256


@dataclass(frozen=True)
class RedisKeysSplit(SourceSplit):
    """A batch of keys from one SCAN call (number ``index``). After a checkpoint, its
    first ``position`` keys are skipped, and then ``skip_rows`` rows of the keys after
    them (a JSON array holds several rows)."""

    index: int
    keys: tuple[bytes, ...]
    position: int = 0
    skip_rows: int = 0

    @property
    def split_id(self) -> str:
        return f"keys-{self.index}"


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode("ascii")


class _SplitSerializer(JsonVersionedSerializer[RedisKeysSplit]):
    VERSION = 2  # 2 added skip_rows; version 1 splits resume at a key
    WHAT = "a RedisScanSource split"

    def to_json(self, obj: RedisKeysSplit) -> Any:
        return {"index": obj.index, "keys": [_b64(k) for k in obj.keys],
                "position": obj.position, "skip_rows": obj.skip_rows}

    def from_json(self, version: int, value: Any) -> RedisKeysSplit:
        keys = tuple(base64.b64decode(k, validate=True) for k in value["keys"])
        skip_rows = int(value["skip_rows"]) if version >= 2 else 0
        return RedisKeysSplit(int(value["index"]), keys, int(value["position"]), skip_rows)


def _connect(url: str) -> Any:
    return redis_client_from_url(url, socket_timeout=30.0, connect_timeout=5.0, retries=1)


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.RedisError, OSError)


class _KeyPlanner(SplitPlanner[RedisKeysSplit]):
    """Runs SCAN one call per split request on the coordinator. Every key already
    handed out is remembered, so a key SCAN returns twice (it may, while the keyspace
    is rehashed) is read once per load; the set is part of the enumerator state."""

    def __init__(self, url: str, match: str, count: int, progress: Any = None) -> None:
        self._url = url
        self._match = match
        self._count = count
        self._client: Any = None
        if progress is None:
            self._cursor, self._done, self._index = 0, False, 0
            self._seen: set[bytes] = set()
        else:
            try:
                self._cursor = int(progress["cursor"])
                self._done = bool(progress["done"])
                self._index = int(progress["index"])
                self._seen = {base64.b64decode(k, validate=True) for k in progress["seen"]}
            except (KeyError, TypeError, ValueError) as exc:
                raise SourceError(f"malformed Redis SCAN progress: {exc}") from exc

    def progress(self) -> Any:
        return {"cursor": self._cursor, "done": self._done, "index": self._index,
                "seen": sorted(_b64(k) for k in self._seen)}

    def next_split(self) -> RedisKeysSplit | None:
        while not self._done:
            if self._client is None:
                self._client = _connect(self._url)
            try:
                cursor, keys = self._client.scan(self._cursor, match=self._match, count=self._count)
            except _redis_errors() as exc:
                raise ConnectorError(
                    f"SCAN of {self._match!r} at {redact_url(self._url)} failed: {exc}"
                ) from exc
            self._cursor = int(cursor)
            self._done = self._cursor == 0
            fresh = [k for k in dict.fromkeys(keys) if k not in self._seen]
            if fresh:
                self._seen.update(fresh)
                self._index += 1
                return RedisKeysSplit(self._index - 1, tuple(fresh))
        return None

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()


class _SplitReader(QueueSplitReader[RedisKeysSplit]):
    """Reads the values of a split's keys in pipelined batches, through the table's
    codec; a restored split re-reads its keys from ``position`` and drops the rows
    emitted before the checkpoint (exact for data that does not change in between)."""

    def __init__(self, table: RedisTable) -> None:
        super().__init__()
        self._table = table
        self._client: Any = None  # this fetcher's own, made on its thread
        self._next = -1
        self._to_skip = 0

    def read_next(self, split: RedisKeysSplit) -> tuple[pa.RecordBatch | None, bool]:
        if self._next < 0:
            self._next, self._to_skip = split.position, split.skip_rows
        start = self._next
        keys = split.keys[start : start + _READ_BATCH]
        batch = None
        if keys:
            if self._client is None and self._table.budget is None:
                # Under a budget each read leases a client of the table (None here).
                self._client = self._table.new_client()
            batch = self._table.read_keys(keys, self._client)
            if self._to_skip:
                dropped = min(self._to_skip, batch.num_rows)
                batch, self._to_skip = batch.slice(dropped), self._to_skip - dropped
        self._next = start + len(keys)
        return batch, self._next >= len(split.keys)

    def split_done(self) -> None:
        self._next = -1

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()


class RedisScanSource(CountsBadValues, PullSource[RedisKeysSplit]):
    """Redis keys matching a glob pattern (or made by a key template), read as rows.

    Built on the driver and picklable (it holds the URL, no client). The enumerator
    runs ``SCAN cursor MATCH match COUNT keys_per_split`` on the coordinator, one call
    per split request, and hands out the keys of each call as a split; readers fetch
    the values of their keys in pipelined batches on their fetcher threads, so values
    are read in parallel.

    Rows are read through [`connectors`][] exactly as ``lookup.RedisLookupFunction``
    reads them (docs/types.md): for ``value_type="hash"`` each schema field is
    the hash field of that name (only the schema's fields are read); for ``"string"``
    the schema has one value field, the string value; for ``"json"`` an object is a row
    and an array of objects several. The Redis key itself fills the field named
    ``key_column`` (``"_key"`` by default) if the schema has one, as a STRING (UTF-8) or
    BINARY. With ``key_template`` (and ``key_columns``), the key columns a value lacks
    are parsed from its Redis key, and ``match`` defaults to every key the template
    makes, so a full cache and a partial cache over the same keys agree. A value that
    cannot be read as its column's type follows ``mode`` and is counted.

    Consistency (what SCAN guarantees, and what this source adds): every key that
    matches for the whole load is read; a key added or removed during the load may or
    may not be. SCAN may return a key more than once: each key is read at most once
    per load (the enumerator remembers the keys it handed out, in its checkpointed
    state). Values are read after the scan found the key, not as of one instant; a key
    deleted in between is skipped. A key of another Redis type fails the read with a
    ``ConnectorError`` naming it. Single Redis servers only (not Redis Cluster).

    Parameters
    ----------
    url
        ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` for TLS, or
        ``unix://``; passwords and TLS options travel in the URL (and are masked in
        error messages).
    match
        A SCAN glob pattern, such as ``"customer:*"`` (default: the template's keys).
    value_type
        ``"hash"``, ``"string"`` or ``"json"``.
    schema
        A Spark DDL string or ``StructType`` (required).
    key_column
        The name of the field that receives the key, if present in the schema.
    keys_per_split
        The SCAN ``COUNT`` hint: about this many keys per split.
    key_template, key_columns, escape
        As for ``RedisLookupFunction``: how Redis keys are made from key columns.
    filters
        Predicates rows must meet (applied after the read).
    mode
        The bad-value policy (``PERMISSIVE``, ``DROPMALFORMED``, ``FAILFAST``).

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an invalid URL, pattern, value type or schema.
    ConnectorError
        On use, when Redis fails, naming the URL (password masked) or key.

    Examples
    --------
    >>> source = RedisScanSource("redis://localhost:6379/0", "country:*",
    ...                          value_type="hash", schema="_key STRING, name STRING")
    >>> from scan import read_arrow
    >>> table = read_arrow(source, parallelism=4)  # doctest: +SKIP
    """

    _COUNTED_BY = "_table"

    ROWS_FIELD = "skip_rows"

    def __init__(
        self,
        url: str,
        match: str | None = None,
        value_type: str = "hash",
        schema: SchemaLike | None = None,
        *,
        key_column: str = "_key",
        keys_per_split: int = 1000,
        key_template: str | None = None,
        key_columns: str | Sequence[str] = (),
        escape: bool = False,
        filters: Sequence[Predicate] | None = None,
        mode: BadValuePolicy | str = BadValuePolicy.PERMISSIVE,
        client_options: Mapping[str, Any] | None = None,
        socket_timeout: timedelta | float = 30.0,
    ) -> None:
        if schema is None:
            raise ConfigError("RedisScanSource needs a schema (Redis values carry no types)")
        check_int(keys_per_split, "keys_per_split")
        self._table = RedisTable(
            url, parse_schema(schema, "RedisScanSource schema"), value_type,
            key_template=key_template, key_columns=key_columns, escape=escape,
            key_field=key_column, filters=filters, mode=mode, client_options=client_options,
            socket_timeout=socket_timeout,
        )
        if match is None:
            if self._table.template is None:
                raise ConfigError("RedisScanSource needs match (a SCAN pattern) or key_template")
            match = self._table.template.glob
        if not isinstance(match, str) or not match:
            raise ConfigError(f"match must be a non-empty SCAN pattern, got {match!r}")
        self._url = self._table.url
        self._match = match
        self._keys_per_split = keys_per_split

    @property
    def url(self) -> str:
        """The URL with its password masked."""
        return redact_url(self._url)

    @property
    def match(self) -> str:
        """The SCAN pattern."""
        return self._match

    def limit_connections(self, budget: ConnectionBudget | None) -> bool:
        """Read values under ``budget`` in this process (each reader's reads lease a
        connection holding a slot of the host); True: they are. The enumerator's ``SCAN``
        runs on a connection of its own."""
        self._table.limit_connections(budget)
        return True

    @property
    def value_type(self) -> str:
        """``"hash"``, ``"string"`` or ``"json"``."""
        return self._table.value_type

    @property
    def schema(self) -> T.StructType:
        return self._table.schema

    def planner(self, progress: Any | None) -> SplitPlanner[RedisKeysSplit]:
        return _KeyPlanner(self._url, self._match, self._keys_per_split, progress)

    def split_reader(self) -> Callable[[], _SplitReader]:
        table = self._table
        return lambda: _SplitReader(table)

    def serializer(self) -> SimpleVersionedSerializer[RedisKeysSplit]:
        return _SplitSerializer()

    def __repr__(self) -> str:
        return (f"RedisScanSource({self.url!r}, {self._match!r}, "
                f"value_type={self.value_type!r})")
