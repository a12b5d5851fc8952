"""Which driver errors pass and which do not.

Every connector translates a driver's error where it enters our code into a
[`TransientConnectorError`][] (a lost connection, a timeout, a
serialization failure or deadlock, a server starting or stopping: retried with
backoff) or a permanent [`ConnectorError`][] (a missing table, a
refused login, a malformed statement: reported at once). The classification uses
what the drivers say: SQLSTATE codes (psycopg, ADBC), MySQL's error numbers (pymysql,
mysql-connector-python, mysqlclient), SQLite's result codes, and redis-py's exception
types.
"""

from __future__ import annotations

import re
from typing import Any

from spark_lookup.errors import (
    ConnectorError,
    SourceBusyError,
    SparkLookupError,
    TransientConnectorError,
)

__all__ = ["MYSQL_TRANSIENT", "driver_errors", "is_over_limit", "is_source_busy", "is_transient",
           "should_retry", "translate"]

# SQLSTATE classes and codes that pass: connection exceptions (08), transaction
# rollbacks such as serialization failures and deadlocks (40), insufficient resources
# (53, e.g. too many connections), operator intervention (57: query canceled by a
# statement timeout, admin shutdown, cannot connect now), system errors (58).
_TRANSIENT_SQLSTATE_CLASSES = ("08", "40", "53", "57", "58")
# A connection refused for who is asking, or for what: retrying cannot help.
_PERMANENT_CONNECT = re.compile(
    r"authentication|password|role .* does not exist|database .* does not exist|"
    r"pg_hba\.conf|permission denied|no such file|invalid (dsn|connection option)|"
    r"unsupported|certificate",
    re.IGNORECASE,
)
# SQLite result codes that pass: SQLITE_BUSY (5), SQLITE_LOCKED (6) and SQLITE_INTERRUPT
# (9: a statement past its timeout), with their extended codes (the low byte).
_SQLITE_TRANSIENT = {5, 6, 9}
_SQLITE_TRANSIENT_TEXT = re.compile(
    r"database (table )?is locked|database is busy|^interrupted$", re.I)

# MySQL and MariaDB error numbers that pass: a lost or refused connection (2002 can't
# connect through the socket, 2003 can't connect, 2006 server gone away, 2013 lost
# during a query, 2055 lost, mysql-connector), too many connections (1040), a server
# shutting down (1053, 1077-1080), a killed or interrupted query (1317), a deadlock
# (1213), a lock wait timeout (1205), a statement past max_statement_time (MariaDB
# 1969) or max_execution_time (MySQL 3024), a read-only or resyncing node (1290, 1836),
# and net read/write errors or timeouts (1158-1161). Everything else a MySQL driver
# reports (1064 syntax, 1146 unknown table, 1054 unknown column, 1045 access denied,
# 1044, 1049 unknown database...) is permanent. 1203 is a user over its
# max_user_connections, a limit as passing as 1040's.
MYSQL_TRANSIENT = frozenset({
    1040, 1053, 1203, 1077, 1078, 1079, 1080, 1158, 1159, 1160, 1161, 1205, 1213, 1290, 1317,
    1836, 1969, 2002, 2003, 2006, 2013, 2055, 3024,
})
_MYSQL_MODULES = frozenset({"pymysql", "mysql", "MySQLdb"})

# A source at its connection limit: up, only busy (see is_over_limit). MariaDB and MySQL
# refuse an account over its own MAX_USER_CONNECTIONS with 1226, the error of every
# per-account resource limit: only that resource's is a connection limit.
_OVER_LIMIT_SQLSTATE = "53300"
_OVER_LIMIT_MYSQL = frozenset({1040, 1203})
_MYSQL_RESOURCE_LIMIT = 1226
# The texts, for drivers that give no code when connecting (psycopg's OperationalError,
# ADBC's, redis-py's ConnectionError): PostgreSQL's per role, per database and server-wide
# refusals, MySQL's and MariaDB's, Redis's maxclients.
_OVER_LIMIT_TEXT = re.compile(
    r"too many connections|sorry, too many clients|remaining connection slots are reserved|"
    r"max_user_connections|max number of clients reached",
    re.IGNORECASE,
)


def _mysql_errno(exc: BaseException) -> int | None:
    code = getattr(exc, "errno", None)  # mysql-connector
    if isinstance(code, int) and code > 0:
        return code
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):  # pymysql, mysqlclient: (errno, message)
        return args[0]
    return None


def _sqlstate(exc: BaseException) -> str | None:
    for attribute in ("sqlstate", "pgcode"):
        code = getattr(exc, attribute, None)
        if isinstance(code, str) and len(code) == 5:
            return code
    diag = getattr(exc, "diag", None)  # psycopg 3
    code = getattr(diag, "sqlstate", None)
    return code if isinstance(code, str) and len(code) == 5 else None


