"""RedisLookupCache: a lookup cache shared by every executor, kept in Redis."""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Final, TypeVar

import pyarrow as pa

from cache._codec import CodecError, decode_rows, encode_key, encode_rows
from cache._missing import check_missing_life, refuse_idle_missing_life
from cache.base import Key, LookupCache, Rows, check_key, freeze_rows, key_tuples
from cache.fit import misfit_check
from cache.metrics import CacheMetrics
from connectors.redis.client import SharedClient, check_redis_url, redact_url, redis_client_from_url
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError
from spark_lookup.per_process import PerProcess

__all__ = ["RedisLookupCache"]

log = logging.getLogger(__name__)

Timer = Callable[[], float]
T = TypeVar("T")

_NAMESPACE = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")


def _seconds(value: object, name: str, *, allow_zero: bool = False) -> float:
    return opts.as_timedelta(value, name, allow_zero=allow_zero).total_seconds()


class _RateLimitedWarning:
    """Logs a warning at most once per interval; counts what it held back."""

    def __init__(self, interval: float, timer: Timer) -> None:
        self._interval = interval
        self._timer = timer
        self._lock = threading.Lock()
        self._last = -math.inf
        self._suppressed = 0

    def __call__(self, message: str, *args: object) -> None:
        with self._lock:
            now = self._timer()
            if now - self._last < self._interval:
                self._suppressed += 1
                return
            suppressed, self._suppressed, self._last = self._suppressed, 0, now
        if suppressed:
            message += " (%d similar warnings suppressed)"
            args = (*args, suppressed)
        log.warning(message, *args)


class _Failed:
    """Marks a Redis round trip that failed or was skipped."""


_FAILED = _Failed()


