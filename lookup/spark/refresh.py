"""Scheduled full reloads of a small table into Spark, served as a refreshed temp view.

[`ScheduledTableRefresh`][] reads a bounded ``scan.Source`` through its PySpark data
source ([`scan.register_data_source`][scan.spark.register_data_source]: splits planned
on the driver, read on the executors) whenever its ``triggers.CacheReloadTrigger``
fires, materializes the rows as a new *version*, and points a temp view at that version
with one catalog call. SQL and DataFrames that name the view after the swap read the
new version; plans resolved before it keep theirs. A reload that fails keeps the view on
the last good version.

The Spark behaviour this rests on (how classic and Connect DataFrames, streams and
caches resolve a replaced view): DESIGN.md, lookup/, "Refreshed temp views".
"""

from __future__ import annotations

import enum
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connectors.errors import should_retry
from lookup.retry import RetryPolicy
from lookup.spark.session import is_connect, is_session
from spark_lookup import errors
from spark_lookup.compat import PYTHON_DATA_SOURCE, SESSION_TAGS, require
from spark_lookup.errors import ConfigError, LookupLoadError, SnapshotUnavailableError
from spark_lookup.options import as_timedelta, check_callable, check_enum, check_instance, check_int
from spark_lookup.schema import parse_schema
from spark_lookup.spark_types import AnySparkSession
from triggers.scheduler import Scheduled, process_scheduler

if TYPE_CHECKING:
    from pyspark import StorageLevel
    from pyspark.sql import DataFrame
    from pyspark.sql import types as T

    from scan.source import Source
    from triggers import CacheReloadTrigger

__all__ = ["Materialization", "RefreshStatus", "ScheduledTableRefresh"]

log = logging.getLogger("lookup")

_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")

DEFAULT_LOCAL_MAX_BYTES = 8 * 1024 * 1024
"""Below Spark's default broadcast threshold (10 MB) and Arrow local-relation limit (48 MB)."""

_LOAD_STOP_WAIT = 10.0

_REFRESH_ALTERNATIVE = (
    "look the table up by key with a FullCachingLookupProvider and lookup_join (reloaded "
    "on the same triggers), or read it on the driver with scan.read_arrow and replace a temp "
    "view of spark.createDataFrame yourself")
"""Seconds ``close()`` waits for a load it interrupted to unwind."""

# One refresh per (session, view): a second would fight over the view and drop it on close.
_claims_lock = threading.Lock()
_claims: set[tuple[int, str]] = set()


class Materialization(enum.Enum):
    """How a loaded version is held by Spark."""

    AUTO = "AUTO"
    """Cache it, then turn it into a local relation if its cached size is at most
    ``local_max_bytes`` (the table is scanned once either way)."""
    LOCAL = "LOCAL"
    """Collect it to the driver as Arrow and serve a ``LocalRelation`` built from it:
    the rows live in the plan (no executor storage, never recomputed from the source)
    and Spark broadcasts it in joins. Only for tables that fit the driver."""
    CACHE = "CACHE"
    """``persist(storage_level)`` on the executors, materialized before the swap."""


