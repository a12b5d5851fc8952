"""What an open connection is: its database (which `connectors.sql.dialects` module
writes its SQL), whether it speaks Arrow (ADBC), and how its statements take parameters.
Told from the connection's driver module, never from a query."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_lookup.errors import ConfigError

__all__ = ["MYSQL", "OTHER", "POSTGRES", "SQLITE", "Flavor", "driver_module", "flavor_of"]

POSTGRES = "postgres"
SQLITE = "sqlite"
MYSQL = "mysql"
OTHER = "other"

_ADBC_MODULES = ("adbc_driver_manager", "adbc_driver_sqlite", "adbc_driver_postgresql")
_PLACEHOLDERS = {"dollar": "${n}", "qmark": "?", "format": "%s", "pyformat": "%s",
                 "numeric": ":{n}", "named": ":p{i}"}  # i: 0-based, n: 1-based
_DBAPI_BACKENDS = {
    "sqlite3": (SQLITE, "qmark"),
    "_sqlite3": (SQLITE, "qmark"),
    "psycopg": (POSTGRES, "format"),
    "psycopg2": (POSTGRES, "format"),
    # pymysql, mysqlclient and mysql-connector-python all interpolate %s client side.
    "pymysql": (MYSQL, "format"),
    "MySQLdb": (MYSQL, "format"),
    "mysql": (MYSQL, "format"),
}
_DRIVER_PACKAGES = {"mysql": "mysql.connector"}
"""Driver modules whose DB-API module (``paramstyle``, ``Error``) is a subpackage."""


@dataclass(frozen=True)
class Flavor:
    """What a connection is: its database, whether it speaks Arrow (ADBC), and how its
    statements take parameters."""

    backend: str
    """``"postgres"``, ``"sqlite"``, ``"mysql"`` or ``"other"``."""
    adbc: bool
    paramstyle: str
    """``"dollar"`` (``$1``: ADBC PostgreSQL), ``"qmark"``, ``"format"``, ``"numeric"``
    or ``"named"``."""

    def placeholder(self, index: int) -> str:
        """The placeholder of the ``index``-th (0-based) parameter."""
        template = _PLACEHOLDERS.get(self.paramstyle)
        if template is None:
            raise ConfigError(f"unsupported DB-API paramstyle {self.paramstyle!r}")
        return template.format(i=index, n=index + 1)

    def params(self, values: Sequence[Any]) -> Any:
        """``values`` in the shape the driver takes for this style."""
        if self.paramstyle == "named":
            return {f"p{i}": v for i, v in enumerate(values)}
        return tuple(values)

    @property
    def escapes_percent(self) -> bool:
        """Whether ``%`` in SQL text must be written ``%%`` (format styles)."""
        return self.paramstyle in ("format", "pyformat")


def driver_module(connection: Any) -> str:
    """The DB-API module of a connection's driver (``pymysql``, ``mysql.connector``)."""
    top = type(connection).__module__.split(".")[0]
    return _DRIVER_PACKAGES.get(top, top)


def flavor_of(connection: Any) -> Flavor:
    """The `Flavor` of an open connection.

    Raises
    ------
    ConfigError
        For a DB-API driver whose parameter style cannot be told.
    """
    module_name = type(connection).__module__.split(".")[0]
    if module_name in _ADBC_MODULES:
        vendor = str(connection.adbc_get_info().get("vendor_name", "")).lower()
        if "postgres" in vendor:
            return Flavor(POSTGRES, True, "dollar")
        return Flavor(SQLITE if "sqlite" in vendor else OTHER, True, "qmark")
    known = _DBAPI_BACKENDS.get(module_name)
    if known is not None:
        return Flavor(known[0], False, known[1])
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            module = None
    paramstyle = getattr(module, "paramstyle", None)
    if not isinstance(paramstyle, str):
        raise ConfigError(
            f"cannot tell the parameter style of {type(connection).__qualname__} connections "
            f"(module {module_name!r} has no DB-API 'paramstyle')"
        )
    return Flavor(OTHER, False, paramstyle)
