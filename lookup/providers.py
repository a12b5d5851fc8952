"""Providers: a lookup function (or scan source) with its caching strategy and options.

A provider is what the user builds on the driver and hands to [`lookup.lookup_join`][],
[`lookup.register_lookup_function`][] or [`lookup.open_lookup`][]. It is a small
picklable value: the function, cache and trigger inside it travel to executors as
their configuration and are opened there (Flink's ``LookupFunctionProvider`` family).
Each provider gets a random ``provider_id`` when built; copies unpickled in one Python
worker share one runtime and cache through it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from pyspark import TaskContext
from pyspark.sql.types import StructType

from cache.base import LookupCache
from lookup.changes.feed import ChangeFeed
from lookup.function import (
    AsyncLookupFunction,
    LookupFunction,
    LookupFunctionBase,
    check_key_columns,
)
from lookup.retry import MissRetry, RetryPolicy
from lookup.validity import Validity
from spark_lookup.connection_budget import (
    DEFAULT_MAX_SOURCE_CONNECTIONS,
    ConnectionBudget,
    default_slots_root,
)
from spark_lookup.errors import ConfigError
from spark_lookup.options import as_timedelta, check_instance, check_int
from spark_lookup.schema import parse_schema

__all__ = [
    "AsyncLookupFunctionProvider",
    "FullCachingLookupProvider",
    "LookupFunctionProvider",
    "LookupProvider",
    "PartialCachingAsyncLookupProvider",
    "PartialCachingLookupProvider",
]

DEFAULT_BATCH_SIZE = 10_000
DEFAULT_CAPACITY = 100
DEFAULT_ASYNC_TIMEOUT = timedelta(seconds=180)
DEFAULT_LOAD_TIMEOUT = timedelta(seconds=180)
DEFAULT_MAX_OVERLAY_KEYS = 100_000


def _retry_policy(max_retries: int | None, retry_policy: RetryPolicy | None) -> RetryPolicy:
    if retry_policy is not None:
        check_instance(retry_policy, RetryPolicy, "retry_policy")
        if max_retries is not None and max_retries != retry_policy.max_retries:
            raise ConfigError(
                "give either max_retries or retry_policy (with its own max_retries), not both"
            )
        return retry_policy
    return RetryPolicy(max_retries=3 if max_retries is None else max_retries)


@dataclass(frozen=True)
class LookupProvider:
    """Base of all providers: the dimension ``schema``, ``key_columns`` and retry options.

    Not built directly: use the ``of`` constructor of a concrete provider.
    """

    schema: StructType
    key_columns: tuple[str, ...]
    retry_policy: RetryPolicy
    retry_on_miss: MissRetry | None
    provider_id: str = field(default_factory=lambda: uuid.uuid4().hex, kw_only=True)
    max_source_connections: int | None = field(default=DEFAULT_MAX_SOURCE_CONNECTIONS,
                                                kw_only=True)
    adaptive_concurrency: bool = field(default=True, kw_only=True)
    validity: Validity | None = field(default=None, kw_only=True)
    """The dimension's version columns (None: one version per key, always valid): each
    stream row then joins the version of its key valid at its ``as_of`` time."""

    @property
    def kind(self) -> str:
        """``"NONE"``, ``"PARTIAL"`` or ``"FULL"``: the caching strategy."""
        return "NONE"

    @property
    def key_types(self) -> list[Any]:
        """Spark data types of the key columns, in key order."""
        return [self.schema[name].dataType for name in self.key_columns]

    def describe(self) -> str:
        """A one-line description for logs and error messages."""
        return f"{type(self).__name__}(key_columns={list(self.key_columns)})"

    def connection_wait(self) -> timedelta:
        """How long a load waits for its source: for a connection of the host's budget,
        and while the source refuses connections for being over its own limit."""
        return DEFAULT_LOAD_TIMEOUT

    def connection_budget(self) -> ConnectionBudget | None:
        """The budget of this provider's connections to its source on each host (at
        most ``max_source_connections`` open at once across the host's processes), or
        None when unlimited. Its slots are files under
        ``<system temp dir>/spark-lookup-slots-<uid>/<provider_id>``, deleted once no
        process of the host uses them (`spark_lookup.host_slots.sweep`); with
        ``adaptive_concurrency``, fewer are used while the source is slow or failing."""
        if self.max_source_connections is None:
            return None
        return ConnectionBudget(str(default_slots_root() / self.provider_id),
                                self.max_source_connections,
                                self.connection_wait().total_seconds(),
                                f"the source of {self.describe()}",
                                self.adaptive_concurrency)


_P = TypeVar("_P", bound=LookupProvider)


def _check_changes(changes: object, key_columns: Sequence[str], what: str) -> None:
    check_instance(changes, ChangeFeed, "changes", "a lookup.ChangeFeed (or None)")
    assert isinstance(changes, ChangeFeed)
    changes.check_provider_keys(list(key_columns), what)


def _check_validity(validity: object, schema: StructType, key_columns: Sequence[str],
                    what: str) -> Validity | None:
    """``validity`` checked against the provider's schema and key columns."""
    if validity is None:
        return None
    check_instance(validity, Validity, "validity", "a lookup.Validity (or None)")
    assert isinstance(validity, Validity)
    validity.check(schema, key_columns, what)
    return validity