@dataclass(frozen=True)
class RefreshStatus:
    """A consistent snapshot of a refresh's state ([`ScheduledTableRefresh.status`][]).

    Attributes
    ----------
    view_name : str
        The temp view.
    version : int
        The number of the version the view serves (the last good one); 0 before any.
    materialization : str or None
        ``"LOCAL"`` or ``"CACHE"``: how that version is held.
    rows : int or None
        Rows of that version.
    bytes : int or None
        Its size: Arrow bytes held by the driver (local) or Spark's in-memory columnar
        size of the cached table (cache).
    last_load_time : float or None
        Duration in milliseconds of the latest successful load (read, materialize, swap).
    last_success_at : datetime or None
        When the latest successful load swapped its version in, or a later reload found
        the source still at that version (UTC; staleness counts from here).
    num_loads : int
        Successful loads.
    reloads_skipped : int
        Reloads that read nothing: the source was still at the version served
        (``scan.Source.current_version``).
    num_load_failures : int
        Reloads that failed after all their retries (each kept the previous version).
    num_retries : int
        Load attempts that failed and were retried.
    last_error : str or None
        The error of the latest failed reload (kept after a later success, for logs).
    last_failure_at : datetime or None
        When that reload gave up (UTC).
    stale : bool
        Whether the view currently raises instead of serving rows because the last
        good version is older than ``max_staleness``.
    """

    view_name: str
    version: int = 0
    materialization: str | None = None
    rows: int | None = None
    bytes: int | None = None
    last_load_time: float | None = None
    last_success_at: datetime | None = None
    num_loads: int = 0
    reloads_skipped: int = 0
    num_load_failures: int = 0
    num_retries: int = 0
    last_error: str | None = None
    last_failure_at: datetime | None = None
    stale: bool = False


@dataclass(frozen=True)
class _Version:
    number: int
    df: DataFrame  # the DataFrame the view points at
    mode: Materialization  # LOCAL or CACHE
    rows: int
    bytes: int | None

    def release(self) -> None:
        """Drop the cached blocks of a CACHE version (a LOCAL one has none)."""
        if self.mode is Materialization.CACHE:
            self.df.unpersist(blocking=False)


