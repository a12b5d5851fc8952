"""Turning fetched elements into rows, and advancing split state (Flink's ``RecordEmitter``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Generic, TypeVar

from scan.reader import ReaderOutput

__all__ = ["RecordEmitter"]

E = TypeVar("E")
StateT = TypeVar("StateT")


class RecordEmitter(ABC, Generic[E, StateT]):
    """Emits the rows of fetched elements and advances the split's state as it does.

    Runs on the reader's thread, inside ``poll_next``. This is the only place where a
    split's mutable state changes, and it changes at the moment its records are
    emitted, so a checkpoint (taken between polls) describes exactly what was emitted:
    records fetched but not yet emitted are read again after a restore, emitted ones
    are not.
    """

    @abstractmethod
    def emit_record(self, element: E, output: ReaderOutput, split_state: StateT) -> None:
        """Emit the row(s) of one element and record its position in ``split_state``."""

    def emit_records(
        self, elements: Sequence[E], output: ReaderOutput, split_state: StateT
    ) -> None:
        """Emit consecutive elements of one split; override to do it in bulk (one
        ``collect_batch`` and one state update), which is what makes full loads fast."""
        for element in elements:
            self.emit_record(element, output, split_state)