class RedisLookupCache(PerProcess, LookupCache):
    """A lookup cache in Redis, shared by every executor: N workers pay a miss once.

    Built on the driver; pickles as its configuration only (URL, namespace, TTL,
    options); each Python worker creates its own client lazily, on [`open`][] or the
    first operation. The entries themselves live in Redis, so an unpickled copy sees the
    same shared entries. Thread-safe (redis-py clients are).

    Keys are ``{namespace}:`` followed by the canonical, type-preserving JSON text of the
    key tuple (``cache._codec``): ``(1,)``, ``("1",)``, ``(1.0,)`` and ``(True,)`` are four
    different entries. Use one namespace per provider (dimension table and key columns).

    Values are compact JSON with type tags (date, datetime, time, timedelta, Decimal,
    bytes, NaN/infinity, tuples, lists, dicts), never pickle: a value that was altered
    or written by someone else decodes to nothing, is served as a miss, and counts as a
    cache error. Once bound to a schema (the lookup runtime binds it), an entry whose
    rows are not exactly values of the schema's types (``1.5`` or ``True`` in a BIGINT,
    an integer beyond its range, ``55`` in a STRING; see ``cache.fit``) is a miss and a
    cache error too, on every path, so the runtime loads the key again and overwrites it.
    A row holding a type without a safe encoding is not cached (the old entry is
    removed, so no stale rows survive) and counts as a cache error.

    Redis enforces the TTL (``SET ... PX``); every put renews it. A missing key (an
    empty answer) lives ``expire_missing_after`` instead, when given, so a dimension row
    that arrives late is found while rows keep the longer TTL. ``get_all`` is one round
    trip (``MGET``), and so is ``put_all`` (pipelined ``SET``). Not for Redis Cluster,
    whose ``MGET`` cannot span slots.

    A Redis outage never fails a lookup: a get becomes a miss and a put or invalidate a
    no-op, ``metrics.num_cache_errors`` grows by one per failed round trip, and a
    warning is logged at most once per ``warn_interval``. Socket timeouts are short, and
    after a connection failure Redis is not contacted for ``cool_down`` (a circuit
    breaker; round trips skipped meanwhile also count as cache errors), so an outage
    costs at most one timeout per cool-down per worker instead of one per lookup.

    Metric gauges (``num_cached_records``, ``num_cached_bytes``) stay 0: the entries are
    shared, and summing one server-wide count per worker would multiply it.
    [`size`][] counts the namespace on demand.

    Parameters
    ----------
    url : str
        ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS, with
        ``?ssl_ca_certs=...`` etc.) or ``unix:///path.sock?db=0``.
    namespace : str
        Prefix of every key: letters, digits and ``_ . : -`` (no glob characters, so
        [`size`][] can match it).
    ttl : timedelta or float
        Time to live of each entry (seconds if a number); rounded up to milliseconds.
    cache_missing_key : bool
        Whether an empty result is cached (default True, as Flink's).
    expire_missing_after : timedelta or float, optional
        Time to live of a cached empty result (seconds if a number), at most ``ttl``;
        default ``ttl``. Refused with ``cache_missing_key=False`` (it would mean nothing).
    socket_timeout, connect_timeout : timedelta or float
        Per-operation read/write and connect timeouts (default 0.25 s each).
    cool_down : timedelta or float
        How long Redis is skipped after a connection failure (default 5 s; 0 disables).
    warn_interval : timedelta or float
        Minimum time between two outage warnings of one instance (default 60 s).
    timer : callable
        Monotonic clock in seconds for the cool-down and warnings; picklable.
    max_keys_per_command : int
        Keys per ``MGET`` (default 1000); a larger ``get_all`` pipelines several.
    client_options : mapping, optional
        Further ``redis.Redis`` keyword arguments; picklable.

    Attributes
    ----------
    namespace : str
        The key prefix (without the trailing ``:``).
    ttl : timedelta
        Time to live of each entry, as given.
    expire_missing_after : timedelta or None
        Time to live of a cached empty result, as given (None: ``ttl``).

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an invalid URL, namespace, TTL or timeout, or an
        ``expire_missing_after`` longer than ``ttl`` or given without missing keys cached.

    Examples
    --------
    >>> from datetime import timedelta
    >>> cache = RedisLookupCache("redis://localhost:6379/0", "customers:v1",
    ...                          ttl=timedelta(minutes=10))
    >>> cache
    RedisLookupCache(url='redis://localhost:6379/0', namespace='customers:v1', ttl=600.0s)
    """

    def __init__(
        self,
        url: str,
        namespace: str,
        ttl: timedelta | float,
        *,
        cache_missing_key: bool = True,
        expire_missing_after: timedelta | float | None = None,
        socket_timeout: timedelta | float = 0.25,
        connect_timeout: timedelta | float = 0.25,
        cool_down: timedelta | float = 5.0,
        warn_interval: timedelta | float = 60.0,
        timer: Timer = time.monotonic,
        max_keys_per_command: int = 1000,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._url = check_redis_url(url)
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ConfigError(
                f"namespace {namespace!r} must be 1-200 letters, digits or '_', '.', ':', '-'"
            )
        self.namespace: Final = namespace
        self.ttl: Final = opts.as_timedelta(ttl, "ttl")
        self._ttl_ms = max(1, math.ceil(self.ttl / timedelta(milliseconds=1)))
        self._cache_missing_key = opts.check_bool(cache_missing_key, "cache_missing_key")
        self.expire_missing_after: Final = (
            None if expire_missing_after is None
            else check_missing_life(expire_missing_after, "expire_missing_after"))
        refuse_idle_missing_life(self.expire_missing_after, self._cache_missing_key, self.ttl,
                                 ("expire_missing_after", "cache_missing_key", "ttl"))
        self._missing_ttl_ms = self._ttl_ms if self.expire_missing_after is None else max(
            1, math.ceil(self.expire_missing_after / timedelta(milliseconds=1)))
        self._socket_timeout = _seconds(socket_timeout, "socket_timeout")
        self._connect_timeout = _seconds(connect_timeout, "connect_timeout")
        self._cool_down = _seconds(cool_down, "cool_down", allow_zero=True)
        self._warn_interval = _seconds(warn_interval, "warn_interval", allow_zero=True)
        self._timer = opts.check_callable(timer, "timer")
        self._max_keys = opts.check_int(max_keys_per_command, "max_keys_per_command")
        self._client_options = dict(client_options or {})
        self._init_per_process()

    # Configuration only travels: the client stays behind; the entries are in Redis.
    _PER_PROCESS = ("_client", "_skip_until", "_metrics", "_warn", "_misfit")

    def _init_per_process(self) -> None:
        bound = getattr(self, "_bound", None)
        self._misfit = None if bound is None else misfit_check(bound[0])
        self._client = SharedClient(lambda: redis_client_from_url(
            self._url, socket_timeout=self._socket_timeout,
            connect_timeout=self._connect_timeout, client_options=self._client_options))
        self._skip_until = -math.inf
        self._metrics = CacheMetrics()
        self._warn = _RateLimitedWarning(self._warn_interval, self._timer)

    def __repr__(self) -> str:
        missing = ("" if self.expire_missing_after is None
                   else f", expire_missing_after={self.expire_missing_after.total_seconds()}s")
        return (
            f"RedisLookupCache(url={redact_url(self._url)!r}, namespace={self.namespace!r}, "
            f"ttl={self.ttl.total_seconds()}s{missing})"
        )

    def bind(self, schema: pa.Schema, key_columns: Sequence[str]) -> None:
        """Check every entry read from now on against ``schema`` (see the class notes)."""
        super().bind(schema, key_columns)
        self._misfit = misfit_check(schema)

    # --- lifecycle

    def open(self, metrics: CacheMetrics | None = None) -> None:
        """Report into ``metrics`` and create the client (no round trip: a Redis that is
        down at this point only makes the first operations misses). Never raises."""
        super().open(metrics)
        try:
            self._client.get()
        except Exception as exc:  # the first operation tries again, and counts it
            self._warn("Redis cache client for %s not created: %s", redact_url(self._url), exc)

    def close(self) -> None:
        """Close this worker's client; the shared entries stay in Redis."""
        try:
            self._client.close()
        except Exception:  # closing a dead connection may fail; harmless
            log.debug("closing the Redis client failed", exc_info=True)

    # --- the Redis boundary: nothing raised below here reaches the caller

    def _round_trip(self, what: str, call: Callable[[Any], T]) -> T | _Failed:
        if self._timer() < self._skip_until:
            self._metrics.inc_cache_errors()
            return _FAILED
        try:
            return call(self._client.get())
        except Exception as exc:  # a cache never fails its caller
            self._metrics.inc_cache_errors()
            if _is_outage(exc):
                self._skip_until = self._timer() + self._cool_down
                self._warn("Redis cache %s at %s failed (%s: %s); serving misses%s",
                           what, redact_url(self._url), type(exc).__name__, exc,
                           f", Redis skipped for {self._cool_down:g} s" if self._cool_down else "")
            else:
                self._warn("Redis cache %s in namespace %r failed: %s: %s",
                           what, self.namespace, type(exc).__name__, exc)
            return _FAILED

    def _redis_key(self, key: Key) -> str | None:
        try:
            return f"{self.namespace}:{encode_key(key)}"
        except CodecError as exc:
            self._metrics.inc_cache_errors()
            self._warn("key %.80r is not cached in Redis: %s", key, exc)
            return None

    def _decode(self, redis_key: str, data: object) -> Rows | None:
        if data is None:
            return None
        try:
            rows = decode_rows(data)  # type: ignore[arg-type]
        except CodecError as exc:
            self._metrics.inc_cache_errors()
            self._warn("Redis cache value at %.120r is not readable (%s); a miss", redis_key, exc)
            return None
        problem = None if self._misfit is None else self._misfit(rows)
        if problem is not None:
            self._metrics.inc_cache_errors()
            self._warn("Redis cache value at %.120r does not fit the schema (%s); a miss",
                       redis_key, problem)
            return None
        return rows

    def _encode(self, key: Key, rows: tuple[tuple[Any, ...], ...]) -> bytes | None:
        """The value to store, or None when nothing is to be stored for ``key``."""
        if not rows and not self._cache_missing_key:
            return None
        try:
            return encode_rows(rows)
        except CodecError as exc:
            self._metrics.inc_cache_errors()
            self._warn("rows of key %.80r are not cached in Redis: %s", key, exc)
            return None

    # --- LookupCache

    def get_if_present(self, key: Key) -> Rows | None:
        """The rows cached for ``key``, or None (absent, undecodable, or Redis failing)."""
        redis_key = self._redis_key(check_key(key))
        rows = None
        if redis_key is not None:
            data = self._round_trip("GET", lambda client: client.get(redis_key))
            if not isinstance(data, _Failed):
                rows = self._decode(redis_key, data)
        return self._counted(rows)

    def get_all(self, keys: Iterable[Key]) -> dict[Key, Rows]:
        """The present keys of ``keys`` with their rows, in one round trip (one ``MGET``,
        or pipelined ``MGET`` commands of ``max_keys_per_command`` keys)."""
        asked = [check_key(key) for key in keys]
        wanted: dict[str, Key] = {}
        for key in asked:
            redis_key = self._redis_key(key)
            if redis_key is not None:
                wanted[redis_key] = key
        found: dict[Key, Rows] = {}
        if wanted:
            names = list(wanted)
            values = self._round_trip("MGET", lambda client: self._mget(client, names))
            if not isinstance(values, _Failed):
                for name, data in zip(names, values, strict=True):
                    rows = self._decode(name, data)
                    if rows is not None:
                        found[wanted[name]] = rows
        hits = sum(1 for key in asked if key in found)
        self._metrics.inc_hits(hits)
        self._metrics.inc_misses(len(asked) - hits)
        return found

    def _mget(self, client: Any, names: list[str]) -> list[Any]:
        step = self._max_keys
        if len(names) <= step:
            return list(client.mget(names))
        # One huge MGET would block the server for every other client meanwhile.
        pipe = client.pipeline(transaction=False)
        for start in range(0, len(names), step):
            pipe.mget(names[start : start + step])
        return [value for reply in pipe.execute() for value in reply]

    def put(self, key: Key, rows: Rows) -> None:
        """Store ``rows`` for ``key`` with the TTL; an empty ``rows`` is stored only if
        missing keys are cached (for ``expire_missing_after``, when given), and otherwise
        removes any stale entry."""
        self.put_all({check_key(key): rows})

    def put_all(self, entries: Mapping[Key, Rows]) -> None:
        """[`put`][] every entry, in one pipelined round trip."""
        # (Redis key, value or None to delete, time to live in ms)
        writes: list[tuple[str, bytes | None, int]] = []
        for key, rows in entries.items():
            frozen = freeze_rows(check_key(key), rows)
            redis_key = self._redis_key(key)
            if redis_key is not None:
                life = self._ttl_ms if frozen else self._missing_ttl_ms
                writes.append((redis_key, self._encode(key, frozen), life))
        if not writes:
            return

        def write(client: Any) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            for redis_key, value, life in writes:
                if value is None:
                    pipe.delete(redis_key)
                else:
                    pipe.set(redis_key, value, px=life)
            return list(pipe.execute(raise_on_error=False))

        results = self._round_trip("pipelined SET", write)
        if not isinstance(results, _Failed):
            errors = [r for r in results if isinstance(r, Exception)]
            if errors:  # e.g. a read-only replica: the connection is fine, the writes not
                self._metrics.inc_cache_errors(len(errors))
                self._warn("%d Redis cache writes failed: %s", len(errors), errors[0])

    def invalidate(self, key: Key) -> None:
        """Remove ``key`` from Redis (for every worker); a no-op if Redis fails."""
        redis_key = self._redis_key(check_key(key))
        if redis_key is not None:
            self._round_trip("DEL", lambda client: client.delete(redis_key))

    def invalidate_arrow(self, keys: Sequence[pa.Array]) -> int:
        """Remove the keys from Redis (for every worker) in one pipelined round trip;
        returns how many were there (0 if Redis fails: the entries then live out their TTL,
        and the failure is counted in ``num_cache_errors``)."""
        names = [name for name in map(self._redis_key, key_tuples(keys)) if name is not None]
        if not names:
            return 0
        step = self._max_keys

        def delete(client: Any) -> int:
            pipe = client.pipeline(transaction=False)
            for start in range(0, len(names), step):
                pipe.delete(*names[start : start + step])
            return sum(int(count) for count in pipe.execute())

        removed = self._round_trip("DEL", delete)
        return 0 if isinstance(removed, _Failed) else removed

    def invalidate_all(self) -> None:
        """Remove every key of the namespace (``SCAN`` and ``UNLINK``, for every worker);
        a no-op if Redis fails (the entries then live out their TTL)."""
        pattern = f"{self.namespace}:[[]*"  # as in size(): not the keys of "namespace:b"
        step = self._max_keys

        def drop(client: Any) -> None:
            batch: list[Any] = []
            for name in client.scan_iter(match=pattern, count=1000):
                batch.append(name)
                if len(batch) >= step:
                    client.unlink(*batch)
                    batch = []
            if batch:
                client.unlink(*batch)

        self._round_trip("SCAN and UNLINK", drop)

    def size(self) -> int:
        """Keys in the namespace now, counted with ``SCAN`` (approximate: entries expire
        and other workers write meanwhile; 0 if Redis fails). Costs a scan of the whole
        keyspace: for tests and diagnostics, not for the lookup path."""
        # A key's text is a JSON array: "[" right after the namespace keeps namespace
        # "a" from counting the keys of "a:b" (whose keys go on "a:b:["). The namespace
        # holds no glob character (see its check).
        pattern = f"{self.namespace}:[[]*"
        count = self._round_trip(
            "SCAN",
            lambda client: sum(1 for _ in client.scan_iter(match=pattern, count=1000)),
        )
        return 0 if isinstance(count, _Failed) else count


def _is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` means Redis cannot be reached (as opposed to one bad command)."""
    if isinstance(exc, OSError):
        return True
    try:
        import redis
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, (redis.ConnectionError, redis.TimeoutError))