def _max_connections(value: object) -> int | None:
    """``max_source_connections`` checked: None (unlimited) or at least 1."""
    return None if value is None else check_int(value, "max_source_connections")


def _adaptive(value: object) -> bool:
    """``adaptive_concurrency`` checked: True or False."""
    if not isinstance(value, bool):
        raise ConfigError(f"adaptive_concurrency must be True or False, got {value!r}")
    return value


def _built(cls: type[_P], fn: Any, base: type[LookupFunctionBase], max_retries: int | None,
           retry_policy: RetryPolicy | None, retry_on_miss: MissRetry | None, batch_size: int,
           **extra: Any) -> _P:
    """The one builder behind the function providers' ``of``: checks ``fn`` (an
    instance of ``base``), the shared options and a ``cache``, then ``extra`` as given."""
    if not isinstance(fn, base):
        is_async = isinstance(fn, AsyncLookupFunction)
        raise ConfigError(
            f"expected a {base.__name__}, got {type(fn).__name__}"
            + (" (use the Async provider for an AsyncLookupFunction)" if is_async else "")
        )
    if retry_on_miss is not None and not isinstance(retry_on_miss, MissRetry):
        raise ConfigError(f"retry_on_miss must be a MissRetry or None, got {retry_on_miss!r}")
    if "cache" in extra:
        check_instance(extra["cache"], LookupCache, "cache", "a cache.LookupCache")
    if extra.get("changes") is not None:
        _check_changes(extra["changes"], fn.key_fields(), f"{type(fn).__name__}")
        if type(extra["cache"]).invalidate_all is LookupCache.invalidate_all:
            raise ConfigError(
                f"changes= needs a cache that can drop all its entries after a lost "
                f"connection (invalidate_all); {type(extra['cache']).__name__} cannot"
            )
    extra["max_source_connections"] = _max_connections(extra.get(
        "max_source_connections", DEFAULT_MAX_SOURCE_CONNECTIONS))
    extra["adaptive_concurrency"] = _adaptive(extra.get("adaptive_concurrency", True))
    if "load_timeout" in extra:
        extra["load_timeout"] = as_timedelta(extra["load_timeout"], "load_timeout")
    extra["validity"] = _check_validity(extra.get("validity"), fn.struct, fn.key_fields(),
                                        type(fn).__name__)
    build: Any = cls  # each caller's class has function and batch_size fields
    return build(  # type: ignore[no-any-return]
        fn.struct, tuple(fn.key_fields()), _retry_policy(max_retries, retry_policy),
        retry_on_miss, function=fn, batch_size=check_int(batch_size, "batch_size"), **extra,
    )


