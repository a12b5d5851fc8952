"""PostgreSQL (ADBC, psycopg 3, psycopg2): ANSI quoting, the ``pg_catalog`` queries, its
rows of the type table (``::text`` for what PostgreSQL prints best), lookups by
``= ANY(array)`` or ``unnest(...) WITH ORDINALITY``, ``statement_timeout``."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from connectors.sql.catalog import ColumnInfo, TableInfo
from connectors.sql.dialects import base
from connectors.sql.flavor import POSTGRES, Flavor
from connectors.sql.types import ColumnRead
from spark_lookup.errors import ConnectorError
from spark_lookup.schema import to_arrow_type
from spark_lookup.type_families import FLOAT_TYPES, INTEGER_TYPES, STRING_TYPES

__all__ = ["PostgresDialect"]

_MAX_KEYS = 100_000
"""Keys per lookup statement (they travel as one array per key column)."""
_UUID = r"^([0-9a-fA-F]{4}-?){7}[0-9a-fA-F]{4}$|^\{([0-9a-fA-F]{4}-?){7}[0-9a-fA-F]{4}\}$"
_KEY_TYPES: dict[type[T.DataType], str] = {
    T.ByteType: "int2", T.ShortType: "int2", T.IntegerType: "int4", T.LongType: "int8",
    T.FloatType: "float4", T.DoubleType: "float8", T.DecimalType: "numeric",
}
# The time types read as their own values (the driver's), in the connection's zone, UTC.
_OWN_TIMES = {
    ("date", T.DateType), ("timestamp", T.TimestampNTZType), ("timestamptz", T.TimestampType),
}
_EXACT_PAIRS = {
    ("date", T.DateType), ("timestamp", T.TimestampNTZType), ("timestamptz", T.TimestampType),
    ("bool", T.BooleanType),
}

# --- the catalog ------------------------------------------------------------------------

# Domains read as their base type. The table's quoted name is bound as text and resolved
# by to_regclass, search_path included (NULL, so no rows, when there is no such table).
_COLUMNS = """
SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
       t.typname, t.typtype, t.typcategory,
       pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(t.typname),
       COALESCE(e.typname, ''), COALESCE(e.typtype, ''), COALESCE(e.typcategory, ''),
       COALESCE((SELECT pg_catalog.string_agg(l.enumlabel, E'\\n' ORDER BY l.enumsortorder)
                 FROM pg_catalog.pg_enum l WHERE l.enumtypid = t.oid), '')
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type d ON d.oid = a.atttypid
JOIN pg_catalog.pg_type t
  ON t.oid = CASE WHEN d.typtype = 'd' THEN d.typbasetype ELSE d.oid END
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE a.attrelid = pg_catalog.to_regclass({table}) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_PRIMARY_KEY = """
SELECT a.attname
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = pg_catalog.to_regclass({table}) AND i.indisprimary
ORDER BY pg_catalog.array_position(i.indkey::int2[], a.attnum)
"""

_UNIQUE = """
SELECT a.attname
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = pg_catalog.to_regclass({table}) AND i.indisunique AND i.indnkeyatts = 1
  AND i.indpred IS NULL AND i.indexprs IS NULL
"""

# --- the type table ----------------------------------------------------------------------

_TEXTUAL = frozenset({"text", "varchar", "bpchar", "name", "citext", "char"})
_DIRECT: dict[str, T.DataType] = {
    "bool": T.BooleanType(),
    "int2": T.ShortType(),
    "int4": T.IntegerType(),
    "int8": T.LongType(),
    "float4": T.FloatType(),
    "float8": T.DoubleType(),
    "bytea": T.BinaryType(),
    "date": T.DateType(),
    "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(),
}
_NUMERIC = re.compile(r"^numeric\((\d+),(\d+)\)")


def _numeric(formatted: str) -> T.DataType:
    match = _NUMERIC.match(formatted.replace(" ", ""))
    if match is None:
        return T.DecimalType(38, 18)  # unconstrained numeric, as Spark's JDBC reader maps it
    precision, scale = int(match.group(1)), int(match.group(2))
    if precision <= 38:
        return T.DecimalType(precision, scale)
    return T.StringType()  # more digits than Spark holds: the exact text


def _scalar(type_name: str, formatted: str) -> T.DataType:
    if type_name in _DIRECT:
        return _DIRECT[type_name]
    if type_name == "numeric":
        return _numeric(formatted)
    return T.StringType()  # text types, and everything read as text (json, uuid, enums...)


