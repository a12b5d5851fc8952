"""A split reader that reads several of its splits side by side (``FileSource``'s).

One reader reading one split at a time leaves cores idle when a split is decoded in
steps that each wait for their slowest part: pyarrow decodes a unit of a Parquet row
group by decoding its columns in parallel and waiting for all of them, and 4 columns
of unequal cost (a string column 40% of the work) keep 2 cores busy about 0.6 of the
time. Several splits decoded at once fill each other's gaps, as ``pq.read_table`` does
with every row group of a file (benchmarks/README.md, "Row groups side by side").
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Generic

from connectors.files.batches import BatchStreamReader
from scan.connector.arrow_records import ArrowRecordsBySplits
from scan.split import SplitT
from spark_lookup.errors import SparkLookupError, raise_from

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SideBySideReader"]

_Item = tuple["pa.RecordBatch", bool] | None


class _Lane(Generic[SplitT]):
    """A split being read: its batches and the future of the next one."""

    __slots__ = ("batches", "next", "split")

    def __init__(self, split: SplitT, batches: Iterator[tuple[pa.RecordBatch, bool]]) -> None:
        self.split = split
        self.batches = batches
        self.next: Future[_Item] | None = None


class SideBySideReader(BatchStreamReader[SplitT]):
    """A `BatchStreamReader` that reads up to ``lanes`` of its splits at once.

    Each split's `flagged_batches` is advanced on a thread of the reader's own,
    one batch ahead; a fetch hands over the first batch ready, so the
    splits' batches interleave, each split's in order (a checkpoint records each
    split's rows emitted, as for splits read one after the other). With one lane it
    reads as its base, on the fetcher thread. The reader owns several splits only if
    its source reader keeps that many in flight
    (``PullingSourceReader(splits_in_flight=...)``).

    Runs on its fetcher thread; its ``lanes`` threads start with its first split and
    stop on `close` (a batch being read is finished first). ``release_memory``:
    each of them hands pyarrow's freed memory back after every batch, as the fetchers
    do (see ``ReaderOptions``).
    """

    def __init__(self, lanes: int = 1, release_memory: bool = False) -> None:
        super().__init__()
        self._lanes = lanes
        self._release_memory = release_memory
        self._in_flight: deque[_Lane[SplitT]] = deque()
        self._pool: ThreadPoolExecutor | None = None
        # Done when a task waits for the fetcher (splits to add): a fetch waiting for
        # its lanes returns, so a split added now starts at once, not after a lane's
        # next unit (a whole row group at p=1).
        self._wake_lock = threading.Lock()
        self._wake: Future[None] = Future()

    def wake_up(self) -> None:
        super().wake_up()
        with self._wake_lock:
            if not self._wake.done():
                self._wake.set_result(None)

    def fetch(self) -> ArrowRecordsBySplits:
        if self._lanes == 1:
            return super().fetch()
        records = ArrowRecordsBySplits()
        if self._woken.is_set():
            self._rearm()
            return records
        while len(self._in_flight) < self._lanes and self._splits:
            split = self._splits.popleft()
            entering = _Lane(split, self.flagged_batches(split))
            entering.next = self._ahead(entering)
            self._in_flight.append(entering)
        if not self._in_flight:
            return records
        lane = self._first_ready()
        if lane is None:
            self._rearm()
            return records
        assert lane.next is not None
        try:
            item = lane.next.result()
        except SparkLookupError:
            raise
        except self.READ_ERRORS as exc:
            raise_from(self.read_error(lane.split, exc), exc)
        batch, last = (None, True) if item is None else item
        split_id = lane.split.split_id
        if batch is not None and batch.num_rows:
            records.add(split_id, batch)
        if last:
            _close(lane)
            records.add_finished(split_id)
        else:
            lane.next = self._ahead(lane)
            self._in_flight.append(lane)
        return records

    def _first_ready(self) -> _Lane[SplitT] | None:
        """The lane whose next batch is ready first, taken out of the lanes in flight
        (waiting for them in turn would leave a lane whose batch is ready, one batch
        ahead, idle behind a slower one), or None when woken up first."""
        # Every lane in flight has a batch on the way (one is asked for as it enters).
        futures: list[Future[Any]] = [lane.next for lane in self._in_flight
                                      if lane.next is not None]
        done, _ = wait([*futures, self._wake], return_when=FIRST_COMPLETED)
        lane = next((lane for lane in self._in_flight if lane.next in done), None)
        if lane is not None:
            self._in_flight.remove(lane)
        return lane

    def _rearm(self) -> None:
        self._woken.clear()
        with self._wake_lock:
            if self._wake.done():
                self._wake = Future()

    def _ahead(self, lane: _Lane[SplitT]) -> Future[_Item]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._lanes, thread_name_prefix="scan-split-lane")
        return self._pool.submit(self._next, lane.batches)

    def _next(self, batches: Iterator[tuple[pa.RecordBatch, bool]]) -> _Item:
        item = next(batches, None)
        if self._release_memory:
            import pyarrow as pa

            pa.default_memory_pool().release_unused()
        return item

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        lanes, self._in_flight = self._in_flight, deque()
        for lane in lanes:
            _close(lane)
        super().close()


def _close(lane: _Lane[SplitT]) -> None:
    close = getattr(lane.batches, "close", None)
    if close is not None:
        close()  # a generator's own cleanup (its open file), not left to the collector