@dataclass(frozen=True)
class LookupFunctionProvider(LookupProvider):
    """Looks every key up in the function, with no cache (Flink's ``LookupFunctionProvider``).

    Misses are still loaded in one [`lookup_batch`][lookup.LookupFunction.lookup_batch] call per
    batch of distinct keys.
    """

    function: LookupFunction = field(kw_only=True)
    batch_size: int = field(default=DEFAULT_BATCH_SIZE, kw_only=True)
    load_timeout: timedelta = field(default=DEFAULT_LOAD_TIMEOUT, kw_only=True)

    def connection_wait(self) -> timedelta:
        return self.load_timeout

    @classmethod
    def of(
        cls,
        fn: LookupFunction,
        *,
        max_retries: int | None = None,
        retry_policy: RetryPolicy | None = None,
        retry_on_miss: MissRetry | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_source_connections: int | None = DEFAULT_MAX_SOURCE_CONNECTIONS,
        adaptive_concurrency: bool = True,
        load_timeout: timedelta | float = DEFAULT_LOAD_TIMEOUT,
        validity: Validity | None = None,
    ) -> LookupFunctionProvider:
        """A provider looking keys up in ``fn`` on every batch.

        Parameters
        ----------
        fn
            The lookup function (picklable; opened on each executor).
        max_retries
            Retries of a failed load (default 3) with exponential backoff; or give a
            full ``retry_policy``.
        retry_on_miss
            Look keys with no rows up again (late-arriving dimension rows).
        batch_size
            Most keys passed to one ``lookup_batch`` call; larger batches are chunked.
        max_source_connections
            Connections to the source open at once per host, across its Python workers
            (default 4; None: unlimited). Loads queue for one (idle ones count: a
            worker keeps a connection only while it holds one of the host's slots).
            Applies to the connectors' functions (SQL, Redis); a function of yours opens
            its own connections.
        adaptive_concurrency
            Whether the host uses fewer of those connections while the source is slow
            (a window of loads took over twice their usual time), times out, fails
            transiently or refuses for being busy, and more again, one at a time, as it
            recovers (default True; between 1 and ``max_source_connections``).
        load_timeout
            How long a load waits for its source (``timedelta`` or seconds; default
            180 s): for a connection of ``max_source_connections``, and while the source
            refuses connections for being over its own limit (waited for with jittered
            backoff, not retried ``max_retries`` times).
        validity
            The dimension's version columns ([`Validity`][lookup.Validity]): ``fn``
            answers every version of a key, and a join picks the one valid at each
            row's ``as_of`` time (or now, without ``as_of``; see
            docs/point-in-time.md).

        Raises
        ------
        ConfigError
            For an invalid schema, key columns or option (a ``ValueError``); for
            ``validity`` columns the schema lacks, that are key columns, or that are no
            TIMESTAMP, TIMESTAMP_NTZ or DATE.
        """
        return _built(cls, fn, LookupFunction, max_retries, retry_policy, retry_on_miss,
                      batch_size, max_source_connections=max_source_connections,
                      adaptive_concurrency=adaptive_concurrency,
                      load_timeout=load_timeout, validity=validity)


