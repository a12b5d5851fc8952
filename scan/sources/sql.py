"""A SQL table over DB-API 2.0, read in chunks of split-column ranges."""

from __future__ import annotations

import pickle
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
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
)
from scan.sources._sql_catalog import (
    describe_table,
    driver_error,
    open_connection,
    translate_errors,
)
from scan.sources._sql_chunks import SqlChunkPlanner, SqlChunkSplit, chunk_query
from scan.sources._sql_plan import ReadPlan, resolve_plan
from spark_lookup.errors import ConfigError
from spark_lookup.schema import SchemaLike, parse_schema
from spark_lookup.sql import qualified_name, validate_identifier

__all__ = ["SqlChunkSplit", "SqlTableSource"]

Row = tuple[Any, ...]

# Rows per fetch: a chunk arrives in a few batches, so the reader starts emitting (and
# a checkpoint can fall) before the whole chunk is fetched.
_FETCH_ROWS = 2048


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
        return SqlChunkSplit(
            index=int(value["index"]),
            lo=value["lo"],
            hi=value["hi"],
            null_chunk=bool(value["null"]),
            resume_after=after[0] if after is not None else None,
            resumed=after is not None,
            skip=int(value["skip"]),
        )


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


class _Emitter(RecordEmitter[Row, _ChunkState]):
    def emit_record(self, element: Row, output: ReaderOutput, split_state: _ChunkState) -> None:
        self.emit_records((element,), output, split_state)

    def emit_records(
        self, elements: Sequence[Row], output: ReaderOutput, split_state: _ChunkState
    ) -> None:
        output.collect_batch(elements)
        split_state.emitted += len(elements)
        if split_state.keyset_index is not None:
            split_state.last_key = [elements[-1][split_state.keyset_index]]


class _SplitReader(SplitReader[Row, SqlChunkSplit]):
    """Reads chunks one after the other on one connection, opened on the first chunk
    (on the fetcher thread, which also closes it: SQLite connections stay on one
    thread)."""

    def __init__(self, factory: Callable[[], Any], plan: ReadPlan) -> None:
        self._factory = factory
        self._plan = plan
        self._coerce = plan.coercer()
        self._splits: deque[SqlChunkSplit] = deque()
        self._connection: Any = None
        self._cursor: Any = None
        self._woken = threading.Event()

    def fetch(self) -> RecordsBySplits[Row]:
        records: RecordsBySplits[Row] = RecordsBySplits()
        if self._woken.is_set():
            self._woken.clear()
            return records
        if not self._splits:
            return records
        split = self._splits[0]
        plan = self._plan
        if self._connection is None:
            self._connection = open_connection(self._factory, plan.table)
        with translate_errors(
            f"reading {split.split_id} of table {plan.table!r}", driver_error(self._connection)
        ):
            if self._cursor is None:
                sql, params = chunk_query(plan, split)
                cursor = self._connection.cursor()
                self._cursor = cursor
                cursor.execute(sql, params)
            rows = self._cursor.fetchmany(_FETCH_ROWS)
            done = len(rows) < _FETCH_ROWS
            if done:
                self._cursor.close()
                self._cursor = None
                # End the chunk's transaction: no snapshot or locks held between chunks.
                self._connection.rollback()
        if rows:
            if type(rows[0]) is not tuple:
                rows = [tuple(row) for row in rows]
            if self._coerce is not None:
                rows = self._coerce(rows)
            records.add(split.split_id, rows)
        if done:
            self._splits.popleft()
            records.add_finished(split.split_id)
        return records

    def handle_splits_changes(self, change: SplitsChange[SqlChunkSplit]) -> None:
        self._splits.extend(change.splits)

    def wake_up(self) -> None:
        # A running query is not interrupted; fetch returns between batches.
        self._woken.set()

    def close(self) -> None:
        connection, self._connection, self._cursor = self._connection, None, None
        if connection is not None:
            connection.close()


