"""How a SQL table is read: the SELECT list, the split column and its ordering, and the
per-column conversions; resolved once from the catalog and the source's arguments."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

from scan.sources._sql_catalog import OTHER, POSTGRES, SQLITE, TableInfo
from spark_lookup.errors import ConfigError, SourceError
from spark_lookup.sql import Dialect, dialect_of, quote_identifier

Row = tuple[Any, ...]

_STRING_TYPES = (T.StringType, T.VarcharType, T.CharType)


@dataclass(frozen=True)
class ReadPlan:
    """Everything a reader needs to build its queries; picklable, resolved on the
    driver (or wherever the source is first used) and shipped with the source."""

    table: str
    table_sql: str
    schema: T.StructType
    select_sql: str
    split_column: str
    split_sql: str
    order_sql: str
    keyset_index: int | None
    """Position of the split column in a row when it is unique and read as stored, so
    a chunk resumes after the last emitted key; None: resume by skipping rows."""
    split_nullable: bool
    driver: str
    dialect: Dialect
    coercions: tuple[tuple[int, str], ...]
    """(column position, kind) of SQLite columns whose stored values need converting."""

    def coercer(self) -> Callable[[list[Row]], list[Row]] | None:
        """A function converting fetched rows to the schema's Python types; None when
        nothing needs converting (every driver but SQLite)."""
        if not self.coercions:
            return None
        converters = [
            (index, _COERCE[kind], self.schema.fields[index].name) for index, kind in self.coercions
        ]
        table = self.table

        def coerce(rows: list[Row]) -> list[Row]:
            out = []
            for row in rows:
                values = list(row)
                for index, convert, name in converters:
                    value = values[index]
                    if value is not None:
                        try:
                            values[index] = convert(value)
                        except (ValueError, TypeError, ArithmeticError) as exc:
                            raise SourceError(
                                f"table {table!r}, column {name!r}: cannot convert "
                                f"{value!r:.60}: {exc}"
                            ) from exc
                out.append(tuple(values))
            return out

        return coerce


def _to_bool(value: Any) -> bool:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "t", "yes"):
            return True
        if lowered in ("0", "false", "f", "no"):
            return False
        raise ValueError("not a boolean")
    return bool(value)


def _to_date(value: Any) -> dt.date:
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value)[:10])


def _to_timestamp(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def _to_decimal(value: Any) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


_COERCE: dict[str, Callable[[Any], Any]] = {
    "bool": _to_bool,
    "date": _to_date,
    "timestamp": _to_timestamp,
    "decimal": _to_decimal,
}


def _coercion_kind(data_type: T.DataType) -> str | None:
    if isinstance(data_type, T.BooleanType):
        return "bool"
    if isinstance(data_type, T.DateType):
        return "date"
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
        return "timestamp"
    if isinstance(data_type, T.DecimalType):
        return "decimal"
    return None


def resolve_plan(
    connection: Any,
    info: TableInfo,
    table: str,
    table_sql: str,
    columns: Sequence[str] | None,
    split_column: str | None,
    schema: T.StructType | None,
) -> ReadPlan:
    """Combine the catalog facts with the source's arguments.

    Raises
    ------
    ConfigError
        For an unknown column, no primary key and no ``split_column``, a schema that
        does not match ``columns``, or a type that cannot be inferred (pass ``schema``).
    """
    known = [c.name for c in info.columns]
    if columns is None:
        columns = schema.fieldNames() if schema is not None else known
        if not columns:
            raise ConfigError(
                f"the columns of table {table!r} cannot be discovered with this driver; "
                "pass columns or schema"
            )
    columns = list(columns)
    if known:
        missing = [c for c in columns if c not in known]
        if missing:
            raise ConfigError(f"table {table!r} has no column(s) {missing}; it has {known}")
    if split_column is None:
        if info.driver == OTHER:
            raise ConfigError(
                f"cannot discover the primary key of {table!r} with this driver; pass split_column"
            )
        if not info.primary_key:
            raise ConfigError(f"table {table!r} has no primary key; pass split_column")
        split_column = info.primary_key[0]
    elif known and split_column not in known:
        raise ConfigError(f"table {table!r} has no split column {split_column!r}; it has {known}")
    schema = _schema_for(info, table, columns, schema)

    split_info = info.column(split_column)
    unique = split_column in info.unique_columns
    select, casts = [], set()
    for field in schema.fields:
        column = info.column(field.name)
        quoted = quote_identifier(field.name, "column name")
        if (
            info.driver == POSTGRES
            and column is not None
            and isinstance(field.dataType, _STRING_TYPES)
            and not column.textual
        ):
            select.append(f"{quoted}::text AS {quoted}")
            casts.add(field.name)
        else:
            select.append(quoted)
    coercions: tuple[tuple[int, str], ...] = ()
    if info.driver == SQLITE:
        coercions = tuple(
            (index, kind)
            for index, field in enumerate(schema.fields)
            for kind in [_coercion_kind(field.dataType)]
            if kind is not None
        )
    coerced = {schema.fields[index].name for index, _ in coercions}
    keyset_index = None
    if unique and split_column in columns and split_column not in casts | coerced:
        keyset_index = columns.index(split_column)
    split_sql = quote_identifier(split_column, "split column")
    if unique:
        order = [split_sql]
    elif info.primary_key:
        # The primary key orders the rows totally, so skipping rows is exact.
        order = [split_sql] + [
            quote_identifier(c, "column name") for c in info.primary_key if c != split_column
        ]
    else:
        # Rows equal in every selected column are interchangeable: skipping n of them
        # emits the same multiset, whichever n the database picks.
        order = [split_sql] + [
            quote_identifier(c, "column name") for c in columns if c != split_column
        ]
    return ReadPlan(
        table=table,
        table_sql=table_sql,
        schema=schema,
        select_sql=", ".join(select),
        split_column=split_column,
        split_sql=split_sql,
        order_sql=", ".join(order),
        keyset_index=keyset_index,
        split_nullable=split_info is None or not split_info.not_null,
        driver=info.driver,
        dialect=dialect_of(connection),
        coercions=coercions,
    )


def _schema_for(
    info: TableInfo, table: str, columns: list[str], schema: T.StructType | None
) -> T.StructType:
    if schema is not None:
        names = schema.fieldNames()
        if names != columns:
            raise ConfigError(
                f"the schema's fields {names} must be the columns read from {table!r}, "
                f"in order: {columns}"
            )
        return schema
    if info.driver == OTHER:
        raise ConfigError(f"cannot infer the schema of {table!r} with this driver; pass schema")
    fields = []
    for name in columns:
        column = info.column(name)
        assert column is not None  # checked against the catalog above
        if column.spark_type is None:
            raise ConfigError(
                f"column {name!r} of {table!r} has type {column.db_type!r} with no Spark "
                "type here; pass schema"
            )
        fields.append(T.StructField(name, column.spark_type, not column.not_null))
    return T.StructType(fields)
