"""A SQL table as every mode reads it: by key (lookups) and by range (full loads).

[`SqlTable`][] is configuration (a connection factory and names), picklable; its
[`SqlPlan`][] is resolved once from the catalog and travels with it. Both
``lookup.SqlLookupFunction`` and ``scan.SqlTableSource`` are thin layers over it, so a
table gives the same values and types whichever reads it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from connectors.convert import Conformer
from connectors.keys import EncodedKeys
from connectors.policy import BadValuePolicy, BadValueStats
from connectors.pool import POOL_LOCK, ConnectionPool
from connectors.predicates import Predicate, VersionBounds, check_predicates, predicates_to_sql
from connectors.sql.catalog import ColumnInfo, TableInfo
from connectors.sql.connection import SqlConnection, open_connection
from connectors.sql.dialects import Dialect, dialect_for
from connectors.sql.dialects.base import KeyBinding, LookupPlan
from connectors.sql.flavor import SQLITE
from connectors.sql.types import ColumnRead, check_read
from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import ConfigError
from spark_lookup.identifiers import qualified_name, validate_identifier
from spark_lookup.options import as_timedelta
from spark_lookup.per_process import PerProcess
from spark_lookup.schema import SchemaLike, parse_schema, to_arrow_schema
from spark_lookup.shown import shown
from spark_lookup.type_families import DATETIME_TYPES

__all__ = ["KeyBinding", "SqlPlan", "SqlTable", "check_factory"]

_Built = TypeVar("_Built")

_ALIAS = "_lt"
"""The table's alias in every statement."""

ConnectionFactory = Callable[[], Any]


def check_factory(factory: object, what: str) -> ConnectionFactory:
    """``factory`` if it is a zero-argument callable that can travel to executors.

    Lambdas and closures are accepted: they are pickled with cloudpickle (as Spark
    pickles functions), which PySpark ships.

    Raises
    ------
    ConfigError
        If it is not callable or cannot be pickled.
    """
    if not callable(factory):
        raise ConfigError(f"the connection factory of {what} must be a zero-argument callable, got "
                          f"{type(factory).__name__}")
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(factory)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ConfigError(
            f"the connection factory of {what} must be picklable (it travels to executors): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return factory


@dataclass(frozen=True)
class SqlPlan:
    """How a table is read; resolved once, small and picklable."""

    table: str
    table_sql: str
    backend: str
    schema: T.StructType
    reads: tuple[ColumnRead, ...]
    primary_key: tuple[str, ...]
    unique_columns: frozenset[str]
    not_null: frozenset[str]
    key_columns: tuple[str, ...]
    key_bindings: tuple[KeyBinding, ...]
    filters: tuple[Predicate, ...]
    known_columns: tuple[str, ...] = ()
    """Every column the catalog lists (empty without a catalog)."""
    ordered_times: frozenset[str] = frozenset()
    """The time columns the database orders as they read (`Dialect.ordered_time`)."""
    _memo: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)
    """What is built from the plan alone, kept (a lookup statement's text)."""

    def memo(self, key: Hashable, build: Callable[[], _Built]) -> _Built:
        """``build()``, built the first time ``key`` is asked for and kept with the
        plan (a lookup statement's text depends on the plan and the flavor only, and
        costs a tenth of a millisecond to build)."""
        try:
            built: _Built = self._memo[key]
        except KeyError:
            built = self._memo[key] = build()
        return built

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the rows read."""
        return to_arrow_schema(self.schema)

    @property
    def dialect(self) -> Dialect:
        """The SQL of the table's database."""
        return dialect_for(self.backend)

    @property
    def alias_sql(self) -> str:
        """The table's alias in every statement, quoted."""
        return self.dialect.quote(_ALIAS)

    def column_sql(self, name: str) -> str:
        """A column, quoted and qualified by the table's alias in every statement."""
        dialect = self.dialect
        return f"{dialect.quote(_ALIAS)}.{dialect.quote(name, 'column name')}"

    def select_sql(self) -> str:
        """The SELECT list: every column's read as ``_c<i>``, then SQLite's flags."""
        quote = self.dialect.quote
        values = [f"{read.expression} AS {quote(f'_c{i}')}" for i, read in enumerate(self.reads)]
        flags = [f"{read.flag} AS {quote(f'_f{i}')}" for i, read in enumerate(self.reads)
                 if read.flag]
        return ", ".join(values + flags)

    def filter_sql(
        self, placeholder: Callable[[int], str], first: int = 0
    ) -> tuple[list[str], list[Any]]:
        """The table's filters as SQL conditions and their values."""
        return predicates_to_sql(self.filters, self.column_sql, placeholder, first)


