"""JDBC URLs, as a Flink JDBC table's ``'url'`` option writes them, read into what a
Python driver connects with: ``jdbc:postgresql://``, ``jdbc:mysql://``,
``jdbc:mariadb://`` and ``jdbc:sqlite:``.

URL parameters map onto the drivers' own (libpq's ``sslmode``, a connect timeout);
one that changes how values are read or secured and has no Python counterpart here is
refused, never dropped. The password (``password=`` or ``user:password@``) is taken
out into a `Secret` at once; `redact_jdbc_url` is the URL
every message shows.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass, replace
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from connectors.sql.flavor import MYSQL, POSTGRES, SQLITE
from spark_lookup.credentials import Secret, redact_credentials
from spark_lookup.errors import ConfigError

__all__ = ["DATABASES", "JdbcUrl", "parse_jdbc_url", "redact_jdbc_url"]

DATABASES = {"postgresql": POSTGRES, "mysql": MYSQL, "mariadb": MYSQL, "sqlite": SQLITE}
"""The JDBC subprotocols read here, and the SQL backend of each."""

_DEFAULT_PORTS = {POSTGRES: 5432, MYSQL: 3306}
_NAMES = {POSTGRES: "PostgreSQL", MYSQL: "MySQL/MariaDB", SQLITE: "SQLite"}
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# Connector/J parameters whose effect our MySQL connections already have: they pin
# the connection's time zone to UTC (values are instants either way) and speak
# utf8mb4.
_MYSQL_IGNORED = frozenset({"serverTimezone", "characterEncoding", "useUnicode",
                            "connectionTimeZone"})


def redact_jdbc_url(url: str) -> str:
    """``url`` without what may be a credential (``user:password@``, ``password=``):
    `spark_lookup.credentials.redact_credentials`."""
    return redact_credentials(url)


@dataclass(frozen=True)
class JdbcUrl:
    """A parsed JDBC URL: the database and where it is, the credentials given in it,
    and the connection parameters in the drivers' terms."""

    backend: str
    """``"postgres"``, ``"mysql"`` or ``"sqlite"`` (`connectors.sql.flavor`)."""
    host: str | None
    port: int | None
    database: str | None
    """The database name; for SQLite, the file's absolute path."""
    user: str | None
    password: Secret | None
    params: tuple[tuple[str, str], ...]
    """Connection parameters by libpq's names (PostgreSQL: ``sslmode``,
    ``sslrootcert``, ``sslcert``, ``sslkey``, ``connect_timeout`` in seconds,
    ``application_name``) or ours for MySQL (``connect_timeout`` in seconds,
    ``ssl_disabled``)."""
    shown: str
    """The URL as messages show it (password redacted)."""

    @property
    def database_name(self) -> str:
        """The database product, for messages: ``PostgreSQL``, ``MySQL/MariaDB``, ``SQLite``."""
        return _NAMES[self.backend]


def parse_jdbc_url(url: object, key: str = "url") -> JdbcUrl:
    """Read a JDBC URL (the value of option ``key``).

    Raises
    ------
    ConfigError
        Naming ``key`` and showing the URL without its password: not a JDBC URL, a
        database other than PostgreSQL, MySQL, MariaDB or SQLite, a malformed host or
        port, several hosts, an in-memory SQLite database, or a parameter that is not
        supported.
    """
    if not isinstance(url, str):
        raise ConfigError(f"option {key!r} must be a JDBC URL string, got {type(url).__name__}")
    # Errors show the URL strictly redacted (its parts may not be what they look);
    # an accepted URL's record shows its host.
    shown = redact_credentials(url, strict=True)
    match = re.match(r"jdbc:([A-Za-z0-9]+):(.*)\Z", url.strip(), re.DOTALL)
    if match is None:
        raise ConfigError(
            f"option {key!r}: {shown!r} is not a JDBC URL; expected "
            "'jdbc:postgresql://host:port/database', 'jdbc:mysql://...', "
            "'jdbc:mariadb://...' or 'jdbc:sqlite:/path/file.db'"
        )
    subprotocol, rest = match.group(1).lower(), match.group(2)
    backend = DATABASES.get(subprotocol)
    if backend is None:
        close = difflib.get_close_matches(subprotocol, list(DATABASES), n=1)
        hint = f" (did you mean 'jdbc:{close[0]}:'?)" if close else ""
        raise ConfigError(
            f"option {key!r}: unsupported database 'jdbc:{subprotocol}:' in {shown!r}{hint}; "
            f"supported: {', '.join(f'jdbc:{name}:' for name in DATABASES)}"
        )
    parsed = _sqlite(rest, key, shown) if backend == SQLITE else _server(backend, rest, key, shown)
    return replace(parsed, shown=redact_credentials(url))


