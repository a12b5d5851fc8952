"""The one small interface every SQL dialect implements, and the generic dialect of
DB-API databases this library has no module for (a declared schema, ANSI quoting,
lookups by a ``VALUES`` list).

A dialect is the SQL of one database, whatever its driver: identifier quoting, the
catalog queries, its rows of the type table (inferred Spark types and wire reads), the
batched-lookup statement, the scan statement's parts, statement timeouts and the
connection's setup. The driver side (how a connection runs statements and hands rows
or Arrow batches over) is `connectors.sql.connection`. Dialects hold no state: one
instance per database, chosen from the connection's driver module
(`connectors.sql.dialects.dialect_for`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from connectors.sql.catalog import ColumnInfo, TableInfo
from connectors.sql.flavor import OTHER, Flavor
from connectors.sql.types import ColumnRead
from spark_lookup.identifiers import validate_identifier
from spark_lookup.schema import to_arrow_type

__all__ = [
    "ConnectionLike",
    "Dialect",
    "KeyBinding",
    "LookupPlan",
    "LookupStatement",
    "escape_percent",
]

_Built = TypeVar("_Built")

_OTHER_MAX_PARAMS = 999


class ConnectionLike(Protocol):
    """What a dialect uses of a [`SqlConnection`][]."""

    raw: Any
    what: str
    flavor: Flavor

    def rows(self, sql: str, params: Any = (), purpose: str = "query"
             ) -> list[tuple[Any, ...]]: ...

    def failing(self, purpose: str) -> AbstractContextManager[None]: ...

    def past_deadline(self) -> int: ...

    def commit_setting(self) -> None: ...


@dataclass(frozen=True)
class KeyBinding:
    """How one key column's values are sent: PostgreSQL's array type of the parameter,
    and which values can never match the column (they are not sent)."""

    array_type: str = ""
    uuid: bool = False
    enum_labels: tuple[str, ...] = ()
    text: bool = False
    exact: bool = False
    """Equality of the column in the database is equality of the key's Arrow values
    (integers, dates, timestamps, booleans): rows can be matched back to keys by value."""
    truth: bool = False
    """MySQL: a BOOLEAN key of a numeric column, which reads as true when it is not 0:
    true is asked as ``<> 0``, false as ``= 0``."""


class LookupPlan(Protocol):
    """What a dialect uses of a [`SqlPlan`][]."""

    @property
    def table_sql(self) -> str: ...

    @property
    def key_columns(self) -> tuple[str, ...]: ...

    @property
    def key_bindings(self) -> tuple[KeyBinding, ...]: ...

    def select_sql(self) -> str: ...

    def column_sql(self, name: str) -> str: ...

    def filter_sql(self, placeholder: Callable[[int], str], first: int = 0
                   ) -> tuple[list[str], list[Any]]: ...

    def memo(self, key: Hashable, build: Callable[[], _Built]) -> _Built: ...


@dataclass(frozen=True)
class LookupStatement:
    """One batched lookup: its SQL and parameters. ``by_value``: the rows carry no key
    position, each is matched back to its key by its key columns' values (exact
    equality of the Arrow values); else the first column is the key's position in the
    chunk."""

    sql: str
    params: Any
    by_value: bool = False


def escape_percent(sql: str) -> str:
    """``%`` doubled for format-style drivers, placeholders kept."""
    return sql.replace("%", "%%").replace("%%s", "%s")


class Dialect:
    """The SQL of one database. This base is the generic dialect (ANSI quoting, no
    catalog, no statement timeout); each method says what a database module overrides."""

    backend = OTHER
    discovers = False
    """Whether `describe` reads the catalog (columns, types, primary key)."""

    # --- identifiers

    def quote(self, name: str, what: str = "identifier") -> str:
        """Validate ``name`` and quote it (ANSI double quotes)."""
        return '"' + validate_identifier(name, what) + '"'

    def qualified(self, name: str, what: str = "table name") -> str:
        """Validate and quote a possibly qualified name (``schema.table``)."""
        return ".".join(self.quote(part, what) for part in name.split("."))

    # --- catalog and type table

    def describe(self, connection: ConnectionLike, table: str, table_sql: str) -> TableInfo:
        """The catalog facts of ``table`` (``table_sql``: its quoted form); none here.

        Raises
        ------
        ConnectorError
            If the table does not exist (permanent) or the catalog cannot be read.
        """
        return TableInfo(self.backend, (), (), frozenset())

    def natural_type(self, column: ColumnInfo) -> T.DataType | None:
        """The Spark type a column is inferred to have (None: declare a schema)."""
        return None

    def read(self, column: ColumnInfo, quoted: str, target: T.DataType, *,
             rowid: bool = False) -> ColumnRead:
        """How to read ``column`` (quoted as ``quoted``) as ``target``: here the
        driver's values, taken as the target's."""
        return ColumnRead(quoted, to_arrow_type(target))

    def key_binding(self, column: ColumnInfo | None, spark: T.DataType) -> KeyBinding:
        """How a key column's values are sent."""
        return KeyBinding()

    def key_refusal(self, column: ColumnInfo, spark: T.DataType) -> str | None:
        """Why the database cannot be asked for the rows whose ``column`` reads as a
        ``spark`` key (its equality would miss rows a cache finds), or None."""
        return None

    def ordered_time(self, column: ColumnInfo | None, target: T.DataType) -> bool:
        """Whether the database orders ``column``'s values as they read as ``target``
        (a DATE, TIMESTAMP or TIMESTAMP_NTZ), so that a bound time of ``target`` in a
        comparison leaves out no row that reads as a time on its side: the column's
        own type holding the target's values (not text, nor another kind of time).
        Values read as bad (null) are `unread_time_sql`'s. None here: unknown."""
        return False

    def unread_time_sql(self, column_sql: str, earliest: str) -> str:
        """A condition holding for every stored value of an `ordered_time` column that
        the database orders before a time of Spark's range yet that reads as bad
        (null): ``earliest`` is the placeholder of Spark's first time. Here those
        before it (-infinity, BC)."""
        return f"{column_sql} < {earliest}"

    def loose_time_sql(self, column_sql: str) -> str | None:
        """An expression of a time column that is not `ordered_time` (text) giving its
        time as a Julian day number to within a few hours, or NULL where the database
        cannot read it; None: the database has none."""
        return None

    # --- values

    def bindable(self, value: Any) -> Any:
        """A value as the DB-API driver binds it for this database."""
        return value

    def sendable(self, bindings: Sequence[KeyBinding], arrays: Sequence[pa.Array]
                 ) -> pa.Array | None:
        """Positions of the keys worth sending (None: all): keys that can never match
        their column are not sent."""
        return None


    # --- statements

    def max_keys(self, connection: ConnectionLike, width: int) -> int:
        """Keys per lookup statement (the driver's parameter limit)."""
        return max(1, _OTHER_MAX_PARAMS // width)

    def lookup_statement(self, plan: LookupPlan, flavor: Flavor, chunk: list[pa.Array]
                         ) -> LookupStatement:
        """The statement of one batch of keys (one array per key column)."""
        return self.values_lookup(plan, flavor, chunk)

    def values_lookup(self, plan: LookupPlan, flavor: Flavor, chunk: list[pa.Array]
                      ) -> LookupStatement:
        """A ``VALUES`` list of (position, key...) joined with the table: exact for
        SQLite's affinity rules too, and answered from an index on the key."""
        alias = self.quote("_lk")
        join = " AND ".join(f"{plan.column_sql(name)} = {alias}.{self.quote(f'_lk_{i}')}"
                            for i, name in enumerate(plan.key_columns))
        names = ", ".join(self.quote(f"_lk_{i}") for i in range(len(plan.key_columns)))
        columns = [[self.bindable(v) for v in a.to_pylist()] for a in chunk]
        values: list[Any] = []
        rows = []
        for row in range(len(chunk[0])):
            slots = [str(row)]
            for column in columns:
                slots.append(flavor.placeholder(len(values)))
                values.append(column[row])
            rows.append("(" + ", ".join(slots) + ")")
        filters, filter_values = plan.filter_sql(flavor.placeholder, len(values))
        position = self.quote("_lk_i")
        sql = (
            f'WITH {alias}({position}, {names}) AS (VALUES {", ".join(rows)}) '
            f'SELECT {alias}.{position}, {plan.select_sql()} FROM {alias} '
            f"JOIN {plan.table_sql} AS {self.quote('_lt')} ON {join}"
        )
        if filters:
            sql += " WHERE " + " AND ".join(filters)
        params = flavor.params(values + [self.bindable(v) for v in filter_values])
        return LookupStatement(self.finish(sql, flavor), params)

    def finish(self, sql: str, flavor: Flavor) -> str:
        """``sql`` as the driver takes it (``%`` escaped for format styles)."""
        return escape_percent(sql) if flavor.escapes_percent else sql

    def offset_sql(self, rows: int) -> str:
        """The clause skipping the first ``rows`` rows of an ordered scan (a literal:
        a count of ours; a bound one would take ADBC PostgreSQL off its COPY path)."""
        return f" OFFSET {int(rows)}"

    def row_estimate(self, connection: ConnectionLike, table_sql: str) -> int | None:
        """The catalog's estimate of the table's rows (None: count them)."""
        return None

    # --- the connection

    def prepare(self, connection: ConnectionLike) -> None:
        """Set up a new connection (connection settings every read relies on)."""

    def bound_statements(self, connection: ConnectionLike, timeout: float) -> bool:
        """Make the database end a statement that runs longer than ``timeout`` seconds;
        False when this database has no such setting here."""
        return False

    def arrow_batches(self, connection: ConnectionLike, sql: str, batch_rows: int
                      ) -> Iterator[pa.RecordBatch] | None:
        """A large parameter-free read (a scan's chunk) as Arrow record batches by a
        reader faster than the connection's driver, or None: the driver reads it."""
        return None


def kept_positions(masks: Sequence[pa.BooleanArray]) -> pa.Array | None:
    """The positions every mask of ``masks`` keeps (a dialect's `Dialect.sendable`),
    or None when they keep all."""
    if not masks:
        return None
    mask = masks[0]
    for more in masks[1:]:
        mask = pc.and_(mask, more)
    return None if pc.all(mask).as_py() else pc.indices_nonzero(mask)
