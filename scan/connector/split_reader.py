"""The blocking reader of splits that runs on a fetcher thread (Flink's ``SplitReader``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from scan.connector.records import RecordsWithSplitIds
from scan.split import SourceSplit

__all__ = ["SplitReader", "SplitsAddition", "SplitsChange"]

E = TypeVar("E")
SplitT = TypeVar("SplitT", bound=SourceSplit)


@dataclass(frozen=True)
class SplitsChange(Generic[SplitT]):
    """A change of the splits a `SplitReader` reads."""

    splits: Sequence[SplitT]


@dataclass(frozen=True)
class SplitsAddition(SplitsChange[SplitT]):
    """New splits to read, after the ones already assigned."""


class SplitReader(ABC, Generic[E, SplitT]):
    """Reads records of its assigned splits; the connector-specific, blocking part.

    Runs on one fetcher thread: `fetch`, `handle_splits_changes` and
    `close` are only ever called from that thread, so a reader may keep a
    connection that must stay on one thread (sqlite3). `wake_up` is the exception:
    it is called from other threads.

    A split reader is created where the reader runs (never pickled), so it is where
    clients are opened, lazily, on the first split.
    """

    @abstractmethod
    def fetch(self) -> RecordsWithSplitIds[E]:
        """Read the next batch of records of the assigned splits; may block.

        Returns a `RecordsBySplits` of rows or an
        `ArrowRecordsBySplits` of record batches (the reader's emitter must
        match). Records of one split come in split order across calls. A split is reported in
        ``finished_splits()`` of the batch that carries (or follows) its last record.
        Driver errors are raised as [`ConnectorError`][spark_lookup.ConnectorError].
        """

    @abstractmethod
    def handle_splits_changes(self, change: SplitsChange[SplitT]) -> None:
        """Take new splits (a `SplitsAddition`)."""

    @abstractmethod
    def wake_up(self) -> None:
        """Make a blocked or the next `fetch` return soon, possibly with an empty
        batch (it is re-called later). Called from other threads."""

    def close(self) -> None:  # optional hook
        """Release clients; called on the fetcher thread when it shuts down."""
