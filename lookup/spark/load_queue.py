"""Loads run one at a time on a thread of their own, with at most one waiting (for
``ScheduledTableRefresh``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Generic, TypeVar

__all__ = ["LoadQueue"]

_T = TypeVar("_T")


class LoadQueue(Generic[_T]):
    """Runs loads one at a time on a thread of its own, between `start` and `stop`.

    A load asked for while one runs is queued once and later asks join it, so every
    future returned reports a load that started after the ask.
    """

    def __init__(self, thread_name: str) -> None:
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._queued: Future[_T] | None = None  # the latest load submitted

    def start(self) -> None:
        """Start the thread; loads may be submitted from now on."""
        with self._lock:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=self._thread_name)

    def submit(self, load: Callable[[], _T]) -> Future[_T] | None:
        """The future of a run of ``load`` that starts after this call; None unless
        started and not stopped."""
        with self._lock:
            if self._executor is None:
                return None
            queued = self._queued
            if queued is not None and not queued.running() and not queued.done():
                return queued  # starts after this call: it sees what the caller wrote
            self._queued = self._executor.submit(load)
            return self._queued

    def stop(self, timeout: float) -> None:
        """Cancel the queued loads and wait up to ``timeout`` seconds for the running one
        to end."""
        with self._lock:
            executor, self._executor = self._executor, None
            last = self._queued
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if last is not None:
            # Loads run in submission order and the queued ones were just cancelled: the
            # latest one ends when the running one does.
            wait_futures([last], timeout=timeout)