@dataclass(frozen=True)
class _PartiallyCached:
    """A function provider whose results are cached in ``cache``, kept fresh by
    ``changes`` when given."""

    cache: LookupCache = field(kw_only=True)
    changes: ChangeFeed | None = field(default=None, kw_only=True)
    share_across_workers: bool | None = field(default=None, kw_only=True)

    @property
    def kind(self) -> str:
        return "PARTIAL"

    def shares_cache(self) -> bool:
        """Whether a runtime opened here puts a host tier behind its cache.

        Runs where the runtime opens. ``share_across_workers`` when it was given, else
        whether this process is a Spark Python worker running a task.
        """
        if self.share_across_workers is not None:
            return self.share_across_workers
        return TaskContext.get() is not None

    def host_tier_directory(self) -> Path:
        """This provider's host tier on this host:
        ``<system temp dir>/spark-lookup-partial-<uid>/<provider_id>``."""
        return (Path(tempfile.gettempdir()) / f"spark-lookup-partial-{os.getuid()}"
                / str(self.provider_id))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class PartialCachingLookupProvider(_PartiallyCached, LookupFunctionProvider):
    """Looks keys up in ``cache`` first and loads the misses from the function
    (Flink's ``PartialCachingLookupProvider``)."""

    @classmethod
    def of(  # type: ignore[override]
        cls,
        fn: LookupFunction,
        cache: LookupCache,
        *,
        max_retries: int | None = None,
        retry_policy: RetryPolicy | None = None,
        retry_on_miss: MissRetry | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        changes: ChangeFeed | None = None,
        max_source_connections: int | None = DEFAULT_MAX_SOURCE_CONNECTIONS,
        adaptive_concurrency: bool = True,
        load_timeout: timedelta | float = DEFAULT_LOAD_TIMEOUT,
        share_across_workers: bool | None = None,
        validity: Validity | None = None,
    ) -> PartialCachingLookupProvider:
        """A provider caching the results of ``fn`` in ``cache`` (e.g. a
        [`cache.DefaultLookupCache`][]); other options as [`LookupFunctionProvider.of`][].

        ``changes`` (a [`ChangeFeed`][], e.g. [`PostgresChanges`][])
        drops each key from the cache when the feed says it changed, in every worker,
        with no cost to lookups; after the feed's connection was lost the cache is
        flushed (see docs/freshness.md).

        ``share_across_workers``: the Python workers of a host share a host tier behind
        their in-process caches (a [`cache.DefaultLookupCache`][]): a key one worker
        loaded is a hit for the others, and a key several miss at once is loaded once.
        None (the default): shared in Spark tasks; ``False``: each worker caches alone
        (see docs/partial-cache.md).

        Examples
        --------
        >>> from cache import DefaultLookupCache
        >>> class Squares(LookupFunction):
        ...     schema, key_columns = "n BIGINT, square BIGINT", ["n"]
        ...     def lookup(self, key):
        ...         return [(key[0], key[0] ** 2)]
        >>> provider = PartialCachingLookupProvider.of(
        ...     Squares(), DefaultLookupCache.new_builder().maximum_size(1000).build())
        >>> provider.kind, provider.key_columns
        ('PARTIAL', ('n',))
        """
        _check_share(share_across_workers)
        return _built(cls, fn, LookupFunction, max_retries, retry_policy, retry_on_miss,
                      batch_size, cache=cache, changes=changes,
                      max_source_connections=max_source_connections,
                      adaptive_concurrency=adaptive_concurrency,
                      load_timeout=load_timeout, share_across_workers=share_across_workers,
                      validity=validity)


def _check_share(share_across_workers: object) -> bool | None:
    """``share_across_workers`` as given, once checked to be True, False or None."""
    if share_across_workers is not None and not isinstance(share_across_workers, bool):
        raise ConfigError("share_across_workers must be True, False or None, got "
                          f"{share_across_workers!r}")
    return share_across_workers


def _async_options(capacity: object, timeout: object) -> dict[str, Any]:
    """An async provider's own options, checked: ``capacity`` lookups in flight, each
    bounded by ``timeout`` (a ``timedelta`` or seconds)."""
    return {"capacity": check_int(capacity, "capacity"),
            "timeout": as_timedelta(timeout, "timeout")}


