"""One open connection to a SQL database, whatever its driver: SQL in, Arrow out.

Kinds of connection: ADBC (adbc-driver-postgresql, adbc-driver-sqlite: results arrive
as Arrow record batches, parameters are bound as Arrow) and DB-API 2.0 drivers (psycopg
3, psycopg2, sqlite3, pymysql, mysql-connector-python, mysqlclient: rows of Python
values, turned into Arrow columns here). What SQL each database takes is its dialect's
(`connectors.sql.dialects`); any other DB-API driver works with a declared schema
(no catalog, no casts).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from connectors.errors import driver_errors, translate
from connectors.sql.dialects import Dialect, dialect_for
from connectors.sql.flavor import MYSQL, OTHER, POSTGRES, SQLITE, Flavor, driver_module, flavor_of
from spark_lookup.connection_budget import ConnectionBudget, record_setup
from spark_lookup.errors import ConnectorError, raise_from
from spark_lookup.host_slots import Slot

__all__ = ["MYSQL", "OTHER", "POSTGRES", "SQLITE", "Flavor", "SqlConnection", "flavor_of"]

log = logging.getLogger("connectors")

_FETCH_ROWS = 8192
"""Rows per fetch on DB-API connections: a chunk streams in batches of this size."""
_ARROW_BATCH_ROWS = 65_536
"""Rows per record batch of a dialect's Arrow reader (connectorx)."""
_ADBC_SQLITE_BATCH_ROWS = 65_536
"""Rows per batch of ADBC SQLite reads that can be resumed (see [`SqlConnection.arrays`][])."""
_ADBC_SQLITE_ONE_BATCH = 2**30
"""ADBC SQLite infers each column's type from the first batch it reads and fails on a
later batch that disagrees (a column NULL in the whole first batch and text later): one
batch for the whole result lets the inference see every value."""


def _close_quietly(resource: Any) -> None:
    try:
        resource.close()
    except Exception:  # a broken or foreign-thread connection: drop it
        log.debug("closing %r failed", resource, exc_info=True)


def build_column(values: Sequence[Any], wire: pa.DataType) -> tuple[pa.Array, pa.Array | None]:
    """A wire column from Python values a DB-API driver returned, and the values that
    do not fit ``wire`` (their text at their position, else null; None if all fit)."""
    try:
        return pa.array(values, type=wire), None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
        pass
    fitted: list[Any] = []
    flags: list[str | None] = []
    for value in values:
        try:
            pa.array([value], type=wire)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
            fitted.append(None)
            flags.append(repr(value)[:200])
            continue
        fitted.append(value)
        flags.append(None)
    return pa.array(fitted, type=wire), pa.array(flags, pa.string())


