"""A SQL table over DB-API 2.0, read in chunks of split-column ranges."""

from __future__ import annotations

import datetime
import decimal
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import types as T

from connectors.policy import BadValuePolicy, CountsBadValues
from connectors.predicates import Predicate
from connectors.sql import SqlConnection, SqlPlan, SqlTable
from connectors.sql.chunks import ChunkPlan, SqlChunkPlanner, SqlChunkSplit, chunk_conditions
from connectors.sql.connection import POSTGRES
from scan.connector.emitter import RecordEmitter
from scan.connector.pulling import PullingSourceReader
from scan.enumerator import SplitEnumeratorContext
from scan.planners import PullEnumeratorState, PullSplitEnumerator, SplitPlanner
from scan.pull import PullSource, QueueSplitReader
from scan.reader import ReaderOutput, SourceReader, SourceReaderContext
from scan.serializers import JsonVersionedSerializer, SimpleVersionedSerializer
from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import ConfigError
from spark_lookup.identifiers import validate_identifier
from spark_lookup.options import check_int
from spark_lookup.per_process import PerProcess
from spark_lookup.schema import SchemaLike
from spark_lookup.type_families import INTEGER_TYPES

if TYPE_CHECKING:
    from connectors.sql.lookup_function import SqlLookupFunction

__all__ = ["SqlChunkSplit", "SqlTableSource"]

Row = tuple[Any, ...]


class _SplitSerializer(JsonVersionedSerializer[SqlChunkSplit]):
    VERSION = 1
    WHAT = "a SqlTableSource split"

    def to_json(self, obj: SqlChunkSplit) -> Any:
        return {
            "index": obj.index,
            "lo": obj.lo,
            "hi": obj.hi,
            "null": obj.null_chunk,
            "after": [obj.resume_after] if obj.resumed else None,
            "skip": obj.skip,
        }

    def from_json(self, version: int, value: Any) -> SqlChunkSplit:
        after = value["after"]
        return SqlChunkSplit(index=int(value["index"]), lo=value["lo"], hi=value["hi"],
                             null_chunk=bool(value["null"]),
                             resume_after=after[0] if after is not None else None,
                             resumed=after is not None, skip=int(value["skip"]))


class _ChunkState:
    """Progress in one chunk: rows emitted, and the last key when resuming by key."""

    __slots__ = ("emitted", "keyset_index", "last_key", "split")

    def __init__(self, split: SqlChunkSplit, keyset_index: int | None) -> None:
        self.split = split
        self.emitted = 0
        # NULL keys cannot be compared: the null chunk always resumes by skipping.
        self.keyset_index = None if split.null_chunk else keyset_index
        self.last_key: list[Any] = []

    def to_split(self) -> SqlChunkSplit:
        if self.last_key:
            return replace(self.split, resume_after=self.last_key[0], resumed=True)
        return replace(self.split, skip=self.split.skip + self.emitted)


class _Emitter(RecordEmitter[pa.RecordBatch, _ChunkState]):
    """Emits a batch (a slice of at most ``records_per_poll`` rows) and advances the
    chunk's position: rows emitted, and the last key (one value per batch) when the
    chunk resumes by key."""

    def emit_record(
        self, element: pa.RecordBatch, output: ReaderOutput, split_state: _ChunkState
    ) -> None:
        output.collect_arrow(element)
        split_state.emitted += element.num_rows
        if split_state.keyset_index is not None and element.num_rows:
            split_state.last_key = [element.column(split_state.keyset_index)[-1].as_py()]


