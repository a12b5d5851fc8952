"""SqlLookupFunction: rows of a database table by key, through the connector layer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from connectors.keys import EncodedKeys, KeyCodec
from connectors.policy import BadValuePolicy
from connectors.predicates import Predicate, VersionBounds
from connectors.sql import SqlConnection, SqlTable
from lookup.keyed import KeyedLookupFunction
from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import TransientConnectorError
from spark_lookup.options import check_int
from spark_lookup.per_process import PerProcess
from spark_lookup.schema import SchemaLike

__all__ = ["SqlLookupFunction"]

log = logging.getLogger(__name__)

ConnectionFactory = Callable[[], Any]


class SqlLookupFunction(PerProcess, KeyedLookupFunction):
    """Looks rows of a database table up by key: PostgreSQL or SQLite over ADBC (Arrow
    end to end) or DB-API (psycopg, sqlite3), or another DB-API database given a schema.

    Built on the driver and pickled to executors as its configuration (the connection
    factory, names, the schema and, once resolved, how each column is read).
    ``connection_factory`` is a zero-argument callable returning a new connection: an
    ADBC connection (``adbc_driver_postgresql.dbapi.connect``,
    ``adbc_driver_sqlite.dbapi.connect``), a psycopg or sqlite3 connection, or another
    DB-API connection; any picklable callable is accepted, lambdas included (they travel
    with cloudpickle). Connections are opened where the function runs, one per thread
    that uses it (sqlite3 connections belong to their thread), in [`open`][] or at the
    first lookup.

    Values. Every column is read through [`connectors`][] (the type table in
    docs/types.md), exactly as ``scan.SqlTableSource`` reads it for full caches and refreshed
    views, so every mode gives the same values and Spark types. A stored value that
    cannot be read as its column's type follows ``mode`` (PERMISSIVE: null; DROPMALFORMED:
    the row is dropped; FAILFAST: [`BadValueError`][spark_lookup.BadValueError]) and is counted
    ([`bad_value_count`][lookup.SqlLookupFunction.bad_value_count], and
    ``num_bad_values`` in the lookup metrics).

    Queries. A batch of keys is one statement. On PostgreSQL the keys travel as one
    array per key column (bound as Arrow on ADBC), unnested ``WITH ORDINALITY`` and
    joined with the table, so each row comes back to the key that asked for it exactly,
    whatever PostgreSQL's comparison rules (collations, ``char(n)`` padding, citext,
    uuid):

        SELECT "_lk"."_lk_i" - 1, ... FROM unnest($1::int8[]) WITH ORDINALITY
        AS "_lk"("_lk_0", "_lk_i") JOIN "customers" AS "_lt" ON "_lt"."id" = "_lk"."_lk_0"

    On SQLite (and other databases) the keys are a ``VALUES`` list tagged with their
    position, joined the same way; a batch is split only above the driver's parameter
    limit or ``max_batch_size``. Identifiers are validated and double-quoted before any
    SQL runs; values are always bound.

    Keys are read as values of their columns' Spark types (see `connectors.keys`):
    a key value of the wrong kind (a str for a BIGINT column, a bool for an INT) or one
    its column's type cannot hold (an out-of-range integer, ``Decimal('1E+1000000')``)
    raises `ConfigError` naming the key and column before any SQL runs; a key
    holding None or NaN, or a value no column value equals, matches nothing and is never
    sent.

    Transactions and failures. Reads run in autocommit mode where the driver has it,
    else are followed by a rollback, so no connection stays idle in a transaction. A driver
    error discards the connection; a connection that broke while idle (a restarted
    server) is replaced and the statement retried once, at once. Errors are
    [`ConnectorError`][spark_lookup.ConnectorError], transient (retried by the lookup runtime with
    backoff) or permanent (reported at once), naming the table and a key.

    Parameters
    ----------
    connection_factory : callable
        Zero-argument callable returning a new connection.
    table : str
        ``table``, ``schema.table`` or ``catalog.schema.table``; each part a plain
        identifier (letters, digits, ``_``, ``$``), matched case-sensitively.
    key_columns : str or sequence of str
        The key columns, in key order.
    columns : sequence of str, optional
        Columns to return, in order (default: the schema's, or all the table's).
    schema : str or StructType, optional
        The dimension schema; inferred from the catalog when omitted (on the driver, at
        construction).
    max_batch_size : int, optional
        Most keys per statement.
    filters : list of Predicate, optional
        Conditions a row must meet to be found (the same as the full cache's).
    mode : {"PERMISSIVE", "DROPMALFORMED", "FAILFAST"}
        The bad-value policy.
    timeout : timedelta or float (seconds), optional
        How long one lookup statement may run, lock waits included: PostgreSQL's
        ``statement_timeout`` for the function's connections; on sqlite3 connections the
        busy timeout and an interrupt past the deadline. A statement ended by it is a
        transient failure, counted and retried by the runtime's ``RetryPolicy``. Not
        applied to ADBC SQLite or other drivers. Default: none (Redis lookups are
        bounded by ``RedisLookupFunction``'s ``socket_timeout``).

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an invalid identifier, a key column not among the
        columns, a key column type no key can have, or a schema that cannot be inferred.
    ConnectorError
        If inference cannot reach the table.

    Examples
    --------
    >>> import functools, sqlite3
    >>> connect = functools.partial(sqlite3.connect, ":memory:")
    >>> customers = SqlLookupFunction(connect, "customers", key_columns=["id"],
    ...                               schema="id BIGINT, name STRING")
    >>> customers.key_columns
    ['id']
    """

    _COUNTED_BY = "_sql"
    _PER_PROCESS = ("_lock", "_local", "_open_connections")  # connections are per process

    def __init__(
        self,
        connection_factory: ConnectionFactory,
        table: str,
        key_columns: str | Sequence[str],
        columns: Sequence[str] | None = None,
        schema: SchemaLike | None = None,
        *,
        max_batch_size: int | None = None,
        filters: Sequence[Predicate] | None = None,
        mode: BadValuePolicy | str = BadValuePolicy.PERMISSIVE,
        timeout: timedelta | float | None = None,
    ) -> None:
        keys = [key_columns] if isinstance(key_columns, str) else list(key_columns)
        if max_batch_size is not None:
            check_int(max_batch_size, "max_batch_size")
        self._sql = SqlTable(
            connection_factory, table, columns=columns, schema=schema, key_columns=keys,
            filters=filters, mode=mode, timeout=timeout,
        )
        self._max_batch_size = max_batch_size
        if schema is None:
            struct = self._sql.plan().schema  # inferred here, on the driver
            self.schema: Any = ", ".join(
                f"`{field.name}` {field.dataType.simpleString()}"
                + ("" if field.nullable else " NOT NULL")
                for field in struct.fields
            )
        else:
            self.schema = schema
            struct = self._sql.declared  # type: ignore[assignment]
        self.key_columns = keys
        self._struct: T.StructType = struct
        self.key_fields()
        self._codec = KeyCodec(keys, [struct[name].dataType for name in keys], f"table {table!r}")
        self._init_per_process()

    @classmethod
    def over(cls, table: SqlTable) -> SqlLookupFunction:
        """A function looking rows of ``table`` up by its key columns, with its
        connection factory, schema, filters, bad-value mode and timeout (what a
        ``scan.SqlTableSource`` gives for its changed keys: ``keyed_table``)."""
        return cls(table.factory, table.table, list(table.key_columns), schema=table.declared,
                   filters=table.filters, mode=table.mode, timeout=table.timeout)

    def _init_per_process(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._open_connections: list[SqlConnection] = []

    @property
    def table(self) -> str:
        """The table name, as given."""
        return self._sql.table

    def __repr__(self) -> str:
        return (
            f"SqlLookupFunction(table={self.table!r}, key_columns={list(self.key_columns)}, "
            f"schema={self._struct.simpleString()!r})"
        )

    # --- connections: one per thread

    def _acquire(self) -> tuple[SqlConnection, bool]:
        """This thread's connection, and whether it was just opened."""
        current: SqlConnection | None = getattr(self._local, "connection", None)
        if current is not None:
            return current, False
        connection = self._sql.connect()
        self._local.connection = connection
        with self._lock:
            self._open_connections.append(connection)
        return connection, True

    def _discard(self, connection: SqlConnection) -> None:
        self._forget(connection)
        connection.close()

    def limit_connections(self, budget: ConnectionBudget | None) -> bool:
        """Open this process's connections under ``budget`` (a slot of the host each):
        a lookup then takes a connection for its statement only and gives it back to
        the table's pool, which closes it after a short idle time, or at once when
        someone on the host waits for a slot. True: they are."""
        self.close()
        self._sql.limit_connections(budget)
        return True

    def open(self) -> None:
        """Connect (this thread) and resolve how the table is read; fails early if the
        database cannot be reached."""
        connection, _ = self._acquire()
        try:
            self._sql.plan(connection)
        except Exception:
            self._discard(connection)
            raise
        if self._sql.budgeted:
            # Under a budget a connection serves one statement at a time: this one
            # waits in the table's pool for the first lookup.
            self._forget(connection)
            self._sql.release(connection)
        elif connection.slot is not None:  # SQLite, known now: no limit to keep
            slot, connection.slot = connection.slot, None
            slot.release()

    def _forget(self, connection: SqlConnection) -> None:
        """Stop holding ``connection`` as this thread's (without closing it)."""
        if getattr(self._local, "connection", None) is connection:
            self._local.connection = None
        with self._lock:
            if connection in self._open_connections:
                self._open_connections.remove(connection)

    def close(self) -> None:
        """Close every connection this function opened."""
        with self._lock:
            connections, self._open_connections = self._open_connections, []
        self._local = threading.local()
        for connection in connections:
            connection.close()
        self._sql.close_idle()

    # --- lookups

    def lookup_arrow_between(self, keys: Sequence[Any], bounds: VersionBounds
                             ) -> tuple[pa.Int64Array, pa.RecordBatch]:
        """`lookup_arrow`, the statement leaving out the versions ``bounds`` rules
        out where the database orders their times as they read (see
        `connectors.sql.table`): a no-cache point-in-time join's load."""
        return self._arrow_answer(keys, lambda encoded: self._query(encoded, bounds))

    def _query(self, encoded: EncodedKeys, bounds: VersionBounds | None = None
               ) -> tuple[pa.Int64Array, pa.RecordBatch]:
        if self._sql.budgeted:
            return self._pooled_query(encoded, bounds)
        for attempt in (1, 2):
            connection, fresh = self._acquire()
            try:
                return self._sql.lookup(connection, encoded, self._max_batch_size, bounds)
            except TransientConnectorError as exc:
                self._discard(connection)
                if attempt == 1 and not fresh:
                    log.info("connection to the database of table %r broke (%s); reconnecting",
                             self.table, exc)
                    continue
                raise
            except BaseException:
                self._discard(connection)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _pooled_query(self, encoded: EncodedKeys, bounds: VersionBounds | None
                      ) -> tuple[pa.Int64Array, pa.RecordBatch]:
        """The lookup on a connection of the table's pool (under a budget), given back
        after the statement; a pooled connection that broke while idle is replaced and
        the statement retried once, at once."""
        table = self._sql
        for attempt in (1, 2):
            pooled = table.pool().take()
            connection = pooled if pooled is not None else table.connect()
            try:
                found = table.lookup(connection, encoded, self._max_batch_size, bounds)
            except TransientConnectorError as exc:
                connection.close()
                if attempt == 1 and pooled is not None:
                    log.info("connection to the database of table %r broke (%s); reconnecting",
                             self.table, exc)
                    continue
                raise
            except BaseException:
                connection.close()
                raise
            table.release(connection)
            return found
        raise AssertionError("unreachable")  # pragma: no cover