class SqlTableSource(Source[SqlChunkSplit, PullEnumeratorState[SqlChunkSplit]]):
    """A table read over DB-API 2.0 (sqlite3, psycopg, ...), in chunks of split-column
    ranges, as Flink CDC chunks a snapshot (see :mod:`scan.sources._sql_chunks`).

    Built on the driver and picklable: it holds the connection factory and names, no
    connection. The enumerator (on the coordinator) plans chunks lazily on a connection
    of its own; each reader's fetcher thread reads its chunks on its own connection.
    The table's catalog (columns, types, primary key) is read once, on first use, and
    travels with the source when it is pickled after that.

    Each chunk is one ``SELECT ... WHERE lo <= key < hi ORDER BY key`` in its own
    short transaction: rows of a chunk are emitted in split-column order, but the
    whole read is not one snapshot (rows changed during a load may be seen in either
    version, as with Flink's JDBC source). A checkpoint inside a chunk resumes after
    the last emitted key when the split column is unique (primary key or unique
    index), else by skipping the emitted rows in a total order (primary key, or all
    read columns); both are exact for data that does not change in between.

    Parameters
    ----------
    connection_factory
        A picklable zero-argument callable returning a new DB-API connection, such as
        ``functools.partial(psycopg.connect, dsn)`` or
        ``functools.partial(sqlite3.connect, path)``. Passwords stay inside it.
    table
        ``table`` or ``schema.table``; validated and quoted (so case-sensitive).
    columns
        Columns to read, in order; default: those of ``schema``, else all columns.
    split_column
        The column to chunk by; default the (first) primary-key column, discovered
        for SQLite and PostgreSQL. Rows whose split column is NULL are read as one
        extra chunk.
    chunk_size
        Rows per chunk (approximately, for evenly spread integer keys).
    schema
        A Spark DDL string or ``StructType`` naming the columns read. Inferred from the
        catalog (SQLite, PostgreSQL) when not given; required for other drivers.

    Raises
    ------
    ConfigError
        (a ``ValueError``) before any SQL runs, for an invalid table or column name,
        a factory that is not callable or not picklable, or an invalid ``chunk_size``
        or ``schema``. On first use, for unknown columns, a table without a primary
        key and no ``split_column``, or types with no Spark type (pass ``schema``).
    ConnectorError
        On use, for a failed connection or query, naming the table.

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

    def __init__(
        self,
        connection_factory: Callable[[], Any],
        table: str,
        columns: Sequence[str] | None = None,
        split_column: str | None = None,
        chunk_size: int = 8192,
        schema: SchemaLike | None = None,
    ) -> None:
        self._table_sql = qualified_name(table, "table name")
        if not callable(connection_factory):
            raise ConfigError(
                f"connection_factory must be a zero-argument callable, got "
                f"{type(connection_factory).__name__}"
            )
        try:
            pickle.dumps(connection_factory)
        except Exception as exc:
            raise ConfigError(
                "connection_factory must be picklable (it travels to executors): use a "
                "module-level function or functools.partial(connect, ...), not a lambda "
                f"or closure ({exc})"
            ) from exc
        if columns is not None:
            if isinstance(columns, str):
                columns = [columns]
            columns = [validate_identifier(c, "column name") for c in columns]
            if not columns or len(set(columns)) != len(columns):
                raise ConfigError(f"columns must be distinct and not empty, got {columns}")
        if split_column is not None:
            validate_identifier(split_column, "split column")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ConfigError(f"chunk_size must be a positive int, got {chunk_size!r}")
        parsed = parse_schema(schema, "SqlTableSource schema") if schema is not None else None
        if parsed is not None:
            for name in parsed.fieldNames():
                validate_identifier(name, "schema field name")
            if columns is not None and parsed.fieldNames() != columns:
                raise ConfigError(
                    f"the schema's fields {parsed.fieldNames()} must be the columns {columns}"
                )
        self._factory = connection_factory
        self._table = table
        self._columns = columns
        self._split_column = split_column
        self._chunk_size = chunk_size
        self._schema = parsed
        self._plan: ReadPlan | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def table(self) -> str:
        """The table name as given."""
        return self._table

    @property
    def chunk_size(self) -> int:
        """Rows per chunk."""
        return self._chunk_size

    def read_plan(self) -> ReadPlan:
        """The resolved plan (columns, split column, ordering), reading the catalog on
        the first call.

        Raises
        ------
        ConfigError, ConnectorError
            As described for the class.
        """
        with self._lock:
            if self._plan is None:
                connection = open_connection(self._factory, self._table)
                try:
                    info = describe_table(connection, self._table, self._table_sql)
                    with translate_errors(f"reading table {self._table!r}"):
                        self._plan = resolve_plan(
                            connection,
                            info,
                            self._table,
                            self._table_sql,
                            self._columns,
                            self._split_column,
                            self._schema,
                        )
                finally:
                    connection.close()
            return self._plan

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def schema(self) -> T.StructType:
        """The declared schema, or the one inferred from the catalog (which reads it)."""
        if self._schema is not None:
            return self._schema
        return self.read_plan().schema

    def create_enumerator(
        self, context: SplitEnumeratorContext[SqlChunkSplit]
    ) -> SplitEnumerator[SqlChunkSplit, PullEnumeratorState[SqlChunkSplit]]:
        return PullSplitEnumerator(
            context, SqlChunkPlanner(self._factory, self.read_plan(), self._chunk_size)
        )

    def restore_enumerator(
        self,
        context: SplitEnumeratorContext[SqlChunkSplit],
        state: PullEnumeratorState[SqlChunkSplit],
    ) -> SplitEnumerator[SqlChunkSplit, PullEnumeratorState[SqlChunkSplit]]:
        planner = SqlChunkPlanner(self._factory, self.read_plan(), self._chunk_size, state.progress)
        return PullSplitEnumerator(context, planner, state.pending)

    def create_reader(self, context: SourceReaderContext) -> SourceReader[SqlChunkSplit]:
        plan = self.read_plan()
        factory = self._factory

        def state_of(split: SqlChunkSplit) -> _ChunkState:
            return _ChunkState(split, plan.keyset_index)

        return PullingSourceReader(
            context, lambda: _SplitReader(factory, plan), _Emitter(), state_of
        )

    @property
    def split_serializer(self) -> SimpleVersionedSerializer[SqlChunkSplit]:
        return _SplitSerializer()

    @property
    def enumerator_state_serializer(
        self,
    ) -> SimpleVersionedSerializer[PullEnumeratorState[SqlChunkSplit]]:
        return PullEnumeratorStateSerializer(
            _SplitSerializer(), 1, "the SqlTableSource enumerator state"
        )

    def __repr__(self) -> str:
        return f"SqlTableSource(table={self._table!r}, chunk_size={self._chunk_size})"
