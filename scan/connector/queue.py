"""The bounded hand-over queue between fetcher threads and a reader (Flink's
``FutureCompletingBlockingQueue``)."""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from concurrent.futures import Future, InvalidStateError
from typing import Generic, TypeVar

from spark_lookup.options import check_int

__all__ = ["ElementQueue"]

T = TypeVar("T")


class ElementQueue(Generic[T]):
    """A bounded queue of fetched batches; thread-safe.

    Fetcher threads `put` (blocking while the queue holds ``capacity`` batches,
    which is the back-pressure on the source); the reader `poll`s without
    blocking and, when it finds nothing, waits on `available_future`, which
    completes when a batch is put or `notify_availability` is called.

    A fetcher blocked in ``put`` can be released with `wake_up_putter` (to run a
    task such as adding splits); its ``put`` then returns False without enqueuing.

    Examples
    --------
    >>> queue = ElementQueue(capacity=1)
    >>> queue.poll() is None, queue.available_future().done()
    (True, False)
    >>> queue.put(0, "batch")
    True
    >>> queue.available_future().done(), queue.poll()
    (True, 'batch')
    """

    def __init__(self, capacity: int = 2) -> None:
        self._capacity = check_int(capacity, "element queue capacity")
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._future: Future[None] = Future()
        self._woken: set[int] = set()

    @property
    def capacity(self) -> int:
        """The most batches the queue holds."""
        return self._capacity

    def put(self, thread_index: int, element: T) -> bool:
        """Enqueue ``element``, blocking while the queue is full.

        Returns
        -------
        bool
            True if enqueued; False if `wake_up_putter` released this fetcher
            while it was blocked (the element was not enqueued).
        """
        with self._lock:
            while len(self._items) >= self._capacity:
                if thread_index in self._woken:
                    self._woken.discard(thread_index)
                    return False
                self._not_full.wait()
            # A wake-up that came while the fetcher was not blocked is moot now.
            self._woken.discard(thread_index)
            self._items.append(element)
            future = self._future
        self._complete(future)
        return True

    def poll(self) -> T | None:
        """The oldest element, or None if empty (never blocks)."""
        with self._lock:
            if not self._items:
                # Only a poll that finds nothing arms a new future, so a notification
                # that came before this poll has already been seen by the caller's check
                # of its own state, and one that comes after completes the new future.
                if self._future.done():
                    self._future = Future()
                return None
            element = self._items.popleft()
            self._not_full.notify_all()
            return element

    def available_future(self) -> Future[None]:
        """A future completed once the queue has (or had) something for the reader."""
        with self._lock:
            if self._items and not self._future.done():
                future = self._future
            else:
                return self._future
        self._complete(future)
        return future

    def notify_availability(self) -> None:
        """Complete the current future without an element (an error or the end needs
        the reader's attention)."""
        with self._lock:
            future = self._future
        self._complete(future)

    def wake_up_putter(self, thread_index: int) -> None:
        """Release fetcher ``thread_index`` if it is blocked in `put`."""
        with self._lock:
            self._woken.add(thread_index)
            self._not_full.notify_all()

    def size(self) -> int:
        """The number of queued elements."""
        with self._lock:
            return len(self._items)

    def is_empty(self) -> bool:
        """True if nothing is queued."""
        with self._lock:
            return not self._items

    @staticmethod
    def _complete(future: Future[None]) -> None:
        # Completed outside the lock: callbacks (a waiting runner) run in this thread.
        with contextlib.suppress(InvalidStateError):  # already completed: fine
            future.set_result(None)
