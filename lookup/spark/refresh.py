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

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeoutError
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from connectors.errors import should_retry
from lookup.retry import RetryPolicy
from lookup.spark.load_queue import LoadQueue
from lookup.spark.refresh_status import RefreshStatus, StatusBook
from lookup.spark.session import is_connect, is_session
from lookup.spark.view_versions import Materialization, Version, ViewVersions
from spark_lookup import errors
from spark_lookup.compat import PYTHON_DATA_SOURCE, SESSION_TAGS, require
from spark_lookup.errors import ConfigError, LookupLoadError, SnapshotUnavailableError
from spark_lookup.options import as_timedelta, check_callable, check_enum, check_instance, check_int
from spark_lookup.schema import parse_schema
from spark_lookup.spark_types import AnySparkSession

if TYPE_CHECKING:
    from pyspark import StorageLevel
    from pyspark.sql import DataFrame

    from scan.source import Source
    from triggers import CacheReloadTrigger

__all__ = ["Materialization", "RefreshStatus", "ScheduledTableRefresh"]

log = logging.getLogger("lookup")

_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")

DEFAULT_LOCAL_MAX_BYTES = 8 * 1024 * 1024
"""Below Spark's default broadcast threshold (10 MB) and Arrow local-relation limit (48 MB)."""

_LOAD_STOP_WAIT = 10.0
"""Seconds ``close()`` waits for a load it interrupted to unwind."""

_REFRESH_ALTERNATIVE = (
    "look the table up by key with a FullCachingLookupProvider and lookup_join (reloaded "
    "on the same triggers), or read it on the driver with scan.read_arrow and replace a temp "
    "view of spark.createDataFrame yourself")

# One refresh per (session, view): a second would fight over the view and drop it on close.
_claims_lock = threading.Lock()
_claims: set[tuple[int, str]] = set()


def _claim(spark: AnySparkSession, view: str) -> None:
    """Reserve ``view`` of ``spark`` for one open refresh."""
    with _claims_lock:
        if (id(spark), view.lower()) in _claims:
            raise ConfigError(f"temp view {view!r} is already served by another open "
                              "ScheduledTableRefresh of this session")
        _claims.add((id(spark), view.lower()))


