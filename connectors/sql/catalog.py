"""What a SQL table looks like: columns and their declared types, NOT NULL, the primary
key and single-column unique indexes, read from the catalogs of PostgreSQL and SQLite
through any of their drivers (ADBC or DB-API). Other databases have no catalog here:
their tables need a declared schema."""

from __future__ import annotations

from dataclasses import dataclass

from connectors.sql.session import POSTGRES, SQLITE, Session
from spark_lookup.errors import ConnectorError
from spark_lookup.sql import validate_identifier

__all__ = ["ColumnInfo", "TableInfo", "describe_table"]


@dataclass(frozen=True)
class ColumnInfo:
    """One column as the catalog declares it."""

    name: str
    db_type: str
    """The declared type as the database prints it (``numeric(10,2)``, ``text[]``)."""
    not_null: bool
    type_name: str = ""
    """PostgreSQL: the (base) type's ``typname`` (``int8``, ``_text`` for text[]);
    SQLite: the declared type, upper case."""
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


def describe_table(session: Session, table: str, table_sql: str) -> TableInfo:
    """The catalog facts of ``table`` (``table_sql`` is its validated, quoted form).

    Raises
    ------
    ConnectorError
        If the table does not exist (permanent) or the catalog cannot be read.
    """
    backend = session.flavor.backend
    if backend == SQLITE:
        return _describe_sqlite(session, table)
    if backend == POSTGRES:
        return _describe_postgres(session, table, table_sql)
    return TableInfo(backend, (), (), frozenset())


# --- SQLite -----------------------------------------------------------------------------


def _sqlite_parts(table: str) -> tuple[str, str]:
    parts = [validate_identifier(p, "table name") for p in table.split(".")]
    return (parts[-2] if len(parts) >= 2 else "main"), parts[-1]


def _describe_sqlite(session: Session, table: str) -> TableInfo:
    schema, name = _sqlite_parts(table)
    p = session.flavor.placeholder
    # The table-valued pragma functions take the names as bound values.
    rows = session.rows(
        f'SELECT name, type, "notnull", pk FROM pragma_table_info({p(0)}, {p(1)}) ORDER BY cid',
        session.flavor.params([name, schema]),
        "reading the columns",
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
    indexes = session.rows(
        f"SELECT name, \"unique\", partial FROM pragma_index_list({p(0)}, {p(1)})",
        session.flavor.params([name, schema]),
        "reading the indexes",
    )
    for index_name, is_unique, partial in indexes:
        if not is_unique or partial:
            continue
        info = session.rows(f"SELECT name FROM pragma_index_info({p(0)}, {p(1)})",
                            session.flavor.params([index_name, schema]), "reading the indexes")
        if len(info) == 1 and info[0][0] is not None:
            unique.add(str(info[0][0]))
    return TableInfo(SQLITE, tuple(columns), primary_key, frozenset(unique))


# --- PostgreSQL --------------------------------------------------------------------------

# Domains read as their base type. The table's quoted name is bound as text and resolved
# by to_regclass, search_path included (NULL, so no rows, when there is no such table).
_PG_COLUMNS = """
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

_PG_PRIMARY_KEY = """
SELECT a.attname
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = pg_catalog.to_regclass({table}) AND i.indisprimary
ORDER BY pg_catalog.array_position(i.indkey::int2[], a.attnum)
"""

_PG_UNIQUE = """
SELECT a.attname
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = pg_catalog.to_regclass({table}) AND i.indisunique AND i.indnkeyatts = 1
  AND i.indpred IS NULL AND i.indexprs IS NULL
"""


def _describe_postgres(session: Session, table: str, table_sql: str) -> TableInfo:
    flavor = session.flavor
    placeholder = flavor.placeholder(0)
    params = flavor.params([table_sql])

    def sql(template: str) -> str:
        text = template.format(table=placeholder)
        return text.replace("%", "%%").replace("%%s", "%s") if flavor.escapes_percent else text

    rows = session.rows(sql(_PG_COLUMNS), params, "reading the columns")
    if not rows:
        raise ConnectorError(
            f"PostgreSQL has no table or view {table!r} (looked up as {table_sql}, on the "
            "search_path when unqualified)"
        )
    columns = tuple(
        ColumnInfo(name=str(name), db_type=str(formatted), not_null=bool(not_null),
                   type_name=str(typname), type_kind=str(typtype), category=str(category),
                   cast_name=str(cast_name), element=str(element), element_kind=str(element_kind),
                   element_category=str(element_category),
                   enum_labels=tuple(str(labels).split("\n")) if labels else ())
        for (name, formatted, not_null, typname, typtype, category, cast_name, element,
             element_kind, element_category, labels) in rows
    )
    primary_key = tuple(str(r[0]) for r in session.rows(sql(_PG_PRIMARY_KEY), params,
                                                         "reading the primary key"))
    unique = {str(r[0]) for r in session.rows(sql(_PG_UNIQUE), params, "reading the indexes")}
    return TableInfo(POSTGRES, columns, primary_key, frozenset(unique))
