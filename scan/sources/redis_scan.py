"""Redis keys matching a pattern, found with SCAN and read as rows."""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import types as T

from scan.connector.emitter import RecordEmitter
from scan.connector.pulling import PullingSourceReader
from scan.connector.records import RecordsBySplits
from scan.connector.split_reader import SplitReader, SplitsChange
from scan.enumerator import SplitEnumerator, SplitEnumeratorContext
from scan.reader import ReaderOutput, SourceReader, SourceReaderContext
from scan.serializers import JsonVersionedSerializer, SimpleVersionedSerializer
from scan.source import Boundedness, Source
from scan.sources._enumerator import (
    PullEnumeratorState,
    PullEnumeratorStateSerializer,
    PullSplitEnumerator,
    SplitPlanner,
)
from scan.sources._types import json_converter, text_converter
from scan.split import SourceSplit
from spark_lookup.errors import ConfigError, ConnectorError, SourceError, SparkLookupError
from spark_lookup.schema import SchemaLike, parse_schema

__all__ = ["RedisKeysSplit", "RedisScanSource"]

Row = tuple[Any, ...]

_VALUE_TYPES = ("hash", "string", "json")
_URL_SCHEMES = ("redis", "rediss", "unix")
# Keys read per round trip (one pipeline) on a reader.
_READ_BATCH = 256


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for error messages)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{user}:***@{host}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class RedisKeysSplit(SourceSplit):
    """A batch of keys from one SCAN call (number ``index``); ``position`` keys of it
    were read before a checkpoint and are skipped."""

    index: int
    keys: tuple[bytes, ...]
    position: int = 0

    @property
    def split_id(self) -> str:
        return f"keys-{self.index}"


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode("ascii")


class _SplitSerializer(JsonVersionedSerializer[RedisKeysSplit]):
    VERSION = 1
    WHAT = "a RedisScanSource split"

    def to_json(self, obj: RedisKeysSplit) -> Any:
        return {"index": obj.index, "keys": [_b64(k) for k in obj.keys], "position": obj.position}

    def from_json(self, version: int, value: Any) -> RedisKeysSplit:
        keys = tuple(base64.b64decode(k, validate=True) for k in value["keys"])
        return RedisKeysSplit(int(value["index"]), keys, int(value["position"]))


def _connect(url: str) -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - redis-py is a declared extra
        raise ConfigError(
            "RedisScanSource needs redis-py: pip install 'spark-lookup[redis]'"
        ) from exc
    return redis.Redis.from_url(url)


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

    def snapshot(self) -> Any:
        return {
            "cursor": self._cursor,
            "done": self._done,
            "index": self._index,
            "seen": sorted(_b64(k) for k in self._seen),
        }

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


class _State:
    __slots__ = ("position", "split")

    def __init__(self, split: RedisKeysSplit) -> None:
        self.split = split
        self.position = split.position

    def to_split(self) -> RedisKeysSplit:
        return replace(self.split, position=self.position)


Element = tuple[int, Row]
"""A row and the position (in its split) of the key it came from."""


class _Emitter(RecordEmitter[Element, _State]):
    def emit_record(self, element: Element, output: ReaderOutput, split_state: _State) -> None:
        output.collect(element[1])
        split_state.position = element[0] + 1

    def emit_records(
        self, elements: Sequence[Element], output: ReaderOutput, split_state: _State
    ) -> None:
        output.collect_batch([row for _, row in elements])
        split_state.position = elements[-1][0] + 1


class _RowMaker:
    """Turns a key and its value into a row of the schema."""

    def __init__(self, schema: T.StructType, value_type: str, key_column: str) -> None:
        self._value_type = value_type
        self._names = schema.fieldNames()
        self._key_index = self._names.index(key_column) if key_column in self._names else None
        key_type = schema.fields[self._key_index].dataType if self._key_index is not None else None
        self._key_binary = isinstance(key_type, T.BinaryType)
        make: Callable[[T.DataType], Callable[[Any], Any]]
        make = json_converter if value_type == "json" else text_converter
        self._converters = [make(f.dataType) for f in schema.fields]

    def row(self, key: bytes, value: Any) -> Row:
        if self._value_type == "hash":
            fields = {k.decode("utf-8", "replace"): v for k, v in value.items()}
        elif self._value_type == "json":
            document = json.loads(value)
            if not isinstance(document, dict):
                raise ValueError(f"expected a JSON object, got {type(document).__name__}")
            fields = document
        else:
            fields = None
        values: list[Any] = []
        for index, (name, convert) in enumerate(zip(self._names, self._converters, strict=True)):
            if index == self._key_index:
                values.append(key if self._key_binary else key.decode("utf-8"))
                continue
            raw = value if fields is None else fields.get(name)
            values.append(None if raw is None else convert(raw))
        return tuple(values)


