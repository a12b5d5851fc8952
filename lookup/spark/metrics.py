"""Cache metrics of lookup joins, carried to the driver through Spark's own channels
(an observed column), on classic and Spark Connect sessions alike; opt-in, as the
channel costs throughput. How it works, and what is not reported: DESIGN.md, lookup/,
"Metrics are opt-in".
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from cache.metrics import GAUGES, CacheMetrics, MetricsAsOf
from lookup.providers import FullCachingLookupProvider, LookupProvider
from lookup.spark.report import (
    REPORT_COLUMN,
    WorkerReport,
    parse_report,
    report_notes,
)
from lookup.spark.session import is_connect
from spark_lookup.compat import OBSERVATION_FILLED_BY_ACTION
from spark_lookup.errors import ConfigError, MetricsUnavailableError
from spark_lookup.shown import shown
from spark_lookup.spark_types import AnySparkSession

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation

__all__ = [
    "METRICS_ENABLED",
    "REPORT_COLUMN",
    "StaleMetricsWarning",
    "WorkerReport",
    "lookup_metrics",
    "metrics_enabled",
    "observe_metrics",
    "parse_report",
    "stop_metrics_listener",
    "worker_reports",
]

log = logging.getLogger("lookup")

METRICS_ENABLED = "spark.lookup.metrics.enabled"
"""The session setting that turns metrics on for every ``lookup_join`` built after it
(``"true"``/``"false"``, default false); ``lookup_join(..., metrics=...)`` overrides it."""

METRICS_COST = "about 10-25% of a full-cache join's throughput"
"""What the channel costs, measured by ``benchmarks/join_throughput.py`` (in messages)."""

_NAME_PREFIX = "spark_lookup_metrics_"
_CLASSIC_WAIT_SECONDS = 1.0
"""How long [`lookup_metrics`][] waits for classic observations to be read back.