@dataclass(frozen=True)
class AsyncLookupFunctionProvider(LookupProvider):
    """Looks keys up with an [`AsyncLookupFunction`][], at most ``capacity``
    in flight, each bounded by ``timeout`` (Flink's ``AsyncLookupFunctionProvider``)."""

    function: AsyncLookupFunction = field(kw_only=True)
    capacity: int = field(default=DEFAULT_CAPACITY, kw_only=True)
    timeout: timedelta = field(default=DEFAULT_ASYNC_TIMEOUT, kw_only=True)
    batch_size: int = field(default=DEFAULT_BATCH_SIZE, kw_only=True)

    def connection_wait(self) -> timedelta:
        return self.timeout

    @classmethod
    def of(
        cls,
        fn: AsyncLookupFunction,
        *,
        capacity: int = DEFAULT_CAPACITY,
        timeout: timedelta | float = DEFAULT_ASYNC_TIMEOUT,
        max_retries: int | None = None,
        retry_policy: RetryPolicy | None = None,
        retry_on_miss: MissRetry | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_source_connections: int | None = DEFAULT_MAX_SOURCE_CONNECTIONS,
        adaptive_concurrency: bool = True,
        validity: Validity | None = None,
    ) -> AsyncLookupFunctionProvider:
        """A provider awaiting ``fn.async_lookup`` per key (or ``async_lookup_batch``).

        Parameters
        ----------
        capacity
            Lookups in flight at once (Flink's ``lookup.async.capacity``... per worker).
        timeout
            Bound of one lookup (``timedelta`` or seconds); a timeout is a failed attempt
            and is retried like any error. Also how long a load waits for a source over
            its connection limit.
        max_source_connections
            As [`LookupFunctionProvider.of`][] (an async function of yours opens its own
            connections: only a busy source's refusals are waited for).
        validity
            As [`LookupFunctionProvider.of`][].
        """
        return _built(cls, fn, AsyncLookupFunction, max_retries, retry_policy, retry_on_miss,
                      batch_size, max_source_connections=max_source_connections,
                      adaptive_concurrency=adaptive_concurrency,
                      validity=validity, **_async_options(capacity, timeout))


@dataclass(frozen=True)
class PartialCachingAsyncLookupProvider(_PartiallyCached, AsyncLookupFunctionProvider):
    """An async lookup function behind a partial cache
    (Flink's ``PartialCachingAsyncLookupProvider``)."""

    @classmethod
    def of(  # type: ignore[override]
        cls,
        fn: AsyncLookupFunction,
        cache: LookupCache,
        *,
        capacity: int = DEFAULT_CAPACITY,
        timeout: timedelta | float = DEFAULT_ASYNC_TIMEOUT,
        max_retries: int | None = None,
        retry_policy: RetryPolicy | None = None,
        retry_on_miss: MissRetry | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        changes: ChangeFeed | None = None,
        max_source_connections: int | None = DEFAULT_MAX_SOURCE_CONNECTIONS,
        adaptive_concurrency: bool = True,
        share_across_workers: bool | None = None,
        validity: Validity | None = None,
    ) -> PartialCachingAsyncLookupProvider:
        """A provider caching the results of the async ``fn`` in ``cache``; options as
        [`AsyncLookupFunctionProvider.of`][], ``changes`` and ``share_across_workers``
        as [`PartialCachingLookupProvider.of`][]."""
        _check_share(share_across_workers)
        return _built(cls, fn, AsyncLookupFunction, max_retries, retry_policy, retry_on_miss,
                      batch_size, cache=cache, changes=changes,
                      max_source_connections=max_source_connections,
                      adaptive_concurrency=adaptive_concurrency, validity=validity,
                      share_across_workers=share_across_workers,
                      **_async_options(capacity, timeout))


