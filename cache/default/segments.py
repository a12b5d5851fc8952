"""Append-only Arrow rows in a few segments, gathered by global row number.

Appends land as new segments, merged with the one before whenever it is no more than
twice their size (a binary counter: ``O(log n)`` segments, each row copied ``O(log n)``
times as the store grows). Gathers take from each segment its own rows, because
Arrow's ``take`` over a chunked string column first concatenates the chunks.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["Segments"]


class Segments:
    """Rows of one schema; row ``i`` of the whole is row ``i - starts[s]`` of segment ``s``."""

    __slots__ = ("_starts", "schema", "segments")

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.segments: list[pa.Table] = []
        self._starts = np.zeros(1, dtype=np.int64)

    @property
    def num_rows(self) -> int:
        """Rows held (live or not: the owner decides)."""
        return int(self._starts[-1])

    @property
    def nbytes(self) -> int:
        """Bytes of the Arrow buffers held."""
        return sum(int(segment.get_total_buffer_size()) for segment in self.segments)

    def append(self, table: pa.Table) -> int:
        """Add ``table``'s rows at the end; returns the global number of its first."""
        first = self.num_rows
        if not table.num_rows:
            return first
        segments = self.segments
        segments.append(table.combine_chunks())
        while len(segments) > 1 and 2 * segments[-1].num_rows >= segments[-2].num_rows:
            last = segments.pop()
            segments[-1] = pa.concat_tables([segments[-1], last]).combine_chunks()
        self._starts = np.zeros(len(segments) + 1, dtype=np.int64)
        np.cumsum([s.num_rows for s in segments], out=self._starts[1:])
        return first

    def merge(self) -> None:
        """Make the segments one (a copy of every row)."""
        if len(self.segments) > 1:
            self.replace(pa.concat_tables(self.segments))

    def replace(self, table: pa.Table) -> None:
        """Hold only ``table`` (compaction)."""
        if table.num_rows:
            self.segments = [table.combine_chunks()]
            self._starts = np.array([0, table.num_rows], dtype=np.int64)
        else:
            self.segments = []
            self._starts = np.zeros(1, dtype=np.int64)

    def cast(self, schema: pa.Schema) -> None:
        """Cast every segment to ``schema`` (a wider type for a column, say)."""
        self.segments = [segment.cast(schema) for segment in self.segments]
        self.schema = schema

    def slice(self, start: int, stop: int) -> pa.Table:
        """Rows ``start`` to ``stop`` (global numbers) that lie in one segment, as they
        do for one key (a key's rows are appended together)."""
        if start == stop or not self.segments:
            return self.schema.empty_table()
        index = int(np.searchsorted(self._starts, start, side="right")) - 1
        first = int(self._starts[index])
        return self.segments[index].slice(start - first, stop - start)

    def take(self, rows: np.ndarray) -> pa.Table:
        """Rows by global number, in the order given."""
        segments = self.segments
        if not len(rows) or not segments:
            return self.schema.empty_table()
        if len(segments) == 1:
            return segments[0].take(pa.array(rows, type=pa.int64()))
        which = np.searchsorted(self._starts, rows, side="right") - 1
        order = np.argsort(which, kind="stable")
        bounds = np.searchsorted(which[order], np.arange(len(segments) + 1))
        parts = []
        for index, segment in enumerate(segments):
            members = order[bounds[index] : bounds[index + 1]]
            if len(members):
                local = rows[members] - self._starts[index]
                parts.append(segment.take(pa.array(local, type=pa.int64())))
        grouped = pa.concat_tables(parts).combine_chunks()
        back = np.empty(len(order), dtype=np.int64)
        back[order] = np.arange(len(order), dtype=np.int64)
        return grouped.take(pa.array(back, type=pa.int64()))
