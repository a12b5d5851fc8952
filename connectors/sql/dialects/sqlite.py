"""SQLite (ADBC, sqlite3): ANSI quoting, the ``pragma_*`` catalog functions, its rows of
the type table (affinity rules; each value read only if its storage class suits the
column, others flagged as bad values), lookups by ``json_each`` or a ``VALUES`` list,
a busy timeout and a progress handler."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from connectors.sql.catalog import ColumnInfo, TableInfo
from connectors.sql.dialects.base import ConnectionLike, Dialect, LookupPlan, LookupStatement
from connectors.sql.flavor import SQLITE, Flavor
from connectors.sql.types import ColumnRead
from spark_lookup.errors import ConfigError, ConnectorError
from spark_lookup.identifiers import validate_identifier
from spark_lookup.type_families import (
    DATETIME_TYPES,
    FLOAT_TYPES,
    INTEGER_TYPES,
    STRING_TYPES,
)

__all__ = ["SqliteDialect", "json_integers", "json_keys"]

_DEFAULT_MAX_PARAMS = 32766  # SQLITE_MAX_VARIABLE_NUMBER since sqlite 3.32.0
_DECIMAL = re.compile(r"^\s*(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def _parts(table: str) -> tuple[str, str]:
    parts = [validate_identifier(p, "table name") for p in table.split(".")]
    return (parts[-2] if len(parts) >= 2 else "main"), parts[-1]


class SqliteDialect(Dialect):
    """SQLite through sqlite3 or ADBC."""

    backend = SQLITE
    discovers = True

    def describe(self, connection: ConnectionLike, table: str, table_sql: str) -> TableInfo:
        schema, name = _parts(table)
        p = connection.flavor.placeholder
        params = connection.flavor.params
        # The table-valued pragma functions take the names as bound values.
        rows = connection.rows(
            f'SELECT name, type, "notnull", pk FROM pragma_table_info({p(0)}, {p(1)}) '
            "ORDER BY cid",
            params([name, schema]), "reading the columns",
        )
        if not rows:
            raise ConnectorError(f"SQLite has no table or view {table!r}")
        primary_key = tuple(name for _, name in sorted((r[3], r[0]) for r in rows if r[3]))
        columns = []
        for column, declared, not_null, pk in rows:
            declared = str(declared or "")
            # An INTEGER PRIMARY KEY is the rowid: never NULL, whatever the flag says.
            rowid = len(primary_key) == 1 and pk and declared.upper() == "INTEGER"
            columns.append(
                ColumnInfo(column, declared, bool(not_null or rowid), type_name=declared.upper())
            )
        unique = set(primary_key) if len(primary_key) == 1 else set()
        indexes = connection.rows(
            f"SELECT name, \"unique\", partial FROM pragma_index_list({p(0)}, {p(1)})",
            params([name, schema]), "reading the indexes",
        )
        for index_name, is_unique, partial in indexes:
            if not is_unique or partial:
                continue
            info = connection.rows(f"SELECT name FROM pragma_index_info({p(0)}, {p(1)})",
                                params([index_name, schema]), "reading the indexes")
            if len(info) == 1 and info[0][0] is not None:
                unique.add(str(info[0][0]))
        return TableInfo(SQLITE, tuple(columns), primary_key, frozenset(unique))

    def natural_type(self, column: ColumnInfo) -> T.DataType | None:
        """SQLite's type affinity rules, refined for the names people give dates,
        booleans, decimals and time zones; None for a column with no declared type (it
        may hold anything: declare a schema)."""
        upper = column.type_name.upper().strip()
        if not upper:
            return None
        if "BOOL" in upper:
            return T.BooleanType()
        if "INT" in upper:
            return T.LongType()  # SQLite integers are 64-bit whatever the declared width
        if upper.startswith(("DATETIME", "TIMESTAMP")):
            if "TZ" in upper or "WITH TIME ZONE" in upper:
                return T.TimestampType()
            return T.TimestampNTZType()
        if upper.startswith("DATE"):
            return T.DateType()
        if any(word in upper for word in ("CHAR", "CLOB", "TEXT", "JSON", "UUID")):
            return T.StringType()
        if "BLOB" in upper:
            return T.BinaryType()
        if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
            return T.DoubleType()
        match = _DECIMAL.match(upper)
        if match:
            precision, scale = int(match.group(1)), int(match.group(2) or 0)
            if 1 <= precision <= 38 and scale <= precision:
                return T.DecimalType(precision, scale)
        if upper.startswith(("DECIMAL", "NUMERIC")):
            return T.DoubleType()  # SQLite keeps NUMERIC values as 64-bit integers or reals
        return None

    def read(self, column: ColumnInfo, quoted: str, target: T.DataType, *,
             rowid: bool = False) -> ColumnRead:
        """Read only the storage classes that suit ``target``; others are flagged."""
        classes: tuple[str, ...]
        if isinstance(target, INTEGER_TYPES):
            classes, expression, wire = ("integer",), quoted, pa.int64()
        elif isinstance(target, FLOAT_TYPES):
            classes, expression, wire = (("integer", "real"), f"CAST({quoted} AS REAL)",
                                         pa.float64())
        elif isinstance(target, T.DecimalType):
            classes, expression, wire = (
                ("integer", "real", "text"), f"CAST({quoted} AS TEXT)", pa.string())
        elif isinstance(target, T.BooleanType):
            # Non-zero integers are true, as Spark casts them (and PostgreSQL's ints).
            classes, expression, wire = ("integer", "text"), (
                f"CASE typeof({quoted}) WHEN 'integer' THEN CASE WHEN {quoted} <> 0 THEN "
                f"'true' ELSE 'false' END ELSE {quoted} END"
            ), pa.string()
        elif isinstance(target, STRING_TYPES):
            classes, expression, wire = (
                ("text", "integer", "real"), f"CAST({quoted} AS TEXT)", pa.string())
        elif isinstance(target, T.BinaryType):
            classes, expression, wire = ("blob", "text"), f"CAST({quoted} AS BLOB)", pa.binary()
        elif isinstance(target, DATETIME_TYPES):
            classes, expression, wire = ("text",), quoted, pa.string()
        else:
            raise ConfigError(
                f"column {column.name!r}: SQLite has no {target.simpleString()} values; "
                "declare STRING (JSON text) or a scalar type"
            )
        if rowid:
            return ColumnRead(quoted, pa.int64()) if wire == pa.int64() else ColumnRead(
                expression, wire)
        listed = ", ".join(f"'{c}'" for c in classes)
        return ColumnRead(
            f"CASE WHEN typeof({quoted}) IN ({listed}) THEN {expression} END",
            wire,
            f"CASE WHEN typeof({quoted}) NOT IN ({listed}, 'null') "
            f"THEN quote({quoted}) || ' (a ' || typeof({quoted}) || ' value)' END",
        )

    def loose_time_sql(self, column_sql: str) -> str | None:
        """``julianday``: it reads the ISO 8601 texts the conformer reads (an offset
        applied, a double's precision), NULL for others; text comparison would order
        '2024-01-02T00:00' after '2024-01-02 09:00'."""
        return f"julianday({column_sql})"

    def bindable(self, value: Any) -> Any:
        """SQLite compares dates, timestamps and decimals as the text it stores."""
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, datetime):
            return value.isoformat(" ")
        if isinstance(value, date):
            return value.isoformat()
        if isinstance(value, Decimal):
            return str(value)  # compared with NUMERIC affinity, so '1.50' equals 1.5
        return value

    def max_keys(self, connection: ConnectionLike, width: int) -> int:
        limit = _DEFAULT_MAX_PARAMS
        getlimit = getattr(connection.raw, "getlimit", None)  # sqlite3, Python 3.11+
        if getlimit is not None:
            limit = int(getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))  # type: ignore[attr-defined]
        return max(1, limit // width)  # the position is a literal, not a parameter

    def lookup_statement(self, plan: LookupPlan, flavor: Flavor, chunk: list[pa.Array]
                         ) -> LookupStatement:
        keys_json = json_integers(chunk)
        if keys_json is None:
            keys_json = json_keys([[self.bindable(v) for v in a.to_pylist()] for a in chunk])
        if keys_json is None:
            return self.values_lookup(plan, flavor, chunk)
        # One JSON text of every key, unnested by json_each: one parameter whatever the
        # batch size, and faster than VALUES on both SQLite drivers
        # (benchmarks/lookup_batch_adbc.py).
        width = len(plan.key_columns)
        if width == 1:
            parts = ['"_lk"."value"']
        else:
            parts = [f"json_extract(\"_lk\".\"value\", '$[{i}]')" for i in range(width)]
        join = " AND ".join(f"{plan.column_sql(name)} = {part}"
                            for name, part in zip(plan.key_columns, parts, strict=True))
        filters, filter_values = plan.filter_sql(flavor.placeholder, 1)
        sql = (
            f'SELECT "_lk"."key", {plan.select_sql()} FROM json_each({flavor.placeholder(0)}) '
            f'AS "_lk" JOIN {plan.table_sql} AS "_lt" ON {join}'
        )
        if filters:
            sql += " WHERE " + " AND ".join(filters)
        params = flavor.params([keys_json, *(self.bindable(v) for v in filter_values)])
        return LookupStatement(self.finish(sql, flavor), params)

    def offset_sql(self, rows: int) -> str:
        return f" LIMIT -1 OFFSET {int(rows)}"  # SQLite needs a LIMIT before an OFFSET

    def bound_statements(self, connection: ConnectionLike, timeout: float) -> bool:
        """sqlite3: the busy timeout bounds lock waits, and a progress handler
        interrupts a statement past its deadline (SQLITE_INTERRUPT, transient). ADBC
        SQLite has no such setting."""
        if connection.flavor.adbc:
            return False
        connection.raw.execute(f"PRAGMA busy_timeout = {max(1, int(timeout * 1000))}")
        connection.raw.set_progress_handler(connection.past_deadline, 10_000)
        return True


def json_keys(columns: list[list[Any]]) -> str | None:
    """The keys as one JSON text (a list of values, or of lists for composite keys), or
    None when a value has no JSON form SQLite compares as bound: bytes, infinities, and
    text holding NUL (SQLite's JSON functions end text there: 's1\x00' would find 's1')."""
    for column in columns:
        for value in column:
            if isinstance(value, (bytes, bytearray)) or (
                isinstance(value, float) and not math.isfinite(value)
            ) or (isinstance(value, str) and "\x00" in value):
                return None
    data = columns[0] if len(columns) == 1 else [list(key) for key in zip(*columns, strict=True)]
    return json.dumps(data, ensure_ascii=False)


def json_integers(chunk: list[pa.Array]) -> str | None:
    """Integer keys as the same JSON text as `json_keys`, built in Arrow (no
    Python object per key); None for keys of other types."""
    if not all(pa.types.is_integer(array.type) for array in chunk):
        return None
    texts = [pc.cast(array, pa.string()) for array in chunk]
    items = texts[0] if len(texts) == 1 else pc.binary_join_element_wise(
        "[", pc.binary_join_element_wise(*texts, ", "), "]", "")
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(items)], pa.int32()),
                                                     items), ", ")
    return f"[{joined[0].as_py()}]"
