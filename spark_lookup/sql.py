"""SQL over DB-API 2.0: validated and quoted identifiers, bound parameters, dialects.

Every identifier that reaches SQL text (table, column) is first validated against a
conservative pattern and then double-quoted (ANSI; sqlite3 and PostgreSQL agree), so a
bad name fails with :class:`ConfigError` before any SQL runs. Values are never formatted
into SQL: they are bound with the driver's own parameter style.

Note that quoting makes names case-sensitive in PostgreSQL: a table created as
``CREATE TABLE Customers`` is stored as ``customers`` and must be named so.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_lookup.errors import ConfigError

__all__ = ["Dialect", "dialect_of", "qualified_name", "quote_identifier", "validate_identifier"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


def validate_identifier(name: object, what: str = "identifier") -> str:
    """Return ``name`` if it is a plain SQL identifier (letters, digits, ``_``, ``$``;
    not starting with a digit; at most 63 characters), else raise :class:`ConfigError`."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ConfigError(
            f"invalid {what} {name!r}: use letters, digits, '_' or '$', not starting "
            "with a digit, at most 63 characters"
        )
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


@dataclass(frozen=True)
class Dialect:
    """How one DB-API driver binds parameters (its ``paramstyle``)."""

    paramstyle: str

    def placeholder(self, index: int) -> str:
        """The placeholder of the ``index``-th (0-based) positional parameter."""
        style = self.paramstyle
        if style == "qmark":
            return "?"
        if style in ("format", "pyformat"):
            return "%s"
        if style == "numeric":
            return f":{index + 1}"
        if style == "named":
            return f":p{index}"
        raise ConfigError(f"unsupported DB-API paramstyle {style!r}")

    def placeholders(self, count: int, start: int = 0) -> list[str]:
        """``count`` placeholders for parameters ``start`` .. ``start + count - 1``."""
        return [self.placeholder(i) for i in range(start, start + count)]

    def params(self, values: Sequence[Any]) -> Sequence[Any] | dict[str, Any]:
        """``values`` in the shape the driver expects for this paramstyle."""
        if self.paramstyle == "named":
            return {f"p{i}": v for i, v in enumerate(values)}
        return list(values)


def dialect_of(connection: Any) -> Dialect:
    """The :class:`Dialect` of an open DB-API connection, from its driver module's
    ``paramstyle`` (``sqlite3``: qmark; ``psycopg``: format)."""
    module_name = type(connection).__module__.split(".")[0]
    module = sys.modules.get(module_name)
    if module is None:
        # A connection made by an unpickled factory (functools.partial of
        # _sqlite3.connect) may come from a module nobody imported by its public name.
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            module = None
    paramstyle = getattr(module, "paramstyle", None)
    if module_name == "psycopg":
        paramstyle = "format"  # psycopg 3 takes %s for server-side binding
    if not isinstance(paramstyle, str):
        raise ConfigError(
            f"cannot tell the parameter style of {type(connection).__qualname__} connections "
            f"(module {module_name!r} has no DB-API 'paramstyle')"
        )
    return Dialect(paramstyle)