class SqlConnection:
    """One connection, used by one thread at a time (sqlite3 connections belong to the
    thread that made them): small queries as rows, reads as Arrow columns.

    Reads run in autocommit mode where the driver has it; otherwise each read ends with a
    rollback, so no connection idles in a transaction holding a snapshot or locks.
    Driver errors become [`ConnectorError`][] (or its transient
    subclass) naming ``what`` and the statement's purpose.

    Parameters
    ----------
    raw
        An open connection.
    what
        What it serves, for messages (``"table 'customers'"``).
    timeout
        Seconds a statement may run, where the database bounds it (see
        `_bound_statements`); None: no bound.
    """

    def __init__(self, raw: Any, what: str, timeout: float | None = None) -> None:
        self.raw = raw
        self.slot: Slot | None = None
        """The host slot of a connection budget it holds (given back when it closes)."""
        self.what = what
        self.flavor = flavor_of(raw)
        self.dialect: Dialect = dialect_for(self.flavor.backend)
        self.broken = False
        """Set when a statement failed or a read was abandoned: not to be reused."""
        self._module = driver_module(raw)
        self._errors = driver_errors(self._module)
        self._rollback = self._prefer_autocommit()
        self._timeout = timeout
        self._deadline = float("inf")
        self.dialect.prepare(self)
        if timeout is not None:
            self._bound_statements(timeout)

    def _bound_statements(self, timeout: float) -> None:
        """Make the database end a statement that runs longer than ``timeout``: the
        dialect's setting (PostgreSQL's ``statement_timeout``, SQLite's progress
        handler, MySQL's ``max_execution_time``). Where it has none, statements are
        not bounded."""
        if not self.dialect.bound_statements(self, timeout):
            log.debug("%s: no statement timeout for %r connections", self.what, self.raw)

    def past_deadline(self) -> int:
        """1 when the running statement is past its timeout (SQLite's progress
        handler interrupts it), else 0."""
        return 1 if time.monotonic() > self._deadline else 0

    def commit_setting(self) -> None:
        """Commit a connection setting just made, unless in autocommit mode (a rollback
        after a read would undo it)."""
        if self._rollback != "never":
            self.raw.commit()

    def _start_statement(self) -> None:
        if self._timeout is not None:
            self._deadline = time.monotonic() + self._timeout

    def _prefer_autocommit(self) -> str:
        raw = self.raw
        if self.flavor.adbc:
            try:
                raw.adbc_connection.set_autocommit(True)
                raw._autocommit = True  # keep the DB-API wrapper's view in step
                return "never"
            except Exception:
                log.debug("cannot set autocommit on %r", raw, exc_info=True)
                return "always"
        autocommit = getattr(raw, "autocommit", None)
        if autocommit is False:
            try:
                raw.autocommit = True
                autocommit = True
            except Exception:  # some drivers refuse; rollback after reads then
                log.debug("cannot set autocommit on %r", raw, exc_info=True)
        if autocommit is True:
            return "never"
        # Legacy sqlite3 opens no transaction for a SELECT, and says so.
        return "if-open" if self.flavor.backend == SQLITE else "always"

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """The driver's error classes."""
        return self._errors

    def end_read(self) -> None:
        """End the transaction a read may have begun."""
        if self._rollback == "always" or (
            self._rollback == "if-open" and getattr(self.raw, "in_transaction", True)
        ):
            self.raw.rollback()

    @contextmanager
    def failing(self, purpose: str) -> Iterator[None]:
        """The driver's errors in the block become a ConnectorError naming the table and
        ``purpose``; the connection is then broken (never reused)."""
        try:
            yield
        except self._errors as exc:
            self.broken = True
            raise_from(translate(exc, f"{self.what}: {purpose} failed"), exc)

    def rows(self, sql: str, params: Any = (), purpose: str = "query") -> list[tuple[Any, ...]]:
        """All rows of a small query (catalog reads, split planning), as tuples.

        Raises
        ------
        ConnectorError
            Naming the connection's table and ``purpose``.
        """
        with self.failing(purpose):
            cursor = self.raw.cursor()
            try:
                self._start_statement()
                cursor.execute(sql, params)
                fetched = [tuple(row) for row in cursor.fetchall()]
            finally:
                _close_quietly(cursor)
            self.end_read()
        return fetched

    def arrays(
        self,
        sql: str,
        params: Any,
        wire: Sequence[pa.DataType],
        purpose: str = "read",
        *,
        rest: Callable[[int], tuple[str, Any]] | None = None,
    ) -> Iterator[tuple[list[pa.Array], list[pa.Array | None]]]:
        """The result of ``sql`` as batches of wire columns, with per-column flags of
        values that did not fit their wire type (DB-API only; else None).

        ADBC results arrive as Arrow record batches without a Python object per row;
        DB-API rows are fetched in slices (``fetchmany``) and turned into columns of the
        ``wire`` types a slice at a time.

        ``rest`` marks a read that may be large (a scan's chunk, ordered): ``rest(n)`` is
        the statement and parameters of its rows after the first ``n``. psycopg 3 then
        streams the rows (``Cursor.stream``: libpq never holds the whole result), and
        ADBC SQLite streams batches too, reading the rest as one batch when its type
        inference fails on a later batch (see ``_ADBC_SQLITE_ONE_BATCH``). Without it
        (lookups: results bounded by their keys) an ADBC SQLite result is one batch and
        psycopg's is received whole. The read's transaction ends when the iterator is
        exhausted or closed.

        Raises
        ------
        ConnectorError
            Naming the connection's table and ``purpose``.
        """
        if rest is not None and not params and not self.flavor.adbc:
            batches = self._faster_reader(sql, purpose)
            if batches is not None:
                yield from self._arrow_arrays(batches, wire, purpose)
                return
        with self.failing(purpose):
            cursor = self._cursor(stream=rest is not None)
        finished = False
        self._start_statement()
        try:
            with self.failing(purpose):
                if self.flavor.adbc and self.flavor.backend == SQLITE:
                    yield from self._adbc_sqlite_arrays(cursor, sql, params, len(wire), rest)
                elif self.flavor.adbc:
                    yield from self._adbc_arrays(cursor, sql, params, len(wire))
                else:
                    yield from self._dbapi_arrays(cursor, sql, params, wire,
                                                  stream=rest is not None)
                self.end_read()
            finished = True
        finally:
            # A read left unfinished (closed early) leaves the connection mid-result.
            self.broken = self.broken or not finished
            _close_quietly(cursor)

    def _cursor(self, stream: bool) -> Any:
        """A cursor; for a large read, one that receives rows as they are fetched
        (pymysql's ``SSCursor``, mysql-connector's unbuffered cursor) rather than the
        whole result first."""
        if stream and self._module == "pymysql":
            import pymysql.cursors

            return self.raw.cursor(pymysql.cursors.SSCursor)
        if stream and self._module == "mysql.connector":
            return self.raw.cursor(buffered=False)
        return self.raw.cursor()

    def _faster_reader(self, sql: str, purpose: str) -> Iterator[pa.RecordBatch] | None:
        """The dialect's faster reader of a large parameter-free read (connectorx for
        MySQL), or None; one that fails to start leaves the read to the driver."""
        try:
            return self.dialect.arrow_batches(self, sql, _ARROW_BATCH_ROWS)
        except Exception as exc:
            log.info("%s: %s: the Arrow reader failed to start (%s: %s); reading with the "
                     "driver", self.what, purpose, type(exc).__name__, str(exc)[:200])
            return None

    def _arrow_arrays(self, batches: Iterator[pa.RecordBatch], wire: Sequence[pa.DataType],
                      purpose: str) -> Iterator[tuple[list[pa.Array], list[pa.Array | None]]]:
        nothing: list[pa.Array | None] = [None] * len(wire)
        try:
            for batch in batches:
                if batch.num_rows:
                    # The reader's own types (int32 for INT, large strings) widen to
                    # the wire's, losslessly.
                    yield [column if column.type == wire_type else column.cast(wire_type)
                           for column, wire_type in zip(batch.columns, wire, strict=True)
                           ], nothing
        except Exception as exc:
            raise_from(translate(exc, f"{self.what}: {purpose} failed"), exc)

    def _adbc_arrays(self, cursor: Any, sql: str, params: Any, width: int
                     ) -> Iterator[tuple[list[pa.Array], list[pa.Array | None]]]:
        cursor.execute(sql, params if params else None)
        reader = cursor.fetch_record_batch()
        nothing: list[pa.Array | None] = [None] * width
        for batch in reader:
            if batch.num_rows:
                yield list(batch.columns), nothing

    def _adbc_sqlite_arrays(self, cursor: Any, sql: str, params: Any, width: int,
                            rest: Callable[[int], tuple[str, Any]] | None
                            ) -> Iterator[tuple[list[pa.Array], list[pa.Array | None]]]:
        batch_rows = _ADBC_SQLITE_BATCH_ROWS if rest is not None else _ADBC_SQLITE_ONE_BATCH
        cursor.adbc_statement.set_options(
            **{"adbc.sqlite.query.batch_rows": str(batch_rows)})
        read = 0
        try:
            for columns, flags in self._adbc_arrays(cursor, sql, params, width):
                read += len(columns[0]) if columns else 0
                yield columns, flags
            return
        except self._errors as exc:
            if rest is None or "type mismatch" not in str(exc).lower():
                raise
        # A column NULL throughout the first batch was inferred INT64 and a later batch
        # disagrees: the batches before it are good; the rest is read as one batch.
        log.debug("%s: ADBC SQLite type inference failed after %d rows; reading the rest "
                  "as one batch", self.what, read)
        sql, params = rest(read)
        again = self.raw.cursor()
        try:
            again.adbc_statement.set_options(
                **{"adbc.sqlite.query.batch_rows": str(_ADBC_SQLITE_ONE_BATCH)})
            yield from self._adbc_arrays(again, sql, params, width)
        finally:
            _close_quietly(again)

    def _dbapi_arrays(self, cursor: Any, sql: str, params: Any, wire: Sequence[pa.DataType],
                      stream: bool = False
                      ) -> Iterator[tuple[list[pa.Array], list[pa.Array | None]]]:
        if stream and self._module == "psycopg":
            # psycopg's execute holds the whole result in libpq before the first fetch;
            # stream() receives it in slices (libpq's chunked-rows mode).
            try:
                rows_of = cursor.stream(sql, params, size=_FETCH_ROWS)
            except TypeError:  # psycopg 3.1 has no size: one row at a time, still streamed
                rows_of = cursor.stream(sql, params)
            while True:
                rows = list(itertools.islice(rows_of, _FETCH_ROWS))
                if not rows:
                    return
                yield self._columns(rows, wire)
        cursor.execute(sql, params)
        while True:
            rows = cursor.fetchmany(_FETCH_ROWS)
            if not rows:
                return
            yield self._columns(rows, wire)
            if len(rows) < _FETCH_ROWS:
                return

    @staticmethod
    def _columns(rows: Sequence[Sequence[Any]], wire: Sequence[pa.DataType]
                 ) -> tuple[list[pa.Array], list[pa.Array | None]]:
        built = [build_column(values, wire_type)
                 for values, wire_type in zip(zip(*rows, strict=True), wire, strict=True)]
        return [array for array, _ in built], [flags for _, flags in built]

    def close(self) -> None:
        """Close the connection (errors of a broken connection are ignored), and give its
        slot back."""
        try:
            _close_quietly(self.raw)
        finally:
            slot, self.slot = self.slot, None
            if slot is not None:
                slot.release()


def open_connection(factory: Any, what: str, timeout: float | None = None,
                    budget: ConnectionBudget | None = None) -> SqlConnection:
    """Call a connection factory and wrap its connection (``timeout``: see
    [`SqlConnection`][]); with a ``budget``, a slot of the host is taken first and
    held by the connection until it closes.

    Raises
    ------
    ConnectorError
        (transient or not, as the driver's error says) if connecting fails, or the
        factory returns None; `SourceBusyError` when the budget has no slot in time.
    """
    slot = None if budget is None else budget.take()
    try:
        started = time.perf_counter()
        try:
            raw = factory()
        except Exception as exc:
            raise_from(translate(exc, f"cannot connect to the database of {what}"), exc)
        finally:
            record_setup(time.perf_counter() - started)
        if raw is None:
            raise ConnectorError(f"the connection factory of {what} returned None")
        try:
            connection = SqlConnection(raw, what, timeout)
        except BaseException:
            _close_quietly(raw)
            raise
    except BaseException:
        if slot is not None:
            slot.release()
        raise
    connection.slot = slot
    return connection
