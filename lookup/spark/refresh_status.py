"""The status of a refreshed temp view and the staleness deadline that runs from its
last success (for ``ScheduledTableRefresh``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

from lookup.spark.view_versions import Version
from triggers.scheduler import Scheduled, process_scheduler

__all__ = ["RefreshStatus", "StatusBook"]


@dataclass(frozen=True)
class RefreshStatus:
    """A consistent snapshot of a refresh's state
    ([`ScheduledTableRefresh.status`][lookup.ScheduledTableRefresh.status]).

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


class StatusBook:
    """A refresh's [`RefreshStatus`][], updated as its reloads end, and the staleness
    deadline: ``expire(number)`` runs once version ``number`` has gone ``max_staleness``
    without a success (a load, or a reload that found the source unchanged)."""

    def __init__(self, view: str, *, clock: Callable[[], float],
                 max_staleness: timedelta | None, expire: Callable[[int], object]) -> None:
        self._view = view
        self._clock = clock
        self.max_staleness = max_staleness
        """The deadline after a success (None: none)."""
        self._expire = expire
        self._lock = threading.Lock()
        self._status = RefreshStatus(view_name=view)
        self._timer: Scheduled | None = None

    @property
    def status(self) -> RefreshStatus:
        """The current status (a consistent snapshot)."""
        with self._lock:
            return self._status

    def retried(self) -> None:
        """Count a load attempt that failed and is retried."""
        with self._lock:
            self._update(num_retries=self._status.num_retries + 1)

    def loaded(self, version: Version, elapsed_ms: float) -> RefreshStatus:
        """Record ``version`` as served from now on, after a load of ``elapsed_ms``."""
        with self._lock:
            self._update(version=version.number, materialization=version.mode.value,
                         rows=version.rows, bytes=version.bytes, last_load_time=elapsed_ms,
                         last_success_at=self._now(), num_loads=self._status.num_loads + 1,
                         stale=False)
            self._arm(version.number)
            return self._status

    def skipped(self, number: int) -> RefreshStatus:
        """Record a reload that read nothing, the source being still at the version of
        ``number``, which is served."""
        with self._lock:
            self._update(reloads_skipped=self._status.reloads_skipped + 1,
                         last_success_at=self._now())
            self._arm(number)
            return self._status

    def failed(self, error: str) -> int:
        """Record a reload that failed after all its retries with ``error``; returns the
        number of the version still served (0: none)."""
        with self._lock:
            self._update(num_load_failures=self._status.num_load_failures + 1,
                         last_error=error, last_failure_at=self._now())
            return self._status.version

    def stale(self) -> None:
        """Record that the view raises instead of serving its version."""
        with self._lock:
            self._update(stale=True)

    def close(self) -> None:
        """Cancel the staleness deadline."""
        with self._lock:
            self._arm(None)

    def _arm(self, number: int | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.max_staleness is None or number is None:
            return
        self._timer = process_scheduler().call_later(
            self.max_staleness, partial(self._expire, number), f"staleness of view {self._view}")

    def _update(self, **changes: Any) -> None:
        self._status = replace(self._status, **changes)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), timezone.utc)