def is_over_limit(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a database or Redis driver, is a refused connection for
    being over a connection limit: PostgreSQL's SQLSTATE 53300, MySQL's and MariaDB's
    errors 1040 and 1203 (and 1226 for ``max_user_connections``), Redis's ``max number
    of clients reached`` (or their texts, where the driver gives no code)."""
    if isinstance(exc, SparkLookupError):
        return isinstance(exc, SourceBusyError)
    module = type(exc).__module__.split(".")[0]
    if module in _MYSQL_MODULES:
        errno = _mysql_errno(exc)
        if errno is not None:
            return errno in _OVER_LIMIT_MYSQL or (
                errno == _MYSQL_RESOURCE_LIMIT and "max_user_connections" in str(exc))
    code = _sqlstate(exc)
    if code is not None:
        return code == _OVER_LIMIT_SQLSTATE
    return bool(_OVER_LIMIT_TEXT.search(str(exc)))


def is_source_busy(exc: BaseException) -> bool:
    """Whether a failed load met a busy source (a [`SourceBusyError`][], or a driver's
    over-limit refusal that reached us untranslated): waited for, not counted as a retry."""
    if isinstance(exc, SourceBusyError):
        return True
    if isinstance(exc, SparkLookupError):
        return False
    return type(exc).__module__.split(".")[0] in _DRIVER_MODULES and is_over_limit(exc)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a database or Redis driver, is worth retrying."""
    if isinstance(exc, TransientConnectorError):
        return True
    if isinstance(exc, SparkLookupError):
        return False
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return not _PERMANENT_CONNECT.search(str(exc))
    module = type(exc).__module__.split(".")[0]
    name = type(exc).__name__
    if module == "redis":
        return _redis_transient(exc)
    if module in _MYSQL_MODULES:
        errno = _mysql_errno(exc)
        if errno is not None:
            # Before the SQLSTATE: MySQL gives a lock wait timeout and a lost
            # connection the catch-all HY000.
            return errno in MYSQL_TRANSIENT or is_over_limit(exc)
    code = _sqlstate(exc)
    if code is not None:
        return code[:2] in _TRANSIENT_SQLSTATE_CLASSES
    if module in ("sqlite3", "_sqlite3"):
        error_code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(error_code, int):
            return (error_code & 0xFF) in _SQLITE_TRANSIENT
        return bool(_SQLITE_TRANSIENT_TEXT.search(str(exc)))
    if name in ("OperationalError", "InterfaceError"):
        # Without a SQLSTATE (psycopg and ADBC failing to connect or losing the socket):
        # transient, unless the server refused who is asking.
        if module == "adbc_driver_manager" and _SQLITE_TRANSIENT_TEXT.search(str(exc)):
            return True
        return not _PERMANENT_CONNECT.search(str(exc))
    return isinstance(exc, OSError)


def _redis_transient(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"AuthenticationError", "AuthorizationError", "NoPermissionError"}:
        return False
    return bool(names & {"ConnectionError", "TimeoutError", "BusyLoadingError", "TryAgainError"})


def translate(exc: BaseException, message: str) -> ConnectorError:
    """``exc`` as our error: ``message`` (naming what was accessed), the driver's
    error, and the class its classification gives; ``exc`` itself when it is ours
    already. Raise it with [`raise_from`][spark_lookup.errors.raise_from] (``raise ... from
    exc`` would make ours its own cause)."""
    if isinstance(exc, ConnectorError):
        return exc
    detail = str(exc).strip().split("\n")[0][:300]
    text = f"{message}: {type(exc).__name__}: {detail}"
    if is_over_limit(exc):
        return SourceBusyError(text)
    if is_transient(exc):
        return TransientConnectorError(text)
    return ConnectorError(text)


def driver_errors(module_name: str) -> tuple[type[BaseException], ...]:
    """The exception classes a driver module raises for database errors (its DB-API
    ``Error``), with OSError for sockets; ``Exception`` if the module has none."""
    import sys

    module: Any = sys.modules.get(module_name)
    error = getattr(module, "Error", None)
    if isinstance(error, type) and issubclass(error, BaseException):
        return (error, OSError)
    return (Exception,)


_DRIVER_MODULES = frozenset(
    {"psycopg", "psycopg2", "sqlite3", "_sqlite3", "redis", "adbc_driver_manager", "pymysql",
     "mysql", "MySQLdb"}
)


def should_retry(exc: BaseException) -> bool:
    """Whether a failed load is worth another attempt.

    Our own errors say it themselves: a [`TransientConnectorError`][]
    is retried; bad configuration, bad keys, bad values (``BadValueError``), other
    permanent connector errors and ``RecursionError`` (input nested too deep) are not.
    A driver's error that reached us untranslated (from a user's lookup function) is
    classified like ours. Anything else a user's function raises is retried, as Flink
    retries every failed lookup.
    """
    if isinstance(exc, TransientConnectorError):
        return True
    # The same input recurses as deep again: a retry cannot help.
    if isinstance(exc, (SparkLookupError, TypeError, RecursionError)):
        return False
    if type(exc).__module__.split(".")[0] in _DRIVER_MODULES:
        return is_transient(exc)
    return True
