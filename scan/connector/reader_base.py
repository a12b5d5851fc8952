"""The reader that connects fetcher threads to ``poll_next`` (Flink's ``SourceReaderBase``)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

from scan.connector.emitter import RecordEmitter
from scan.connector.fetcher import SplitFetcherManager
from scan.connector.records import RecordsWithSplitIds
from scan.reader import (
    InputStatus,
    ReaderOutput,
    SourceReader,
    SourceReaderContext,
    completed_future,
)
from scan.split import SourceSplit
from spark_lookup.errors import SourceError

__all__ = ["SourceReaderBase"]

E = TypeVar("E")
SplitT = TypeVar("SplitT", bound=SourceSplit)
StateT = TypeVar("StateT")


class SourceReaderBase(SourceReader[SplitT], Generic[E, SplitT, StateT]):
    """A reader whose splits are read by fetcher threads and emitted by an emitter.

    Runs where its subtask runs; all methods are called from one thread. Fetchers (see
    `SingleThreadFetcherManager`) do the blocking reads and fill a bounded
    queue; `poll_next` takes fetches from it without blocking and emits at most
    ``context.options.records_per_poll`` records (rows) per call through the
    `RecordEmitter`, which advances the per-split state. Fetches of Arrow
    batches (`ArrowRecordsBySplits`) are emitted as zero-copy slices of
    that many rows, so a poll (and a checkpoint after it) may end inside a batch.

    End of input is reported only when no more splits will come
    (`notify_no_more_splits`), every owned split has finished, and the queue is
    empty, and only after checking that no fetcher failed: a failed read never looks
    like a finished one. A fetcher's error is raised by the next ``poll_next``.

    Subclasses define the split state: `init_split_state`, `to_split`, and
    optionally `on_split_finished`. A reader is created where it runs and is never
    pickled; its split reader opens clients on its fetcher thread.

    Parameters
    ----------
    fetcher_manager
        Owns the fetcher threads and the queue they fill.
    record_emitter
        Emits fetched elements (rows or Arrow batches) and advances the split state.
    context
        The reader's context (split requests, options).
    """

    def __init__(
        self,
        fetcher_manager: SplitFetcherManager[E, SplitT],
        record_emitter: RecordEmitter[E, StateT],
        context: SourceReaderContext,
    ) -> None:
        self._manager = fetcher_manager
        self._emitter = record_emitter
        self._context = context
        self._records_per_poll = context.options.records_per_poll
        self._split_states: dict[str, StateT] = {}
        self._current_fetch: RecordsWithSplitIds[E] | None = None
        self._current_state: StateT | None = None
        self._no_more_splits = False

    @property
    def context(self) -> SourceReaderContext:
        """The context this reader was created with."""
        return self._context

    # --- split state hooks

    @abstractmethod
    def init_split_state(self, split: SplitT) -> StateT:
        """The mutable state of a newly added split (its position within the split)."""

    @abstractmethod
    def to_split(self, split_id: str, state: StateT) -> SplitT:
        """The split rebuilt at the position ``state`` records (for checkpoints)."""

    def on_split_finished(self, finished: Mapping[str, StateT]) -> None:  # optional hook
        """Splits that have been read completely (their states, by id)."""

    # --- SourceReader

    def start(self) -> None:
        """Nothing to start: fetchers start with the first split."""

    def add_splits(self, splits: Sequence[SplitT]) -> None:
        for split in splits:
            if split.split_id in self._split_states:
                raise SourceError(f"split {split.split_id!r} was added twice to one reader")
            self._split_states[split.split_id] = self.init_split_state(split)
        if splits:
            self._manager.add_splits(list(splits))

    def notify_no_more_splits(self) -> None:
        self._no_more_splits = True
        # A reader waiting for data may now be finished: let it poll again.
        self._manager.queue.notify_availability()

    def poll_next(self, output: ReaderOutput) -> InputStatus:
        self._manager.check_errors()
        while True:
            fetch = self._current_fetch
            if fetch is None:
                fetch = self._manager.queue.poll()
                if fetch is None:
                    return self._finished_or_available_later()
                self._current_fetch = fetch
            state = self._current_state
            if state is not None:
                records = fetch.next_records_from_split(self._records_per_poll)
                if records:
                    self._emitter.emit_records(records, output, state)
                    return InputStatus.MORE_AVAILABLE
            split_id = fetch.next_split()
            if split_id is None:
                self._finish_current_fetch(fetch)
                continue
            next_state = self._split_states.get(split_id)
            if next_state is None:
                raise SourceError(
                    f"fetched records of split {split_id!r}, which this reader does not own"
                )
            self._current_state = next_state

    def is_available(self) -> Future[None]:
        if self._current_fetch is not None:
            return completed_future()
        return self._manager.queue.available_future()

    def snapshot_state(self, checkpoint_id: int) -> list[SplitT]:
        return [self.to_split(sid, state) for sid, state in self._split_states.items()]

    def close(self) -> None:
        self._manager.close()

    # --- internals

    def _finish_current_fetch(self, fetch: RecordsWithSplitIds[E]) -> None:
        finished: dict[str, StateT] = {}
        for split_id in fetch.finished_splits():
            state = self._split_states.pop(split_id, None)
            if state is not None:
                finished[split_id] = state
        fetch.recycle()
        self._current_fetch = None
        self._current_state = None
        if finished:
            self.on_split_finished(finished)

    def _finished_or_available_later(self) -> InputStatus:
        if not self._no_more_splits or self._split_states:
            return InputStatus.NOTHING_AVAILABLE
        if not self._manager.queue.is_empty():
            return InputStatus.MORE_AVAILABLE
        # A fetcher that failed after its last batch must still fail the read.
        self._manager.check_errors()
        return InputStatus.END_OF_INPUT
