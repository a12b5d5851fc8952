"""Splits: the units of work a source is divided into (Flink's ``SourceSplit``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TypeVar

__all__ = ["EnumStateT", "SourceSplit", "SplitT"]


class SourceSplit(ABC):
    """One unit of work of a [`Source`][]: a file, a row group, a key range.

    A split is a value: immutable, small, and picklable, because it travels from the
    enumerator (the driver, at planning) to a reader (an executor task) and into
    checkpoints. Concrete splits are frozen dataclasses. The progress of reading a split
    is never written into the split object itself; a reader keeps it in a mutable *split
    state* and builds a new split from it when a checkpoint is taken (a split that
    "resumes at row 40" is a different value from the split that starts at row 0).

    Subclasses implement [`split_id`][] as a property derived from their fields, so the
    id stays the same when a split is rebuilt with a new resume position.
    """

    __slots__ = ()

    @property
    @abstractmethod
    def split_id(self) -> str:
        """An id unique among the splits of one source instance and stable across
        checkpoints: the split rebuilt from a checkpoint has the same id."""


SplitT = TypeVar("SplitT", bound=SourceSplit)
"""The split type of a source, its enumerator and its readers."""
EnumStateT = TypeVar("EnumStateT")
"""The checkpoint state type of a source's enumerator."""
