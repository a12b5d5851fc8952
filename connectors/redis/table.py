"""Dimension rows kept in Redis (hashes, JSON documents or plain strings), as every mode
reads them: by key (lookups) and by SCAN (full loads, refreshed views).

[`RedisTable`][] is configuration (URL, key template, schema), picklable; the client
is created where reads run. ``lookup.RedisLookupFunction`` and ``scan.RedisScanSource``
are thin layers over it. Nothing read from Redis is ever unpickled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from connectors.convert import Conformer, castable
from connectors.errors import translate
from connectors.keys import EncodedKeys
from connectors.policy import BadValuePolicy, BadValueStats
from connectors.pool import ConnectionPool
from connectors.predicates import Predicate, check_predicates
from connectors.redis.client import SharedClient, check_redis_url, redact_url, redis_client_from_url
from connectors.redis.template import KeyTemplate
from connectors.redis.values import conform_rows, reply_rows
from spark_lookup import options as opts
from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import ConfigError, raise_from
from spark_lookup.host_slots import Slot
from spark_lookup.options import check_int
from spark_lookup.per_process import PerProcess
from spark_lookup.schema import SchemaLike, parse_schema, to_arrow_schema
from spark_lookup.shown import shown

__all__ = ["VALUE_TYPES", "RedisTable", "cast_key_parts"]

VALUE_TYPES = ("hash", "json", "string")

# A value of each key type, to try a template's format specs on at construction.
_SAMPLES: dict[type[T.DataType], Any] = {
    T.ByteType: 0, T.ShortType: 0, T.IntegerType: 0, T.LongType: 0,
    T.FloatType: 0.0, T.DoubleType: 0.0, T.DecimalType: Decimal(0),
    T.BooleanType: False, T.StringType: "", T.VarcharType: "", T.CharType: "",
    T.DateType: date(2000, 1, 1), T.TimestampType: datetime(2000, 1, 1),
    T.TimestampNTZType: datetime(2000, 1, 1), T.BinaryType: b"",
}


class RedisTable(PerProcess):
    """Rows kept one per Redis key (``json``: one or many per key).

    Parameters
    ----------
    url
        ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS), ``unix://``.
    schema
        The dimension schema (Spark DDL or ``StructType``).
    value_type
        ``"hash"`` (a field per column; only the schema's fields are read, ``HMGET``),
        ``"json"`` (an object is a row, an array of objects many rows) or ``"string"``
        (the value is the schema's one non-key, non-``key_field`` column).
    key_template, key_columns
        How lookup keys name Redis keys (``"user:{id}"``; one key column or several);
        optional for a table only scanned by ``match``.
    escape
        Percent-encode separators inside key parts (see `connectors.redis.template`).
    key_field
        A STRING or BINARY column that receives the Redis key itself (scans).
    filters
        Predicates rows must meet (evaluated after the read: Redis has no query).
    mode
        The bad-value policy.
    socket_timeout, connect_timeout, retries, max_keys_per_command, client_options
        Client settings (see ``RedisLookupFunction``).

    Raises
    ------
    ConfigError
        For an invalid URL, template, value type or schema.
    """

    _PER_PROCESS = ("_client", "stats", "conformer", "budget", "_leases")
    budget: ConnectionBudget | None
    """The host's connection budget of the provider reading the table (set where it is
    opened, `limit_connections`): each connection to Redis holds one of its slots."""

    def __init__(
        self,
        url: str,
        schema: SchemaLike,
        value_type: str = "hash",
        *,
        key_template: str | None = None,
        key_columns: str | Sequence[str] = (),
        escape: bool = False,
        key_field: str | None = None,
        filters: Sequence[Predicate] | None = None,
        mode: BadValuePolicy | str = BadValuePolicy.PERMISSIVE,
        socket_timeout: timedelta | float = 5.0,
        connect_timeout: timedelta | float = 5.0,
        retries: int = 1,
        max_keys_per_command: int = 1000,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.url = check_redis_url(url)
        if value_type not in VALUE_TYPES:
            raise ConfigError(f"value_type must be one of {list(VALUE_TYPES)}, got {value_type!r}")
        check_int(retries, "retries", min_value=0)
        check_int(max_keys_per_command, "max_keys_per_command")
        self.schema = parse_schema(schema, "Redis schema")
        names = self.schema.fieldNames()
        self.value_type = value_type
        self.key_columns = (key_columns,) if isinstance(key_columns, str) else tuple(key_columns)
        missing = [k for k in self.key_columns if k not in names]
        if missing:
            raise ConfigError(f"key column(s) {missing}: not a column of the schema {names}")
        self.template = (
            KeyTemplate(key_template, self.key_columns, escape) if key_template is not None
            else None
        )
        if self.template is not None:
            samples = {}
            for name in self.key_columns:
                data_type = self.schema[name].dataType
                if type(data_type) not in _SAMPLES:
                    raise ConfigError(
                        f"key column {name!r}: {data_type.simpleString()} values do not format "
                        "into Redis keys"
                    )
                samples[name] = _SAMPLES[type(data_type)]
            self.template.check_formats(samples)
        if key_field is not None:
            if key_field not in names:
                key_field = None  # the schema does not ask for the Redis key
            elif not isinstance(self.schema[key_field].dataType, (T.StringType, T.BinaryType)):
                raise ConfigError(f"the key field {key_field!r} must be STRING or BINARY, "
                                  f"got {self.schema[key_field].dataType.simpleString()}")
        self.key_field = key_field
        self.stored = [n for n in names if n != key_field]
        """The columns read from values (all but the Redis key's own column)."""
        if value_type == "string":
            others = [n for n in self.stored if n not in self.key_columns]
            if len(others) != 1:
                raise ConfigError(
                    "value_type 'string' needs exactly one column besides the key columns"
                    f"{' and ' + repr(key_field) if key_field else ''}, got {others}"
                )
            self.value_column: str | None = others[0]
        else:
            self.value_column = None
        self.filters = check_predicates(filters, names, "the Redis table")
        self.mode = BadValuePolicy.parse(mode)
        self.socket_timeout = opts.as_timedelta(socket_timeout, "socket_timeout")
        self.connect_timeout = opts.as_timedelta(connect_timeout, "connect_timeout")
        self.retries = retries
        self.max_keys = max_keys_per_command
        self.client_options = dict(client_options or {})
        self.arrow_schema = to_arrow_schema(self.schema)
        if value_type != "json":
            for name in self.stored:
                field = self.arrow_schema.field(name)
                wire = pa.binary() if pa.types.is_binary(field.type) else pa.string()
                if not castable(wire, field.type):
                    raise ConfigError(
                        f"column {name!r}: {self.schema[name].dataType.simpleString()} values "
                        f"cannot be read from text ({value_type} values); use value_type "
                        "'json' for arrays, maps and structs"
                    )
        self.name = key_template or f"Redis at {redact_url(self.url)}"
        """What messages call the table: its key template."""
        self._init_per_process()

    def _init_per_process(self) -> None:
        self.budget = None
        self._leases: ConnectionPool[_LeasedClient] | None = None
        self._client = SharedClient(self.new_client)
        self.stats = BadValueStats(f"Redis table {self.name!r}")
        self.conformer = Conformer(
            self.name, self.arrow_schema, [f.dataType.simpleString() for f in self.schema.fields],
            self.mode, self.stats,
        )

    @property
    def bad_value_count(self) -> int:
        """Stored values this process could not read as their column's type."""
        return self.stats.count

    # --- client

    def new_client(self) -> Any:
        """A new client (connections are made at its first command); the caller closes
        it."""
        return redis_client_from_url(self.url, socket_timeout=self.socket_timeout.total_seconds(),
                                     connect_timeout=self.connect_timeout.total_seconds(),
                                     retries=self.retries, client_options=self.client_options)

    def client(self) -> Any:
        """This process's shared client (thread-safe: redis-py pools connections)."""
        return self._client.get()

    def close(self) -> None:
        """Close the client and its connections."""
        self._client.close()
        leases = self._leases
        if leases is not None:
            leases.close()

    def limit_connections(self, budget: ConnectionBudget | None) -> None:
        """Open this process's connections under ``budget`` from now on (None: none):
        each read then takes a client holding one connection and a slot of the host,
        and gives it back to a pool that closes it after a short idle time, or at once
        when someone on the host waits for a slot."""
        self.close()
        self.budget = budget
        self._leases = None if budget is None else ConnectionPool(
            budget.contended, lambda leased: budget.admits(leased.slot))

    def _fetch(self, redis_keys: Sequence[str | bytes], what: str, client: Any = None) -> list[Any]:
        """The stored values of ``redis_keys`` in one round trip (a pipeline)."""
        leases = self._leases
        if client is None and leases is not None and self.budget is not None:
            leased = leases.take()
            if leased is None:
                leased = _LeasedClient(self.budget.take(), self.new_client())
            try:
                values = self._fetch(redis_keys, what, leased.client)
            except BaseException:
                leased.close()
                raise
            leases.give(leased)
            return values
        client = client or self.client()
        import redis  # installed: the client exists

        try:
            pipe = client.pipeline(transaction=False)
            if self.value_type == "hash":
                for name in redis_keys:
                    pipe.hmget(name, self.stored)
                return list(pipe.execute())
            for start in range(0, len(redis_keys), self.max_keys):
                pipe.mget(list(redis_keys[start : start + self.max_keys]))
            return [value for reply in pipe.execute() for value in reply]
        except (redis.RedisError, OSError) as exc:
            first = redis_keys[0] if redis_keys else ""
            raise_from(translate(
                exc, f"Redis {what} of {len(redis_keys)} key(s) (first {shown(first)}) at "
                f"{redact_url(self.url)} failed"
            ), exc)

    # --- keys

    def redis_key(self, values: Mapping[str, Any]) -> tuple[str, bool]:
        """The Redis key of normalized key values, and whether it is ambiguous."""
        assert self.template is not None
        return self.template.format(values)

    # --- reads

    def lookup(self, keys: EncodedKeys, key_names: Sequence[str]) -> tuple[pa.Int64Array,
                                                                            pa.RecordBatch]:
        """The rows of the distinct ``keys`` (normalized by a ``KeyCodec`` of
        ``key_names``): for each row the index of its key, and the rows.

        Raises
        ------
        ConfigError
            For a key part that is ambiguous where no stored key column can check it.
        ConnectorError
            If Redis fails (transient or not); BadValueError under FAILFAST.
        """
        assert self.template is not None
        redis_keys: list[str] = []
        ambiguous: list[bool] = []
        for values in keys.distinct:
            redis_key, unsure = self.template.format(dict(zip(key_names, values, strict=True)))
            if unsure and (self.value_type == "string" or not set(self.key_columns) <= set(
                self.stored
            )):
                raise ConfigError(
                    f"key {shown(values)}: a part holds the key template's separator "
                    f"({self.template.template!r}) and the stored value cannot confirm it "
                    "belongs to this key; use escape=True (and the same encoding when writing)"
                )
            redis_keys.append(redis_key)
            ambiguous.append(unsure)
        if not redis_keys:
            return pa.array([], pa.int64()), pa.RecordBatch.from_pylist([], self.arrow_schema)
        replies = self._fetch(redis_keys, "lookup")
        owners, wires, flags, malformed = reply_rows(self, replies)
        owner_array = pa.array(owners, pa.int64())
        key_values = {
            name: keys.arrays[key_names.index(name)].take(owner_array)
            for name in self.key_columns
        }
        batch, keep = conform_rows(self, redis_keys, owners, wires, flags, key_values,
                                    [not ambiguous[i] for i in owners], malformed)
        return (owner_array if keep is None else owner_array.filter(keep)), batch

    def read_keys(self, redis_keys: Sequence[bytes], client: Any = None) -> pa.RecordBatch:
        """The rows stored at ``redis_keys`` (found by SCAN); keys since deleted are
        skipped. Key columns the values lack are parsed from the Redis keys.

        Raises
        ------
        ConnectorError
            If Redis fails; BadValueError under FAILFAST.
        """
        replies = self._fetch(redis_keys, "read", client)
        owners, wires, flags, malformed = reply_rows(self, replies)
        key_values: dict[str, pa.Array] = {}
        parsed_ok = [True] * len(owners)
        by_format: list[int] = []
        if self.template is not None and self.key_columns:
            parts: dict[str, list[str | None]] = {name: [] for name in self.key_columns}
            for row, owner in enumerate(owners):
                readings = _parse_key(self.template, redis_keys[owner])
                parsed = readings[0] if len(readings) == 1 else None
                if parsed is None:
                    parsed_ok[row] = False
                    if len(readings) > 1:  # the stored key says which reading it is
                        by_format.append(row)
                for column in self.key_columns:
                    parts[column].append(None if parsed is None else parsed[column])
            for column in self.key_columns:
                target = self.arrow_schema.field(column).type
                key_values[column] = cast_key_parts(pa.array(parts[column], pa.string()),
                                                    target)
        batch, _ = conform_rows(self, redis_keys, owners, wires, flags, key_values, parsed_ok,
                                 malformed, by_format)
        return batch


class _LeasedClient:
    """A client used by one thread at a time (so one connection), holding a slot of the
    host's budget until it closes."""

    def __init__(self, slot: Slot, client: Any) -> None:
        self.slot = slot
        self.client = client

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            self.slot.release()


def _parse_key(template: KeyTemplate, name: str | bytes) -> list[dict[str, str]]:
    """The readings of a scanned Redis key as key parts (several when a part may hold a
    separator); none for one the template cannot have made (such as bytes that are no
    UTF-8: a replacement character would name another key)."""
    if isinstance(name, bytes):
        try:
            name = name.decode("utf-8")
        except UnicodeDecodeError:
            return []
    readings = template.parse_all(name)
    # Past the limit, the stored key columns (where there are) decide, checked by format.
    return [{}, {}] if readings is None else readings


def cast_key_parts(wire: pa.Array, target: pa.DataType) -> pa.Array:
    """Key parts parsed from Redis keys (text) as values of ``target``; a part that is no
    value of it is null (that row's key then cannot be confirmed)."""
    try:
        return pc.cast(wire, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _cast_each(wire, target)


def _cast_each(wire: pa.Array, target: pa.DataType) -> pa.Array:
    """``wire`` cast value by value, unreadable parts as null (that row's key then
    cannot be confirmed)."""
    out = []
    for value in wire:
        try:
            out.append(pc.cast(pa.array([value.as_py()], pa.string()), target)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(None)
    return pa.array(out, target)
