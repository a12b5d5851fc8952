"""The reload trigger interface (Flink's ``CacheReloadTrigger`` and its ``Context``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import Future
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

__all__ = ["CacheReloadTrigger", "ReloadContext"]


@runtime_checkable
class ReloadContext(Protocol):
    """What a trigger needs from the full cache it drives (Flink's ``CacheReloadTrigger.Context``).

    The full cache implements it and passes it to [`CacheReloadTrigger.open`][], on the
    executor (Python worker) that holds the cache. Both methods may be called from the
    trigger's scheduler thread, so they must be thread-safe.

    Examples
    --------
    A context that loads on its own thread and counts its loads:

    >>> import time
    >>> from concurrent.futures import Future, ThreadPoolExecutor
    >>> class CountingContext:
    ...     def __init__(self) -> None:
    ...         self.loads = 0
    ...         self._pool = ThreadPoolExecutor(max_workers=1)
    ...     def current_processing_time(self) -> int:
    ...         return time.time_ns() // 1_000_000
    ...     def trigger_reload(self) -> Future[None]:
    ...         return self._pool.submit(self._load)
    ...     def _load(self) -> None:
    ...         self.loads += 1
    >>> context = CountingContext()
    >>> isinstance(context, ReloadContext)
    True
    >>> context.trigger_reload().result(timeout=5)
    >>> context.loads
    1
    """

    def current_processing_time(self) -> int:
        """The current processing time, in milliseconds since the epoch.

        Part of Flink's contract, kept so a Flink-shaped context fits unchanged. The
        triggers of this package schedule on APScheduler's wall clock instead, which
        must agree with it to within the precision a reload schedule needs.
        """
        ...

    def trigger_reload(self) -> Future[Any]:
        """Start one full reload and return a future that completes when that load ends.

        The future fails (``set_exception``) when the load fails. The call should return
        promptly: a trigger holds its start lock while it runs, and
        [`CacheReloadTrigger.close`][] waits for that lock only for a bounded time.
        """
        ...


class CacheReloadTrigger(ABC):
    """Decides when a full cache reloads its whole table (Flink's ``CacheReloadTrigger``).

    Built on the driver and pickled to executors as its configuration only; each copy
    is opened where its cache lives, which is where its scheduler thread starts.
    Implementations: [`PeriodicCacheReloadTrigger`][] and
    [`TimedCacheReloadTrigger`][].
    """

    @abstractmethod
    def open(self, context: ReloadContext) -> None:
        """Start the schedule; from now on the trigger calls ``context.trigger_reload()``.

        Runs on the executor, once per opened cache. Both triggers of this package start
        the first load immediately, then follow their schedule.
        """

    @abstractmethod
    def close(self) -> None:
        """Stop the schedule: no load starts after this returns.

        Waits a bounded time for a load in progress; it never waits forever.
        """

    def next_reload_after(self, loaded_at: datetime) -> datetime | None:
        """When this schedule wants data loaded at ``loaded_at`` replaced (pure).

        For a cache whose data may have been loaded by another process (the host-level
        snapshot store of full caching): it evaluates the schedule from the load time of
        the data it serves, not from its own [`open`][], so staleness stays bounded by
        the schedule while processes come and go. The trigger's own schedule is not
        changed by this method.

        Parameters
        ----------
        loaded_at : datetime
            When the load that produced the data started (aware).

        Returns
        -------
        datetime or None
            The time the data is due for a reload (aware), or None (this default) when
            the trigger cannot tell: then every firing reloads.
        """
        return None