class ScheduledTableRefresh:
    """A temp view over a small table, reloaded in full whenever a trigger fires.

    Lives on the driver. [`open`][] registers ``source`` as a PySpark data source,
    opens ``trigger`` with this object as its [`triggers.ReloadContext`][] and waits
    for the first load. Each firing runs one load on a background thread of this
    object: the executors read the source's splits, the rows are materialized (see
    [`Materialization`][]), and ``createOrReplaceTempView`` points the view at the
    new version. Queries resolved before the swap keep the version they resolved.

    A load that fails is retried with ``retry_policy``'s backoff; if every attempt
    fails, the view keeps its version, the failure is counted and logged (logger
    ``lookup``), and the next firing tries again. With ``max_staleness``, once the
    served version is older than that the view is replaced by one that raises an error
    naming the view, until a load succeeds.

    Thread-safe: firings arrive on the trigger's scheduler thread, explicit reloads and
    [`status`][] may come from any thread while queries on the view run on others.
    Loads never overlap: a reload asked for while one runs is queued once (later asks
    join the queued one), so its future reports a load that started after the ask.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The session whose catalog holds the view: classic or Spark Connect.
    source : scan.Source
        A bounded source declaring its schema; picklable (read on the executors).
    trigger : triggers.CacheReloadTrigger
        When to reload. Opened by [`open`][], closed by [`close`][]; the triggers
        of this library load once when opened, then on their schedule.
    view_name : str
        The temp view (a plain identifier). This object owns it while open.
    materialization : Materialization or str
        ``AUTO`` (default), ``LOCAL`` or ``CACHE``.
    local_max_bytes : int
        ``AUTO`` serves a version as a local relation up to this cached size (8 MiB).
    storage_level : pyspark.StorageLevel, optional
        Of cached versions (default ``MEMORY_AND_DISK_DESER``, what ``cache()`` uses).
    retry_policy : RetryPolicy, optional
        Retries of a failed load (default: 3 retries, exponential backoff from 100 ms).
    max_staleness : timedelta or float, optional
        When set, the view raises once its version finished loading longer ago than
        this. Keep it above the trigger's interval plus a load.
    unpersist_delay : timedelta or float
        How long a replaced cached version stays persisted after the swap, for queries
        that resolved it before (default 60 s; 0: right after the swap). A query that
        outlives it recomputes the missing partitions from the live source.
    initial_load_timeout : timedelta or float
        How long [`open`][] waits for the first load (default 5 min).
    clock : callable
        Wall-clock seconds since the epoch (``time.time``), for the status timestamps
        and ``current_processing_time``; timers use real time (the process scheduler).

    Raises
    ------
    ConfigError
        (a ``ValueError``) naming the argument that is invalid; on PySpark 3.5, which has
        neither Python data sources nor a classic session's ``addTag``.

    Notes
    -----
    [`close`][] stops the trigger, interrupts a load in progress (its Spark operations
    carry a session tag of their own, ``SparkSession.addTag``), drops the view and
    unpersists every version, unless
    ``keep_view=True``: then the last version stays as a plain temp view (release it
    with ``spark.catalog.dropTempView``, which also uncaches it).

    Examples
    --------
    >>> from datetime import timedelta
    >>> from scan import CollectionSource
    >>> from triggers import PeriodicCacheReloadTrigger
    >>> source = CollectionSource([(1, "nl", "Netherlands"), (2, "fr", "France")],
    ...                           schema="id BIGINT, code STRING, name STRING")
    >>> refresh = ScheduledTableRefresh(
    ...     spark, source, PeriodicCacheReloadTrigger(timedelta(hours=1)), "countries")
    >>> with refresh:  # opens: the first load is done when the block starts
    ...     spark.sql("SELECT name FROM countries WHERE code = 'fr'").first()["name"]
    ...     refresh.trigger_reload().result(timeout=120).version
    'France'
    2
    >>> spark.catalog.tableExists("countries")  # closed: the view is dropped
    False
    """

    def __init__(
        self,
        spark: AnySparkSession,
        source: Source[Any, Any],
        trigger: CacheReloadTrigger,
        view_name: str,
        *,
        materialization: Materialization | str = Materialization.AUTO,
        local_max_bytes: int = DEFAULT_LOCAL_MAX_BYTES,
        storage_level: StorageLevel | None = None,
        retry_policy: RetryPolicy | None = None,
        max_staleness: timedelta | float | None = None,
        unpersist_delay: timedelta | float = timedelta(seconds=60),
        initial_load_timeout: timedelta | float = timedelta(minutes=5),
        clock: Callable[[], float] = time.time,
    ) -> None:
        from pyspark import StorageLevel

        from scan.source import check_bounded
        from triggers import CacheReloadTrigger

        if not is_session(spark):
            raise ConfigError(f"spark must be a SparkSession (classic or Spark Connect), got "
                              f"{type(spark).__name__}")
        for capability in (PYTHON_DATA_SOURCE, SESSION_TAGS):
            require(capability, "ScheduledTableRefresh", _REFRESH_ALTERNATIVE,
                    connect=is_connect(spark))
        check_bounded(source, "a refreshed view")
        if getattr(source, "schema", None) is None:
            raise ConfigError(f"source {type(source).__name__} declares no schema")
        if not isinstance(trigger, CacheReloadTrigger):
            raise ConfigError(
                f"trigger must be a triggers.CacheReloadTrigger, got {type(trigger).__name__}"
            )
        if not isinstance(view_name, str) or not _VIEW_NAME.fullmatch(view_name):
            raise ConfigError(
                f"view_name must be an identifier (a letter or _, then letters, digits or _; "
                f"at most 100 characters), got {view_name!r}"
            )
        check_int(local_max_bytes, "local_max_bytes", min_value=0)
        if storage_level is None:
            storage_level = StorageLevel.MEMORY_AND_DISK_DESER
        check_instance(storage_level, StorageLevel, "storage_level", "a pyspark.StorageLevel")
        if retry_policy is None:
            retry_policy = RetryPolicy()
        check_instance(retry_policy, RetryPolicy, "retry_policy")
        check_callable(clock, "clock", "a callable returning seconds")
        self._spark = spark
        self._source = source
        self._struct = parse_schema(source.schema, f"{type(source).__name__}.schema")
        self._trigger = trigger
        self._view = view_name
        self._mode = check_enum(materialization, "materialization", Materialization)
        self._local_max_bytes = local_max_bytes
        self._storage_level = storage_level
        self._retry = retry_policy
        self._max_staleness = (
            None if max_staleness is None else as_timedelta(max_staleness, "max_staleness")
        )
        self._unpersist_delay = as_timedelta(unpersist_delay, "unpersist_delay", allow_zero=True)
        self._initial_load_timeout = as_timedelta(initial_load_timeout, "initial_load_timeout")
        self._clock = clock
        tag = uuid.uuid4().hex[:12]
        self._format = f"spark_lookup_refresh_{view_name}_{tag}"
        # Marks the Spark operations of this refresh's loads, so close() interrupts them.
        self._tag = f"spark-lookup-refresh-{view_name}-{tag}"

        # Guards everything below; Spark calls made under it are catalog calls only.
        self._lock = threading.Lock()
        self._state = "new"  # -> "open" -> "closed"
        self._stop = threading.Event()  # set by close(); wakes a retry backoff
        self._trigger_opened = False  # close() must not close a trigger open() did not open
        self._executor: ThreadPoolExecutor | None = None
        self._queued: Future[RefreshStatus] | None = None  # the latest load submitted
        self._first: Future[RefreshStatus] = Future()
        self._current: _Version | None = None
        # The repr of the source's version the current version was read at (None: unknown).
        self._source_version: str | None = None
        self._retiring: dict[int, tuple[_Version, Scheduled]] = {}
        self._stale_timer: Scheduled | None = None
        self._status = RefreshStatus(view_name=view_name)

    # --- public API

    @property
    def view_name(self) -> str:
        """The temp view this refresh serves."""
        return self._view

    @property
    def is_open(self) -> bool:
        """Whether the refresh is between [`open`][] and [`close`][]."""
        return self._state == "open"

    def open(self, *, wait: bool = True) -> ScheduledTableRefresh:
        """Register the data source, start the trigger and (by default) wait for the
        first load; on the driver. Returns ``self``.

        Raises
        ------
        LookupLoadError
            The first load failed after its retries (the refresh is closed again).
        SnapshotUnavailableError
            The first load did not finish within ``initial_load_timeout``.
        ConfigError
            Another open refresh serves this view in this session.
        RuntimeError
            Opened twice, or after [`close`][].
        """
        from scan.spark import register_data_source

        key = (id(self._spark), self._view.lower())
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"{self!r} was already opened; build a new refresh")
            with _claims_lock:
                if key in _claims:
                    raise ConfigError(f"temp view {self._view!r} is already served by another open "
                                      "ScheduledTableRefresh of this session")
                _claims.add(key)
            self._state = "open"
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="lookup-view-refresh")
        try:
            register_data_source(self._spark, self._format, self._source)
            # Until the first load swaps in, a query on the view says why it has no rows
            # (not Spark's bare TABLE_OR_VIEW_NOT_FOUND, nor an empty table).
            self._placeholder("has no data yet: its first load is still running (open() "
                              "waits for it unless wait=False)")
            self._trigger.open(self)
            self._trigger_opened = True
            if wait:
                self._first.result(timeout=self._initial_load_timeout.total_seconds())
        except FutureTimeoutError as exc:  # the builtin TimeoutError from Python 3.11
            self.close()
            raise SnapshotUnavailableError(
                f"the first load of temp view {self._view!r} did not finish within "
                f"{self._initial_load_timeout}"
            ) from exc
        except BaseException:
            self.close()
            raise
        return self

    def close(self, *, keep_view: bool = False) -> None:
        """Stop reloading; on the driver. Idempotent.

        Stops the trigger, interrupts the Spark operations of a load in progress and waits
        a bounded time for it to unwind (a load never swaps after ``close``). Then drops
        the view and unpersists every version, including replaced ones still within
        ``unpersist_delay`` (queries still running on those may recompute partitions
        from the source). With ``keep_view=True`` the current version stays as a plain
        temp view, persisted if cached, no longer refreshed.

        Dropping the view waits for a ``CACHE``/``AUTO`` load that is still planning its
        splits (DESIGN.md, lookup/, "Refreshed temp views"), however long that takes.
        """
        with self._lock:
            if self._state == "closed":
                return
            was_open = self._state == "open"
            self._state = "closed"
            self._stop.set()
            last = self._queued
            executor, self._executor = self._executor, None
        if was_open:
            try:
                # First the Spark operations of a load in progress, so the trigger's close
                # (which waits for that load) returns promptly.
                self._spark.interruptTag(self._tag)
                if self._trigger_opened:
                    self._trigger.close()
            finally:
                if executor is not None:
                    executor.shutdown(wait=False, cancel_futures=True)
                if last is not None:
                    # Loads run in submission order and the queued ones were just
                    # cancelled: the latest one ends when the running one does.
                    wait_futures([last], timeout=_LOAD_STOP_WAIT)
                with _claims_lock:
                    _claims.discard((id(self._spark), self._view.lower()))
        with self._lock:
            current = self._current
            retiring = list(self._retiring.values())
            self._retiring.clear()
            if self._stale_timer is not None:
                self._stale_timer.cancel()
                self._stale_timer = None
            if not keep_view:
                self._current = None
        for version, timer in retiring:
            timer.cancel()
            version.release()
        if was_open and (not keep_view or current is None):  # no version: nothing to keep
            self._spark.catalog.dropTempView(self._view)
            if current is not None:
                current.release()
        _settle(self._first, error=RuntimeError(f"{self!r} closed before its first load"))
        log.info("refresh of temp view %r closed (view %s)", self._view,
                 "kept" if keep_view else "dropped")

    def status(self) -> RefreshStatus:
        """The current [`RefreshStatus`][] (a consistent snapshot)."""
        with self._lock:
            return self._status

    def table(self) -> DataFrame:
        """The view as a DataFrame of the refresh's session (resolved now on a classic
        session, at each action on Spark Connect).

        On a classic session, use it inside ``foreachBatch`` to join each micro-batch
        with the version served when that micro-batch runs (``batch_df.sparkSession``
        would resolve the view in the query's cloned session, as of the query's start).
        On Connect a ``foreachBatch`` function runs on the server and cannot reach it.

        Raises
        ------
        RuntimeError
            If the refresh is not open.
        SnapshotUnavailableError
            Before its first version is served.
        """
        if self._state != "open":
            raise RuntimeError(f"{self!r} is not open")
        if self._current is None:
            # On a classic session the DataFrame would stay bound to the placeholder.
            raise SnapshotUnavailableError(
                f"temp view {self._view!r} has no version yet: its first load has not "
                "finished (or failed; see status())")
        return self._spark.table(self._view)

    # --- triggers.ReloadContext

    def current_processing_time(self) -> int:
        """Epoch milliseconds, from ``clock``."""
        return int(self._clock() * 1000)

    def trigger_reload(self) -> Future[RefreshStatus]:
        """Reload now (also what the trigger calls); returns promptly.

        The future completes with the [`RefreshStatus`][] after the swap, or fails
        with [`LookupLoadError`][] when every attempt failed
        (the view kept its version), or with ``RuntimeError`` once closed.
        """
        with self._lock:
            executor = self._executor
            if self._state != "open" or executor is None:
                failed: Future[RefreshStatus] = Future()
                failed.set_exception(RuntimeError(f"{self!r} is not open"))
                return failed
            queued = self._queued
            if queued is not None and not queued.running() and not queued.done():
                return queued  # starts after this call: it sees what the caller wrote
            future = executor.submit(self._run_load)
            self._queued = future
            return future

    # --- loading (on the loader thread)

    def _run_load(self) -> RefreshStatus:
        try:
            status = self._load_with_retries()
        except BaseException as exc:
            with self._lock:
                never_loaded = self._state == "open" and self._current is None
            if never_loaded and not self._first.done():
                self._placeholder(f"has no data: its first load failed ({_summary(exc)}); "
                                  "the next reload of its trigger tries again")
            _settle(self._first, error=exc)
            raise
        _settle(self._first, result=status)
        return status

    def _load_with_retries(self) -> RefreshStatus:
        # Tags are per thread: this one marks what this loader thread starts, until removed.
        self._spark.addTag(self._tag)
        try:
            return self._load_tagged()
        finally:
            self._spark.removeTag(self._tag)

    def _load_tagged(self) -> RefreshStatus:
        def count_retry() -> None:
            with self._lock:
                self._update(num_retries=self._status.num_retries + 1)

        tries = self._retry.retries(f"reload of temp view {self._view!r}",
                                    on_retry=count_retry, wait=self._stop.wait,
                                    retryable=_retryable)
        for _ in tries:
            if self._stop.is_set():
                break
            started = time.perf_counter()
            try:
                # Read before the scan plans (see Source.current_version).
                found = self._source.current_version()
                source_version = None if found is None else repr(found)
                skipped = self._skip_unchanged(source_version)
                if skipped is not None:
                    return skipped
                version = self._materialize()
            except Exception as exc:
                if not tries.failed(exc):
                    break  # a missing table, a bad value under FAILFAST: reported at once
                continue
            return self._swap(version, (time.perf_counter() - started) * 1000, source_version)
        error = tries.error
        if error is None or self._stop.is_set():
            raise RuntimeError(f"{self!r} closed during a reload")
        with self._lock:
            self._update(num_load_failures=self._status.num_load_failures + 1,
                         last_error=_summary(error), last_failure_at=self._now())
            served = self._status.version
        log.error("reload of temp view %r failed after %d attempt(s): %s; %s", self._view,
                  tries.tries, _summary(error),
                  f"still serving version {served}" if served else "no version yet")
        raise LookupLoadError(f"reload of temp view {self._view!r} failed after {tries.tries} "
                              f"attempt(s): {_summary(error)}") from error

    def _materialize(self) -> _Version:
        """Read the source through its data source (executors read the splits) and hold
        the rows as the next version; nothing is visible to queries yet."""
        df = self._spark.read.format(self._format).load()
        if self._mode is Materialization.LOCAL:
            return self._local(df.toArrow())
        df = df.persist(self._storage_level)
        try:
            rows = df.count()  # builds every cached partition before the swap
            size = _cached_size(self._spark, df)
            if self._mode is Materialization.AUTO and size is not None and (
                size <= self._local_max_bytes
            ):
                version = self._local(df.toArrow())
                df.unpersist(blocking=False)  # it only staged the read
                return version
        except BaseException:
            df.unpersist(blocking=False)
            raise
        return _Version(0, df, Materialization.CACHE, rows, size)

    def _local(self, table: pa.Table) -> _Version:
        # The given schema keeps the source's exact types and nullability.
        df = self._spark.createDataFrame(table, schema=self._struct)
        return _Version(0, df, Materialization.LOCAL, table.num_rows, table.nbytes)

    def _skip_unchanged(self, source_version: str | None) -> RefreshStatus | None:
        """The status after skipping this reload when the source is still at the
        version served (the view keeps it; staleness counts from now); else None."""
        with self._lock:
            if (source_version is None or source_version != self._source_version
                    or self._current is None or self._state != "open"):
                return None
            self._update(reloads_skipped=self._status.reloads_skipped + 1,
                         last_success_at=self._now())
            self._arm_staleness()
            status = self._status
        log.info("temp view %r: source still at version %s; reload skipped", self._view,
                 source_version)
        return status

    def _swap(self, version: _Version, elapsed_ms: float, source_version: str | None = None
              ) -> RefreshStatus:
        with self._lock:
            if self._state != "open":
                version.release()
                raise RuntimeError(f"{self!r} closed during a reload")
            self._source_version = source_version
            # Numbered here, so versions count successes only.
            version = replace(version, number=self._status.version + 1)
            # One catalog call: a query resolves either the old or the new version.
            version.df.createOrReplaceTempView(self._view)
            previous, self._current = self._current, version
            self._update(version=version.number, materialization=version.mode.value,
                         rows=version.rows, bytes=version.bytes, last_load_time=elapsed_ms,
                         last_success_at=self._now(), num_loads=self._status.num_loads + 1,
                         stale=False)
            if previous is not None:
                self._retire(previous)
            self._arm_staleness()
            status = self._status
        log.info("temp view %r now serves version %d: %d rows, %s bytes, %s, loaded in %.0f ms",
                 self._view, version.number, version.rows, version.bytes, version.mode.value,
                 elapsed_ms)
        return status

    # --- retiring versions and staleness (under self._lock)

    def _retire(self, version: _Version) -> None:
        if version.mode is not Materialization.CACHE:
            return  # a local version lives as long as the plans that hold it
        delay = self._unpersist_delay.total_seconds()
        if delay == 0:
            version.release()
            return
        timer = process_scheduler().call_later(
            delay, partial(self._release_retired, version.number),
            f"unpersist version {version.number} of view {self._view}")
        self._retiring[version.number] = (version, timer)

    def _release_retired(self, number: int) -> None:
        with self._lock:
            entry = self._retiring.pop(number, None)
        if entry is not None:
            entry[0].release()
            log.debug("temp view %r: unpersisted replaced version %d", self._view, number)

    def _arm_staleness(self) -> None:
        if self._stale_timer is not None:
            self._stale_timer.cancel()
            self._stale_timer = None
        if self._max_staleness is None or self._current is None:
            return
        self._stale_timer = process_scheduler().call_later(
            self._max_staleness, partial(self._expire, self._current.number),
            f"staleness of view {self._view}")

    def _expire(self, number: int) -> None:
        """The served version outlived ``max_staleness``: make the view raise."""
        with self._lock:
            current = self._current
            if self._state != "open" or current is None or current.number != number:
                return  # a newer version was swapped in meanwhile
            status = self._status
            message = self._placeholder(
                f"is stale: version {number} finished loading at {status.last_success_at}, "
                f"more than max_staleness={self._max_staleness} ago; last reload error: "
                f"{status.last_error}")
            self._current = None
            self._retire(current)
            self._update(stale=True)
        log.error("%s; queries on the view fail until a reload succeeds", message)

    # --- helpers

    def _placeholder(self, why: str) -> str:
        """Serve, as the view, a frame of its schema whose every query fails with ``why``;
        returns the message."""
        message = f"spark-lookup: temp view {self._view!r} {why}"
        _stale_frame(self._spark, self._struct, message).createOrReplaceTempView(self._view)
        return message

    def _update(self, **changes: Any) -> None:
        self._status = replace(self._status, **changes)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), timezone.utc)

    def __enter__(self) -> ScheduledTableRefresh:
        if self._state != "open":
            self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ScheduledTableRefresh(view_name={self._view!r}, "
            f"source={type(self._source).__name__}, trigger={self._trigger!r}, "
            f"materialization={self._mode.value})"
        )


