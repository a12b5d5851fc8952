"""The one exception hierarchy of spark-lookup.

Errors of drivers (sqlite3, psycopg, redis-py, pyarrow) are translated where they enter
our code: ``raise ConnectorError(...) from exc``, naming the table, key or URL involved, so
callers catch our types and still see the original cause.
"""

from __future__ import annotations

from typing import NoReturn

__all__ = [
    "BadValueError",
    "ConfigError",
    "ConfigWarning",
    "ConnectorError",
    "KeyKindError",
    "LookupLoadError",
    "MetricsUnavailableError",
    "SnapshotUnavailableError",
    "SourceBusyError",
    "SourceError",
    "SparkLookupError",
    "TransientConnectorError",
]


class SparkLookupError(Exception):
    """Base class of every error raised by spark-lookup."""


class ConfigError(SparkLookupError, ValueError):
    """An invalid option or argument; the message names the option key or argument."""


class KeyKindError(ConfigError, TypeError):
    """A key handed to the per-key API (``lookup``, ``lookup_batch``, a cache's ``get``,
    ``put`` or ``invalidate``, a SQL lookup function's arguments) that is not a tuple of
    one value per key column, or holds a value of a kind its column never holds (text
    for a BIGINT, a bool for an INT) or beyond its type's range; the message names the
    key and column. A ``TypeError`` and a ``ValueError`` (``ConfigError``) alike, so
    code written against either keeps catching it."""


class ConnectorError(SparkLookupError):
    """A database, Redis or file access failed; the message names what was accessed.

    Permanent unless it is a [`TransientConnectorError`][]: a missing table, a refused
    login, a malformed query are not retried; the caller learns of them at once.
    """


class TransientConnectorError(ConnectorError):
    """A failure the driver classifies as passing: a lost connection, a timeout, a
    serialization failure or deadlock, a server starting up or shutting down. Loads
    that fail with it are retried with backoff."""


class SourceBusyError(TransientConnectorError):
    """The source refused a connection for being at its connection limit (PostgreSQL's
    ``too many connections``, MySQL's 1040, 1203 and 1226, Redis's ``max number of
    clients``), or no connection of the host's budget (``max_source_connections``) came
    free in time. Waited for with jittered backoff up to the provider's load timeout, not
    retried a fixed number of times: the source is up, only busy."""


class BadValueError(ConnectorError):
    """A stored value cannot be read as its column's type and the bad-value policy is
    ``FAILFAST``; the message names the table, key, column, value and target type.
    Never retried: the same value would fail again."""


class LookupLoadError(SparkLookupError):
    """A lookup load failed after all retries; the message names the key(s) and cause."""


class SourceError(SparkLookupError):
    """A split-based source failed while enumerating or reading splits."""


class SnapshotUnavailableError(SparkLookupError):
    """A full cache has no usable snapshot: the first load has not finished in time,
    or the last good snapshot is older than the configured maximum staleness."""


class ConfigWarning(UserWarning):
    """An option value that is valid but probably not what was meant (a bare-number
    duration under a second: Flink reads it as milliseconds); the message names the
    option and what to write instead. Filter it as any warning
    (``warnings.simplefilter("error", ConfigWarning)`` makes it an error)."""


class MetricsUnavailableError(SparkLookupError):
    """No metrics of a provider have reached the driver yet (``lookup.lookup_metrics``):
    nothing that reports them has run with it, or its reports are still on their way."""


def raise_from(error: BaseException, cause: BaseException) -> NoReturn:
    """Raise ``error`` from ``cause``; ``cause`` itself, as it is, when a translation gave
    it back (``raise ours from ours`` would make an error its own cause: a chain that a
    loop over ``__cause__`` never leaves)."""
    if error is cause:
        raise error
    raise error from cause