def _sqlite(rest: str, key: str, shown: str) -> JdbcUrl:
    path = rest.split("?")[0]
    if not path or path == ":memory:" or "mode=memory" in rest:
        raise ConfigError(
            f"option {key!r}: {shown!r} is an in-memory SQLite database, which belongs to "
            "one connection of one process (the lookups and loads on executors would each "
            "see an empty one of their own); give a database file: 'jdbc:sqlite:/path/file.db'"
        )
    if rest.startswith("file:"):
        raise ConfigError(f"option {key!r}: {shown!r}: give the database file's path "
                          "('jdbc:sqlite:/path/file.db'), not a 'file:' URI")
    if "?" in rest:
        # sqlite-jdbc reads pragmas there; taken as part of the file name they would
        # open another file.
        raise ConfigError(f"option {key!r}: {shown!r}: parameters of a SQLite URL are not "
                          "supported; give the database file's path only")
    # Resolved here, on the driver: executors have working directories of their own.
    return JdbcUrl(SQLITE, None, None, os.path.abspath(rest), None, None, (), shown)


def _server(backend: str, rest: str, key: str, shown: str) -> JdbcUrl:
    expected = f"expected 'jdbc:{'postgresql' if backend == POSTGRES else 'mysql'}" \
               "://host[:port]/database[?parameters]'"
    if not rest.startswith("//"):
        raise ConfigError(f"option {key!r}: {shown!r}: {expected}")
    parts = _split(rest)
    if parts is None:
        raise ConfigError(f"option {key!r}: {shown!r} does not parse as a URL "
                          "(a '[' or ']' outside an IPv6 address?); percent-encode such "
                          f"characters in the user and password; {expected}")
    if "@" in parts.path + parts.query + parts.fragment:
        raise ConfigError(f"option {key!r}: {shown!r}: the user or password holds '/', '?' "
                          "or '#', which end the URL's host part: percent-encode them "
                          "(%2F, %3F, %23)")
    if "," in parts.netloc:
        raise ConfigError(f"option {key!r}: {shown!r} names several hosts "
                          "(or a user and password without '@'); one host is supported")
    port = _port(parts)
    if port == -1:
        # The port text may be a password missing its '@': the host part is not shown.
        raise ConfigError(f"option {key!r}: {shown!r} has an invalid port; "
                          f"{expected}")
    host = parts.hostname
    if not host:
        raise ConfigError(f"option {key!r}: {shown!r} names no host; {expected}")
    if ";" in parts.path:
        # Connector/J and SQL Server read ';name=value' there; taken as the database
        # name, a ';password=...' would be shown as one.
        raise ConfigError(f"option {key!r}: {shown!r}: parameters after ';' in the path are "
                          "not supported; give them after '?' (…/database?user=...&password=...)")
    database = unquote(parts.path.lstrip("/")) or None
    user = unquote(parts.username) if parts.username else None
    password = Secret(unquote(parts.password)) if parts.password is not None else None
    params: dict[str, str] = {}
    known = {"user", "password", *(_POSTGRES_PARAMS if backend == POSTGRES else _MYSQL_PARAMS)}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if "password" in params and name not in known:
            # Maybe the rest of a password holding '&': neither it nor its name is shown.
            raise ConfigError(
                f"option {key!r}: {shown!r}: what "
                "follows 'password=' does not read as supported parameters; a password "
                "holding '&', '#' or '+' must encode them (%26, %23, %2B)")
        if name in params or (name == "user" and parts.username):
            raise ConfigError(f"option {key!r}: {shown!r} gives parameter {name!r} twice")
        params[name] = value
    if "user" in params:
        user = params.pop("user")
    if "password" in params:
        if password is not None:
            raise ConfigError(f"option {key!r}: {shown!r} gives the password twice")
        password = Secret(params.pop("password"))
    read = _postgres_params if backend == POSTGRES else _mysql_params
    mapped = read(params, key, shown)
    return JdbcUrl(backend, host, port or _DEFAULT_PORTS[backend], database, user, password,
                   tuple(sorted(mapped.items())), shown)