class _SplitReader(SplitReader[Element, RedisKeysSplit]):
    def __init__(self, url: str, value_type: str, rows: _RowMaker) -> None:
        self._url = url
        self._value_type = value_type
        self._rows = rows
        self._client: Any = None
        self._splits: deque[RedisKeysSplit] = deque()
        self._position = -1
        self._woken = threading.Event()

    def fetch(self) -> RecordsBySplits[Element]:
        records: RecordsBySplits[Element] = RecordsBySplits()
        if self._woken.is_set():
            self._woken.clear()
            return records
        if not self._splits:
            return records
        split = self._splits[0]
        if self._position < 0:
            self._position = split.position
        start = self._position
        keys = split.keys[start : start + _READ_BATCH]
        if keys:
            values = self._read(keys)
            elements = []
            for offset, (key, value) in enumerate(zip(keys, values, strict=True)):
                # A key deleted since SCAN found it reads as empty: it is skipped.
                if value is None or (self._value_type == "hash" and not value):
                    continue
                elements.append((start + offset, self._row(key, value)))
            if elements:
                records.add(split.split_id, elements)
        self._position = start + len(keys)
        if self._position >= len(split.keys):
            self._splits.popleft()
            self._position = -1
            records.add_finished(split.split_id)
        return records

    def _read(self, keys: Sequence[bytes]) -> list[Any]:
        if self._client is None:
            self._client = _connect(self._url)
        try:
            pipeline = self._client.pipeline(transaction=False)
            for key in keys:
                if self._value_type == "hash":
                    pipeline.hgetall(key)
                else:
                    pipeline.get(key)
            values = pipeline.execute(raise_on_error=False)
        except _redis_errors() as exc:
            raise ConnectorError(f"reading keys at {redact_url(self._url)} failed: {exc}") from exc
        for key, value in zip(keys, values, strict=True):
            if isinstance(value, Exception):
                raise ConnectorError(
                    f"reading key {key!r} at {redact_url(self._url)} as a {self._value_type} "
                    f"failed: {value}"
                ) from value
        return list(values)

    def _row(self, key: bytes, value: Any) -> Row:
        try:
            return self._rows.row(key, value)
        except SparkLookupError:
            raise
        except (ValueError, TypeError, ArithmeticError, AttributeError) as exc:
            raise SourceError(
                f"the value of Redis key {key!r} does not fit the schema: {exc}"
            ) from exc

    def handle_splits_changes(self, change: SplitsChange[RedisKeysSplit]) -> None:
        self._splits.extend(change.splits)

    def wake_up(self) -> None:
        self._woken.set()

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()


