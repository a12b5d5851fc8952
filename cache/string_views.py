"""Short strings of a snapshot, or of a warm partial cache's rows, gathered through
16-byte views: one memory access a row.

A join gathers random rows of the dimension. Arrow's ``take`` of a string column reads
each row's offsets and then its bytes, two cache misses a row once the table outgrows
the CPU caches (at a few million rows, most of a full-cache join's time). A *view*
(Arrow's ``string_view`` layout) holds a value of up to 12 bytes inline, so gathering
the views of short strings touches one place a row; longer values are read from the
column's own data, as before. Views are built once per snapshot (or merged segment of a
large partial cache), for string and binary columns whose values are mostly short; a
snapshot's are published beside the key index, so the processes that map it share them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from cache.full.index_file import ComputedArray

__all__ = ["StringViews"]

_INLINE = 12
"""The longest value a view holds inline (Arrow's layout)."""

_SHORT_SHARE = 0.5
"""Views are built for a column when at least this share of its values is inline (a
long value costs a view and its bytes, as Arrow's take costs offsets and bytes: views
never gather slower, but take 12 bytes a row more than offsets for long values)."""

_PREFIX = "view:"
_CHUNK = 1 << 18
"""Rows converted at a time: a build holds one piece's temporaries beside its result."""
_VIEW_TYPES = {pa.string(): pa.string_view(), pa.binary(): pa.binary_view()}


def _single(column: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else None
    return column


def _offsets(column: pa.Array) -> np.ndarray:
    return np.frombuffer(column.buffers()[1], dtype=np.int32, count=len(column) + 1,
                         offset=4 * column.offset)


def _mostly_short(column: pa.Array) -> bool:
    count = len(column)
    short = int(np.count_nonzero(np.diff(_offsets(column)) <= _INLINE))
    return count > 0 and short >= _SHORT_SHARE * count


def _view_pieces(column: pa.Array) -> Iterator[np.ndarray]:
    """The views of ``column`` as ``uint64`` pairs, a piece at a time, long values
    pointing into the column's data from its first offset (so they hold whatever buffer
    the same values are mapped from)."""
    count = len(column)
    first = int(_offsets(column)[0])
    offsets, data = column.buffers()[1], column.buffers()[2]
    for start in range(0, count, _CHUNK):
        stop = min(start + _CHUNK, count)
        # A piece of offset 0 over the same bytes: Arrow casts a slice's views from its
        # array's start (quadratic over the pieces). Validity is the column's business.
        piece = pa.Array.from_buffers(
            column.type, stop - start,
            [None, offsets.slice(4 * (column.offset + start), 4 * (stop - start + 1)), data],
        ).cast(_VIEW_TYPES[column.type])
        views = np.frombuffer(piece.buffers()[1], dtype=np.int32,
                              count=4 * (stop - start)).reshape(-1, 4).copy()
        long = views[:, 0] > _INLINE
        # Arrow's cast points long values at the column's data buffer, from its start.
        views[long, 2] = 0
        views[long, 3] -= first
        yield views.view(np.uint64).reshape(-1)


def _viewed_columns(table: pa.Table, skip: Sequence[str]) -> Iterator[tuple[str, pa.Array]]:
    """The string and binary columns of ``table`` (one chunk each, not in ``skip``) whose
    values are mostly short enough to be inline."""
    for field, column in zip(table.schema, table.columns, strict=True):
        one = _single(column)
        if (field.type in _VIEW_TYPES and one is not None and field.name not in skip
                and _mostly_short(one)):
            yield field.name, one


class StringViews:
    """The views of a snapshot's short-string columns (none for other columns)."""

    __slots__ = ("_views",)

    def __init__(self, views: Mapping[str, np.ndarray] | None = None) -> None:
        self._views = dict(views or {})

    @classmethod
    def of(cls, table: pa.Table, skip: Sequence[str] = ()) -> StringViews:
        """Views of every string or binary column of ``table`` (one chunk each) whose
        values are mostly inline, but the columns named in ``skip`` (a join never
        gathers its key columns)."""
        views = {}
        for name, column in _viewed_columns(table, skip):
            built = np.empty(2 * len(column), dtype=np.uint64)
            at = 0
            for piece in _view_pieces(column):
                built[at:at + len(piece)] = piece
                at += len(piece)
            views[name] = built
        return cls(views)

    @staticmethod
    def computed(table: pa.Table, skip: Sequence[str] = ()) -> dict[str, ComputedArray]:
        """What `payload` of `of` holds, computed as it is written (a
        loading process publishes views it never holds)."""
        return {_PREFIX + name: ComputedArray(np.dtype(np.uint64), 2 * len(column),
                                              functools.partial(_view_pieces, column))
                for name, column in _viewed_columns(table, skip)}

    @classmethod
    def from_payload(cls, arrays: Mapping[str, np.ndarray], table: pa.Table) -> StringViews:
        """The views published with ``table`` (those that fit it: a column of the
        table's rows, in one chunk)."""
        views = {}
        for name, array in arrays.items():
            if not name.startswith(_PREFIX):
                continue
            column = name[len(_PREFIX):]
            if column not in table.schema.names:
                continue
            one = _single(table.column(column))
            if (one is not None and one.type in _VIEW_TYPES and array.dtype == np.uint64
                    and len(array) == 2 * len(one)):
                views[column] = array
        return cls(views)

    def payload(self) -> dict[str, np.ndarray]:
        """The arrays to publish beside the key index."""
        return {_PREFIX + name: views for name, views in self._views.items()}

    @property
    def nbytes(self) -> int:
        """Bytes the views hold."""
        return sum(int(v.nbytes) for v in self._views.values())

    def take(self, name: str, column: pa.Array | pa.ChunkedArray, rows: np.ndarray,
             missing: np.ndarray | None) -> pa.Array | None:
        """Rows ``rows`` of ``column`` (null where ``missing``), or None when the column
        has no views (the caller takes it the usual way)."""
        views = self._views.get(name)
        one = _single(column)
        if views is None or one is None:
            return None
        at = rows if missing is None else np.where(missing, 0, rows)
        gathered = views.view("V16")[at]
        valid = None if missing is None else ~missing
        if one.null_count:
            bits = np.frombuffer(one.buffers()[0], dtype=np.uint8)
            position = at + one.offset
            held = ((bits[position >> 3] >> (position & 7)) & 1).astype(bool)
            valid = held if valid is None else valid & held
        fields = gathered.view(np.int32).reshape(-1, 4)
        if valid is not None:
            fields[~valid] = 0
        data_start = int(_offsets(one)[0])
        data = one.buffers()[2]
        size = 0 if data is None else data.size - data_start
        lengths = fields[:, 0]
        long = lengths > _INLINE
        offset = fields[long, 3].astype(np.int64)
        # Views are data: a damaged one must not reach past the column's bytes.
        if ((lengths < 0).any() or fields[long, 2].any() or (offset < 0).any()
                or (offset + lengths[long] > size).any()):
            raise ValueError(f"the views of column {name!r} do not fit its data")
        mask = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
        buffers = [mask, pa.py_buffer(gathered),
                   data.slice(data_start) if data is not None else pa.py_buffer(b"")]
        as_views = pa.Array.from_buffers(_VIEW_TYPES[one.type], len(at), buffers,
                                         null_count=-1 if valid is not None else 0)
        return as_views.cast(one.type)