class SqlTable(PerProcess):
    """One table of a SQL database, with its schema and how each column is read.

    Built on the driver and picklable (the factory, names, and once resolved the plan);
    connections are opened where the reads run.

    Parameters
    ----------
    connection_factory
        A zero-argument callable returning a new connection: ADBC (adbc-driver-postgresql,
        adbc-driver-sqlite), psycopg 3, psycopg2, sqlite3, or another DB-API driver (then
        ``schema`` is required). Lambdas are fine (pickled with cloudpickle).
    table
        ``table`` or ``schema.table``; validated and quoted (so case-sensitive).
    columns
        Columns to read, in order (default: the schema's, else every column).
    schema
        A Spark DDL string or ``StructType``; inferred from the catalog when not given.
    key_columns
        The columns lookups find rows by (empty for a table only scanned).
    filters
        [`Predicate`][]s every row read must meet, in every mode.
    mode
        The [`BadValuePolicy`][] (default PERMISSIVE).
    timeout
        How long one statement may run (PostgreSQL and sqlite3; see
        [`SqlConnection`][]), or None.
    """

    # Counters, the conformer, idle connections, the budget a runtime set where it runs.
    _PER_PROCESS = ("_reading", "_pool", "budget")
    _reading: _TableReading | None
    _pool: ConnectionPool[SqlConnection] | None
    budget: ConnectionBudget | None
    """The host's connection budget of the provider reading the table (set where it is
    opened, `limit_connections`): every connection holds one of its slots. SQLite's
    are left out (a file has no connection limit)."""

    def __init__(
        self,
        connection_factory: ConnectionFactory,
        table: str,
        *,
        columns: Sequence[str] | None = None,
        schema: SchemaLike | None = None,
        key_columns: Sequence[str] = (),
        filters: Sequence[Predicate] | None = None,
        mode: BadValuePolicy | str = BadValuePolicy.PERMISSIVE,
        timeout: timedelta | float | None = None,
    ) -> None:
        self.timeout = None if timeout is None else as_timedelta(
            timeout, f"timeout of table {table!r}").total_seconds()
        qualified_name(table, "table name")  # validated here; quoted by the dialect
        self.table = table
        self.factory = check_factory(connection_factory, f"table {table!r}")
        if columns is not None:
            if isinstance(columns, str):
                columns = [columns]
            columns = [validate_identifier(c, "column name") for c in columns]
            if not columns or len(set(columns)) != len(columns):
                raise ConfigError(f"columns must be distinct and not empty, got {columns}")
        self.columns = None if columns is None else tuple(columns)
        self.declared = parse_schema(schema, f"schema of table {table!r}") if schema else None
        if self.declared is not None:
            for name in self.declared.fieldNames():
                validate_identifier(name, "column")
            if columns is not None and self.declared.fieldNames() != list(columns):
                raise ConfigError(
                    f"columns {list(columns)} must be the schema's field names in order "
                    f"{self.declared.fieldNames()}"
                )
        self.key_columns = tuple(validate_identifier(k, "key column") for k in key_columns)
        self.filters = check_predicates(
            filters, self.declared.fieldNames() if self.declared else [f.column for f in
                                                                         (filters or [])],
            f"table {table!r}",
        )
        self.mode = BadValuePolicy.parse(mode)
        self._plan: SqlPlan | None = None
        self._init_per_process()

    @property
    def what(self) -> str:
        """``table '<name>'``, for messages."""
        return f"table {self.table!r}"

    # --- plan

    def limit_connections(self, budget: ConnectionBudget | None) -> None:
        """Open connections under ``budget`` from now on, in this process (None: none)."""
        with POOL_LOCK:
            self.budget = budget
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()  # its idle connections hold no slot of the new budget

    def connect(self) -> SqlConnection:
        """A new connection, holding a slot of the budget (if any; waited for).

        Raises
        ------
        ConnectorError
            If connecting fails (transient or not, as the driver says);
            `SourceBusyError` when no slot of the budget came free in time.
        """
        return open_connection(self.factory, self.what, self.timeout,
                               self.budget if self.budgeted else None)

    @property
    def budgeted(self) -> bool:
        """Whether connections open under a budget: one was set, and the table is not
        known to be SQLite's (a file has no connection limit to keep)."""
        plan = self._plan
        return self.budget is not None and (plan is None or plan.backend != SQLITE)

    def close_idle(self) -> None:
        """Close this process's idle connections of the table (giving their slots back)."""
        pool = self._pool
        if pool is not None:
            pool.close()

    def acquire(self) -> SqlConnection:
        """A connection for a read: an idle one of this process's pool, else a new one.

        The pool saves a connection per read of a load (planning, then each reader). It
        keeps at most a few connections, none idle longer than two seconds (no connection
        is held between loads) nor while someone waits for a slot of the budget, and
        never sqlite3's, which belong to the thread that opened them.

        Raises
        ------
        ConnectorError
            If connecting fails.
        """
        connection = self.pool().take()
        return connection if connection is not None else self.connect()

    def release(self, connection: SqlConnection) -> None:
        """Give back a connection from [`acquire`][] after a read that ended cleanly
        (a broken one is closed, not pooled)."""
        flavor = connection.flavor
        if not connection.broken and (flavor.adbc or flavor.backend != SQLITE):
            self.pool().give(connection)
        else:
            connection.close()

    def pool(self) -> ConnectionPool[SqlConnection]:
        """This process's idle connections of the table."""
        pool = self._pool
        if pool is None:
            with POOL_LOCK:
                pool = self._pool
                if pool is None:
                    budget = self.budget
                    pool = self._pool = ConnectionPool(
                        None if budget is None else budget.contended,
                        None if budget is None else lambda c: budget.admits(c.slot))
        return pool

    def plan(self, connection: SqlConnection | None = None) -> SqlPlan:
        """The resolved plan, reading the catalog (on ``connection``, or a connection of
        its own) the first time.

        Raises
        ------
        ConfigError
            For unknown columns, or types that cannot be read as declared.
        ConnectorError
            If the catalog cannot be read, or the table does not exist.
        """
        plan = self._plan
        if plan is not None:
            return plan
        own = connection is None
        connection = connection or self.connect()
        try:
            dialect = connection.dialect
            table_sql = dialect.qualified(self.table)
            info = dialect.describe(connection, self.table, table_sql)
            plan = self._resolve(info, connection, dialect, table_sql)
        finally:
            if own:
                connection.close()
        self._plan = plan
        return plan

    def _resolve(self, info: TableInfo, connection: SqlConnection, dialect: Dialect, table_sql: str
                 ) -> SqlPlan:
        known = [c.name for c in info.columns]
        if self.declared is not None:
            names = self.declared.fieldNames()
        elif self.columns is not None:
            names = list(self.columns)
        elif known:
            names = known
        else:
            raise ConfigError(f"the columns of {self.what} cannot be discovered over "
                              f"{type(connection.raw).__module__} connections: pass schema")
        if known:
            missing = [n for n in names if n not in known]
            if missing:
                raise ConfigError(f"{self.what} has no column(s) {missing}; it has {known}")
        missing_keys = [k for k in self.key_columns if k not in names]
        if missing_keys:
            raise ConfigError(
                f"key column(s) {missing_keys} of {self.what} are not among the columns read "
                f"{names}"
            )
        check_predicates(self.filters, known or names, self.what)
        schema = self.declared or self._inferred(info, names, dialect)
        for key in self.key_columns:
            self._check_key(dialect, info.column(key), schema[key].dataType)
        rowid = (
            info.backend == SQLITE and len(info.primary_key) == 1
            and (info.column(info.primary_key[0]) or ColumnInfo("", "", False)).type_name
            == "INTEGER"
        )
        alias = dialect.quote(_ALIAS)
        reads = tuple(
            self._read(dialect, info.column(f.name),
                       f"{alias}.{dialect.quote(f.name, 'column name')}", f.dataType,
                       rowid and f.name == info.primary_key[0])
            for f in schema.fields
        )
        return SqlPlan(
            table=self.table,
            table_sql=table_sql,
            backend=info.backend,
            schema=schema,
            reads=reads,
            primary_key=info.primary_key,
            unique_columns=info.unique_columns,
            not_null=frozenset(c.name for c in info.columns if c.not_null),
            key_columns=self.key_columns,
            key_bindings=tuple(
                dialect.key_binding(info.column(k), schema[k].dataType)
                for k in self.key_columns
            ),
            filters=self.filters,
            known_columns=tuple(known),
            ordered_times=frozenset(
                f.name for f in schema.fields if isinstance(f.dataType, DATETIME_TYPES)
                and dialect.ordered_time(info.column(f.name), f.dataType)),
        )

    def _check_key(self, dialect: Dialect, column: ColumnInfo | None, spark: T.DataType
                   ) -> None:
        if column is None:
            return
        reason = dialect.key_refusal(column, spark)
        if reason:
            raise ConfigError(
                f"key column {column.name!r} of {self.what} is {column.db_type}, which the "
                f"database cannot look up as a {spark.simpleString().upper()} key: {reason}"
            )

    def _read(self, dialect: Dialect, column: ColumnInfo | None, quoted: str,
              target: T.DataType, rowid: bool) -> ColumnRead:
        if column is None:  # no catalog: the driver's values are taken as the target's
            return Dialect().read(ColumnInfo("", "", False), quoted, target)
        return check_read(dialect.read(column, quoted, target, rowid=rowid), self.table,
                          column, target)

    def _inferred(self, info: TableInfo, names: list[str], dialect: Dialect) -> T.StructType:
        fields = []
        unmapped = []
        for name in names:
            column = info.column(name)
            assert column is not None  # checked against the catalog above
            spark = dialect.natural_type(column)
            if spark is None:
                unmapped.append(f"{name} ({column.db_type or 'no declared type'})")
                continue
            fields.append(T.StructField(name, spark, not column.not_null))
        if unmapped:
            raise ConfigError(f"cannot infer the Spark type of column(s) {', '.join(unmapped)} of "
                              f"{self.what}: pass schema, or columns without them")
        return T.StructType(fields)

    # --- the per-process part: counters and the conformer

    def reading(self) -> _TableReading:
        """The per-process conversion state (built on first use after unpickling)."""
        reading = self._reading
        if reading is None:
            reading = self._reading = _TableReading(self.plan(), self.mode)
        return reading

    @property
    def bad_value_count(self) -> int:
        """Bad values this process met reading the table."""
        reading = self._reading
        return 0 if reading is None else reading.stats.count

    # --- reads

    def scan(
        self,
        connection: SqlConnection,
        conditions: Sequence[str],
        values: Sequence[Any],
        order_sql: str | None = None,
        offset: int = 0,
        key_column: str | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Rows meeting ``conditions`` (SQL over [`SqlPlan.column_sql`][], values
        bound in order, numbered from 0) and the table's filters, as record batches of
        the schema.

        Runs where the read runs (a reader's fetcher thread). ``key_column`` names the
        column whose value identifies a row in bad-value messages.

        Raises
        ------
        ConnectorError
            If the database fails; BadValueError under FAILFAST.
        """
        plan = self.plan(connection)
        reading = self.reading()
        flavor = connection.flavor
        filters, filter_values = plan.filter_sql(flavor.placeholder, len(values))
        where = [*conditions, *filters]
        bound = [*values, *filter_values]
        dialect = plan.dialect
        head = f"SELECT {plan.select_sql()} FROM {plan.table_sql} AS {plan.alias_sql}"
        if where:
            head += " WHERE " + " AND ".join(where)
        if order_sql:
            head += f" ORDER BY {order_sql}"
        params = flavor.params([dialect.bindable(v) for v in bound]) if bound else ()

        def skipping(rows: int) -> tuple[str, Any]:
            sql = head + (dialect.offset_sql(rows) if rows else "")
            return dialect.finish(sql, flavor), params

        names = plan.schema.fieldNames()
        key_index = names.index(key_column) if key_column in names else None
        sql, params = skipping(offset)
        # Without an order, the rows after the first n are not a statement.
        rest = (lambda n: skipping(offset + n)) if order_sql else None
        for wires, built_flags in connection.arrays(sql, params, reading.wire_types, "reading",
                                                 rest=rest):
            yield reading.to_batch(wires, built_flags, key_index)

    def lookup(self, connection: SqlConnection, keys: EncodedKeys, max_keys: int | None = None,
               versions: VersionBounds | None = None) -> tuple[pa.Int64Array, pa.RecordBatch]:
        """The rows of the distinct ``keys``: for each row, the index of its key in
        ``keys.distinct``, and the rows as a record batch of the schema; with
        ``versions``, the rows they leave out may be left unread (`_BoundedPlan`).

        One statement per batch (split only above the driver's parameter limit or
        ``max_keys``). Keys that can never match a column (text that is no uuid, an
        unknown enum label, a NUL character on PostgreSQL) are not sent.

        Raises
        ------
        ConnectorError
            If the database fails; BadValueError under FAILFAST.
        """
        plan = self.plan(connection)
        if not plan.key_columns:
            raise ConfigError(f"{self.what} has no key columns to look rows up by")
        reading = self.reading()
        statement_plan: LookupPlan = plan if versions is None else _BoundedPlan(plan, versions)
        positions = plan.dialect.sendable(plan.key_bindings, keys.arrays)
        arrays = keys.arrays if positions is None else [a.take(positions) for a in keys.arrays]
        count = len(arrays[0]) if arrays else 0
        per_statement = plan.dialect.max_keys(connection, max(1, len(plan.key_columns)))
        if max_keys is not None:
            per_statement = min(per_statement, max_keys)
        indices: list[pa.Array] = []
        batches: list[pa.RecordBatch] = []
        for start in range(0, count, per_statement):
            chunk = [array.slice(start, per_statement) for array in arrays]
            for index, batch in self._lookup_chunk(connection, plan, statement_plan, reading,
                                                   chunk, keys, start, positions):
                indices.append(index)
                batches.append(batch)
        if len(indices) == 1:
            index = indices[0]
        else:
            index = pa.concat_arrays(indices) if indices else pa.array([], pa.int64())
        return index, _one_batch(batches, reading.schema)

    def _lookup_chunk(self, connection: SqlConnection, plan: SqlPlan, statement_plan: LookupPlan,
                      reading: _TableReading,
                      chunk: list[pa.Array], keys: EncodedKeys, start: int,
                      positions: pa.Array | None) -> Iterator[tuple[pa.Int64Array, pa.RecordBatch]]:
        statement = plan.dialect.lookup_statement(statement_plan, connection.flavor, chunk)
        sql, params, by_value = statement.sql, statement.params, statement.by_value
        wire = reading.wire_types if by_value else reading.positioned_wire_types
        first = start if positions is None else positions[start].as_py()
        purpose = f"lookup of {len(chunk[0])} key(s) (first key {shown(keys.key_at(first))})"
        key_positions = reading.key_positions

        def to_sent(found: pa.Array) -> pa.Int64Array:
            """Positions in ``chunk`` as positions in ``keys.arrays``."""
            index = found if found.type == pa.int64() else pc.cast(found, pa.int64())
            if start:
                index = pc.add(index, start)
            return index if positions is None else positions.take(index)

        for wires, built_flags in connection.arrays(sql, params, wire, purpose):
            if by_value:
                # The rows' own keys say which key asked (exact for these types).
                key_wire = wires[key_positions[0]]

                def describe(row: int, key_wire: Any = key_wire) -> str:
                    return shown((key_wire[row].as_py(),))

                batch, _ = reading.conform(wires, built_flags, describe)
                batch, found = _match_by_value(batch, key_positions, chunk)
                yield to_sent(found), batch
                continue
            sent_index = to_sent(wires[0])

            def describe_sent(row: int, sent_index: Any = sent_index) -> str:
                return shown(keys.key_at(sent_index[row].as_py()))

            batch, keep = reading.conform(wires[1:], built_flags[1:], describe_sent)
            yield (sent_index if keep is None else sent_index.filter(keep)), batch


_EPOCH = dt.datetime(1970, 1, 1)
_DAY_MICROS = 86_400_000_000
_SECOND_MICROS = 1_000_000
_JULIAN_EPOCH = 2440587.5  # 1970-01-01 00:00 as a Julian day number
# A loose time (`Dialect.loose_time_sql`) is compared a day wide: more than any offset
# in a text, and any double's rounding.
_LOOSE_MARGIN_DAYS = 1.0


def _time_value(micros: int, target: T.DataType, up: bool) -> Any:
    """``micros`` (as `lookup.versions.instants` reads ``target``) as a value of the
    column's type to bind: a DATE's day, or a timestamp widened to the whole second
    (``up``: the next one), so that no database's rounding of a fraction in a
    comparison can leave a row out. None beyond Python's datetimes (no bound)."""
    try:
        if isinstance(target, T.DateType):
            return (_EPOCH + dt.timedelta(days=micros // _DAY_MICROS)).date()
        seconds = -(-micros // _SECOND_MICROS) if up else micros // _SECOND_MICROS
        naive = _EPOCH + dt.timedelta(seconds=seconds)
    except OverflowError:
        return None
    return naive.replace(tzinfo=dt.timezone.utc) if isinstance(target, T.TimestampType) else naive


def _earliest(target: T.DataType) -> Any:
    """Spark's first time of ``target``: the stored values before it read as bad."""
    first = dt.datetime(1, 1, 1)
    if isinstance(target, T.DateType):
        return first.date()
    return first.replace(tzinfo=dt.timezone.utc) if isinstance(target, T.TimestampType) else first


class _BoundedPlan:
    """A lookup statement's plan whose filters leave out versions a point-in-time
    join's batch cannot need (`VersionBounds`): every dialect's lookup statement takes
    them as the table's own filters, bound after them.

    Only rows whose time the database orders as it reads are left out, so a bound
    never drops a row the join would have used:

    - ``valid_from`` after the latest start: compared as its own type (`ordered_time`),
      or as a Julian day a day wide (`loose_time_sql`, SQLite's text); NULL, and text
      the database cannot read, kept. (A stored value that reads as bad is a NULL
      valid_from, which matches nothing: leaving it out changes a count only.)
    - ``valid_to`` at or before the earliest end: only where ordered as its own type,
      and never a value that reads as bad (`unread_time_sql`): read as NULL, it is a
      version still valid. Text is not bounded: a valid_to the conformer cannot read
      ('2024-02-30') is still valid, and SQLite's ``julianday`` reads it as a time.
    """

    def __init__(self, plan: SqlPlan, bounds: VersionBounds) -> None:
        self._plan = plan
        self._bounds = bounds

    @property
    def table_sql(self) -> str:
        return self._plan.table_sql

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self._plan.key_columns

    @property
    def key_bindings(self) -> tuple[KeyBinding, ...]:
        return self._plan.key_bindings

    def select_sql(self) -> str:
        return self._plan.select_sql()

    def column_sql(self, name: str) -> str:
        return self._plan.column_sql(name)

    def memo(self, key: Hashable, build: Callable[[], _Built]) -> _Built:
        # Not kept: the bounds' values change with every batch (a statement's text costs
        # a tenth of a millisecond to build, a round trip far more).
        return build()

    def filter_sql(self, placeholder: Callable[[int], str], first: int = 0
                   ) -> tuple[list[str], list[Any]]:
        conditions, values = self._plan.filter_sql(placeholder, first)

        def bind(value: Any) -> str:
            values.append(value)
            return placeholder(first + len(values) - 1)

        plan, bounds = self._plan, self._bounds
        dialect = plan.dialect
        schema = plan.schema
        start = plan.column_sql(bounds.valid_from)
        start_type = schema[bounds.valid_from].dataType
        if bounds.valid_from in plan.ordered_times:
            latest = _time_value(bounds.latest_start, start_type, up=True)
            if latest is not None:
                conditions.append(f"({start} IS NULL OR {start} <= {bind(latest)})")
        else:
            loose = dialect.loose_time_sql(start)
            if loose is not None:
                day = (bounds.latest_start / _DAY_MICROS + _JULIAN_EPOCH
                       + _LOOSE_MARGIN_DAYS)
                conditions.append(f"({loose} IS NULL OR {loose} <= {bind(day)})")
        if (bounds.valid_to is not None and bounds.earliest_end is not None
                and bounds.valid_to in plan.ordered_times):
            end = plan.column_sql(bounds.valid_to)
            end_type = schema[bounds.valid_to].dataType
            earliest = _time_value(bounds.earliest_end, end_type, up=False)
            if earliest is not None:
                # DATE: a day d ends after lo when its midnight does, d > lo's day. Bound
                # in the order of the text: some drivers' placeholders are positional.
                after = f"{end} > {bind(earliest)}"
                unread = dialect.unread_time_sql(end, bind(_earliest(end_type)))
                conditions.append(f"({end} IS NULL OR {after} OR {unread})")
        return conditions, values


class _TableReading:
    """What a table needs in each process: its conformer (with the bad-value counter)
    and the wire types of the reads."""

    def empty(self) -> pa.RecordBatch:
        """No rows, in the schema."""
        return pa.RecordBatch.from_arrays(
            [pa.array([], f.type) for f in self.schema], schema=self.schema
        )

    def __init__(self, plan: SqlPlan, mode: BadValuePolicy) -> None:
        self.schema = plan.arrow_schema
        self.stats = BadValueStats(f"table {plan.table!r}")
        self.conformer = Conformer(
            f"{plan.table}", self.schema,
            [f.dataType.simpleString() for f in plan.schema.fields], mode, self.stats,
        )
        self.wire_types = [read.wire for read in plan.reads] + [
            pa.string() for read in plan.reads if read.flag
        ]
        # A lookup's rows: the key's position first, unless matched back by value.
        self.positioned_wire_types = [pa.int64(), *self.wire_types]
        names = plan.schema.fieldNames()
        self.key_positions = [names.index(k) for k in plan.key_columns]
        self._flagged = [i for i, read in enumerate(plan.reads) if read.flag]
        self._width = len(plan.reads)

    def conform(self, wires: Sequence[pa.Array], built_flags: Sequence[pa.Array | None],
                describe: Callable[[int], str]) -> tuple[pa.RecordBatch, pa.BooleanArray | None]:
        values = wires[: self._width]
        flags = self._flags(wires, built_flags)
        columns, keep = self.conformer.conform(values, describe, flags)
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        if keep is not None:
            batch = batch.filter(keep)
        return batch, keep

    def _flags(self, wires: Sequence[pa.Array], built_flags: Sequence[pa.Array | None]
               ) -> list[pa.Array | None] | None:
        """Per column, the values known bad (DB-API columns built from Python values,
        SQLite's flag expressions), or None when no value is (ADBC reads, as a rule)."""
        flags: list[pa.Array | None] = list(built_flags[: self._width])
        for offset, column in enumerate(self._flagged):
            sql_flag = wires[self._width + offset]
            if sql_flag.null_count < len(sql_flag):
                built = flags[column]
                flags[column] = sql_flag if built is None else pc.coalesce(
                    pc.cast(sql_flag, pa.string()), built)
        return flags if any(f is not None for f in flags) else None

    def to_batch(self, wires: Sequence[pa.Array], built_flags: Sequence[pa.Array | None],
                 key_index: int | None) -> pa.RecordBatch:
        def describe(row: int) -> str:
            if key_index is None:
                return f"in row {row} of a read"
            return shown(wires[key_index][row].as_py())

        return self.conform(wires, built_flags, describe)[0]


def _match_by_value(batch: pa.RecordBatch, key_positions: list[int], chunk: list[pa.Array]
                    ) -> tuple[pa.RecordBatch, pa.Array]:
    """The rows whose key columns equal a key of ``chunk`` exactly (Arrow equality;
    a key read as null matches nothing; -0.0 is 0.0), and each one's key position in
    ``chunk``."""
    read = [_zero_signless(batch.column(p)) for p in key_positions]
    chunk = [_zero_signless(array) for array in chunk]
    # index_in finds a row one key; asked both, 0.0 and -0.0 each take the join's.
    if len(key_positions) == 1 and not pa.types.is_floating(chunk[0].type):
        found = pc.index_in(read[0], value_set=chunk[0])
        if found.null_count:
            matched = pc.is_valid(found)
            batch, found = batch.filter(matched), found.filter(matched)
        return batch, found
    names = [f"k{i}" for i in range(len(chunk))]
    rows = pa.table([*read, pa.array(range(batch.num_rows), pa.int64())],
                    names=[*names, "_row"])
    asked = pa.table([*chunk, pa.array(range(len(chunk[0])), pa.int64())],
                     names=[*names, "_key"])
    joined = rows.join(asked, keys=names, join_type="inner").sort_by("_row")
    return (batch.take(joined.column("_row").combine_chunks()),
            joined.column("_key").combine_chunks())


def _zero_signless(array: pa.Array) -> pa.Array:
    """Floats with -0.0 made 0.0, as the caches hash them and SQL compares them (Arrow's
    equality tells them apart)."""
    if not pa.types.is_floating(array.type):
        return array
    return pc.add(array, pa.scalar(0.0, array.type))


def _one_batch(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    if not batches:
        return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
    return pa.concat_batches(batches)
