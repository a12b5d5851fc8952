"""The Python driver a JDBC URL is read with, and the picklable connection factory that
opens it (`JdbcConnect`), where the password lives.

Drivers, by database, in the order the default takes them: PostgreSQL ``adbc``
(adbc-driver-postgresql), ``psycopg``, ``psycopg2``; MySQL/MariaDB ``pymysql``,
``mysql-connector``, ``mysqlclient`` (no ADBC driver of MySQL is packaged for Python);
SQLite ``adbc`` (adbc-driver-sqlite), ``sqlite3``. ADBC first: Arrow end to end.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, urlencode

from connectors.errors import is_transient
from connectors.sql.flavor import MYSQL, POSTGRES, SQLITE
from connectors.sql.jdbc.url import JdbcUrl
from spark_lookup.credentials import Secret
from spark_lookup.errors import ConfigError, ConnectorError, TransientConnectorError

__all__ = ["DRIVER_NAMES", "JdbcConnect", "choose_driver"]


@dataclass(frozen=True)
class _Driver:
    name: str
    backend: str
    module: str
    package: str


_DRIVERS = (
    _Driver("adbc", POSTGRES, "adbc_driver_postgresql", "adbc-driver-postgresql"),
    _Driver("psycopg", POSTGRES, "psycopg", "psycopg[binary]"),
    _Driver("psycopg2", POSTGRES, "psycopg2", "psycopg2-binary"),
    _Driver("pymysql", MYSQL, "pymysql", "pymysql"),
    _Driver("mysql-connector", MYSQL, "mysql.connector", "mysql-connector-python"),
    _Driver("mysqlclient", MYSQL, "MySQLdb", "mysqlclient"),
    _Driver("adbc", SQLITE, "adbc_driver_sqlite", "adbc-driver-sqlite"),
    _Driver("sqlite3", SQLITE, "sqlite3", "(the standard library)"),
)
_ALIASES = {"adbc-postgresql": ("adbc", POSTGRES), "adbc-sqlite": ("adbc", SQLITE)}
# Flink's 'driver' option names a JDBC driver class; the Python driver is chosen as if
# none were given (a DDL carries over unchanged).
_JDBC_CLASSES = {"org.postgresql.Driver": POSTGRES, "com.mysql.cj.jdbc.Driver": MYSQL,
                 "com.mysql.jdbc.Driver": MYSQL, "org.mariadb.jdbc.Driver": MYSQL,
                 "org.sqlite.JDBC": SQLITE}
_EXTRAS = {POSTGRES: "'spark-lookup[adbc-postgresql]' or 'spark-lookup[postgres]'",
           MYSQL: "'spark-lookup[mysql]'", SQLITE: "nothing (sqlite3 is standard)"}

DRIVER_NAMES = tuple(dict.fromkeys([d.name for d in _DRIVERS] + list(_ALIASES)))
"""The names option ``'driver'`` takes (besides Flink's JDBC driver class names)."""


def _installed(driver: _Driver) -> bool:
    try:
        return importlib.util.find_spec(driver.module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False


def choose_driver(name: object, url: JdbcUrl, key: str = "driver") -> str:
    """The driver that opens ``url``: ``name`` (option ``key``) when it names one, else
    the first installed for the database.

    Raises
    ------
    ConfigError
        For an unknown name (with the name it resembles), a driver of another database,
        a driver that is not installed (saying which package to install), or no driver
        of the database installed.
    """
    database = url.database_name
    if name is None or name in _JDBC_CLASSES:
        if name is not None and _JDBC_CLASSES[str(name)] != url.backend:
            raise ConfigError(f"option {key!r}: {name!r} is not a {database} JDBC driver "
                              f"(the url names a {database} database)")
        for candidate in _DRIVERS:
            if candidate.backend == url.backend and _installed(candidate):
                return candidate.name
        raise ConfigError(f"no Python driver of {database} is installed: pip install "
                          f"{_EXTRAS[url.backend]}")
    if not isinstance(name, str):
        raise ConfigError(f"option {key!r} must be a string, got {type(name).__name__}")
    wanted = name.strip().lower()
    alias = _ALIASES.get(wanted)
    if alias is not None:
        if alias[1] != url.backend:
            raise ConfigError(f"option {key!r}: {name!r} is not a {database} driver "
                              f"(the url names a {database} database)")
        wanted = alias[0]
    known = [d for d in _DRIVERS if d.name == wanted]
    if not known:
        close = difflib.get_close_matches(wanted, list(DRIVER_NAMES), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"option {key!r}: unknown driver {name!r}; {hint}use one of "
                          f"{', '.join(DRIVER_NAMES)}, or leave it out to choose by what is "
                          "installed")
    chosen = next((d for d in known if d.backend == url.backend), None)
    if chosen is None:
        raise ConfigError(f"option {key!r}: {name!r} is not a driver of {database}, which the "
                          f"url names")
    if not _installed(chosen):
        raise ConfigError(f"option {key!r}: driver {name!r} is not installed: pip install "
                          f"{chosen.package}")
    return chosen.name


class JdbcConnect:
    """Opens a new connection to the database of a JDBC URL with one Python driver: the
    connection factory of the SQL lookup functions and sources built from Flink options.

    A small picklable value (it travels to executors); the driver is imported where it
    connects. The password is held only here, in a `Secret`: the
    repr shows the driver, host, port, database and user, and a failed connection raises
    a [`ConnectorError`][] (transient or not, as the driver's error is
    classified) whose message has the password scrubbed out, with no driver exception
    attached (a driver may quote the DSN it was given).
    """

    __slots__ = ("driver", "password", "url", "user")

    def __init__(self, driver: str, url: JdbcUrl, user: str | None,
                 password: Secret | None) -> None:
        self.driver = driver
        # The credentials given here (the options' over the URL's) are the only ones.
        self.url = replace(url, user=None, password=None)
        self.user = user
        self.password = password

    def __call__(self) -> Any:
        error: ConnectorError
        try:
            return _CONNECT[(self.driver, self.url.backend)](self)
        except ImportError as exc:
            error = ConnectorError(self._scrub(
                f"cannot connect to {self!r}: the driver is not installed where this runs "
                f"({exc})"))
        except Exception as exc:
            text = str(exc).strip().split("\n")[0][:300]
            message = self._scrub(f"cannot connect to {self!r}: {type(exc).__name__}: {text}")
            error = (TransientConnectorError if is_transient(exc) else ConnectorError)(message)
        # Raised outside the handler, so the driver's exception is not its context.
        raise error

    def _scrub(self, text: str) -> str:
        return self.password.scrub(text) if self.password is not None else text

    def __repr__(self) -> str:
        url = self.url
        if url.backend == SQLITE:
            return f"JdbcConnect(driver={self.driver!r}, database={url.database!r})"
        return (f"JdbcConnect(driver={self.driver!r}, host={url.host!r}, port={url.port!r}, "
                f"database={url.database!r}, user={self.user!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JdbcConnect):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def _fields(self) -> tuple[Any, ...]:
        return (self.driver, self.url, self.user, self.password)

    def __reduce__(self) -> tuple[Any, ...]:
        return (JdbcConnect, self._fields())

    # --- what each driver is given

    def libpq_keywords(self) -> dict[str, Any]:
        """libpq's connection keywords (psycopg, psycopg2)."""
        url = self.url
        keywords: dict[str, Any] = {"host": url.host, "port": url.port, "dbname": url.database,
                                    "user": self.user, **dict(url.params)}
        if self.password is not None:
            keywords["password"] = self.password.reveal()
        return {k: v for k, v in keywords.items() if v is not None}

    def postgres_uri(self) -> str:
        """A libpq URI (ADBC PostgreSQL takes no keywords), every part percent-encoded."""
        url = self.url
        credentials = quote(self.user or "", safe="")
        if self.password is not None:
            credentials += ":" + quote(self.password.reveal(), safe="")
        if credentials:
            credentials += "@"
        host = f"[{url.host}]" if url.host and ":" in url.host else url.host
        query = f"?{urlencode(url.params)}" if url.params else ""
        return (f"postgresql://{credentials}{host}:{url.port}/"
                f"{quote(url.database or '', safe='')}{query}")

    def mysql_keywords(self, timeout_name: str) -> dict[str, Any]:
        """pymysql's, mysql-connector's and mysqlclient's keywords; ``timeout_name``:
        what the driver calls its connect timeout."""
        url = self.url
        params = dict(url.params)
        keywords: dict[str, Any] = {"host": url.host, "port": url.port, "user": self.user,
                                    "database": url.database}
        if self.password is not None:
            keywords["password"] = self.password.reveal()
        if "connect_timeout" in params:
            keywords[timeout_name] = int(params["connect_timeout"])
        if params.get("ssl_disabled") == "true":
            keywords["ssl_disabled"] = True
        return {k: v for k, v in keywords.items() if v is not None}

    def sqlite_uri(self) -> str:
        """The file as a read-write SQLite URI: a missing file is an error, not a new
        empty database."""
        return f"file:{quote(self.url.database or '')}?mode=rw"


def _adbc_postgres(c: JdbcConnect) -> Any:
    module = importlib.import_module("adbc_driver_postgresql.dbapi")
    return module.connect(c.postgres_uri())


def _psycopg(c: JdbcConnect) -> Any:
    return importlib.import_module("psycopg").connect(**c.libpq_keywords())


def _psycopg2(c: JdbcConnect) -> Any:
    return importlib.import_module("psycopg2").connect(**c.libpq_keywords())


def _pymysql(c: JdbcConnect) -> Any:
    keywords = c.mysql_keywords("connect_timeout")
    if isinstance(keywords.get("password"), str):
        # pymysql sends a str password as Latin-1: a password set by a UTF-8 client
        # (any other character than ASCII) would not match. Bytes are sent as they are.
        keywords["password"] = keywords["password"].encode("utf-8")
    return importlib.import_module("pymysql").connect(**keywords)


def _mysql_connector(c: JdbcConnect) -> Any:
    module = importlib.import_module("mysql.connector")
    return module.connect(**c.mysql_keywords("connection_timeout"))


def _mysqlclient(c: JdbcConnect) -> Any:
    keywords = c.mysql_keywords("connect_timeout")
    if keywords.pop("ssl_disabled", False):
        keywords["ssl_mode"] = "DISABLED"
    return importlib.import_module("MySQLdb").connect(**keywords)


def _adbc_sqlite(c: JdbcConnect) -> Any:
    return importlib.import_module("adbc_driver_sqlite.dbapi").connect(c.sqlite_uri())


def _sqlite3(c: JdbcConnect) -> Any:
    return importlib.import_module("sqlite3").connect(c.sqlite_uri(), uri=True)


_CONNECT: dict[tuple[str, str], Callable[[JdbcConnect], Any]] = {
    ("adbc", POSTGRES): _adbc_postgres,
    ("psycopg", POSTGRES): _psycopg,
    ("psycopg2", POSTGRES): _psycopg2,
    ("pymysql", MYSQL): _pymysql,
    ("mysql-connector", MYSQL): _mysql_connector,
    ("mysqlclient", MYSQL): _mysqlclient,
    ("adbc", SQLITE): _adbc_sqlite,
    ("sqlite3", SQLITE): _sqlite3,
}
