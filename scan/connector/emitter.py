"""Emitting fetched elements and advancing split state (Flink's ``RecordEmitter``): the
generic base, and the emitter of Arrow record batches."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from scan.reader import ReaderOutput

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ArrowRecordEmitter", "RecordEmitter", "RowOffsetState"]

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


class RowOffsetState(Protocol):
    """A split state whose position is the number of rows emitted so far (a restore
    skips that many rows of the split)."""

    def advance(self, rows: int) -> None:
        """``rows`` more rows of the split were emitted."""
        ...


RowStateT = TypeVar("RowStateT", bound=RowOffsetState)


class ArrowRecordEmitter(RecordEmitter["pa.RecordBatch", RowStateT]):
    """Emits fetched record batches with ``output.collect_arrow`` and advances the split
    state by their row counts: the emitter of `ArrowRecordsBySplits`.

    Runs on the reader's thread; stateless, so one instance may serve every reader. A
    batch here is a slice of at most ``records_per_poll`` rows (the reader asks for no
    more), so the state moves in the same steps as with row records and a checkpoint
    stays exact. The state is advanced after the output took the rows: an output that
    refuses a batch (wrong schema) leaves the position where it was.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from scan import ReaderOutput
    >>> class Offset:
    ...     rows = 0
    ...     def advance(self, rows): self.rows += rows
    >>> class Rows(ReaderOutput):
    ...     def __init__(self): self.rows = []
    ...     def collect(self, record): self.rows.append(record)
    >>> state, output = Offset(), Rows()
    >>> ArrowRecordEmitter().emit_record(pa.record_batch({"n": [1, 2]}), output, state)
    >>> output.rows, state.rows
    ([(1,), (2,)], 2)
    """

    def emit_record(
        self, element: pa.RecordBatch, output: ReaderOutput, split_state: RowStateT
    ) -> None:
        output.collect_arrow(element)
        split_state.advance(element.num_rows)
