"""Chunking a table by ranges of its split column, as Flink CDC's snapshot splitter does.

Design notes: DESIGN.md, scan/ ``connectors/sql/chunks.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from connectors.sql import SqlConnection, SqlTable
from scan.planners import SplitPlanner
from scan.split import SourceSplit
from spark_lookup.errors import SourceError
from spark_lookup.shown import shown

EVEN_FACTOR_LOWER = 0.05
EVEN_FACTOR_UPPER = 1000.0
MIN_CHUNK_ROWS = 65_536
"""By default a chunk holds at least this many rows: a chunk's own cost (its reader's
connection, its statement, the planning queries; tens of milliseconds) is about what
reading this many rows takes, so smaller chunks cost more than parallel readers save."""
_LEGACY_CHUNK_SIZE = 8192
"""Rows per chunk of progress checkpointed before the planner recorded its chunk size
(the default ``chunk_size`` then)."""


@dataclass(frozen=True)
class SqlChunkSplit(SourceSplit):
    """Rows of a table whose split column is in ``[lo, hi)`` (None: unbounded), or, for
    the null chunk, is NULL; ordered by the split column.

    A restored split resumes after ``resume_after`` (the last emitted key, when the
    split column is unique) or after skipping ``skip`` rows in the chunk's order.
    """

    index: int
    lo: Any = None
    hi: Any = None
    null_chunk: bool = False
    resume_after: Any = None
    resumed: bool = False
    skip: int = 0

    @property
    def split_id(self) -> str:
        return "chunk-null" if self.null_chunk else f"chunk-{self.index}"


@dataclass(frozen=True)
class ChunkPlan:
    """How a table is chunked: the split column, the order rows of a chunk come in, and
    how a checkpointed chunk resumes; resolved once with the table's plan."""

    table: str
    table_sql: str
    backend: str
    split_column: str
    split_name: str
    """The split column, quoted (planning queries)."""
    split_sql: str
    """The split column, quoted and qualified by the read's table alias (chunk reads)."""
    order_sql: str
    keyset_index: int | None
    """Position of the split column in a row when it is unique and read as stored, so
    a chunk resumes after the last emitted key; None: resume by skipping rows."""
    split_nullable: bool


def chunk_conditions(plan: ChunkPlan, split: SqlChunkSplit, placeholder: Any
                     ) -> tuple[list[str], list[Any]]:
    """The WHERE conditions of one chunk and their values (numbered from 0): integer
    bounds as literals (see the module), others bound."""
    key = plan.split_sql
    conditions: list[str] = []
    values: list[Any] = []

    def bind(value: Any) -> str:
        if type(value) is int:
            # int() of an exact int: digits and a sign only, nothing to inject.
            return str(int(value))
        values.append(value)
        return str(placeholder(len(values) - 1))

    if split.null_chunk:
        conditions.append(f"{key} IS NULL")
    else:
        if split.resumed:
            conditions.append(f"{key} > {bind(split.resume_after)}")
        elif split.lo is not None:
            conditions.append(f"{key} >= {bind(split.lo)}")
        if split.hi is not None:
            conditions.append(f"{key} < {bind(split.hi)}")
        if not conditions:
            conditions.append(f"{key} IS NOT NULL")
    return conditions, values


