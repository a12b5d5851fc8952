"""Cache metrics: Flink's CacheMetricGroup as one thread-safe, mergeable object."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, overload

__all__ = ["CacheMetrics", "MetricsAsOf"]


@dataclass(frozen=True)
class MetricsAsOf:
    """What metrics read on the driver cover (``CacheMetrics.as_of``): the Spark action
    or micro-batch that delivered the newest worker report they include.

    Attributes
    ----------
    kind : str
        ``"action"`` (a batch action on a ``lookup_join`` DataFrame), ``"micro-batch"``
        (a streaming query's progress) or ``"failed query"`` (a streaming query's error).
    name : str
        The observation of the ``lookup_join`` DataFrame, or the streaming query's id.
    at : datetime
        When the newest report included was made (UTC, by its worker's clock).
    first_action_only : bool
        True for a batch DataFrame on classic PySpark: Spark observes its first action
        only, so a later action on the same DataFrame is not included (build it again
        with ``lookup_join`` for each action, or use Spark Connect, which observes each).
    """

    kind: str
    name: str
    at: datetime
    first_action_only: bool = False

_COUNTERS = (
    "hit_count",
    "miss_count",
    "load_count",
    "num_load_failures",
    "num_retries",
    "num_cache_errors",
    "num_bad_values",
    "reloads_skipped",
    "num_notifications",
    "num_keys_invalidated",
    "num_reconnect_flushes",
    "num_change_reads",
    "num_connection_waits",
    "connection_wait_ms",
    "num_host_hits",
    "num_host_waits",
    "num_concurrency_decreases",
    "num_concurrency_increases",
    "num_out_of_retention",
)
_GAUGES = ("num_cached_records", "num_cached_bytes")
FIELDS: tuple[str, ...] = (*_COUNTERS, "latest_load_time", "source_concurrency_limit", *_GAUGES)
"""Every metric, in [`CacheMetrics.as_dict`][] order."""
GAUGES: tuple[str, ...] = _GAUGES
"""The metrics that are a size now (not a count that only grows)."""


class _Counter:
    """A read-only metric of [`CacheMetrics`][], read from its values by name."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, metrics: None, owner: type) -> _Counter: ...
    @overload
    def __get__(self, metrics: CacheMetrics, owner: type) -> int: ...
    def __get__(self, metrics: CacheMetrics | None, owner: type) -> _Counter | int:
        return self if metrics is None else metrics._values[self._name]

    def __set__(self, metrics: CacheMetrics, value: object) -> None:
        raise AttributeError(f"{self._name} is read-only: count with the inc_* methods")


class CacheMetrics:
    """Counters and gauges of one lookup cache; thread-safe.

    Flink's metrics, plus ours: ``num_retries`` (load attempts that were retried),
    ``num_cache_errors`` (operations of a remote cache tier that failed and were served
    as misses), ``num_bad_values`` (stored values that could not be read as their
    column's type, handled by the connector's bad-value policy), ``reloads_skipped``
    (full-cache reloads that read nothing because the source was still at the version
    loaded, ``scan.Source.current_version``), and those of a change feed
    (``lookup.ChangeFeed``): ``num_notifications`` (change notifications received; a
    partial cache counts one once it has dropped its keys),
    ``num_keys_invalidated`` (cached keys dropped because they changed),
    ``num_reconnect_flushes`` (whole-cache flushes after the feed's connection was lost)
    and ``num_change_reads`` (keys a full cache read by key for its overlay of changes),
    and those of the source's connection limits: ``num_connection_waits`` (waits for a
    connection: for a slot of the host's ``max_source_connections``, or a backoff while
    the source refused connections for being over its own limit) and
    ``connection_wait_ms`` (the milliseconds they took); those of a partial cache's
    host tier: ``num_host_hits`` (keys the in-process cache missed and the host tier
    answered) and ``num_host_waits`` (keys waited for while another worker loaded them);
    and of adaptive concurrency:
    ``num_concurrency_decreases`` and ``num_concurrency_increases`` (changes of the
    host's limit of concurrent connections this worker made: down while the source was
    slow or failing, up as it recovered) and ``source_concurrency_limit`` (that limit at
    the worker's latest load; ``max_source_connections`` while the source keeps up);
    and of point-in-time joins: ``num_out_of_retention`` (rows whose ``as_of`` was
    older than their provider's ``Validity.retention``, joined with no version).

    - Counters (``hit_count``, ``miss_count``, ``load_count``, ``num_load_failures``,
      ``num_retries``, ``num_cache_errors``, ``num_bad_values``, ``reloads_skipped``,
      ``num_notifications``, ``num_keys_invalidated``, ``num_reconnect_flushes``,
      ``num_change_reads``, ``num_connection_waits``, ``connection_wait_ms``,
      ``num_host_hits``, ``num_host_waits``,
      ``num_concurrency_decreases``, ``num_concurrency_increases``,
      ``num_out_of_retention``) only grow.
    - ``latest_load_time`` is the duration in milliseconds of the latest load, -1 before any.
    - ``source_concurrency_limit`` is -1 before any load under an adaptive budget.
    - Gauges (``num_cached_records``, ``num_cached_bytes``) are read from the cache that
      registered them ([`register_gauges`][]) at the moment they are read; bytes are an
      estimate of the memory the cached rows hold.

    Metrics of several workers add up with ``+`` (counters and gauges are summed,
    ``latest_load_time`` is the maximum, ``source_concurrency_limit`` the lowest known);
    [`as_dict`][] gives a plain dict that travels between processes and [`from_dict`][]
    reads it back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        self._values["latest_load_time"] = -1
        self._values["source_concurrency_limit"] = -1
        self._fixed_gauges: dict[str, int] = dict.fromkeys(_GAUGES, 0)
        self._gauges: Callable[[], tuple[int, int]] | None = None
        self.as_of: MetricsAsOf | None = None
        """What these metrics cover when they were read on the driver from Spark's
        reports ([`lookup_metrics`][lookup.lookup_metrics]); None for a cache's own, read where
        they are counted."""

    # --- updates (called by caches and the lookup runtime)

    def _add(self, name: str, n: int) -> None:
        with self._lock:
            self._values[name] += n

    def inc_hits(self, n: int = 1) -> None:
        """Count ``n`` keys answered from the cache."""
        self._add("hit_count", n)

    def inc_misses(self, n: int = 1) -> None:
        """Count ``n`` keys the cache could not answer."""
        self._add("miss_count", n)

    def inc_loads(self, n: int = 1) -> None:
        """Count ``n`` loads from the source (a batched load counts once)."""
        self._add("load_count", n)

    def inc_load_failures(self, n: int = 1) -> None:
        """Count ``n`` loads that failed after all retries."""
        self._add("num_load_failures", n)

    def inc_retries(self, n: int = 1) -> None:
        """Count ``n`` retried load attempts."""
        self._add("num_retries", n)

    def inc_cache_errors(self, n: int = 1) -> None:
        """Count ``n`` failed operations of a remote cache tier (served as misses)."""
        self._add("num_cache_errors", n)

    def inc_bad_values(self, n: int = 1) -> None:
        """Count ``n`` stored values that could not be read as their column's type."""
        self._add("num_bad_values", n)

    def inc_reloads_skipped(self, n: int = 1) -> None:
        """Count ``n`` reloads skipped because the source's version had not changed."""
        self._add("reloads_skipped", n)

    def inc_notifications(self, n: int = 1) -> None:
        """Count ``n`` change notifications received from a change feed."""
        self._add("num_notifications", n)

    def inc_keys_invalidated(self, n: int = 1) -> None:
        """Count ``n`` cached keys dropped because a change feed said they changed."""
        self._add("num_keys_invalidated", n)

    def inc_reconnect_flushes(self, n: int = 1) -> None:
        """Count ``n`` flushes of the whole cache after a change feed lost its connection."""
        self._add("num_reconnect_flushes", n)

    def inc_change_reads(self, n: int = 1) -> None:
        """Count ``n`` keys a full cache read by key because a change feed named them."""
        self._add("num_change_reads", n)

    def record_connection_wait(self, seconds: float) -> None:
        """Count one wait for a connection to the source, of ``seconds``."""
        with self._lock:
            self._values["num_connection_waits"] += 1
            self._values["connection_wait_ms"] += round(seconds * 1000)

    def inc_host_hits(self, n: int = 1) -> None:
        """Count ``n`` keys the host tier answered."""
        self._add("num_host_hits", n)

    def inc_host_waits(self, n: int = 1) -> None:
        """Count ``n`` keys waited for while another worker of the host loaded them."""
        self._add("num_host_waits", n)

    def inc_out_of_retention(self, n: int = 1) -> None:
        """Count ``n`` stream rows whose time was older than the retention."""
        self._add("num_out_of_retention", n)

    def record_concurrency(self, limit: int, change: int = 0) -> None:
        """Set ``source_concurrency_limit`` to ``limit``, and count a ``change`` of it made
        here (-1 down, +1 up, 0 none)."""
        with self._lock:
            self._values["source_concurrency_limit"] = limit
            if change < 0:
                self._values["num_concurrency_decreases"] += 1
            elif change > 0:
                self._values["num_concurrency_increases"] += 1

    def record_load_time(self, millis: float) -> None:
        """Set ``latest_load_time`` to the duration of the load that just ended."""
        with self._lock:
            self._values["latest_load_time"] = round(millis)

    def register_gauges(self, gauges: Callable[[], tuple[int, int]]) -> None:
        """Let a cache report ``(num_cached_records, num_cached_bytes)`` when read."""
        with self._lock:
            self._gauges = gauges

    # --- reads

    def _gauge(self, index: int) -> int:
        gauges = self._gauges
        if gauges is None:
            return self._fixed_gauges[_GAUGES[index]]
        return int(gauges()[index])

    hit_count = _Counter("Keys answered from the cache.")
    miss_count = _Counter("Keys the cache could not answer.")
    load_count = _Counter("Loads from the source; one batched load of many keys counts once.")
    num_load_failures = _Counter("Loads that failed after all retries.")
    num_retries = _Counter("Load attempts that failed and were retried.")
    num_cache_errors = _Counter("Remote cache operations that failed and were served as misses.")
    num_bad_values = _Counter("Stored values that could not be read as their column's type.")
    reloads_skipped = _Counter(
        "Full-cache reloads skipped: the source was still at the version loaded.")
    num_notifications = _Counter(
        "Change notifications received from a change feed; a partial cache counts one once "
        "its keys are dropped.")
    num_keys_invalidated = _Counter("Cached keys dropped because a change feed said they changed.")
    num_reconnect_flushes = _Counter(
        "Whole-cache flushes after a change feed lost its connection (changes may be missed).")
    num_change_reads = _Counter(
        "Keys a full cache read by key from its source because a change feed named them.")
    num_connection_waits = _Counter(
        "Waits for a connection to the source: for a slot of the host's "
        "max_source_connections, or a backoff while the source was over its own limit.")
    connection_wait_ms = _Counter("Milliseconds spent in num_connection_waits.")
    num_host_hits = _Counter("Keys the in-process cache missed and the host tier answered.")
    num_host_waits = _Counter(
        "Keys waited for while another worker of the host loaded them (single loads).")
    num_concurrency_decreases = _Counter(
        "Times the host's limit of concurrent connections to the source went down: it was "
        "slow, timed out, failed transiently or refused for being busy.")
    num_concurrency_increases = _Counter(
        "Times the host's limit of concurrent connections went back up, one at a time, as "
        "the source kept up.")
    num_out_of_retention = _Counter(
        "Stream rows whose as_of was older than now minus their provider's "
        "Validity.retention: joined with no version (never a wrong one).")
    latest_load_time = _Counter("Duration in ms of the latest load; -1 before any load.")
    source_concurrency_limit = _Counter(
        "The host's limit of concurrent connections to the source at the latest load "
        "(at most max_source_connections); -1 before any, or without an adaptive budget.")

    @property
    def num_cached_records(self) -> int:
        """Rows (partial cache: keys) held by the cache now."""
        return self._gauge(0)

    @property
    def num_cached_bytes(self) -> int:
        """Estimated bytes held by the cache now."""
        return self._gauge(1)

    def as_dict(self) -> dict[str, int]:
        """All metrics as a plain dict (picklable, JSON-serializable)."""
        with self._lock:
            values = dict(self._values)
            gauges = self._gauges
        if gauges is None:
            values.update(self._fixed_gauges)
        else:
            records, nbytes = gauges()
            values["num_cached_records"] = int(records)
            values["num_cached_bytes"] = int(nbytes)
        return {name: values[name] for name in FIELDS}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> CacheMetrics:
        """Rebuild a (gauge-less) metrics object from [`as_dict`][] output."""
        unknown = set(values) - set(FIELDS)
        if unknown:
            raise ValueError(f"unknown metric names: {sorted(unknown)}")
        metrics = cls()
        for name in FIELDS:
            if name in values:
                value = int(values[name])
                if name in _GAUGES:
                    metrics._fixed_gauges[name] = value
                else:
                    metrics._values[name] = value
        return metrics

    snapshot = as_dict
    """The former name of [`as_dict`][] ("snapshot" now means a full cache's version)."""

    from_snapshot = from_dict
    """The former name of [`from_dict`][]."""

    @classmethod
    def sum(cls, parts: Iterable[CacheMetrics | Mapping[str, Any]]) -> CacheMetrics:
        """Add up metrics (objects or `as_dict` dicts) of several workers."""
        total = cls()
        for part in parts:
            total = total + (part if isinstance(part, CacheMetrics) else cls.from_dict(part))
        return total

    def __add__(self, other: object) -> CacheMetrics:
        if not isinstance(other, CacheMetrics):
            return NotImplemented
        mine, theirs = self.as_dict(), other.as_dict()
        merged = {name: mine[name] + theirs[name] for name in FIELDS}
        merged["latest_load_time"] = max(mine["latest_load_time"], theirs["latest_load_time"])
        # The most held back of the hosts: what a user looking for a slow source wants.
        known = [v for v in (mine["source_concurrency_limit"],
                             theirs["source_concurrency_limit"]) if v >= 0]
        merged["source_concurrency_limit"] = min(known) if known else -1
        return CacheMetrics.from_dict(merged)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CacheMetrics):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        # Not a constructor call: values come from a cache, or from_dict(dict).
        fields = " ".join(f"{k}={v}" for k, v in self.as_dict().items())
        return f"<CacheMetrics {fields}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # Ships as its current values; the lock and the gauge callback stay behind.
        return (CacheMetrics.from_dict, (self.as_dict(),))
