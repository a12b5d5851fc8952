"""Batches of fetched records, grouped by split (Flink's ``RecordsWithSplitIds``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

__all__ = ["RecordsBySplits", "RecordsWithSplitIds"]

E = TypeVar("E")


class RecordsWithSplitIds(ABC, Generic[E]):
    """One fetch's worth of records, split by split, plus the splits it finished.

    Produced by a `SplitReader` on a fetcher thread, consumed by the reader on
    its own thread (never both at once). The reader walks it split by split:
    `next_split`, then `next_records_from_split` until empty, and so on;
    when `next_split` returns None it takes `finished_splits`.
    """

    @abstractmethod
    def next_split(self) -> str | None:
        """Move to the next split with records; its id, or None when none is left."""

    @abstractmethod
    def next_records_from_split(self, max_records: int) -> Sequence[E]:
        """Up to ``max_records`` further records of the current split, in order; empty
        when the current split has no more in this batch."""

    @abstractmethod
    def finished_splits(self) -> set[str]:
        """Ids of splits this batch completes: every record of them is in this or an
        earlier batch."""

    def is_empty(self) -> bool:  # optional hook
        """True if the batch is known to carry neither records nor finished splits (a
        fetcher drops it instead of queueing it); the default does not know: False."""
        return False

    def recycle(self) -> None:  # optional hook
        """The reader is done with this batch (a hook for pooled buffers)."""


class RecordsBySplits(RecordsWithSplitIds[E]):
    """The plain implementation: a list of records per split, and a set of finished ids.

    Examples
    --------
    >>> batch = RecordsBySplits({"a": [(1,), (2,)]}, finished=["a"])
    >>> batch.next_split(), list(batch.next_records_from_split(10)), batch.finished_splits()
    ('a', [(1,), (2,)], {'a'})
    """

    def __init__(
        self,
        records: dict[str, Sequence[E]] | None = None,
        finished: Iterable[str] = (),
    ) -> None:
        self._by_split: dict[str, Sequence[E]] = {} if records is None else dict(records)
        self._finished = set(finished)
        self._order: list[str] = list(self._by_split)
        self._split_index = -1
        self._position = 0
        self._current: Sequence[E] = ()

    def add(self, split_id: str, records: Sequence[E]) -> None:
        """Append ``records`` of ``split_id`` (before the batch is handed over)."""
        if split_id in self._by_split:
            self._by_split[split_id] = [*self._by_split[split_id], *records]
        else:
            self._by_split[split_id] = records
            self._order.append(split_id)

    def add_finished(self, split_id: str) -> None:
        """Mark ``split_id`` finished by this batch."""
        self._finished.add(split_id)

    def is_empty(self) -> bool:
        """True if the batch carries neither records nor finished splits."""
        return not self._finished and not any(self._by_split.values())

    def next_split(self) -> str | None:
        while self._split_index + 1 < len(self._order):
            self._split_index += 1
            split_id = self._order[self._split_index]
            self._current = self._by_split[split_id]
            self._position = 0
            if self._current:
                return split_id
        self._current = ()
        return None

    def next_records_from_split(self, max_records: int) -> Sequence[E]:
        start = self._position
        if start >= len(self._current):
            return ()
        end = min(len(self._current), start + max_records)
        self._position = end
        if start == 0 and end == len(self._current):
            return self._current
        return self._current[start:end]

    def finished_splits(self) -> set[str]:
        return self._finished
