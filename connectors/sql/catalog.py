"""What a SQL table looks like: columns and their declared types, NOT NULL, the primary
key and single-column unique indexes. Each dialect (`connectors.sql.dialects`)
reads them from its database's catalog; databases without a catalog here give none,
and their tables need a declared schema."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ColumnInfo", "TableInfo"]


@dataclass(frozen=True)
class ColumnInfo:
    """One column as the catalog declares it."""

    name: str
    db_type: str
    """The declared type as the database prints it (``numeric(10,2)``, ``text[]``,
    ``int(10) unsigned``)."""
    not_null: bool
    type_name: str = ""
    """PostgreSQL: the (base) type's ``typname`` (``int8``, ``_text`` for text[]);
    SQLite: the declared type, upper case; MySQL: ``DATA_TYPE`` (``int``, ``varchar``)."""
    type_kind: str = ""
    """PostgreSQL ``typtype`` (``b`` base, ``e`` enum, ...); empty for SQLite."""
    category: str = ""
    """PostgreSQL ``typcategory`` (``N`` numeric, ``S`` string, ``A`` array, ...)."""
    cast_name: str = ""
    """PostgreSQL: the type's quoted, schema-qualified name, without a modifier."""
    element: str = ""
    """PostgreSQL arrays: the element's ``typname``."""
    element_kind: str = ""
    element_category: str = ""
    enum_labels: tuple[str, ...] = ()
    """PostgreSQL enums: the labels, in order."""
    collation: str = ""
    """MySQL: the column's collation (``utf8mb4_general_ci``); empty elsewhere."""


@dataclass(frozen=True)
class TableInfo:
    """The catalog facts of one table (no columns for databases without a catalog)."""

    backend: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...]
    unique_columns: frozenset[str]

    def column(self, name: str) -> ColumnInfo | None:
        """The column named ``name``, if the catalog has it."""
        return next((c for c in self.columns if c.name == name), None)
