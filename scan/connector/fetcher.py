"""Fetcher threads and their managers (Flink's ``SplitFetcher`` and ``SplitFetcherManager``).

A fetcher is one thread that owns one `SplitReader`: it runs tasks (adding
splits) and otherwise fetches and hands batches to the reader through the shared
`ElementQueue`. A manager decides how many fetchers a reader has and which
splits each reads; the first error of any fetcher is kept and re-raised by the reader.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from scan.connector.queue import ElementQueue
from scan.connector.records import RecordsWithSplitIds
from scan.connector.split_reader import SplitReader, SplitsAddition
from scan.split import SourceSplit
from spark_lookup.errors import SourceError, SparkLookupError
from spark_lookup.options import check_int

__all__ = [
    "MultiThreadFetcherManager",
    "SingleThreadFetcherManager",
    "SplitFetcher",
    "SplitFetcherManager",
]

E = TypeVar("E")
SplitT = TypeVar("SplitT", bound=SourceSplit)

_log = logging.getLogger(__name__)


class SplitFetcher(Generic[E, SplitT]):
    """One fetcher thread running one `SplitReader`.

    Created and started by a `SplitFetcherManager`; thread-safe. Records of a
    split reach the queue in the order the split reader returned them; a split counts
    as assigned to this fetcher until its finishing batch is in the queue, so the
    reader can never see a fetcher idle while that batch is still outside the queue.
    """

    def __init__(
        self,
        fetcher_id: int,
        queue: ElementQueue[RecordsWithSplitIds[E]],
        split_reader: SplitReader[E, SplitT],
        on_error: Callable[[BaseException], None],
        name: str = "scan-fetcher",
        *,
        release_memory: bool = False,
    ) -> None:
        self.fetcher_id = fetcher_id
        self._release_memory = release_memory
        self._queue = queue
        self._split_reader = split_reader
        self._on_error = on_error
        self._cond = threading.Condition()
        self._tasks: deque[Callable[[], None]] = deque()
        self._assigned: dict[str, SplitT] = {}
        self._pending: RecordsWithSplitIds[E] | None = None
        self._fetching = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"{name}-{fetcher_id}", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def add_splits(self, splits: Sequence[SplitT]) -> None:
        """Hand ``splits`` to the split reader (on the fetcher thread, before its next
        fetch); wakes a fetch or a ``put`` that is blocked."""
        splits = list(splits)
        with self._cond:
            for split in splits:
                self._assigned[split.split_id] = split
            self._tasks.append(
                lambda: self._split_reader.handle_splits_changes(SplitsAddition(splits))
            )
            self._cond.notify_all()
        self._wake_up()

    @property
    def num_assigned(self) -> int:
        """Splits assigned and not yet finished."""
        with self._cond:
            return len(self._assigned)

    def is_idle(self) -> bool:
        """True if the fetcher has no splits, no tasks and nothing waiting to be queued."""
        with self._cond:
            return not self._assigned and not self._tasks and self._pending is None

    def shutdown(self) -> None:
        """Ask the thread to stop (it closes the split reader on its way out)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._wake_up()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True if it has stopped."""
        if self._thread.ident is not None:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _wake_up(self) -> None:
        with self._cond:
            fetching = self._fetching
        if fetching:
            self._split_reader.wake_up()
        self._queue.wake_up_putter(self.fetcher_id)

    def _run(self) -> None:
        try:
            while self._run_once():
                pass
        except BaseException as exc:  # every failure must reach the reader
            self._on_error(exc)
        finally:
            try:
                self._split_reader.close()
            except Exception as exc:
                _log.warning("closing split reader of fetcher %d failed", self.fetcher_id,
                             exc_info=exc)

    def _run_once(self) -> bool:
        with self._cond:
            while not (self._closed or self._tasks or self._assigned or self._pending is not None):
                self._cond.wait()
            if self._closed:
                return False
            task = self._tasks.popleft() if self._tasks else None
            if task is None and self._pending is None:
                self._fetching = True
        if task is not None:
            task()
            return True
        if self._pending is None:
            try:
                records = self._split_reader.fetch()
            finally:
                with self._cond:
                    self._fetching = False
            if self._release_memory:
                _release_thread_memory()
            if records.is_empty():
                return True  # woken up, or nothing yet: look at tasks, then fetch again
            self._pending = records
        pending = self._pending
        assert pending is not None
        if not self._queue.put(self.fetcher_id, pending):
            return True  # released to run a task; the batch is put again afterwards
        with self._cond:
            self._pending = None
            for split_id in pending.finished_splits():
                self._assigned.pop(split_id, None)
        return True


def _release_thread_memory() -> None:
    """Hand the free pages of pyarrow's default pool back to the system, from this
    thread: mimalloc keeps a thread's freed blocks in that thread's heap (blocks freed
    by another thread, the batches a reader handed over, come back to it), and only
    the owning thread's collection releases them."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


