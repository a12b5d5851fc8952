"""The SQL type table's shared part: how a column is read (`ColumnRead`), and
the check that its wire form converts to the Spark type it is declared to have.

Each dialect (`connectors.sql.dialects`) holds its database's rows of the table:
each database type's Spark type, and the *wire* form a column is read in, chosen so that
every driver of the database returns the same thing (PostgreSQL's ``::text`` for what
has no Arrow counterpart, SQLite's storage-class checks, MySQL's ``CAST(... AS CHAR)``).
The wire form then becomes the Spark type through `connectors.convert`,
identically for every driver. docs/types.md is the dialects in prose;
``tests/contract`` checks them against each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import types as T

from connectors.convert import castable
from connectors.sql.catalog import ColumnInfo
from spark_lookup.errors import ConfigError
from spark_lookup.schema import to_arrow_type

__all__ = ["ColumnRead", "check_read"]



@dataclass(frozen=True)
class ColumnRead:
    """How one column is read: its SELECT expression, its wire type, and (SQLite) the
    expression that is non-null exactly when the stored value is bad."""

    expression: str
    wire: pa.DataType
    flag: str | None = None


def check_read(read: ColumnRead, table: str, column: ColumnInfo, target: T.DataType
               ) -> ColumnRead:
    """``read`` if its wire form converts to ``target``.

    Raises
    ------
    ConfigError
        If the stored type can never be read as ``target`` (naming table, column and
        both types).
    """
    if not castable(read.wire, to_arrow_type(target)):
        raise ConfigError(
            f"column {column.name!r} of {table!r} is {column.db_type or 'untyped'}, which "
            f"cannot be read as {target.simpleString()}: declare a type it converts to "
            "(STRING reads every type)"
        )
    return read
