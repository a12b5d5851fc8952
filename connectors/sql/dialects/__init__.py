"""One module per SQL database behind one small interface
(`Dialect`): PostgreSQL, SQLite, MySQL/MariaDB,
and the generic dialect of other DB-API databases. Adding a database is adding a
dialect module and its line below."""

from __future__ import annotations

from connectors.sql.dialects.base import Dialect
from connectors.sql.dialects.mysql import MysqlDialect
from connectors.sql.dialects.postgres import PostgresDialect
from connectors.sql.dialects.sqlite import SqliteDialect
from connectors.sql.flavor import OTHER

__all__ = ["Dialect", "dialect_for"]

_DIALECTS: dict[str, Dialect] = {
    d.backend: d for d in (PostgresDialect(), SqliteDialect(), MysqlDialect(), Dialect())
}


def dialect_for(backend: str) -> Dialect:
    """The dialect of a backend (`Flavor.backend`);
    the generic one for a database without a module."""
    return _DIALECTS.get(backend, _DIALECTS[OTHER])