class PostgresDialect(base.Dialect):
    """PostgreSQL through any of its drivers."""

    backend = POSTGRES
    discovers = True

    def describe(self, connection: base.ConnectionLike, table: str, table_sql: str) -> TableInfo:
        flavor = connection.flavor
        placeholder = flavor.placeholder(0)
        params = flavor.params([table_sql])

        def sql(template: str) -> str:
            return self.finish(template.format(table=placeholder), flavor)

        rows = connection.rows(sql(_COLUMNS), params, "reading the columns")
        if not rows:
            raise ConnectorError(
                f"PostgreSQL has no table or view {table!r} (looked up as {table_sql}, on the "
                "search_path when unqualified)"
            )
        columns = tuple(
            ColumnInfo(name=str(name), db_type=str(formatted), not_null=bool(not_null),
                       type_name=str(typname), type_kind=str(typtype), category=str(category),
                       cast_name=str(cast_name), element=str(element),
                       element_kind=str(element_kind), element_category=str(element_category),
                       enum_labels=tuple(str(labels).split("\n")) if labels else ())
            for (name, formatted, not_null, typname, typtype, category, cast_name, element,
                 element_kind, element_category, labels) in rows
        )
        primary_key = tuple(str(r[0]) for r in connection.rows(sql(_PRIMARY_KEY), params,
                                                             "reading the primary key"))
        unique = {str(r[0]) for r in connection.rows(sql(_UNIQUE), params, "reading the indexes")}
        return TableInfo(POSTGRES, columns, primary_key, frozenset(unique))

    def natural_type(self, column: ColumnInfo) -> T.DataType | None:
        if column.category == "A" and column.element:
            element_formatted = column.db_type[:-2] if column.db_type.endswith("[]") else ""
            return T.ArrayType(_scalar(column.element, element_formatted))
        return _scalar(column.type_name, column.db_type)

    def read(self, column: ColumnInfo, quoted: str, target: T.DataType, *,
             rowid: bool = False) -> ColumnRead:
        if isinstance(target, (*STRING_TYPES, T.DecimalType)):
            # A decimal as its exact digits: it never goes through a double.
            textual = isinstance(target, STRING_TYPES) and column.type_name in _TEXTUAL
            return ColumnRead(quoted if textual else f"{quoted}::text", pa.string())
        if column.category == "A" and column.element:
            # An element type the driver does not give as Spark's value is read as text.
            element = _DIRECT.get(column.element)
            if element is None or (isinstance(target, T.ArrayType) and isinstance(
                    target.elementType, (*STRING_TYPES, T.DecimalType))):
                return ColumnRead(f"{quoted}::text[]", pa.list_(pa.string()))
            return ColumnRead(quoted, pa.list_(to_arrow_type(element)))
        if column.type_name == "numeric" and isinstance(target, FLOAT_TYPES):
            return ColumnRead(f"{quoted}::float8", pa.float64())
        direct = _DIRECT.get(column.type_name)
        if direct is None:
            return ColumnRead(f"{quoted}::text", pa.string())
        return ColumnRead(quoted, to_arrow_type(direct))

    def key_binding(self, column: ColumnInfo | None, spark: T.DataType) -> base.KeyBinding:
        if column is None:
            return base.KeyBinding()
        if column.category == "N":
            # Numbers compare across types: the key's own type keeps its exact value.
            array_type = _KEY_TYPES.get(type(spark), column.cast_name)
        else:
            array_type = column.cast_name  # uuid, citext, enums, char(n): the column's terms
        exact = (column.type_name in ("int2", "int4", "int8")
                 and isinstance(spark, INTEGER_TYPES)) or (
            (column.type_name, type(spark)) in _EXACT_PAIRS
        )
        return base.KeyBinding(array_type=array_type, uuid=column.type_name == "uuid",
                               enum_labels=column.enum_labels if column.type_kind == "e" else (),
                               text=isinstance(spark, STRING_TYPES), exact=exact)

    def ordered_time(self, column: ColumnInfo | None, target: T.DataType) -> bool:
        return column is not None and (column.type_name, type(target)) in _OWN_TIMES

    def sendable(self, bindings: Sequence[base.KeyBinding], arrays: Sequence[pa.Array]
                 ) -> pa.Array | None:
        masks = []
        for binding, array in zip(bindings, arrays, strict=True):
            if binding.text or binding.uuid or binding.enum_labels:
                masks.append(pc.invert(pc.match_substring(array, "\x00")))
            if binding.uuid:
                masks.append(pc.match_substring_regex(array, _UUID))
            if binding.enum_labels:
                masks.append(pc.is_in(array, pa.array(binding.enum_labels)))
        return base.kept_positions(masks)

    def max_keys(self, connection: base.ConnectionLike, width: int) -> int:
        return _MAX_KEYS

    def lookup_statement(self, plan: base.LookupPlan, flavor: Flavor, chunk: list[pa.Array]
                         ) -> base.LookupStatement:
        # The text depends on the plan and the flavor only: built once, kept with the plan.
        sql, filter_values, by_value = plan.memo(
            ("postgres lookup", flavor), lambda: self._lookup_sql(plan, flavor))
        params: object
        if flavor.adbc:
            arrays = [
                pa.ListArray.from_arrays(pa.array([0, len(a)], pa.int32()), a) for a in chunk
            ] + [pa.array([v]) for v in filter_values]
            params = pa.record_batch(arrays, names=[f"p{i}" for i in range(len(arrays))])
        else:
            params = flavor.params([a.to_pylist() for a in chunk] + filter_values)
        return base.LookupStatement(sql, params, by_value)

    def _lookup_sql(self, plan: base.LookupPlan, flavor: Flavor) -> tuple[str, list[object], bool]:
        """A batched lookup's text, the values of the table's filters, and whether rows
        are matched back to their keys by value."""
        width = len(plan.key_columns)
        select = plan.select_sql()
        filters, filter_values = plan.filter_sql(flavor.placeholder, width)
        by_value = width == 1 and plan.key_bindings[0].exact
        if by_value:
            # One key column whose equality is its values' (integers, dates...): "= ANY"
            # over the index, each row matched back to its key by value.
            binding = plan.key_bindings[0]
            sql = (
                f'SELECT {select} FROM {plan.table_sql} AS "_lt" WHERE '
                f"{plan.column_sql(plan.key_columns[0])} = "
                f"ANY({flavor.placeholder(0)}::{binding.array_type}[])"
            )
        else:
            # The keys travel as one array per key column; ORDINALITY tags each key, so
            # rows come back to the key that asked, whatever PostgreSQL's comparison
            # rules (collations, char(n) padding, citext).
            join = " AND ".join(f'{plan.column_sql(name)} = "_lk"."_lk_{i}"'
                                for i, name in enumerate(plan.key_columns))
            names = ", ".join(f'"_lk_{i}"' for i in range(width))
            unnest = ", ".join(f"{flavor.placeholder(i)}::{binding.array_type}[]"
                               for i, binding in enumerate(plan.key_bindings))
            sql = (
                f'SELECT "_lk"."_lk_i" - 1, {select} FROM unnest({unnest}) WITH ORDINALITY '
                f'AS "_lk"({names}, "_lk_i") JOIN {plan.table_sql} AS "_lt" ON {join}'
            )
        if filters:
            sql += (" AND " if by_value else " WHERE ") + " AND ".join(filters)
        return self.finish(sql, flavor), list(filter_values), by_value

    def row_estimate(self, connection: base.ConnectionLike, table_sql: str) -> int | None:
        flavor = connection.flavor
        estimate = connection.rows(
            "SELECT reltuples::bigint FROM pg_catalog.pg_class "
            f"WHERE oid = pg_catalog.to_regclass({flavor.placeholder(0)})",
            flavor.params([table_sql]), "planning chunks",
        )
        if estimate and estimate[0][0] is not None and estimate[0][0] > 0:
            return int(estimate[0][0])
        return None

    def bound_statements(self, connection: base.ConnectionLike, timeout: float) -> bool:
        """``statement_timeout`` for the connection (a lock wait counts; the error,
        SQLSTATE 57014, is transient)."""
        milliseconds = max(1, int(timeout * 1000))
        # SET takes no bound parameter (the value is an int we made). Outside autocommit
        # it must be committed: a rollback would undo it.
        with connection.failing("setting the statement timeout"):
            cursor = connection.raw.cursor()
            try:
                cursor.execute(f"SET statement_timeout = {milliseconds}")
            finally:
                cursor.close()
            connection.commit_setting()
        return True