class _SplitReader(QueueSplitReader[SqlChunkSplit]):
    """Reads chunks one after the other on one connection, opened on the first chunk (on
    the fetcher thread, which also closes it: SQLite connections stay on one thread).
    A chunk arrives in the batches its driver streams, so the reader starts emitting
    (and a checkpoint can fall) before the whole chunk is fetched.

    ``ordered`` False (a read that takes no checkpoints): a PostgreSQL chunk is read
    without its ORDER BY, which only resuming inside it needs; the server then scans
    the table rather than walking the key's index (measured 30 ms against 80-180 ms
    for 1M rows). SQLite keeps it: a rowid table is stored in key order anyway, and
    ADBC SQLite's batches resume by offset in that order.
    """

    def __init__(self, table: SqlTable, plan: ChunkPlan, ordered: bool = True) -> None:
        super().__init__()
        self._table = table
        self._plan = plan
        self._ordered = ordered or plan.backend != POSTGRES
        self._connection: SqlConnection | None = None
        self._batches: Iterator[pa.RecordBatch] | None = None

    def read_next(self, split: SqlChunkSplit) -> tuple[pa.RecordBatch | None, bool]:
        if self._connection is None:
            self._connection = self._table.acquire()
        if self._batches is None:
            plan = self._plan
            conditions, values = chunk_conditions(plan, split, self._connection.flavor.placeholder)
            # A restored split stands at a position in the chunk's order.
            ordered = self._ordered or split.resumed or split.skip > 0
            self._batches = self._table.scan(
                self._connection, conditions, values, plan.order_sql if ordered else None,
                offset=split.skip, key_column=plan.split_column,
            )
        batch = next(self._batches, None)
        return batch, batch is None

    def split_done(self) -> None:
        self._batches = None
        if self._table.budgeted:
            # Under a connection budget no reader holds a slot between chunks: a reader
            # (or process) waiting for one takes it, and this reader's next chunk takes
            # the connection back from the pool when nobody did.
            connection, self._connection = self._connection, None
            if connection is not None:
                self._table.release(connection)

    def close(self) -> None:
        batches, self._batches = self._batches, None
        if batches is not None:
            batches.close()  # type: ignore[attr-defined]  # a generator: ends its read
        connection, self._connection = self._connection, None
        if connection is not None:
            self._table.release(connection)


def _reads_as_stored(plan: SqlPlan, index: int) -> bool:
    """Whether the split column's emitted values, bound back, compare as the stored ones
    (so a chunk can resume after the last emitted key): PostgreSQL columns read without
    a cast; SQLite integer and text columns (read through their storage class check)."""
    read = plan.reads[index]
    name = plan.schema.fieldNames()[index]
    if read.expression == plan.column_sql(name):
        return True
    data_type = plan.schema.fields[index].dataType
    return plan.backend == "sqlite" and isinstance(
        data_type, (T.LongType, T.StringType)
    ) and ("'text'" in read.expression) == isinstance(data_type, T.StringType)


def _check_bounds(bounds: object, chunk_count: int | None) -> None:
    if not (isinstance(bounds, (tuple, list)) and len(bounds) == 2
            and all(type(b) is int for b in bounds)):
        raise ConfigError(f"split_bounds must be (lower, upper), two ints, got {bounds!r}")
    if bounds[0] > bounds[1]:
        raise ConfigError(f"split_bounds {tuple(bounds)}: the lower bound is above the upper")
    if chunk_count is None:
        raise ConfigError("split_bounds need chunk_count (how many chunks divide them)")


