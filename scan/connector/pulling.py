"""A reader that pulls one split at a time, used by the built-in sources."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from scan.connector.emitter import RecordEmitter
from scan.connector.fetcher import SingleThreadFetcherManager, SplitFetcherManager
from scan.connector.reader_base import SourceReaderBase
from scan.connector.split_reader import SplitReader
from scan.reader import SourceReaderContext
from scan.split import SourceSplit

__all__ = ["PullingSourceReader", "SplitState"]

E = TypeVar("E")
SplitT = TypeVar("SplitT", bound=SourceSplit)
SplitT_co = TypeVar("SplitT_co", bound=SourceSplit, covariant=True)
StateT = TypeVar("StateT", bound="SplitState[SourceSplit]")


class SplitState(Protocol[SplitT_co]):
    """Mutable progress within one split; the emitter advances it."""

    def to_split(self) -> SplitT_co:
        """The split rebuilt to resume right after the last emitted record."""
        ...


class PullingSourceReader(SourceReaderBase[E, SplitT, StateT], Generic[E, SplitT, StateT]):
    """A `SourceReaderBase` that asks for a split whenever it owns fewer than
    ``splits_in_flight`` (by default: when it starts without one and whenever it has
    finished all it owns), until the enumerator says there are no more.

    Runs where its subtask runs. At most one split request is outstanding, and none is
    sent after no-more-splits, so a pull-based enumerator answers each request exactly
    once.

    Parameters
    ----------
    context
        The reader context.
    split_reader_factory
        Makes the split reader of the fetcher thread (called where the reader runs).
    record_emitter
        Emits elements and advances the split state.
    state_factory
        The initial mutable state of a split (``state.to_split()`` rebuilds it).
    fetcher_manager
        Defaults to a `SingleThreadFetcherManager` with the context's
        queue capacity and memory release.
    splits_in_flight
        The splits the reader owns at once when there are enough: more than one for a
        split reader that reads several side by side (the next one is asked for while
        the first is still being read).
    """

    def __init__(
        self,
        context: SourceReaderContext,
        split_reader_factory: Callable[[], SplitReader[E, SplitT]],
        record_emitter: RecordEmitter[E, StateT],
        state_factory: Callable[[SplitT], StateT],
        fetcher_manager: SplitFetcherManager[E, SplitT] | None = None,
        splits_in_flight: int = 1,
    ) -> None:
        if fetcher_manager is None:
            options = context.options
            fetcher_manager = SingleThreadFetcherManager(
                split_reader_factory, options.element_queue_capacity,
                release_memory=options.release_memory,
            )
        super().__init__(fetcher_manager, record_emitter, context)
        self._state_factory = state_factory
        self._splits_in_flight = splits_in_flight
        self._started = False
        self._requested = False  # a request not yet answered

    def init_split_state(self, split: SplitT) -> StateT:
        return self._state_factory(split)

    def to_split(self, split_id: str, state: StateT) -> SplitT:
        return state.to_split()  # type: ignore[return-value]  # StateT: SplitState[SplitT]

    def start(self) -> None:
        self._started = True
        self._request_splits()

    def add_splits(self, splits: Sequence[SplitT]) -> None:
        super().add_splits(splits)
        self._requested = False
        self._request_splits()

    def notify_no_more_splits(self) -> None:
        self._requested = False
        super().notify_no_more_splits()

    def on_split_finished(self, finished: Mapping[str, StateT]) -> None:
        self._request_splits()

    def _request_splits(self) -> None:
        # Restored splits are added before start(), when no request may be sent yet.
        if (self._started and not self._requested and not self._no_more_splits
                and len(self._split_states) < self._splits_in_flight):
            self._requested = True
            self.context.send_split_request()