A classic ``Observation`` is filled before its action returns, but its only reader,
``Observation.get``, blocks until then: on one that no action has run yet it would
block for ever. So each is read on a thread of its own, and this bounds the wait for
threads whose observation is not filled (a DataFrame never run)."""

_CLASSIC_LATE_WAIT_SECONDS = 10.0
"""The same bound where Spark fills a classic ``Observation`` after its action returns
(PySpark 3.5: from a listener, on the listener bus, which a busy driver runs late)."""

_MAX_PENDING = 256
"""Classic observations kept per provider until read (the oldest unread are dropped
beyond this: their workers' later reports make good what they held)."""


@dataclass(frozen=True)
class _Channel:
    """What delivered a report: an observed action or a streaming query's progress."""

    kind: str
    name: str
    first_action_only: bool = False


class _ProviderReports:
    """The latest report of each worker of one provider, and what delivered it (under
    the store's lock)."""

    def __init__(self) -> None:
        self.latest: dict[str, WorkerReport] = {}
        self.channels: dict[str, _Channel] = {}

    def add(self, report: WorkerReport, channel: _Channel) -> None:
        current = self.latest.get(report.worker)
        if current is None or current.sequence < report.sequence:
            self.latest[report.worker] = report
            self.channels[report.worker] = channel

    def total(self, snapshot_gauges: bool) -> CacheMetrics:
        reports = list(self.latest.values())
        total = CacheMetrics.sum(r.values for r in reports).as_dict()
        newest = max(reports, key=lambda r: (r.at, r.sequence)) if reports else None
        if snapshot_gauges and newest is not None:
            # One table held by every worker: its size is that of the newest report,
            # not the sum over the workers that hold it.
            for name in GAUGES:
                total[name] = newest.values.get(name, 0)
        metrics = CacheMetrics.from_dict(total)
        if newest is not None:
            channel = self.channels[newest.worker]
            metrics.as_of = MetricsAsOf(
                channel.kind, channel.name,
                datetime.fromtimestamp(newest.at / 1000, timezone.utc),
                channel.first_action_only)
        return metrics


class _ClassicObservation:
    """A classic session's ``Observation`` of one batch lookup join, read on a thread
    of its own once [`lookup_metrics`][] asks (see ``_CLASSIC_WAIT_SECONDS``)."""

    def __init__(self, store: _Reports, name: str, observation: Observation) -> None:
        self.store = store
        self.name = name
        self.observation = observation
        self.done = threading.Event()
        self._started = False

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        thread = threading.Thread(target=self._read, name=f"lookup-metrics-{self.name[-8:]}",
                                  daemon=True)
        thread.start()

    def _read(self) -> None:
        try:
            result = self.observation.get
            self.store.receive(_reports_in(result),
                               _Channel("action", self.name, first_action_only=True))
        except Exception as exc:  # a failed action, or the session stopped
            log.debug("observation %s gave no metrics: %r", self.name, exc)
        finally:
            # Only now: lookup_metrics reads the totals once this is set.
            self.done.set()


class _ConnectObservation:
    """A Connect session's ``Observation`` of one batch lookup join. The client fills
    it after every action that runs it; it is read without waiting, and a last time
    when the DataFrames holding it are gone."""

    def __init__(self, store: _Reports, provider_id: str, name: str,
                 observation: Observation) -> None:
        self.store = store
        self.provider_id = provider_id
        self.name = name
        self._ref = weakref.ref(observation)
        # The client updates this very dict after each action (PySpark 4.3): read once
        # more when the observation is collected, for an action run since the last read.
        live = _get(observation)
        weakref.finalize(observation, store.forget, name, live)

    def read(self) -> None:
        observation = self._ref()
        if observation is not None:
            result = _get(observation)
            if result:
                self.store.receive(_reports_in(result), _Channel("action", self.name))


def _get(observation: Observation) -> Mapping[str, Any] | None:
    try:
        result = observation.get
    except Exception as exc:  # the observation of a failed action holds its error
        log.debug("observation gave no metrics: %r", exc)
        return None
    return result if isinstance(result, Mapping) else None


def _reports_in(result: Any) -> list[Any]:
    """The report texts of an observed-metrics row (a ``Row`` or a mapping); none when
    it holds no result of ours (a classic observation of a failed action is empty)."""
    try:
        reports = result["reports"]
    except (KeyError, TypeError, IndexError, ValueError):
        return []
    if not isinstance(reports, str):
        return []
    try:
        texts = json.loads(reports)
    except ValueError:
        log.debug("ignoring malformed observed reports %.200r", reports)
        return []
    return texts if isinstance(texts, list) else []


class _Reports:
    """Everything the driver process knows about lookup-join metrics (thread-safe)."""

    def __init__(self) -> None:
        # Reentrant: a weakref finalizer may run (garbage collection) under the lock.
        self._lock = threading.RLock()
        self._providers: dict[str, _ProviderReports] = {}
        self._classic: dict[str, list[_ClassicObservation]] = {}
        self._connect: dict[str, _ConnectObservation] = {}
        self._listeners: weakref.WeakKeyDictionary[Any, _ProgressListener] = (
            weakref.WeakKeyDictionary())
        self.observed: set[str] = set()  # providers some join asked metrics of

    def _reports(self, provider_id: str) -> _ProviderReports:
        return self._providers.setdefault(provider_id, _ProviderReports())

    # --- receiving (any thread)

    def receive(self, texts: Iterable[Any], channel: _Channel) -> None:
        """Merge reports (texts; anything else is ignored) that ``channel`` delivered."""
        parsed = [r for r in map(parse_report, texts) if r is not None]
        with self._lock:
            for report in parsed:
                self._reports(report.provider_id).add(report, channel)

    def forget(self, name: str, last: Mapping[str, Any] | None) -> None:
        """A Connect observation was collected: read its last result and drop it."""
        if last:
            self.receive(_reports_in(last), _Channel("action", name))
        with self._lock:
            self._connect.pop(name, None)

    # --- registering (driver, at lookup_join)

    def watch_batch(self, spark: AnySparkSession, provider_id: str, name: str,
                    observation: Observation) -> None:
        if is_connect(spark):
            watched = _ConnectObservation(self, provider_id, name, observation)
            with self._lock:
                self._connect[name] = watched
            return
        with self._lock:
            pending = self._classic.setdefault(provider_id, [])
            pending.append(_ClassicObservation(self, name, observation))
            unread = [p for p in pending if not p.done.is_set()]
            if len(unread) > _MAX_PENDING:
                pending.remove(unread[0])

    def listen(self, spark: AnySparkSession) -> None:
        """Register the progress listener on ``spark`` (once per session)."""
        with self._lock:
            if spark in self._listeners:
                return
            listener = self._listeners[spark] = _ProgressListener(self)
        if is_connect(spark):
            # Stopping a Connect session removes its listeners after the session is
            # released, which PySpark 4.3 reports with this warning, for nothing: the
            # listener goes with the session.
            warnings.filterwarnings(
                "ignore", r"Failed to remove the listener because of exception: "
                r"\[NO_ACTIVE_SESSION\]", UserWarning)
        spark.streams.addListener(listener)

    def unlisten(self, spark: AnySparkSession) -> bool:
        with self._lock:
            listener = self._listeners.pop(spark, None)
        if listener is None:
            return False
        spark.streams.removeListener(listener)
        return True

    # --- reading (driver, lookup_metrics)

    def metrics(self, provider: LookupProvider) -> CacheMetrics | None:
        reports = self.collect(provider)
        if reports is None:
            return None
        with self._lock:
            return reports.total(isinstance(provider, FullCachingLookupProvider))

    def collect(self, provider: LookupProvider) -> _ProviderReports | None:
        """Read every pending observation of ``provider``; its reports, or None when
        nothing of it has been observed."""
        provider_id = provider.provider_id
        with self._lock:
            classic = list(self._classic.get(provider_id, ()))
            connect = [w for w in self._connect.values() if w.provider_id == provider_id]
        for watched in classic:
            watched.start()
        wait = (_CLASSIC_WAIT_SECONDS if OBSERVATION_FILLED_BY_ACTION.available()
                else _CLASSIC_LATE_WAIT_SECONDS)
        deadline = time.monotonic() + wait
        for watched in classic:
            watched.done.wait(max(0.0, deadline - time.monotonic()))
        for each in connect:
            each.read()
        with self._lock:
            pending = self._classic.get(provider_id)
            if pending is not None:
                pending[:] = [p for p in pending if not p.done.is_set()]
            reports = self._providers.get(provider_id)
            return reports if reports is not None and reports.latest else None


_METRICS = _Reports()


class _ProgressListener(StreamingQueryListener):
    """Reads our observed metrics from every micro-batch's progress and failed
    queries' errors. Runs on the driver (classic: a callback thread; Connect: the
    client's listener thread)."""

    def __init__(self, store: _Reports) -> None:
        super().__init__()
        self._store = store

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = event.progress
            for name, row in dict(progress.observedMetrics).items():
                if name.startswith(_NAME_PREFIX):
                    self._store.receive(_reports_in(row),
                                        _Channel("micro-batch", str(progress.id)))
        except Exception:  # a listener must never fail the query's events
            log.exception("reading lookup metrics from a streaming progress failed")

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        exception = getattr(event, "exception", None)
        if exception:
            self._store.receive(report_notes(str(exception)),
                                _Channel("failed query", str(getattr(event, "id", ""))))


# --- driver-side API -------------------------------------------------------------------


def observe_metrics(mapped: DataFrame, provider: LookupProvider, *,
                    report_rows: bool = True) -> DataFrame:
    """Observe the reports in ``mapped`` (the output of a lookup join's map, with
    `REPORT_COLUMN`), then drop the column, and with ``report_rows`` the rows
    that only carry a report. Runs on the driver, when the join is built; returns the
    DataFrame the user gets."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    spark = mapped.sparkSession
    with _METRICS._lock:
        _METRICS.observed.add(provider.provider_id)
    name = f"{_NAME_PREFIX}{uuid.uuid4().hex}"
    # One JSON text: a string reaches the driver as a str on every line and session kind
    # (PySpark 3.5's classic Observation hands a list over as a JVM object).
    reports = F.to_json(F.collect_list(F.col(REPORT_COLUMN))).alias("reports")
    if mapped.isStreaming:
        _METRICS.listen(spark)
        observed = mapped.observe(name, reports)
    else:
        observation = Observation(name)
        observed = mapped.observe(observation, reports)
        _METRICS.watch_batch(spark, provider.provider_id, name, observation)
    if report_rows:
        observed = observed.where(F.col(REPORT_COLUMN).isNull())
    return observed.drop(REPORT_COLUMN)


def _check_provider(provider: object) -> LookupProvider:
    if not isinstance(provider, LookupProvider):
        raise ConfigError("lookup_metrics takes the lookup provider given to lookup_join "
                          f"(PartialCachingLookupProvider, FullCachingLookupProvider, ...), got "
                          f"{type(provider).__name__}: {shown(provider)}")
    return provider


def metrics_enabled(spark: AnySparkSession) -> bool:
    """Whether `METRICS_ENABLED` is on in ``spark`` (classic or Connect). Runs on
    the driver, when a join is built.

    Raises
    ------
    ConfigError
        For a value other than ``true`` or ``false`` (any case).
    """
    value = spark.conf.get(METRICS_ENABLED, "false")
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"the session setting {METRICS_ENABLED} must be true or false, "
                          f"got {shown(value)}")
    return text == "true"


def _unavailable(provider: LookupProvider) -> MetricsUnavailableError:
    with _METRICS._lock:
        asked = provider.provider_id in _METRICS.observed
    if not asked:
        return MetricsUnavailableError(
            f"metrics of {provider.describe()} are off: no lookup_join with it asked for "
            "them. Turn them on for one join with lookup_join(..., metrics=True), or for "
            f"every join built afterwards with spark.conf.set({METRICS_ENABLED!r}, 'true'); "
            f"they cost {METRICS_COST} (an observed column the plan collects and drops); "
            "SQL functions report none in any case"
        )
    return MetricsUnavailableError(
        f"no metrics of {provider.describe()} have reached the driver yet: they arrive "
        "when an action on a lookup_join DataFrame using it finishes (batch) or with a "
        "micro-batch's progress (streaming); SQL functions report none, and a failed "
        "batch action reports nothing"
    )


def worker_reports(provider: LookupProvider) -> list[WorkerReport]:
    """The latest report of each Python worker that ran ``lookup_join`` tasks with
    ``provider``, as [`lookup_metrics`][] adds them up (oldest first). Runs on the
    driver.

    Raises
    ------
    MetricsUnavailableError, ConfigError
        As [`lookup_metrics`][].
    """
    provider = _check_provider(provider)
    reports = _METRICS.collect(provider)
    if reports is None:
        raise _unavailable(provider)
    with _METRICS._lock:
        return sorted(reports.latest.values(), key=lambda r: (r.at, r.sequence))


def stop_metrics_listener(spark: AnySparkSession) -> bool:
    """Remove the progress listener that a streaming ``lookup_join`` registered on
    ``spark``; False if there is none. Runs on the driver.

    Later micro-batches of running queries are no longer counted (a new streaming
    ``lookup_join`` registers it again). Worth calling before ``spark.stop()`` on Spark
    Connect only: PySpark 4.3 releases a Connect session before removing its listeners,
    and the server then logs an error about the listener's stream (harmless).
    """
    return _METRICS.unlisten(spark)


def lookup_metrics(provider: LookupProvider, spark: AnySparkSession | None = None
                   ) -> CacheMetrics:
    """The cache metrics of ``provider``, summed over the executors' Python workers
    that ran ``lookup_join`` tasks with it, as Spark has reported them to the driver.

    Runs on the driver, on a classic or a Spark Connect session alike, after an action
    (batch) or while and after a streaming query runs. Each worker's latest report
    counts: counters (hits, misses, loads, load failures, retries, cache errors, bad
    values) add up over the workers; the gauges (cached records and bytes) add up for
    partial caches (each worker holds its own) and, for a full cache, are those of the
    newest report (the workers serve one table, not one each).

    Parameters
    ----------
    provider
        The provider given to [`lookup.lookup_join`][].
    spark
        Accepted for compatibility and ignored: metrics are kept per provider for the
        whole driver process, whichever session ran the joins.

    Returns
    -------
    cache.CacheMetrics
        A copy: later reports do not change it.

    Raises
    ------
    MetricsUnavailableError
        When no worker's report of ``provider`` has reached the driver yet: no action
        on a ``lookup_join`` DataFrame with it has finished (or those that did read no
        rows), no micro-batch's progress has arrived, its only actions failed, or it was
        only used by SQL functions (which do not report). Raised rather than returning
        zeros, which would read as "no lookups were needed".
    ConfigError
        When ``provider`` is not a lookup provider.

    Notes
    -----
    A streaming query's progress reaches the driver shortly after each micro-batch
    (asynchronously): right after ``processAllAvailable`` the latest micro-batch may not
    be counted yet. A task that failed reports nothing (DESIGN.md, "Metrics"); on a
    classic session, only the first action on a ``lookup_join`` DataFrame is observed.
    ``lookup_metrics`` may wait up to a second for classic observations of DataFrames
    that were never run (on PySpark 3.5, which fills them after the action returns, up to
    ten seconds).

    Examples
    --------
    >>> enriched = lookup_join(orders, customers, on="customer_id")  # doctest: +SKIP
    >>> enriched.write.parquet(out)  # doctest: +SKIP
    >>> lookup_metrics(customers).hit_count  # doctest: +SKIP
    1234
    """
    metrics = _METRICS.metrics(_check_provider(provider))
    if metrics is None:
        raise _unavailable(provider)
    _warn_if_partial(provider, metrics.as_of)
    return metrics


_RETURNED: dict[str, MetricsAsOf] = {}
_WARNED: set[str] = set()


def _warn_if_partial(provider: LookupProvider, as_of: MetricsAsOf | None) -> None:
    """Warn (once per DataFrame) when metrics of a classic observation, which sees its
    first action only, are asked for again and are still those returned before: an
    action run since would not be included (no mechanism without the JVM tells whether
    one ran)."""
    if as_of is None:
        return
    with _METRICS._lock:
        before = _RETURNED.get(provider.provider_id)
        _RETURNED[provider.provider_id] = as_of
        if not as_of.first_action_only or before != as_of or as_of.name in _WARNED:
            return
        _WARNED.add(as_of.name)
    warnings.warn(
        f"the metrics of {provider.describe()} are as of the first action on its "
        f"lookup_join DataFrame ({as_of.at:%Y-%m-%d %H:%M:%S} UTC): a classic session "
        "observes no later action on the same DataFrame, so an action run on it since is "
        "not included (CacheMetrics.as_of says what is). Build the DataFrame anew with "
        "lookup_join for each action whose metrics you want, or use Spark Connect, which "
        "observes every action", StaleMetricsWarning, stacklevel=3)


class StaleMetricsWarning(UserWarning):
    """Metrics that may not include every action run (a classic session's observation
    of a batch DataFrame sees its first action only)."""
