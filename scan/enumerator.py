"""The split enumerator and its context (Flink's ``SplitEnumerator``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from scan.split import EnumStateT, SplitT

__all__ = ["ReaderInfo", "SplitEnumerator", "SplitEnumeratorContext"]

R = TypeVar("R")


@dataclass(frozen=True)
class ReaderInfo:
    """A registered reader: its subtask index and where it runs."""

    subtask_id: int
    location: str = "local"


class SplitEnumeratorContext(ABC, Generic[SplitT]):
    """What an enumerator may do: assign splits, signal the end, talk to readers.

    Provided by whatever drives the enumerator ([`LocalSourceRunner`][], or the
    planner of a Spark read). Its methods are called from the enumerator's own thread
    (the coordinator); [`call_async`][] is the way to run blocking work elsewhere.
    """

    @property
    @abstractmethod
    def current_parallelism(self) -> int:
        """The number of parallel readers of this read."""

    @property
    @abstractmethod
    def registered_readers(self) -> Mapping[int, ReaderInfo]:
        """The readers registered so far, by subtask index."""

    @abstractmethod
    def assign_splits(self, assignment: Mapping[int, Sequence[SplitT]]) -> None:
        """Give each listed reader its splits.

        Raises
        ------
        SourceError
            If a subtask index is not a registered reader.
        """

    def assign_split(self, split: SplitT, subtask_id: int) -> None:
        """Give one split to the reader of ``subtask_id``."""
        self.assign_splits({subtask_id: [split]})

    @abstractmethod
    def signal_no_more_splits(self, subtask_id: int) -> None:
        """Tell a reader it will get no further splits.

        Delivered at most once per registration of the reader; repeated signals are
        ignored, so an enumerator may signal whenever it finds itself out of splits.
        """

    @abstractmethod
    def send_event_to_reader(self, subtask_id: int, event: Any) -> None:
        """Deliver a custom event to one reader's [`SourceReader.handle_source_events`][]."""

    @abstractmethod
    def call_async(
        self, callable: Callable[[], R], handler: Callable[[R | None, BaseException | None], None]
    ) -> None:
        """Run ``callable`` on a worker thread, then ``handler(result, error)`` on the
        coordinator thread (where the enumerator's other methods run), so blocking
        discovery never stalls split assignment and the enumerator needs no locks."""


class SplitEnumerator(ABC, Generic[SplitT, EnumStateT]):
    """Discovers splits and assigns them to readers; one per read, on the coordinator.

    All methods are called from one thread, so an enumerator needs no locks. Readers
    pull: each asks for a split when it starts and after it finishes one
    ([`handle_split_request`][]); an enumerator answers with a split, or, when it has
    none left, with [`SplitEnumeratorContext.signal_no_more_splits`][].

    The enumerator's state ([`snapshot_state`][]) holds every split not yet assigned
    (including splits added back) and the progress of discovery; splits already
    assigned belong to the readers' state.
    """

    @abstractmethod
    def start(self) -> None:
        """Called once before any other method (except ``close``)."""

    @abstractmethod
    def handle_split_request(self, subtask_id: int) -> None:
        """Reader ``subtask_id`` asks for a split; answer through the context."""

    @abstractmethod
    def add_splits_back(self, splits: Sequence[SplitT], subtask_id: int) -> None:
        """Take back splits assigned to a reader that failed before its state was
        checkpointed; they must be assigned again."""

    @abstractmethod
    def add_reader(self, subtask_id: int) -> None:
        """A reader registered (also after a restore); pull-based enumerators wait for
        its request instead of assigning here."""

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> EnumStateT:
        """The state to checkpoint: unassigned splits and discovery progress."""

    def handle_source_event(self, subtask_id: int, event: Any) -> None:  # optional hook
        """A custom event from a reader; ignored unless overridden."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # optional hook
        """Checkpoint ``checkpoint_id`` is durable; ignored unless overridden."""

    def close(self) -> None:  # optional hook
        """Release clients; the enumerator is not used afterwards."""