class SplitFetcherManager(ABC, Generic[E, SplitT]):
    """Owns the fetchers of one reader and the queue they fill.

    Used from the reader's thread; fetchers report errors from their own threads,
    and `check_errors` re-raises the first one.

    Parameters
    ----------
    split_reader_factory
        Makes a new `SplitReader`, one per fetcher; called where the reader runs.
    element_queue_capacity
        Fetches (``RecordsWithSplitIds``, of rows or of Arrow batches) the queue holds
        before fetchers block.
    release_memory
        Whether fetchers hand freed memory back after every fetch (see
        [`ReaderOptions`][]).
    """

    def __init__(
        self,
        split_reader_factory: Callable[[], SplitReader[E, SplitT]],
        element_queue_capacity: int = 2,
        *,
        release_memory: bool = False,
    ) -> None:
        self._factory = split_reader_factory
        self._release_memory = release_memory
        self._queue: ElementQueue[RecordsWithSplitIds[E]] = ElementQueue(element_queue_capacity)
        self._fetchers: dict[int, SplitFetcher[E, SplitT]] = {}
        self._next_id = 0
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._closed = False

    @property
    def queue(self) -> ElementQueue[RecordsWithSplitIds[E]]:
        """The queue the reader polls."""
        return self._queue

    @abstractmethod
    def add_splits(self, splits: Sequence[SplitT]) -> None:
        """Distribute ``splits`` to fetchers (starting fetchers as needed)."""

    def check_errors(self) -> None:
        """Re-raise the first fetcher error, if any.

        Raises
        ------
        SparkLookupError
            The fetcher's error itself when it is one of ours (a ``ConnectorError``
            naming the table or URL), else a [`SourceError`][] caused by it.
        """
        with self._error_lock:
            error = self._error
        if error is None:
            return
        if isinstance(error, SparkLookupError):
            raise error
        raise SourceError(f"a split fetcher failed: {error!r}") from error

    def all_idle(self) -> bool:
        """True if every fetcher is idle (no splits, tasks or batches left to queue)."""
        return all(f.is_idle() for f in self._fetchers.values())

    def close(self, timeout: float = 10.0) -> None:
        """Stop every fetcher and wait up to ``timeout`` seconds for their threads."""
        self._closed = True
        fetchers = list(self._fetchers.values())
        for fetcher in fetchers:
            fetcher.shutdown()
        for fetcher in fetchers:
            if not fetcher.join(timeout):
                _log.warning("fetcher %d did not stop within %.1fs", fetcher.fetcher_id, timeout)

    def _record_error(self, error: BaseException) -> None:
        with self._error_lock:
            if self._error is None:
                self._error = error
        self._queue.notify_availability()

    def _create_fetcher(self) -> SplitFetcher[E, SplitT]:
        if self._closed:
            raise SourceError("the fetcher manager is closed")
        fetcher_id = self._next_id
        self._next_id += 1
        fetcher = SplitFetcher(fetcher_id, self._queue, self._factory(), self._record_error,
                               release_memory=self._release_memory)
        self._fetchers[fetcher_id] = fetcher
        fetcher.start()
        return fetcher


class SingleThreadFetcherManager(SplitFetcherManager[E, SplitT]):
    """One fetcher thread reads every split of the reader, in assignment order (the
    default of `PullingSourceReader`; what every built-in source uses, since
    a pulling reader owns one split at a time)."""

    def add_splits(self, splits: Sequence[SplitT]) -> None:
        fetcher = next(iter(self._fetchers.values()), None) or self._create_fetcher()
        fetcher.add_splits(splits)


class MultiThreadFetcherManager(SplitFetcherManager[E, SplitT]):
    """Up to ``num_fetchers`` fetcher threads, each with its own split reader; each new
    split goes to the fetcher with the fewest unfinished splits (a new fetcher while
    fewer than ``num_fetchers`` exist). Splits are read in parallel; each split stays
    with one fetcher, so its records keep their order.

    For a reader that owns several splits at once (a push-style enumerator, or a
    restore); a pulling reader owns one at a time and gains nothing from it.

    Parameters
    ----------
    split_reader_factory
        Makes a new `SplitReader` per fetcher, where the reader runs.
    num_fetchers
        The most fetcher threads (and split readers, and so connections).
    element_queue_capacity
        Batches the shared queue holds before fetchers block.
    release_memory
        As `SplitFetcherManager`.

    Raises
    ------
    ConfigError
        For a ``num_fetchers`` that is not a positive int.
    """

    def __init__(
        self,
        split_reader_factory: Callable[[], SplitReader[E, SplitT]],
        num_fetchers: int,
        element_queue_capacity: int = 2,
        *,
        release_memory: bool = False,
    ) -> None:
        self._num_fetchers = check_int(num_fetchers, "num_fetchers")
        super().__init__(split_reader_factory, element_queue_capacity,
                         release_memory=release_memory)

    def add_splits(self, splits: Sequence[SplitT]) -> None:
        for split in splits:
            idle = [f for f in self._fetchers.values() if f.num_assigned == 0]
            if idle:
                fetcher = idle[0]
            elif len(self._fetchers) < self._num_fetchers:
                fetcher = self._create_fetcher()
            else:
                fetcher = min(self._fetchers.values(), key=lambda f: f.num_assigned)
            fetcher.add_splits([split])