class SqlTableSource(PerProcess, CountsBadValues, PullSource[SqlChunkSplit]):
    """A SQL table read in chunks of split-column ranges, as Flink CDC chunks a snapshot
    (see `connectors.sql.chunks`): PostgreSQL or SQLite over ADBC (Arrow end to
    end) or DB-API (psycopg, sqlite3), or another DB-API database given a schema.

    Built on the driver and picklable: it holds the connection factory and names, no
    connection. The enumerator (on the coordinator) plans chunks lazily on a connection
    of its own; each reader's fetcher thread reads its chunks on its own connection.
    The table's catalog (columns, types, primary key) is read once, on first use, and
    travels with the source when it is pickled after that.

    Values are read through [`connectors`][], exactly as ``lookup.SqlLookupFunction``
    reads them (docs/types.md): the same table gives the same values and Spark
    types in a full cache, a refreshed view and a partial cache. A stored value that
    cannot be read as its column's type follows ``mode`` and is counted
    ([`bad_value_count`][scan.SqlTableSource.bad_value_count]).

    Each chunk is one ``SELECT ... WHERE lo <= key < hi [AND filters] ORDER BY key`` in
    its own short transaction (a bulk read, which takes no checkpoints, leaves the
    ``ORDER BY`` out on PostgreSQL: the server then scans rather than walking the key's
    index, 20% of a 1M-row load; a full cache sorts the loaded table only if it did not
    come in key order): rows of a chunk are emitted in split-column order, but
    the whole read is not one snapshot (rows changed during a load may be seen in
    either version, as with Flink's JDBC source). A checkpoint inside a chunk resumes
    after the last emitted key when the split column is unique (primary key or unique
    index) and read as stored, else by skipping the emitted rows in a total order
    (primary key, or all read columns); both are exact for data that does not change in
    between.

    How many chunks: by default (``chunk_size=None``) one per reader, so a load reads at
    its driver's own speed: ``read_arrow(source, 1)`` reads the table as one unbounded
    chunk (no planning query), ``read_arrow(source, 4)`` as 4 chunks of about a quarter
    of the rows each (fewer for a small table: no chunk of fewer than 65,536 rows). An
    explicit ``chunk_size`` makes chunks of about that many rows instead (more chunks
    than readers spread uneven work, and shorten what a checkpoint resumes by skipping
    rows). The readers are the enumerator's ``current_parallelism`` (``read_arrow``'s
    and ``LocalSourceRunner``'s ``parallelism``, ``plan_splits``' ``parallelism``, a
    Spark data source's partitions). Integer bounds are written into the statement as
    literals (ints the planner computed, never user input), so a chunk without filters
    has no bound parameter: PostgreSQL's ADBC driver streams it through ``COPY``, its
    fastest path (bound values take its prepared-statement path, 2x slower). Every
    driver streams a chunk in batches (ADBC record batches, psycopg's ``stream``, DB-API
    ``fetchmany``), so one huge chunk is never held whole on top of its Arrow result.

    Parameters
    ----------
    connection_factory
        A zero-argument callable returning a new connection (ADBC, psycopg, sqlite3 or
        another DB-API driver), such as ``functools.partial(psycopg.connect, dsn)`` or
        ``lambda: adbc_driver_postgresql.dbapi.connect(dsn)``; any picklable callable,
        lambdas included (pickled with cloudpickle). Passwords stay inside it.
    table
        ``table`` or ``schema.table``; validated and quoted (so case-sensitive).
    columns
        Columns to read, in order (only these are selected); default: those of
        ``schema``, else all columns.
    split_column
        The column to chunk by; default the (first) primary-key column, discovered
        for SQLite and PostgreSQL. Rows whose split column is NULL are read as one
        extra chunk.
    chunk_size
        Rows per chunk (approximately, for evenly spread integer keys); default None:
        one chunk per reader (see above).
    schema
        A Spark DDL string or ``StructType`` naming the columns read. Inferred from the
        catalog (SQLite, PostgreSQL) when not given; required for other drivers.
    filters
        [`Predicate`][]s pushed into every chunk's WHERE (values bound):
        only matching rows are read.
    mode
        The bad-value policy: ``PERMISSIVE`` (default), ``DROPMALFORMED`` or ``FAILFAST``.
    chunk_count
        How many chunks to make, whatever the number of readers (instead of
        ``chunk_size``; Flink JDBC's ``scan.partition.num``).
    split_bounds
        ``(lower, upper)``: the integer split column's expected smallest and largest
        values (Flink JDBC's ``scan.partition.lower-bound``/``upper-bound``), with
        ``chunk_count``: the range is divided into ``chunk_count`` equal key steps with
        no planning query. Rows outside it are still read (the first chunk is open
        below, the last above), where Flink's JDBC source would drop them.
    version_query
        A statement of yours returning one row that changes whenever the table does
        (``"SELECT max(updated_at), count(*) FROM t"``, a version counter a trigger
        keeps): the source's [`current_version`][], so a full cache's reload at an
        unchanged version costs this query, not a load. Run as given (it is your SQL,
        not built from input). Default None: every reload loads.

    Raises
    ------
    ConfigError
        (a ``ValueError``) before any SQL runs, for an invalid table or column name,
        a factory that is not callable or not picklable, or an invalid ``chunk_size``,
        ``schema`` or filter. On first use, for unknown columns, a table without a
        primary key and no ``split_column``, or types that cannot be read as declared.
    ConnectorError
        On use, for a failed connection or query, naming the table (transient or not).

    Examples
    --------
    >>> import functools, os, sqlite3, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "dim.db")
    >>> with sqlite3.connect(path) as db:
    ...     _ = db.execute("CREATE TABLE country (id INTEGER PRIMARY KEY, code TEXT)")
    ...     _ = db.executemany("INSERT INTO country VALUES (?, ?)", [(1, "NL"), (2, "FR")])
    >>> source = SqlTableSource(functools.partial(sqlite3.connect, path), "country")
    >>> source.schema.simpleString()
    'struct<id:bigint,code:string>'
    >>> from scan import read_arrow
    >>> read_arrow(source, parallelism=2).sort_by("id").to_pylist()
    [{'id': 1, 'code': 'NL'}, {'id': 2, 'code': 'FR'}]
    """

    _COUNTED_BY = "_sql"
    _PER_PROCESS = ("_lock",)

    def __init__(
        self,
        connection_factory: Callable[[], Any],
        table: str,
        columns: Sequence[str] | None = None,
        split_column: str | None = None,
        chunk_size: int | None = None,
        schema: SchemaLike | None = None,
        *,
        filters: Sequence[Predicate] | None = None,
        mode: BadValuePolicy | str = BadValuePolicy.PERMISSIVE,
        chunk_count: int | None = None,
        split_bounds: tuple[int, int] | None = None,
        version_query: str | None = None,
    ) -> None:
        if version_query is not None and (not isinstance(version_query, str)
                                          or not version_query.strip()):
            raise ConfigError(f"version_query must be a SQL statement, got {version_query!r}")
        if split_column is not None:
            validate_identifier(split_column, "split column")
        if chunk_size is not None:
            check_int(chunk_size, "chunk_size")
        if chunk_count is not None:
            check_int(chunk_count, "chunk_count")
            if chunk_size is not None:
                raise ConfigError("give chunk_size or chunk_count, not both")
        if split_bounds is not None:
            _check_bounds(split_bounds, chunk_count)
        self._sql = SqlTable(
            connection_factory, table, columns=columns, schema=schema, filters=filters,
            mode=mode,
        )
        self._table = table
        self._split_column = split_column
        self._chunk_size = chunk_size
        self._chunk_count = chunk_count
        self._split_bounds = (None if split_bounds is None
                              else (split_bounds[0], split_bounds[1]))
        self._chunks: ChunkPlan | None = None
        self._version_query = version_query
        self._init_per_process()

    def _init_per_process(self) -> None:
        self._lock = threading.Lock()

    @property
    def table(self) -> str:
        """The table name as given."""
        return self._table

    @property
    def chunk_size(self) -> int | None:
        """Rows per chunk; None: one chunk per reader."""
        return self._chunk_size

    def current_version(self) -> tuple[Any, ...] | None:
        """The row of ``version_query`` (None without one).

        Raises
        ------
        ConnectorError
            When the query fails, naming the table (transient or not, as the driver says).
        ConfigError
            When it returns other than one row, or a value with no stable ``repr``.
        """
        if self._version_query is None:
            return None
        connection = self._sql.acquire()
        try:
            rows = connection.rows(self._version_query, purpose="version query")
        finally:
            self._sql.release(connection)
        if len(rows) != 1:
            raise ConfigError(f"version_query of table {self._table!r} must return one row, "
                              f"it returned {len(rows)}")
        return tuple(version_value(value, self._table) for value in rows[0])

    def limit_connections(self, budget: ConnectionBudget | None) -> bool:
        """Open this process's connections to the table (planning, reading, the version
        query) under ``budget``; True: they are."""
        self._sql.limit_connections(budget)
        return True

    def keyed_table(self, key_columns: Sequence[str]) -> SqlTable | None:
        """This table read by ``key_columns``: the same connection factory, schema,
        filters and bad-value mode, so that the rows of a key read through it are the
        rows a scan reads (a row the filters leave out: none). A full cache with a
        change feed reads the changed keys through it. A subclass may return None:
        changes then reload the table.

        Runs where the provider is built (the schema is resolved there).
        """
        return SqlTable(self._sql.factory, self._table, schema=self.schema,
                        key_columns=key_columns, filters=self._sql.filters, mode=self._sql.mode)

    def keyed_lookup(self, key_columns: Sequence[str]) -> SqlLookupFunction | None:
        """A lookup function over ``keyed_table(key_columns)`` (None when that is None):
        what a full cache with a change feed reads its changed keys through.
        """
        # Imported here: a scan alone never loads the lookup package.
        from connectors.sql.lookup_function import SqlLookupFunction

        table = self.keyed_table(key_columns)
        return None if table is None else SqlLookupFunction.over(table)

    def read_plan(self) -> ChunkPlan:
        """The resolved chunk plan (split column, ordering, resume), reading the catalog
        on the first call.

        Raises
        ------
        ConfigError, ConnectorError
            As described for the class.
        """
        with self._lock:
            if self._chunks is None:
                self._chunks = self._resolve_chunks()
            return self._chunks

    def _resolve_chunks(self) -> ChunkPlan:
        plan = self._sql.plan()
        names = plan.schema.fieldNames()
        split_column = self._split_column
        if split_column is None:
            if not plan.dialect.discovers:
                raise ConfigError(
                    f"cannot discover the primary key of {self._table!r} with this driver; "
                    "pass split_column"
                )
            if not plan.primary_key:
                raise ConfigError(f"table {self._table!r} has no primary key; pass split_column")
            split_column = plan.primary_key[0]
        elif plan.known_columns and split_column not in plan.known_columns:
            raise ConfigError(f"table {self._table!r} has no split column {split_column!r}; it has "
                              f"{list(plan.known_columns)}")
        if (self._split_bounds is not None and split_column in names
                and not isinstance(plan.schema[split_column].dataType, INTEGER_TYPES)):
            raise ConfigError(
                f"split_bounds {self._split_bounds} need an integer split column; "
                f"{split_column!r} of table {self._table!r} is "
                f"{plan.schema[split_column].dataType.simpleString()}")
        split_name = plan.dialect.quote(split_column, "split column")
        reads_as_stored = (split_column in names
                           and _reads_as_stored(plan, names.index(split_column)))
        unique = split_column in plan.unique_columns
        # The primary key orders the rows totally, so skipping rows is exact. Without one,
        # rows equal in every selected column are interchangeable: skipping n of them
        # emits the same multiset, whichever n the database picks.
        ties = [] if unique else [c for c in plan.primary_key or names if c != split_column]
        order = [plan.column_sql(c) for c in (split_column, *ties)]
        return ChunkPlan(
            table=self._table,
            table_sql=plan.table_sql,
            backend=plan.backend,
            split_column=split_column,
            split_name=split_name,
            split_sql=plan.column_sql(split_column),
            order_sql=", ".join(order),
            keyset_index=names.index(split_column) if unique and reads_as_stored else None,
            split_nullable=split_column not in plan.not_null,
        )

    @property
    def schema(self) -> T.StructType:
        """The declared schema, or the one inferred from the catalog (which reads it and
        checks the split column)."""
        if self._sql.declared is not None:
            return self._sql.declared
        self.read_plan()
        return self._sql.plan().schema

    def planner(self, progress: Any | None, parallelism: int = 1
                ) -> SplitPlanner[SqlChunkSplit]:
        """The chunk planner (on the coordinator), sized for ``parallelism`` readers."""
        return SqlChunkPlanner(self._sql, self.read_plan(), self._chunk_size, progress,
                               parallelism, chunk_count=self._chunk_count,
                               bounds=self._split_bounds)

    def create_enumerator(self, context: SplitEnumeratorContext[SqlChunkSplit]
                          ) -> PullSplitEnumerator[SqlChunkSplit]:
        # The default chunking needs the number of readers, which only the context knows.
        return PullSplitEnumerator(context, self.planner(None, context.current_parallelism))

    def restore_enumerator(
        self, context: SplitEnumeratorContext[SqlChunkSplit],
        state: PullEnumeratorState[SqlChunkSplit],
    ) -> PullSplitEnumerator[SqlChunkSplit]:
        return PullSplitEnumerator(
            context, self.planner(state.progress, context.current_parallelism), state.pending)

    def split_reader(self, ordered: bool = True) -> Callable[[], _SplitReader]:
        plan, table = self.read_plan(), self._sql
        return lambda: _SplitReader(table, plan, ordered)

    def create_reader(self, context: SourceReaderContext) -> SourceReader[SqlChunkSplit]:
        """A reader of chunks, where its subtask runs; chunks in key order unless the
        read takes no checkpoints (``context.options.checkpoints``)."""
        return PullingSourceReader(context, self.split_reader(context.options.checkpoints),
                                   self.emitter(), self.split_state)

    def split_state(self, split: SqlChunkSplit) -> _ChunkState:
        return _ChunkState(split, self.read_plan().keyset_index)

    def emitter(self) -> _Emitter:
        return _Emitter()

    def serializer(self) -> SimpleVersionedSerializer[SqlChunkSplit]:
        return _SplitSerializer()

    def __repr__(self) -> str:
        return f"SqlTableSource(table={self._table!r}, chunk_size={self._chunk_size!r})"


_VERSION_TYPES = (int, float, str, bytes, bool, type(None), decimal.Decimal, datetime.date,
                  datetime.time, datetime.timedelta, uuid.UUID)


def version_value(value: Any, table: str) -> Any:
    """A value of a version query's row, as one whose ``repr`` identifies it (a host's
    snapshot store records versions by ``repr``)."""
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    if not isinstance(value, _VERSION_TYPES):
        raise ConfigError(f"version_query of table {table!r} returned a "
                          f"{type(value).__name__}, which has no stable repr; cast it to "
                          "text or a number in the query")
    return value