class SqlChunkPlanner(SplitPlanner[SqlChunkSplit]):
    """Makes the chunks of a table one at a time (see the module); opens its own
    connection on first use, on the coordinator.

    ``chunk_size`` None: about one chunk per reader of ``parallelism``, or
    ``chunk_count`` chunks when given; with ``bounds`` (the split column's expected
    smallest and largest values, ints) too, the chunks divide that range evenly and
    no planning query runs (Flink JDBC's ``scan.partition.*``), the first chunk still
    open below and the last open above. A restored planner keeps the sizes it chose
    at first (they are part of its progress).
    """

    def __init__(self, table: SqlTable, plan: ChunkPlan, chunk_size: int | None,
                 progress: Any = None, parallelism: int = 1, *,
                 chunk_count: int | None = None,
                 bounds: tuple[int, int] | None = None) -> None:
        self._table = table
        self._plan = plan
        self._chunk_size = chunk_size
        self._parallelism = max(1, int(parallelism))
        self._chunk_count = chunk_count
        self._bounds = bounds
        self._connection: SqlConnection | None = None
        state: dict[str, Any] = dict(progress) if progress is not None else {"phase": "init"}
        if state.get("phase") not in ("init", "even", "uneven", "null", "done"):
            raise SourceError(f"malformed SQL chunk planner progress: {shown(progress, 120)}")
        self._state = state

    def progress(self) -> Any:
        return dict(self._state)

    def close(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            self._table.release(connection)

    def next_split(self) -> SqlChunkSplit | None:
        state = self._state
        if state["phase"] == "init":
            self._initialize()
            if state["phase"] != "uneven" or state.get("last"):
                # No more planning queries: a reader takes this connection from the
                # pool instead of opening one (an ADBC PostgreSQL connect is ~50 ms).
                self.close()
        if state["phase"] == "even":
            return self._next_even()
        if state["phase"] == "uneven":
            try:
                return self._next_uneven()
            finally:
                if self._table.budgeted:
                    # Planned on request: between requests the connection waits in the
                    # pool, so no reader waits for the slot of an idle planner.
                    self.close()
        if state["phase"] == "null":
            state["phase"] = "done"
            return SqlChunkSplit(-1, null_chunk=True)
        return None

    # --- phases

    def _after_ranges(self) -> None:
        self._state["phase"] = "null" if self._plan.split_nullable else "done"

    def _one_chunk(self) -> None:
        # No bounds to find, and an unbounded read is the driver's fastest.
        self._state.update(index=0, max=None, cursor=None, phase="uneven", last=True)

    def _initialize(self) -> None:
        plan = self._plan
        key = plan.split_name
        chunks = self._chunk_count
        if self._bounds is not None and chunks is not None:
            self._divide(*self._bounds, chunks)
            return
        if chunks == 1 or (chunks is None and self._chunk_size is None
                           and self._parallelism == 1):
            self._one_chunk()
            return
        rows = self._row_count()
        if self._chunk_size is None:
            if chunks is None:
                chunks = min(self._parallelism, max(1, rows // MIN_CHUNK_ROWS))
            # A chunk ends before the size-th key from its start (the next chunk's
            # first): one more, so the rows fill exactly ``chunks`` chunks.
            size = -(-rows // chunks) + 1
        else:
            size = self._chunk_size
        if chunks == 1 or rows <= size:
            self._one_chunk()
            return
        # ORDER BY ... LIMIT 1 rather than MIN/MAX: every orderable type has an order
        # (PostgreSQL's uuid has no MIN), and an index on the key answers it directly.
        low = self._first(
            f"SELECT {key} FROM {plan.table_sql} WHERE {key} IS NOT NULL ORDER BY {key} LIMIT 1"
        )
        high = self._first(f"SELECT {key} FROM {plan.table_sql} WHERE {key} IS NOT NULL "
                           f"ORDER BY {key} DESC LIMIT 1")
        state = self._state
        state.update(index=0, max=high, cursor=None, size=size)
        if low is None:
            # No non-null key now: one unbounded chunk still reads what is there then.
            state.update(phase="uneven", last=True)
            return
        integral = all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high))
        factor = (high - low + 1) / rows if integral and rows > 0 else 0.0
        if integral and EVEN_FACTOR_LOWER <= factor <= EVEN_FACTOR_UPPER:
            # By count, the key range itself is divided: even with a stale row estimate
            # the chunks are as many as planned.
            step = (-(-(high - low + 1) // chunks) if chunks is not None
                    else int(size * factor))
            state.update(phase="even", step=max(1, step), cursor=low)
        else:
            state.update(phase="uneven", cursor=low, last=False)

    def _divide(self, low: int, high: int, chunks: int) -> None:
        """``chunks`` chunks of equal key steps over ``[low, high]``; rows outside the
        range are read too (by the first and the last chunk), unlike Flink's JDBC
        source, which drops them."""
        step = max(1, -(-(high - low + 1) // chunks))
        self._state.update(index=0, max=high, cursor=low, phase="even", step=step)

    def _emit(self, lo: Any, hi: Any) -> SqlChunkSplit:
        index = self._state["index"]
        self._state["index"] = index + 1
        # The first chunk is open below: keys smaller than MIN at planning still belong.
        return SqlChunkSplit(index, None if index == 0 else lo, hi)

    def _next_even(self) -> SqlChunkSplit:
        state = self._state
        lo = state["cursor"]
        hi = lo + state["step"]
        if hi > state["max"]:
            self._after_ranges()
            return self._emit(lo, None)
        state["cursor"] = hi
        return self._emit(lo, hi)

    def _next_uneven(self) -> SqlChunkSplit:
        state = self._state
        lo = state["cursor"]
        if state.get("last"):
            self._after_ranges()
            return self._emit(lo, None)
        end = self._chunk_end(lo)
        if end is None or _same(end, state["max"]) or _not_below(end, state["max"]):
            self._after_ranges()
            return self._emit(lo, None)
        state["cursor"] = end
        return self._emit(lo, end)

    def _chunk_end(self, start: Any) -> Any:
        plan = self._plan
        key = plan.split_name
        flavor = self._connect().flavor
        placeholder = flavor.placeholder(0)
        params = flavor.params([start])
        size = int(self._state.get("size", self._chunk_size or _LEGACY_CHUNK_SIZE))
        end = self._first(
            f"SELECT {key} FROM (SELECT {key} FROM {plan.table_sql} "
            f"WHERE {key} >= {placeholder} ORDER BY {key} LIMIT {size}) "
            f"AS chunk ORDER BY {key} DESC LIMIT 1",
            params,
        )
        if end is not None and end == start:
            # chunk_size rows or more share this key: the chunk takes all of them.
            end = self._first(
                f"SELECT {key} FROM {plan.table_sql} WHERE {key} > {placeholder} "
                f"ORDER BY {key} LIMIT 1",
                params,
            )
        return end

    def _first(self, sql: str, params: Any = ()) -> Any:
        rows = self._query(sql, params)
        return rows[0][0] if rows else None

    def _row_count(self) -> int:
        plan = self._plan
        connection = self._connect()
        estimate = connection.dialect.row_estimate(connection, plan.table_sql)
        if estimate is not None:
            return estimate
        return int(self._query(f"SELECT COUNT(*) FROM {plan.table_sql}")[0][0])

    def _connect(self) -> SqlConnection:
        if self._connection is None:
            self._connection = self._table.acquire()
        return self._connection

    def _query(self, sql: str, params: Any = ()) -> list[Any]:
        # Each request ends its transaction (SqlConnection.rows): no snapshot held, no locks.
        return self._connect().rows(sql, params, "planning chunks")


def _same(value: Any, maximum: Any) -> bool:
    """``value == maximum``, NaN included: PostgreSQL sorts NaN (float or numeric) above
    every number and finds it equal to itself, so a key column holding NaN ends on it;
    Python's NaN equals nothing, and the chunks after it would never end."""
    return bool(value == maximum) or (value != value and maximum != maximum)


def _not_below(value: Any, maximum: Any) -> bool:
    """``value >= maximum`` in Python's order. It only decides when to stop making
    bounded chunks: the last chunk is unbounded, so a database order that differs
    (a collation) costs chunk balance, never rows."""
    try:
        return bool(value >= maximum)
    except (TypeError, ArithmeticError):  # decimal.InvalidOperation: a NaN is unordered
        return False
