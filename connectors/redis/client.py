"""Redis clients from URLs: passwords and TLS travel in the URL, never in messages."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import SplitResult, urlsplit

from spark_lookup.credentials import redact_credentials
from spark_lookup.errors import ConfigError

__all__ = ["SharedClient", "check_redis_url", "redact_url", "redis_client_from_url"]

_SCHEMES = ("redis", "rediss", "unix")


def check_redis_url(url: object, what: str = "url") -> str:
    """Return ``url`` if it is a Redis URL (``redis://``, ``rediss://`` for TLS,
    ``unix://``), else raise [`ConfigError`][] naming ``what``.

    Passwords and TLS options travel in the URL, as redis-py reads them:
    ``redis://:password@host:6379/0``, ``rediss://user:password@host:6380/1``,
    ``rediss://host?ssl_cert_reqs=required&ssl_ca_certs=/path/ca.pem``.
    """
    if not isinstance(url, str):
        raise ConfigError(f"{what} must be a Redis URL string, got {type(url).__name__}")
    parts = _parts(url)
    if parts is None:
        # Not the parser's message: it quotes the port, which may be part of a password.
        raise ConfigError(f"{what} {redact_credentials(url, strict=True)!r} is not a valid "
                          "URL: its host or port does not parse (a password holding '/', '?', "
                          "'#', '[' or ']' must encode them as %2F, %3F, %23, %5B, %5D)")
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise ConfigError(
            f"{what} {redact_credentials(url, strict=True)!r} is not a Redis URL: use "
            "redis://, rediss:// (TLS) or unix://"
        )
    if "@" in parts.path + parts.query + parts.fragment:
        raise ConfigError(
            f"{what} {redact_credentials(url, strict=True)!r}: the user or password holds '/', "
            "'?' or '#', which "
            "end the URL's host part: percent-encode them (%2F, %3F, %23)")
    return url


def _parts(url: str) -> SplitResult | None:
    """``url`` split, None when its port does not parse (the parser's error is left
    here: it quotes the port, and would be the context of an error raised with it)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # parsing it is the check
    except ValueError:
        return None
    return parts


def redact_url(url: str) -> str:
    """``url`` without what may be a credential, for messages and logs
    (`spark_lookup.credentials.redact_credentials`)."""
    return redact_credentials(url)


def redis_client_from_url(
    url: str,
    *,
    socket_timeout: float,
    connect_timeout: float,
    retries: int = 0,
    client_options: Mapping[str, Any] | None = None,
) -> Any:
    """A ``redis.Redis`` client (bytes responses) for ``url``.

    Runs where the client is used (an executor's Python worker); call it from ``open()``,
    never in ``__init__``, since clients do not pickle. ``retries`` is the number of
    immediate retries redis-py makes on a connection error or timeout (no backoff: the
    lookup runtime owns backoff, and a cache must fail fast). ``client_options`` are
    further ``redis.Redis`` keyword arguments (``ssl_ca_certs``, ``max_connections``...).

    Raises
    ------
    ConfigError
        If redis-py is not installed.
    """
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ConfigError(
            "Redis support needs redis-py: pip install 'spark-lookup[redis]'"
        ) from exc
    kwargs: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "retry": Retry(NoBackoff(), retries),
        "decode_responses": False,
    }
    kwargs.update(client_options or {})
    return redis.Redis.from_url(url, **kwargs)


class SharedClient:
    """One process's Redis client, made by ``make`` at first use and shared by its
    threads (redis-py pools connections)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._client: Any = None

    def get(self) -> Any:
        """The client, made now if there is none."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
                client = self._client
        return client

    def close(self) -> None:
        """Close the client if one was made; the next `get` makes another."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