def _cached_size(spark: AnySparkSession, df: DataFrame) -> int | None:
    """Spark's size of a materialized cached DataFrame (what its broadcast decision
    reads), or None if Spark does not say."""
    # PySpark has no API for a cached relation's statistics on either kind of session
    # (classic would need the JVM): EXPLAIN COST prints them, to three significant
    # digits ("15.5 KiB"); tests/lookup/spark/test_refresh_formats.py pins the format on both.
    # A fresh query, as a plan's statistics are computed once (maybe before the cache
    # was built), over a projection: a classic session passes df to spark.sql as a temp
    # view that it drops afterwards, and dropping a view of df's own plan uncaches it.
    probe = df.selectExpr("*", f"1 AS `{_PROBE_COLUMN}`")
    try:
        row = spark.sql("EXPLAIN COST SELECT * FROM {df}", df=probe).first()
        plan = None if row is None else str(row[0])
    except Exception:  # the size is informative, never required
        log.debug("no cached size for %r", df, exc_info=True)
        return None
    return None if plan is None else _parse_size(plan)


_PROBE_COLUMN = "__spark_lookup_size_probe"
_SIZE = re.compile(r"InMemoryRelation [^\n]*?sizeInBytes=([0-9.]+(?:E[0-9]+)?)\s*([KMGTPE]i)?B")
_UNITS: dict[str | None, int] = {None: 0, "Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}


def _parse_size(plan: str) -> int | None:
    """The size of the cached relation in an ``EXPLAIN COST`` text, in bytes."""
    match = _SIZE.search(plan)
    if match is None:
        return None
    number, unit = match.groups()
    return round(float(number) * float(1024 ** _UNITS[unit]))


def _stale_frame(spark: AnySparkSession, struct: T.StructType, message: str) -> DataFrame:
    """A DataFrame of ``struct``'s schema whose every evaluation raises ``message``.

    The error sits both in a filter (``count(*)`` prunes every column) and in every
    column (a filter on a typed-null literal column would be folded away unevaluated).
    """
    from pyspark.sql import functions as F

    error = F.raise_error(F.lit(message))
    return spark.range(1).where(error.isNull()).select(
        *[error.cast(field.dataType).alias(field.name) for field in struct.fields]
    )


def _settle(future: Future[RefreshStatus], result: RefreshStatus | None = None,
            error: BaseException | None = None) -> None:
    """Complete ``future`` unless another thread already did."""
    try:
        if error is not None:
            future.set_exception(error)
        elif result is not None:
            future.set_result(result)
    except InvalidStateError:
        pass


def _retryable(exc: BaseException) -> bool:
    """Whether a failed load is worth another attempt: as `should_retry` says,
    of the source's own error when it failed in a Python worker."""
    line = _worker_error_line(exc)
    module, _, name = ("" if line is None else line.partition(":")[0]).rpartition(".")
    found = getattr(errors, name, None) if module == errors.__name__ else None
    if isinstance(found, type) and issubclass(found, errors.SparkLookupError):
        return issubclass(found, errors.TransientConnectorError)
    return should_retry(exc)


def _worker_error_line(exc: BaseException) -> str | None:
    """The ``module.Class: message`` line of the Python exception that failed ``exc``'s
    Spark operation in a Python worker (the data source planning or reading), or None."""
    from pyspark.errors import PySparkException

    if not isinstance(exc, PySparkException):
        return None
    # PySpark has no structured field for the worker's exception class: it is in the
    # worker's traceback, text. A classic session gives the traceback as a message
    # parameter ("traceback" of PYTHON_EXCEPTION, "msg" of PYTHON_DATA_SOURCE_ERROR); a
    # Connect PythonException carries no parameters, only the message.
    # tests/lookup/spark/test_refresh_formats.py pins both.
    parameters = exc.getMessageParameters() or {}
    text = parameters.get("traceback") or parameters.get("msg") or str(exc)
    _, header, tail = text.rpartition("Traceback (most recent call last):")
    if not header:
        return None
    # Python's format: indented frames, then the exception's first unindented line.
    line = next((line for line in tail.splitlines() if line and not line[0].isspace()), "")
    return line.strip() if _EXCEPTION_LINE.match(line) else None


def _summary(error: BaseException | None) -> str:
    """One line for an error: its first line, then the Python worker's exception (see
    `_worker_error_line`) or else its last line naming an error."""
    if error is None:
        return "no error"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = lines[0].removesuffix("Traceback (most recent call last):").strip() if lines else ""
    summary = f"{type(error).__name__}: {first}"
    cause = _worker_error_line(error)
    if cause is None:  # not a worker's: the last line naming an error, if any
        cause = next((line for line in reversed(lines[1:]) if _CAUSE.match(line)), None)
    if cause is not None:
        summary = f"{summary} ... {cause}"
    return summary[:1000]


_CAUSE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)\b.*:")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(:|$)")