class RedisScanSource(Source[RedisKeysSplit, PullEnumeratorState[RedisKeysSplit]]):
    """Redis keys matching a glob pattern, each read as one row.

    Built on the driver and picklable (it holds the URL, no client). The enumerator
    runs ``SCAN cursor MATCH match COUNT keys_per_split`` on the coordinator, one call
    per split request, and hands out the keys of each call as a split; readers fetch
    the values of their keys in pipelined batches on their fetcher threads, so values
    are read in parallel.

    Rows: for ``value_type="hash"``, each schema field is the hash field of that name
    (missing: NULL); for ``"string"``, the schema has one value field, the string
    value; for ``"json"``, the string value is a JSON object whose members fill the
    fields by name. Values are converted to the field types (numbers, booleans, ISO
    dates and timestamps, decimals; arrays, maps and structs from JSON). The Redis key
    itself fills the field named ``key_column`` (``"_key"`` by default) if the schema
    has one, as a STRING (UTF-8) or BINARY.

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
        A SCAN glob pattern, such as ``"customer:*"``.
    value_type
        ``"hash"``, ``"string"`` or ``"json"``.
    schema
        A Spark DDL string or ``StructType`` (required).
    key_column
        The name of the field that receives the key, if present in the schema.
    keys_per_split
        The SCAN ``COUNT`` hint: about this many keys per split.

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

    def __init__(
        self,
        url: str,
        match: str,
        value_type: str = "hash",
        schema: SchemaLike | None = None,
        *,
        key_column: str = "_key",
        keys_per_split: int = 1000,
    ) -> None:
        if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in _URL_SCHEMES:
            shown = redact_url(url) if isinstance(url, str) else repr(url)
            raise ConfigError(f"url must be a redis://, rediss:// or unix:// URL, got {shown}")
        if not isinstance(match, str) or not match:
            raise ConfigError(f"match must be a non-empty SCAN pattern, got {match!r}")
        if value_type not in _VALUE_TYPES:
            raise ConfigError(f"value_type must be one of {list(_VALUE_TYPES)}, got {value_type!r}")
        if schema is None:
            raise ConfigError("RedisScanSource needs a schema (Redis values carry no types)")
        if (
            isinstance(keys_per_split, bool)
            or not isinstance(keys_per_split, int)
            or keys_per_split < 1
        ):
            raise ConfigError(f"keys_per_split must be a positive int, got {keys_per_split!r}")
        parsed = parse_schema(schema, "RedisScanSource schema")
        names = parsed.fieldNames()
        if key_column in names:
            key_type = parsed.fields[names.index(key_column)].dataType
            if not isinstance(key_type, (T.StringType, T.BinaryType)):
                raise ConfigError(
                    f"the key field {key_column!r} must be STRING or BINARY, "
                    f"got {key_type.simpleString()}"
                )
        value_fields = [n for n in names if n != key_column]
        if value_type == "string" and len(value_fields) != 1:
            raise ConfigError(
                "a string value fills one field: the schema must have exactly one field "
                f"besides {key_column!r}, got {value_fields}"
            )
        self._url = url
        self._match = match
        self._value_type = value_type
        self._schema = parsed
        self._key_column = key_column
        self._keys_per_split = keys_per_split
        _RowMaker(parsed, value_type, key_column)  # fails now for unsupported field types

    @property
    def url(self) -> str:
        """The URL with its password masked."""
        return redact_url(self._url)

    @property
    def match(self) -> str:
        """The SCAN pattern."""
        return self._match

    @property
    def value_type(self) -> str:
        """``"hash"``, ``"string"`` or ``"json"``."""
        return self._value_type

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def schema(self) -> T.StructType:
        return self._schema

    def create_enumerator(
        self, context: SplitEnumeratorContext[RedisKeysSplit]
    ) -> SplitEnumerator[RedisKeysSplit, PullEnumeratorState[RedisKeysSplit]]:
        return PullSplitEnumerator(
            context, _KeyPlanner(self._url, self._match, self._keys_per_split)
        )

    def restore_enumerator(
        self,
        context: SplitEnumeratorContext[RedisKeysSplit],
        state: PullEnumeratorState[RedisKeysSplit],
    ) -> SplitEnumerator[RedisKeysSplit, PullEnumeratorState[RedisKeysSplit]]:
        planner = _KeyPlanner(self._url, self._match, self._keys_per_split, state.progress)
        return PullSplitEnumerator(context, planner, state.pending)

    def create_reader(self, context: SourceReaderContext) -> SourceReader[RedisKeysSplit]:
        url, value_type = self._url, self._value_type
        rows = _RowMaker(self._schema, value_type, self._key_column)
        return PullingSourceReader(
            context, lambda: _SplitReader(url, value_type, rows), _Emitter(), _State
        )

    @property
    def split_serializer(self) -> SimpleVersionedSerializer[RedisKeysSplit]:
        return _SplitSerializer()

    @property
    def enumerator_state_serializer(
        self,
    ) -> SimpleVersionedSerializer[PullEnumeratorState[RedisKeysSplit]]:
        return PullEnumeratorStateSerializer(
            _SplitSerializer(), 1, "the RedisScanSource enumerator state"
        )

    def __repr__(self) -> str:
        return f"RedisScanSource({self.url!r}, {self._match!r}, value_type={self._value_type!r})"
