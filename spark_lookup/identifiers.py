"""SQL identifiers: validated and quoted.

Every identifier that reaches SQL text (table, column) is first validated against a
conservative pattern and then double-quoted (ANSI; sqlite3 and PostgreSQL agree), so a
bad name fails with [`ConfigError`][] before any SQL runs. Values are never formatted
into SQL: they are bound with the driver's own parameter style.

Note that quoting makes names case-sensitive in PostgreSQL: a table created as
``CREATE TABLE Customers`` is stored as ``customers`` and must be named so.
"""

from __future__ import annotations

import re

from spark_lookup.errors import ConfigError

__all__ = ["qualified_name", "quote_identifier", "validate_identifier"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")


def validate_identifier(name: object, what: str = "identifier") -> str:
    """Return ``name`` if it is a plain SQL identifier (letters, digits, ``_``, ``$``;
    not starting with a digit; at most 63 characters), else raise [`ConfigError`][]."""
    # fullmatch: a trailing newline passes a match of ``...$``.
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise ConfigError(f"invalid {what} {name!r}: use letters, digits, '_' or '$', not starting "
                          "with a digit, at most 63 characters")
    return name


def quote_identifier(name: str, what: str = "identifier") -> str:
    """Validate ``name`` and return it double-quoted."""
    return '"' + validate_identifier(name, what) + '"'


def qualified_name(name: object, what: str = "table name") -> str:
    """Validate and quote a possibly qualified name (``table``, ``schema.table``,
    ``catalog.schema.table``)."""
    if not isinstance(name, str):
        raise ConfigError(f"invalid {what} {name!r}: expected a string")
    parts = name.split(".")
    if not 1 <= len(parts) <= 3:
        raise ConfigError(f"invalid {what} {name!r}: at most catalog.schema.table")
    return ".".join(quote_identifier(part, what) for part in parts)