def _unsupported(name: str, key: str, shown: str, supported: list[str]) -> ConfigError:
    close = difflib.get_close_matches(name, supported, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ConfigError(f"option {key!r}: URL parameter {name!r} of {shown!r} is not supported; "
                       f"{hint}supported: {', '.join(supported)}")


_POSTGRES_PARAMS = {"sslmode": "sslmode", "sslrootcert": "sslrootcert", "sslcert": "sslcert",
                    "sslkey": "sslkey", "connectTimeout": "connect_timeout",
                    "ApplicationName": "application_name"}


def _postgres_params(params: dict[str, str], key: str, shown: str) -> dict[str, str]:
    mapped = {}
    for name, value in params.items():
        libpq = _POSTGRES_PARAMS.get(name)
        if libpq is None:
            raise _unsupported(name, key, shown, ["user", "password", *_POSTGRES_PARAMS])
        if name == "sslmode" and value not in _SSLMODES:
            raise ConfigError(f"option {key!r}: sslmode={value!r} in {shown!r}; expected one of "
                              f"{', '.join(_SSLMODES)}")
        if name == "connectTimeout":
            value = str(_whole_number(value, name, key, shown))  # seconds, as libpq's
        mapped[libpq] = value
    return mapped


def _split(text: str) -> SplitResult | None:
    """``text`` split as a URL, None when it does not parse (no parser error kept: see
    `_port`)."""
    try:
        return urlsplit(text)
    except ValueError:
        return None


def _port(parts: SplitResult) -> int | None:
    """The URL's port, -1 for one that does not parse (told apart outside the handler:
    the parser's error quotes the port, which may be part of a password, and an error
    raised in the handler would keep it as its context)."""
    try:
        return parts.port
    except ValueError:
        return -1


_MYSQL_PARAMS = frozenset({"connectTimeout", "sslMode", "useSSL", *_MYSQL_IGNORED})


def _mysql_params(params: dict[str, str], key: str, shown: str) -> dict[str, str]:
    mapped = {}
    supported = ["user", "password", "connectTimeout", "sslMode", "useSSL",
                 *sorted(_MYSQL_IGNORED)]
    for name, value in params.items():
        if name in _MYSQL_IGNORED:
            continue
        if name == "connectTimeout":
            millis = _whole_number(value, name, key, shown)
            if millis:  # 0: no timeout, as Connector/J reads it
                mapped["connect_timeout"] = str(math.ceil(millis / 1000))
        elif name in ("sslMode", "useSSL"):
            mode = value.upper() if name == "sslMode" else {
                "FALSE": "DISABLED", "TRUE": "PREFERRED"}.get(value.upper(), "")
            if mode == "DISABLED":
                mapped["ssl_disabled"] = "true"
            elif mode != "PREFERRED":
                raise ConfigError(
                    f"option {key!r}: {name}={value!r} in {shown!r} is not supported from a "
                    "URL (certificates cannot be given here): use sslMode=DISABLED or "
                    "PREFERRED, or build lookup.SqlLookupFunction with a connection factory "
                    "of your own"
                )
        else:
            raise _unsupported(name, key, shown, supported)
    return mapped


def _whole_number(value: str, name: str, key: str, shown: str) -> int:
    if not value.isdigit():
        raise ConfigError(f"option {key!r}: {name}={value!r} in {shown!r} must be a whole "
                          "number")
    return int(value)
