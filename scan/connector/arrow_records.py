"""Fetched Arrow record batches, grouped by split: the Arrow flavour of
``RecordsWithSplitIds`` (Flink's fetchers also hand over batches of records)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

from scan.connector.records import RecordsWithSplitIds
from spark_lookup.errors import SourceError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ArrowRecordsBySplits"]

# What a split reader may add for a split: a batch, a table (its chunks), or several.
ArrowData = Union["pa.RecordBatch", "pa.Table", Sequence["pa.RecordBatch"]]


class ArrowRecordsBySplits(RecordsWithSplitIds["pa.RecordBatch"]):
    """One fetch's worth of Arrow record batches, split by split, plus the splits it
    finished.

    Built by a `SplitReader` on its fetcher thread (`add`,
    `add_finished`), then walked by the reader on its own thread. A record here
    is a row: `next_records_from_split` hands out zero-copy slices of the split's
    batches holding at most ``max_records`` rows together, so ``records_per_poll``
    bounds rows per poll exactly as for row records, and a checkpoint between two polls
    can fall inside a fetched batch. Empty batches are dropped when added.

    Use it with `ArrowRecordEmitter` (or an emitter that calls
    ``output.collect_arrow``). One queue element is one instance, however many rows it
    holds, so the element queue's capacity still counts fetches.

    Parameters
    ----------
    records
        Batches per split id (a batch, a ``pyarrow.Table``, or a sequence of batches).
    finished
        Ids of splits this fetch completes.

    Examples
    --------
    >>> import pyarrow as pa
    >>> fetch = ArrowRecordsBySplits({"a": pa.record_batch({"n": [1, 2, 3]})}, ["a"])
    >>> fetch.next_split()
    'a'
    >>> [b.num_rows for b in fetch.next_records_from_split(2)]
    [2]
    >>> [b.column(0).to_pylist() for b in fetch.next_records_from_split(2)]
    [[3]]
    >>> fetch.next_records_from_split(2), fetch.next_split(), fetch.finished_splits()
    ([], None, {'a'})
    """

    def __init__(
        self,
        records: Mapping[str, ArrowData] | None = None,
        finished: Iterable[str] = (),
    ) -> None:
        self._by_split: dict[str, list[pa.RecordBatch]] = {}
        self._finished = set(finished)
        self._order: list[str] = []
        self._split_index = -1
        self._current: deque[pa.RecordBatch] = deque()
        for split_id, data in (records or {}).items():
            self.add(split_id, data)

    def add(self, split_id: str, data: ArrowData) -> None:
        """Append the rows of ``data`` to ``split_id`` (before the fetch is handed over).

        Raises
        ------
        SourceError
            If ``data`` is neither a record batch, a table, nor a sequence of batches.
        """
        batches = _batches(data, split_id)
        if split_id not in self._by_split:
            self._by_split[split_id] = []
            self._order.append(split_id)
        self._by_split[split_id].extend(batches)

    def add_finished(self, split_id: str) -> None:
        """Mark ``split_id`` finished by this fetch."""
        self._finished.add(split_id)

    def is_empty(self) -> bool:
        return not self._finished and not any(self._by_split.values())

    @property
    def num_rows(self) -> int:
        """Rows of every split, emitted or not."""
        return sum(batch.num_rows for batches in self._by_split.values() for batch in batches)

    def next_split(self) -> str | None:
        while self._split_index + 1 < len(self._order):
            self._split_index += 1
            split_id = self._order[self._split_index]
            self._current = deque(self._by_split[split_id])
            if self._current:
                return split_id
        self._current = deque()
        return None

    def next_records_from_split(self, max_records: int) -> list[pa.RecordBatch]:
        """Zero-copy slices of the current split's next rows, in order, holding at most
        ``max_records`` rows together; empty when the split has no more in this fetch."""
        taken: list[pa.RecordBatch] = []
        room = max_records
        current = self._current
        while current and room > 0:
            batch = current[0]
            if batch.num_rows <= room:
                taken.append(current.popleft())
                room -= batch.num_rows
            else:
                taken.append(batch.slice(0, room))
                current[0] = batch.slice(room)
                room = 0
        return taken

    def finished_splits(self) -> set[str]:
        return self._finished


def _batches(data: Any, split_id: str) -> list[pa.RecordBatch]:
    import pyarrow as pa

    if isinstance(data, pa.RecordBatch):
        batches = [data]
    elif isinstance(data, pa.Table):
        batches = data.to_batches()
    elif isinstance(data, Sequence) and all(isinstance(b, pa.RecordBatch) for b in data):
        batches = list(data)
    else:
        raise SourceError(
            f"records of split {split_id!r} must be a pyarrow.RecordBatch, a pyarrow.Table "
            f"or a sequence of record batches, got {type(data).__name__}"
        )
    return [batch for batch in batches if batch.num_rows]