def _unclaim(spark: AnySparkSession, view: str) -> None:
    with _claims_lock:
        _claims.discard((id(spark), view.lower()))


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
        _check_arguments(spark, source, trigger, view_name, local_max_bytes, storage_level,
                         retry_policy, clock)
        self._spark = spark
        self._source = source
        struct = parse_schema(source.schema, f"{type(source).__name__}.schema")
        self._trigger = trigger
        self._view = view_name
        mode = check_enum(materialization, "materialization", Materialization)
        self._retry = RetryPolicy() if retry_policy is None else retry_policy
        staleness = None if max_staleness is None else as_timedelta(max_staleness,
                                                                     "max_staleness")
        unpersist_after = as_timedelta(unpersist_delay, "unpersist_delay", allow_zero=True)
        self._initial_load_timeout = as_timedelta(initial_load_timeout, "initial_load_timeout")
        self._clock = clock
        tag = uuid.uuid4().hex[:12]
        self._format = f"spark_lookup_refresh_{view_name}_{tag}"
        # Marks the Spark operations of this refresh's loads, so close() interrupts them.
        self._tag = f"spark-lookup-refresh-{view_name}-{tag}"

        # Guards the state and each change of what the view serves; Spark calls made under
        # it are catalog calls only.
        self._lock = threading.Lock()
        self._state = "new"  # -> "open" -> "closed"
        self._stop = threading.Event()  # set by close(); wakes a retry backoff
        self._trigger_opened = False  # close() must not close a trigger open() did not open
        self._loads: LoadQueue[RefreshStatus] = LoadQueue("lookup-view-refresh")
        self._first: Future[RefreshStatus] = Future()
        self._versions = ViewVersions(
            spark, view_name, self._format, struct, mode=mode, local_max_bytes=local_max_bytes,
            storage_level=storage_level, unpersist_delay=unpersist_after)
        self._book = StatusBook(view_name, clock=clock, max_staleness=staleness,
                                expire=self._expire)

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

        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"{self!r} was already opened; build a new refresh")
            _claim(self._spark, self._view)
            self._state = "open"
            self._loads.start()
        try:
            register_data_source(self._spark, self._format, self._source)
            # Until the first load swaps in, a query on the view says why it has no rows
            # (not Spark's bare TABLE_OR_VIEW_NOT_FOUND, nor an empty table).
            self._versions.placeholder("has no data yet: its first load is still running "
                                       "(open() waits for it unless wait=False)")
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
        if was_open:
            try:
                # First the Spark operations of a load in progress, so the trigger's close
                # (which waits for that load) returns promptly.
                self._spark.interruptTag(self._tag)
                if self._trigger_opened:
                    self._trigger.close()
            finally:
                self._loads.stop(timeout=_LOAD_STOP_WAIT)
                _unclaim(self._spark, self._view)
        # Nothing serves or arms once closed; unpersisting can wait on Spark, not under the lock.
        self._book.close()
        current = self._versions.close(keep_current=keep_view)
        if was_open and (not keep_view or current is None):  # no version: nothing to keep
            self._spark.catalog.dropTempView(self._view)
            if current is not None:
                current.release()
        _settle(self._first, error=RuntimeError(f"{self!r} closed before its first load"))
        log.info("refresh of temp view %r closed (view %s)", self._view,
                 "kept" if keep_view else "dropped")

    def status(self) -> RefreshStatus:
        """The current [`RefreshStatus`][] (a consistent snapshot)."""
        return self._book.status

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
        if self._versions.current is None:
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
            future = self._loads.submit(self._run_load) if self._state == "open" else None
        if future is None:
            future = Future()
            future.set_exception(RuntimeError(f"{self!r} is not open"))
        return future

    # --- loading (on the loader thread)

    def _run_load(self) -> RefreshStatus:
        try:
            status = self._load_with_retries()
        except BaseException as exc:
            with self._lock:
                never_loaded = self._state == "open" and self._versions.current is None
            if never_loaded and not self._first.done():
                self._versions.placeholder(f"has no data: its first load failed "
                                           f"({_summary(exc)}); the next reload of its "
                                           "trigger tries again")
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
        tries = self._retry.retries(f"reload of temp view {self._view!r}",
                                    on_retry=self._book.retried, wait=self._stop.wait,
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
                version = self._versions.materialize(source_version)
            except Exception as exc:
                if not tries.failed(exc):
                    break  # a missing table, a bad value under FAILFAST: reported at once
                continue
            return self._swap(version, (time.perf_counter() - started) * 1000)
        error = tries.error
        if error is None or self._stop.is_set():
            raise RuntimeError(f"{self!r} closed during a reload")
        served = self._book.failed(_summary(error))
        log.error("reload of temp view %r failed after %d attempt(s): %s; %s", self._view,
                  tries.tries, _summary(error),
                  f"still serving version {served}" if served else "no version yet")
        raise LookupLoadError(f"reload of temp view {self._view!r} failed after {tries.tries} "
                              f"attempt(s): {_summary(error)}") from error

    def _skip_unchanged(self, source_version: str | None) -> RefreshStatus | None:
        """The status after skipping this reload when the source is still at the
        version served (the view keeps it; staleness counts from now); else None."""
        with self._lock:
            current = self._versions.current
            if (source_version is None or current is None
                    or source_version != current.source_version or self._state != "open"):
                return None
            status = self._book.skipped(current.number)
        log.info("temp view %r: source still at version %s; reload skipped", self._view,
                 source_version)
        return status

    def _swap(self, version: Version, elapsed_ms: float) -> RefreshStatus:
        with self._lock:
            if self._state != "open":
                version.release()
                raise RuntimeError(f"{self!r} closed during a reload")
            # Numbered here, so versions count successes only.
            version = self._versions.serve(version, self._book.status.version + 1)
            status = self._book.loaded(version, elapsed_ms)
        log.info("temp view %r now serves version %d: %d rows, %s bytes, %s, loaded in %.0f ms",
                 self._view, version.number, version.rows, version.bytes, version.mode.value,
                 elapsed_ms)
        return status

    # --- staleness

    def _expire(self, number: int) -> None:
        """The served version outlived ``max_staleness``: make the view raise."""
        with self._lock:
            current = self._versions.current
            if self._state != "open" or current is None or current.number != number:
                return  # a newer version was swapped in meanwhile
            status = self._book.status
            message = self._versions.placeholder(
                f"is stale: version {number} finished loading at {status.last_success_at}, "
                f"more than max_staleness={self._book.max_staleness} ago; last reload error: "
                f"{status.last_error}")
            self._book.stale()
        log.error("%s; queries on the view fail until a reload succeeds", message)

    # --- helpers

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
            f"materialization={self._versions.mode.value})"
        )


def _check_arguments(spark: AnySparkSession, source: Source[Any, Any],
                     trigger: CacheReloadTrigger, view_name: str, local_max_bytes: int,
                     storage_level: StorageLevel | None, retry_policy: RetryPolicy | None,
                     clock: Callable[[], float]) -> None:
    """Raise `ConfigError` for the first of `ScheduledTableRefresh`'s arguments that is
    invalid (None: the default), or when the session lacks a mechanism it needs."""
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
    if storage_level is not None:
        check_instance(storage_level, StorageLevel, "storage_level", "a pyspark.StorageLevel")
    if retry_policy is not None:
        check_instance(retry_policy, RetryPolicy, "retry_policy")
    check_callable(clock, "clock", "a callable returning seconds")


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
