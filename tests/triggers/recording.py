"""A ReloadContext for tests: loads run on the context's own threads and record when
they were requested, started and ended (monotonic seconds)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

from triggers import CacheReloadTrigger

T = TypeVar("T", bound=CacheReloadTrigger)


@dataclass
class Load:
    """One ``trigger_reload()`` call and, once its load ran, when it started and ended."""

    number: int
    requested: float
    started: float | None = None
    ended: float | None = None
    requested_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    """Wall-clock time of the call, to compare with a timed trigger's fire times."""


class RecordingContext:
    """Implements ``triggers.ReloadContext``.

    Parameters
    ----------
    load_seconds:
        How long each load takes.
    raise_on:
        Call numbers (1-based) whose ``trigger_reload()`` raises instead of starting a load.
    fail_on:
        Call numbers whose load runs and then fails its future.
    workers:
        Loader threads; more than one, so that a trigger that overlapped loads would be seen.
    """

    def __init__(
        self,
        load_seconds: float = 0.0,
        *,
        raise_on: frozenset[int] = frozenset(),
        fail_on: frozenset[int] = frozenset(),
        workers: int = 4,
    ) -> None:
        self.load_seconds = load_seconds
        self.raise_on = raise_on
        self.fail_on = fail_on
        self.loads: list[Load] = []
        self.max_concurrent = 0
        self._running = 0
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="test-load")
        self._changed = threading.Condition()
        self._release = threading.Event()  # ends blocked loads at teardown

    # --- ReloadContext

    def current_processing_time(self) -> int:
        return time.time_ns() // 1_000_000

    def trigger_reload(self) -> Future[None]:
        with self._changed:
            load = Load(len(self.loads) + 1, time.monotonic())
            self.loads.append(load)
            self._changed.notify_all()
        if load.number in self.raise_on:
            raise RuntimeError(f"cannot start load {load.number}")
        return self._pool.submit(self._run, load)

    # --- test helpers

    @property
    def calls(self) -> int:
        """Number of ``trigger_reload()`` calls so far."""
        with self._changed:
            return len(self.loads)

    def finished(self) -> list[Load]:
        """Loads that ran to their end, in call order."""
        with self._changed:
            return [load for load in self.loads if load.ended is not None]

    def wait_for_calls(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until ``trigger_reload()`` has been called ``count`` times."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.loads) >= count, timeout)

    def wait_for_finished(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until ``count`` loads have ended."""
        with self._changed:
            return self._changed.wait_for(
                lambda: sum(load.ended is not None for load in self.loads) >= count, timeout
            )

    def shutdown(self) -> None:
        """Release loads still sleeping and stop the loader threads (not waiting)."""
        self._release.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, load: Load) -> None:
        with self._changed:
            load.started = time.monotonic()
            self._running += 1
            self.max_concurrent = max(self.max_concurrent, self._running)
        try:
            self._release.wait(self.load_seconds)
        finally:
            with self._changed:
                self._running -= 1
                load.ended = time.monotonic()
                self._changed.notify_all()
        if load.number in self.fail_on:
            raise RuntimeError(f"load {load.number} failed")


class Opener(Protocol):
    """The ``opened`` fixture: opens a trigger and closes it after the test."""

    def __call__(self, trigger: T, context: Any) -> T: ...