@dataclass(frozen=True)
class FullCachingLookupProvider(LookupProvider):
    """Loads the whole dimension table from a split-based ``scan.Source`` into an
    in-memory snapshot, reloaded by a trigger (Flink's ``FullCachingLookupProvider``,
    taking any FLIP-27 source instead of only an InputFormat).

    Lookups never touch the source: a key absent from the snapshot has no rows (and is
    counted as a miss). A failed reload keeps serving the last good snapshot.

    In Spark's Python workers the snapshot is shared by every worker of the host through
    a snapshot store (see [`of`][], ``share_across_workers``).
    """

    source: Any = field(kw_only=True)
    reload_trigger: Any = field(kw_only=True)
    parallelism: int = field(default=4, kw_only=True)
    initial_load_timeout: timedelta = field(default=timedelta(minutes=5), kw_only=True)
    max_staleness: timedelta | None = field(default=None, kw_only=True)
    share_across_workers: bool | None = field(default=None, kw_only=True)
    snapshot_dir: str | None = field(default=None, kw_only=True)
    snapshot_name: str | None = field(default=None, kw_only=True)
    changes: ChangeFeed | None = field(default=None, kw_only=True)
    change_lookup: LookupFunction | None = field(default=None, kw_only=True)
    max_overlay_keys: int = field(default=DEFAULT_MAX_OVERLAY_KEYS, kw_only=True)

    @property
    def kind(self) -> str:
        return "FULL"

    def connection_wait(self) -> timedelta:
        return self.initial_load_timeout

    def shares_snapshots(self) -> bool:
        """Whether a runtime opened here uses the host snapshot store.

        Runs where the runtime opens. ``share_across_workers`` when it was given, else
        whether this process is a Spark Python worker running a task.
        """
        if self.share_across_workers is not None:
            return self.share_across_workers
        return TaskContext.get() is not None

    def snapshot_directory(self) -> Path:
        """The store directory of this table on this host:
        ``<snapshot_dir or tmp/spark-lookup-snapshots>/<snapshot_name or provider_id>``."""
        from cache.full.store import default_snapshot_root

        root = Path(self.snapshot_dir) if self.snapshot_dir else default_snapshot_root()
        return root / (self.snapshot_name or self.provider_id)

    def snapshot_fingerprint(self) -> str:
        """What a stored snapshot must be to serve this provider: a digest of the key
        columns, the schema and the validity columns (a named store outliving a change of
        any is replaced, never served)."""
        described: dict[str, Any] = {"key_columns": list(self.key_columns),
                                     "schema": self.schema.json()}
        if self.validity is not None:
            # A snapshot orders a key's versions by valid_from: another validity is
            # another order (left out without one, so older stores stay valid).
            described["validity"] = list(self.validity.columns)
        shape = json.dumps(described)
        return hashlib.sha256(shape.encode()).hexdigest()[:32]

    @classmethod
    def of(
        cls,
        source: Any,
        reload_trigger: Any,
        key_columns: Sequence[str] | str,
        *,
        parallelism: int = 4,
        initial_load_timeout: timedelta | float = timedelta(minutes=5),
        max_staleness: timedelta | float | None = None,
        max_retries: int | None = None,
        retry_policy: RetryPolicy | None = None,
        share_across_workers: bool | None = None,
        snapshot_dir: str | os.PathLike[str] | None = None,
        snapshot_name: str | None = None,
        changes: ChangeFeed | None = None,
        change_lookup: LookupFunction | None = None,
        max_overlay_keys: int = DEFAULT_MAX_OVERLAY_KEYS,
        max_source_connections: int | None = DEFAULT_MAX_SOURCE_CONNECTIONS,
        adaptive_concurrency: bool = True,
        validity: Validity | None = None,
    ) -> FullCachingLookupProvider:
        """A provider serving lookups from full snapshots of ``source``.

        Parameters
        ----------
        source
            A ``scan.Source`` declaring its ``schema`` (picklable; read on executors).
        reload_trigger
            A ``triggers.CacheReloadTrigger``; it loads once when the cache opens, then
            on its schedule.
        key_columns
            Columns of the source schema that lookups match on, in key order.
        parallelism
            Readers scanning the source's splits at once during a load.
        initial_load_timeout
            How long the first lookup waits for the first load.
        max_staleness
            When set, lookups fail with
            [`SnapshotUnavailableError`][spark_lookup.SnapshotUnavailableError] once the
            last good snapshot is older than this (reloads keep failing).
        max_retries, retry_policy
            Retries of a failed reload with backoff, before waiting for the next firing.
        share_across_workers
            Whether the Python processes of a host share one snapshot: ``None`` (the
            default) shares in Spark Python workers (where a task runs) and not
            elsewhere; ``True`` always; ``False`` never (one snapshot per process, loaded
            by each, Flink's model). Shared, a load writes the table once to the host's
            snapshot store as an Arrow file that every worker memory-maps; one worker per
            host loads per due reload (under a file lock) while the others keep serving
            the previous version and switch at their next lookup; a new worker starts
            from the stored snapshot without touching the source, and the trigger's
            schedule runs from the snapshot's load time. Giving ``snapshot_dir`` or
            ``snapshot_name`` implies ``True``.
        snapshot_dir
            The local directory (absolute, the same path on every executor) under which
            stores are kept; default ``<system temp dir>/spark-lookup-snapshots``. It
            must belong to the user running the workers and not be writable by others.
        snapshot_name
            Names this table's store (letters, digits, ``_ . -``). Default: the
            provider's ``provider_id``, so only copies of this provider (the workers of
            this application) share it, and a new application starts from a new store.
            A name shares it across applications too (a restarted query starts warm):
            give one only to providers that read the same table.
        changes
            A [`ChangeFeed`][] of the source's table (e.g. [`PostgresChanges`][]). With a
            keyed lookup of the source (``change_lookup``, or the source's own
            ``keyed_lookup(key_columns)``: a ``scan.SqlTableSource`` has one), each worker
            reads the changed keys by key (one batched query per batch of notifications)
            into an overlay served in front of the snapshot, so a change is seen
            milliseconds after its notification and the source reads only the changed keys.
            Without one (files, Delta, Iceberg), a change reloads the cache soon after (at
            most once per the feed's ``min_interval``; shared, one load for the host).
            "Everything changed" (a ``TRUNCATE``) and a lost connection reload it either
            way. The trigger still reloads on its schedule, which bounds staleness when no
            notification comes.
        change_lookup
            A [`LookupFunction`][] reading rows of the source's table by key,
            with the provider's schema and key columns (in order): what ``changes``
            reads changed keys with, for a source that has no keyed lookup of its own
            (or to replace it). Its rows must be those a load gives (the same filters,
            values and types): a row it does not find is a deleted key.
        max_overlay_keys
            Changed keys a worker's overlay holds before it asks for a full reload
            (default 100,000); it keeps serving meanwhile, and the reload empties it.
        max_source_connections
            Connections a load opens to the source at once per host (default 4; None:
            unlimited): its readers and its planning queue for the host's slots (the SQL
            and Redis sources; a file source opens none). A load waits for them, and for
            a source over its own connection limit, up to ``initial_load_timeout``.
        adaptive_concurrency
            Whether a reload's timeouts, transient errors and busy refusals lower the
            host's limit below ``max_source_connections`` for the next tries (default
            True; it rises again by one per 10 s).
        validity
            The source's version columns ([`Validity`][lookup.Validity]): a snapshot
            orders each key's versions by ``valid_from``, and a join picks the one valid
            at each row's ``as_of`` time (or now, without ``as_of``; see
            docs/point-in-time.md).

        Raises
        ------
        ConfigError
            For an invalid argument, or ``snapshot_dir``/``snapshot_name`` together with
            ``share_across_workers=False``.
        """
        from cache.full.store import check_store_name
        from scan.source import Source
        from triggers import CacheReloadTrigger

        check_instance(source, Source, "source", "a scan.Source")
        check_instance(reload_trigger, CacheReloadTrigger, "reload_trigger",
                       "a triggers.CacheReloadTrigger")
        if getattr(source, "schema", None) is None:
            raise ConfigError(f"{type(source).__name__} declares no schema; pass schema=...")
        schema = parse_schema(source.schema, f"{type(source).__name__}.schema")
        keys = check_key_columns(key_columns, schema.fieldNames(), "key_columns",
                                 "name the columns lookups match on", "the source schema")
        share, directory = _sharing(share_across_workers, snapshot_dir, snapshot_name)
        if changes is not None:
            _check_changes(changes, keys, f"the full cache of {type(source).__name__}")
            if change_lookup is None:
                change_lookup = _source_lookup(source, keys)
        elif change_lookup is not None:
            raise ConfigError("change_lookup reads the keys a change feed names: give "
                              "changes= too")
        if change_lookup is not None:
            _check_change_lookup(change_lookup, schema, keys)
        return cls(
            schema, tuple(keys), _retry_policy(max_retries, retry_policy), None, source=source,
            reload_trigger=reload_trigger,
            parallelism=check_int(parallelism, "parallelism"),
            initial_load_timeout=as_timedelta(initial_load_timeout, "initial_load_timeout"),
            max_staleness=(None if max_staleness is None
                           else as_timedelta(max_staleness, "max_staleness")),
            share_across_workers=share,
            snapshot_dir=directory,
            snapshot_name=None if snapshot_name is None else check_store_name(snapshot_name),
            changes=changes,
            change_lookup=change_lookup,
            max_overlay_keys=check_int(max_overlay_keys, "max_overlay_keys"),
            max_source_connections=_max_connections(max_source_connections),
            adaptive_concurrency=_adaptive(adaptive_concurrency),
            validity=_check_validity(validity, schema, keys, type(source).__name__),
        )


