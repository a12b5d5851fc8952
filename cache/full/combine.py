"""A loaded table's columns combined into one chunk each, releasing the chunks as they
are copied.

A full load arrives in many record batches; a snapshot wants one chunk per column
(readers take rows from it; a take from many chunks concatenates them first). Arrow's
``combine_chunks`` keeps every chunk of a column until the combined copy is made, so a
column costs twice its size at the moment it is combined. Here a column of plain values
(numbers, dates and times, text and binary) is copied chunk by chunk into one buffer and
each chunk is dropped as soon as it is copied: combining costs one chunk more than the
table. Other columns are combined by Arrow.

The caller must hold no other reference to the table (its chunks would stay alive).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cache.full.release import give_back

__all__ = ["combine_releasing"]


def combine_releasing(holder: list[pa.Table]) -> pa.Table:
    """The table popped from ``holder``, one chunk per column."""
    table = holder.pop()
    schema = table.schema
    columns: list[pa.ChunkedArray | None] = list(table.columns)
    del table
    give_back()  # what the load freed (decoding buffers) before the copies start
    combined: list[pa.Array] = []
    for i, field in enumerate(schema):
        column = columns[i]
        columns[i] = None
        assert column is not None
        if column.num_chunks == 1:
            combined.append(column.chunk(0))
            continue
        chunks: list[pa.Array | None] = list(column.chunks)
        del column
        combined.append(_concatenated(chunks, field.type))
        give_back()
    return pa.Table.from_arrays(combined, schema=schema)


def _concatenated(chunks: list[pa.Array | None], kind: pa.DataType) -> pa.Array:
    arrays = [chunk for chunk in chunks if chunk is not None]
    total = sum(len(chunk) for chunk in arrays)
    del arrays
    width = _fixed_width(kind)
    if width:
        return _fixed(chunks, kind, total, width)
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        return _variable(chunks, kind, total)
    return pa.concat_arrays([chunk for chunk in chunks if chunk is not None])


def _fixed_width(kind: pa.DataType) -> int:
    """Bytes a value of a fixed-width plain type takes (0: not such a type)."""
    if pa.types.is_boolean(kind) or pa.types.is_dictionary(kind) or pa.types.is_nested(kind):
        return 0
    if (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_temporal(kind)
            or pa.types.is_decimal(kind)):
        return int(kind.bit_width) // 8
    return 0


def _validity(chunks: list[pa.Array | None], total: int) -> tuple[np.ndarray | None, int]:
    """Each row's validity, when some row is null (else None), and the null count."""
    if not any(chunk is not None and chunk.null_count for chunk in chunks):
        return None, 0
    valid = np.empty(total, dtype=bool)
    at = 0
    for chunk in chunks:
        assert chunk is not None
        valid[at:at + len(chunk)] = chunk.is_valid().to_numpy(zero_copy_only=False)
        at += len(chunk)
    return valid, int(total - np.count_nonzero(valid))


def _bitmap(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None:
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _fixed(chunks: list[pa.Array | None], kind: pa.DataType, total: int,
           width: int) -> pa.Array:
    valid, nulls = _validity(chunks, total)
    values = np.empty(total * width, dtype=np.uint8)
    at = 0
    for i, chunk in enumerate(chunks):
        assert chunk is not None
        n = len(chunk)
        data = chunk.buffers()[1]
        if data is not None and n:
            start = chunk.offset * width
            values[at:at + n * width] = np.frombuffer(data, dtype=np.uint8, count=n * width,
                                                      offset=start)
        at += n * width
        chunks[i] = None  # copied: its memory can go back now
        del chunk, data
        if i % 16 == 15:
            give_back()
    return pa.Array.from_buffers(kind, total, [_bitmap(valid), pa.py_buffer(values)],
                                 null_count=nulls)


def _variable(chunks: list[pa.Array | None], kind: pa.DataType, total: int) -> pa.Array:
    sizes = []
    for chunk in chunks:
        assert chunk is not None
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32,
                                count=len(chunk) + 1, offset=chunk.offset * 4)
        sizes.append(int(offsets[-1]) - int(offsets[0]))
    if sum(sizes) >= 2**31:  # past 32-bit offsets: Arrow says what to do (large types)
        return pa.concat_arrays([chunk for chunk in chunks if chunk is not None])
    valid, nulls = _validity(chunks, total)
    out_offsets = np.empty(total + 1, dtype=np.int32)
    out_offsets[0] = 0
    data = np.empty(sum(sizes), dtype=np.uint8)
    row = byte = 0
    for i, chunk in enumerate(chunks):
        assert chunk is not None
        n = len(chunk)
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32, count=n + 1,
                                offset=chunk.offset * 4)
        first = int(offsets[0])
        out_offsets[row + 1:row + n + 1] = offsets[1:] - first + byte
        size = sizes[i]
        if size:
            data[byte:byte + size] = np.frombuffer(chunk.buffers()[2], dtype=np.uint8,
                                                   count=size, offset=first)
        row += n
        byte += size
        chunks[i] = None
        del chunk, offsets
        if i % 16 == 15:
            give_back()
    return pa.Array.from_buffers(kind, total, [_bitmap(valid), pa.py_buffer(out_offsets),
                                               pa.py_buffer(data)], null_count=nulls)
