"""The pull-based enumerator all built-in sources share: a planner discovers splits one
at a time, on request, and its progress is part of the enumerator state."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from scan.enumerator import SplitEnumerator, SplitEnumeratorContext
from scan.serializers import (
    JsonVersionedSerializer,
    SimpleVersionedSerializer,
    pack_versioned,
    unpack_versioned,
)
from scan.source import SplitT
from spark_lookup.errors import SourceError
from spark_lookup.shown import shown


class SplitPlanner(ABC, Generic[SplitT]):
    """Discovers splits lazily on the coordinator; opens its clients on first use."""

    @abstractmethod
    def next_split(self) -> SplitT | None:
        """The next split, or None when there are no more."""

    @abstractmethod
    def progress(self) -> Any:
        """The discovery progress as JSON-like data (tagged scalars allowed)."""

    def close(self) -> None:  # optional hook
        """Close clients."""


@dataclass(frozen=True)
class PullEnumeratorState(Generic[SplitT]):
    """Splits not yet assigned (added back, or discovered ahead) and the planner's progress."""

    pending: tuple[SplitT, ...]
    progress: Any


class PullSplitEnumerator(SplitEnumerator[SplitT, PullEnumeratorState[SplitT]]):
    """Answers each split request with a pending split, else the planner's next one,
    else no-more-splits (at most once per reader registration, by the context)."""

    def __init__(self, context: SplitEnumeratorContext[SplitT], planner: SplitPlanner[SplitT],
                 pending: Sequence[SplitT] = ()) -> None:
        self._context = context
        self._planner = planner
        self._pending: deque[SplitT] = deque(pending)

    def start(self) -> None:
        """Nothing to do before the first request: discovery is lazy."""

    def handle_split_request(self, subtask_id: int) -> None:
        if subtask_id not in self._context.registered_readers:
            return  # a request of a reader that has gone away
        split = self._pending.popleft() if self._pending else self._planner.next_split()
        if split is None:
            self._context.signal_no_more_splits(subtask_id)
        else:
            self._context.assign_split(split, subtask_id)

    def add_splits_back(self, splits: Sequence[SplitT], subtask_id: int) -> None:
        self._pending.extendleft(reversed(list(splits)))

    def add_reader(self, subtask_id: int) -> None:
        """Readers ask for splits themselves."""

    def snapshot_state(self, checkpoint_id: int) -> PullEnumeratorState[SplitT]:
        return PullEnumeratorState(tuple(self._pending), self._planner.progress())

    def close(self) -> None:
        self._planner.close()


class PullEnumeratorStateSerializer(JsonVersionedSerializer[PullEnumeratorState[SplitT]]):
    """Writes pending splits with the source's split serializer (each with its own
    version) and the planner progress as tagged JSON."""

    def __init__(self, split_serializer: SimpleVersionedSerializer[SplitT], version: int, what: str
                 ) -> None:
        self._splits = split_serializer
        self._version = version
        self.WHAT = what

    @property
    def version(self) -> int:
        return self._version

    def to_json(self, obj: PullEnumeratorState[SplitT]) -> Any:
        return {
            "pending": [pack_versioned(self._splits, split) for split in obj.pending],
            "progress": obj.progress,
        }

    def from_json(self, version: int, value: Any) -> PullEnumeratorState[SplitT]:
        if not isinstance(value, dict):
            raise SourceError(f"{self.WHAT} is malformed: expected an object")
        pending = tuple(
            unpack_versioned(self._splits, packed, f"a pending split of {self.WHAT}")
            for packed in value["pending"]
        )
        return PullEnumeratorState(pending, value["progress"])


class ListPlanner(SplitPlanner[SplitT]):
    """Hands out a fixed list of splits; its progress is the position in the list."""

    def __init__(self, splits: Sequence[SplitT], position: int = 0) -> None:
        self._splits = list(splits)
        self._position = position

    def next_split(self) -> SplitT | None:
        if self._position >= len(self._splits):
            return None
        split = self._splits[self._position]
        self._position += 1
        return split

    def progress(self) -> Any:
        return {"position": self._position}

    @staticmethod
    def position_of(progress: Any) -> int:
        """The position saved by `snapshot`.

        Raises
        ------
        SourceError
            If ``progress`` is not what `snapshot` writes.
        """
        if not isinstance(progress, dict) or not isinstance(progress.get("position"), int):
            raise SourceError(f"malformed split list progress: {shown(progress)}")
        return int(progress["position"])


class VersionListPlanner(SplitPlanner[SplitT]):
    """Plans the splits of one version of a table when first asked (``plan(version)``,
    None: the current one, gives the version planned and its splits), then hands them
    out in order; the version is in its progress (under ``key``), so a restore plans
    the same splits."""

    def __init__(self, plan: Callable[[int | None], tuple[int | None, Sequence[SplitT]]],
                 key: str, progress: Any, what: str) -> None:
        if progress is not None and not (isinstance(progress, dict)
                                         and isinstance(progress.get(key), int)):
            raise SourceError(f"malformed {what} planner progress: {shown(progress, 120)}")
        self._plan = plan
        self._key = key
        self._version: int | None = None if progress is None else int(progress[key])
        self._position = 0 if progress is None else ListPlanner.position_of(progress)
        self._splits: ListPlanner[SplitT] | None = None

    def next_split(self) -> SplitT | None:
        if self._splits is None:
            self._version, splits = self._plan(self._version)
            self._splits = ListPlanner(splits, self._position)
        return self._splits.next_split()

    def progress(self) -> Any:
        if self._version is None:
            return None
        position = (self._position if self._splits is None
                    else ListPlanner.position_of(self._splits.progress()))
        return {self._key: self._version, "position": position}