def _source_lookup(source: Any, key_columns: Sequence[str]) -> LookupFunction | None:
    """The keyed lookup a source offers (``keyed_lookup(key_columns)``: a SQL table's reads
    the same table, columns, filters, schema and bad-value mode), else None."""
    keyed_lookup = getattr(source, "keyed_lookup", None)
    return None if keyed_lookup is None else keyed_lookup(key_columns)


def _check_change_lookup(function: object, schema: StructType,
                         key_columns: Sequence[str]) -> None:
    """Refuse a change lookup whose rows would not be the snapshot's.

    Raises
    ------
    ConfigError
        For another kind of function, other key columns, or another schema.
    """
    check_instance(function, LookupFunction, "change_lookup", "a lookup.LookupFunction")
    assert isinstance(function, LookupFunction)
    keys = function.key_fields()
    if keys != list(key_columns):
        raise ConfigError(f"change_lookup {type(function).__name__} looks up by {keys}; the "
                          f"full cache by {list(key_columns)} (the same columns, in order)")
    theirs = [(f.name, f.dataType) for f in function.struct.fields]
    ours = [(f.name, f.dataType) for f in schema.fields]
    if theirs != ours:
        raise ConfigError(
            f"change_lookup {type(function).__name__} has the schema "
            f"{function.struct.simpleString()}; the full cache {schema.simpleString()}: its "
            "rows must be the source's, column for column")


def _sharing(share: object, directory: object, name: object) -> tuple[bool | None, str | None]:
    share = _check_share(share)
    path: str | None = None
    if directory is not None:
        if not isinstance(directory, (str, os.PathLike)):
            raise ConfigError(f"snapshot_dir must be a path, got {type(directory).__name__}")
        path = os.fspath(directory)
        if not isinstance(path, str) or not os.path.isabs(path):
            # Resolved on each executor: a relative path would mean its working directory.
            raise ConfigError(f"snapshot_dir must be an absolute path, got {directory!r}")
    if directory is not None or name is not None:
        if share is False:
            raise ConfigError(
                "snapshot_dir and snapshot_name configure the shared snapshot store; they "
                "contradict share_across_workers=False"
            )
        share = True
    return share, path
