"""A new snapshot's columns written to files as its batches arrive, read back mapped,
one chunk a column.

A snapshot serves one chunk per column (a probe's ``take`` from many chunks
concatenates them first), and a store publishes the table as one Arrow record batch.
Collected in memory, a load holds the whole table, and for a while the source's batches
beside it. Here each batch's columns are appended to files as the batch arrives, and
the batch is let go: a loader holds a few batches, not the table. The finished table
maps the files, so a page costs the loader's resident set only once it is read (the
key columns, by the index; nothing else). Plain columns (numbers, dates and times,
decimals, fixed-size binary, text and binary) are written this way; other columns
(booleans, dictionaries, nested types), small or rare in dimension tables, are kept as
chunks and combined by Arrow when the spool finishes.

A writer copies the table's mapped buffers from their files (`ColumnSpool.spans`)
instead of reading them through the map, so publishing the table does not bring it into
memory either. Depends on nothing of ours.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

__all__ = ["ArraySpool", "ColumnSpool", "Span", "SpoolError"]

_TAKE_ROWS = 1 << 18
"""Rows a reorder takes at once: its temporaries stay bounded by this, not the table."""


class SpoolError(OSError):
    """Writing the spool's files failed (a full disk, say): the source was not at fault."""


class Span(NamedTuple):
    """A mapped buffer of the finished table and the file holding its bytes."""

    address: int
    size: int
    path: Path


class ColumnSpool:
    """The columns of one table, appended batch by batch to files in ``directory``.

    Used by one thread at a time (a load). `append` every batch, then
    `finish` once: the table, one chunk a column, its plain columns mapped from
    the files. `discard` deletes the files (maps already made stay valid, on
    POSIX systems, until their last user lets go).

    Parameters
    ----------
    directory
        Where the files go (they are named ``<prefix><n>...``).
    prefix
        The start of every file's name, unique to this spool.
    schema
        The schema of every batch appended and of the table.
    """

    def __init__(self, directory: Path, prefix: str, schema: pa.Schema) -> None:
        self.schema = schema
        self._directory = directory
        self._prefix = prefix
        self._generation = 0
        self._paths: list[Path] = []
        self._columns: list[_SpooledColumn] = _writing(self._writers)
        self._arrays: list[ArraySpool] = []
        self._table: pa.Table | None = None
        self._spans: list[Span] = []

    def append(self, batch: pa.RecordBatch) -> None:
        """Write ``batch``'s columns, after checking it in full (offsets, value bounds:
        the finished table is never in memory whole to be checked).

        Raises
        ------
        ValueError
            When the batch is not of the spool's schema, or not valid Arrow data.
        SpoolError
            When writing fails.
        """
        if self._table is not None:
            raise ValueError("append() after finish()")
        if not batch.schema.equals(self.schema):
            raise ValueError(f"a batch of schema {batch.schema} for a spool of {self.schema}")
        try:
            batch.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise ValueError(f"a batch that is not valid Arrow data: {exc}") from exc
        for column, array in zip(self._columns, batch.columns, strict=True):
            _writing(column.append, array)

    def finish(self) -> pa.Table:
        """The table of every row appended, in order, one chunk a column.

        Raises
        ------
        SpoolError
            When the files cannot be completed or mapped.
        """
        if self._table is None:
            arrays = [_writing(column.finish) for column in self._columns]
            self._table = pa.Table.from_arrays(arrays, schema=self.schema)
            self._spans = [span for column in self._columns for span in column.spans]
            self._columns = []
        return self._table

    def reorder(self, indices: pa.Array) -> pa.Table:
        """The finished table's rows in the order of ``indices``, written to new files
        column by column (a bounded number of rows at a time); the old files are
        deleted and the spool holds the new table. The caller lets go of the old table.

        Raises
        ------
        SpoolError
            When writing fails.
        """
        sources = [column.chunk(0) for column in self.finish().columns]
        old = self._paths
        self._paths = []
        self._generation += 1
        self._table = None
        self._spans = []
        try:
            self._columns = self._writers()
            for column, source in zip(self._columns, sources, strict=True):
                for start in range(0, len(indices), _TAKE_ROWS):
                    _writing(column.append, source.take(indices.slice(start, _TAKE_ROWS)))
        finally:
            del sources
            _remove(old)  # the old table's maps stay valid while the caller holds it
        return self.finish()

    def array(self, name: str, dtype: type[np.number[Any]]) -> ArraySpool:
        """A spool of one flat array of ``dtype`` beside the columns (values computed
        from the batches as they arrive: the key index's hashes), deleted with them.

        Raises
        ------
        SpoolError
            When its file cannot be created.
        """
        path = self._directory / f"{self._prefix}{self._generation}-{name}.array"
        self._paths.append(path)
        spool = ArraySpool(_writing(_Sink, path), dtype)
        self._arrays.append(spool)
        return spool

    def holds(self, name: str) -> bool:
        """Whether the file called ``name`` is one of this spool's."""
        return name.startswith(self._prefix)

    def spans(self) -> list[Span]:
        """Where the finished table's mapped buffers come from."""
        return list(self._spans)

    def discard(self) -> None:
        """Delete the files and let go of the table (idempotent)."""
        for column in self._columns:
            column.close()
        for array in self._arrays:
            array.close()
        self._columns = []
        self._arrays = []
        self._table = None
        self._spans = []
        _remove(self._paths)
        self._paths = []

    # --- helpers

    def _writers(self) -> list[_SpooledColumn]:
        return [self._writer(i, field.type) for i, field in enumerate(self.schema)]

    def _writer(self, number: int, kind: pa.DataType) -> _SpooledColumn:
        def path(part: str) -> Path:
            name = self._directory / f"{self._prefix}{self._generation}-{number}.{part}"
            self._paths.append(name)
            return name

        width = _fixed_width(kind)
        if width:
            return _FixedColumn(kind, width, path("values"))
        offsets = _offset_type(kind)
        if offsets is not None:
            return _VariableColumn(kind, offsets, path("offsets"), path("data"))
        return _MemoryColumn(kind)


def _writing(step: Callable[..., Any], *args: Any) -> Any:
    try:
        return step(*args)
    except SpoolError:
        raise
    except OSError as exc:
        raise SpoolError(exc.errno, f"writing a snapshot's columns failed: {exc}") from exc


def _remove(paths: list[Path]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _fixed_width(kind: pa.DataType) -> int:
    """Bytes a value of a fixed-width plain type takes (0: not such a type)."""
    if pa.types.is_fixed_size_binary(kind):
        return int(kind.byte_width)
    if (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_temporal(kind)
            or pa.types.is_decimal(kind)):
        return int(kind.bit_width) // 8
    return 0


def _offset_type(kind: pa.DataType) -> type[np.integer[Any]] | None:
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        return np.int32
    if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        return np.int64
    return None


def _mapped(path: Path) -> pa.Buffer:
    if not path.stat().st_size:
        return pa.py_buffer(b"")  # nothing to map
    with pa.memory_map(str(path), "r") as source:
        return source.read_buffer()  # the map lives as long as the buffer


class _Sink:
    """An append-only file, written whole, unbuffered."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: Any = open(path, "xb", buffering=0)  # noqa: SIM115 - closed by close()
        self.size = 0

    def write(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        self.size += len(view)
        while view:  # an unbuffered write may take part of it
            view = view[self._file.write(view):]

    def close(self) -> None:
        self._file.close()


class ArraySpool:
    """One flat numpy array appended in pieces to a file, mapped back when finished
    (made by `ColumnSpool.array`)."""

    def __init__(self, sink: _Sink, dtype: type[np.number[Any]]) -> None:
        self._sink = sink
        self._dtype = np.dtype(dtype)

    def append(self, values: np.ndarray) -> None:
        """Write ``values`` after those appended before.

        Raises
        ------
        SpoolError
            When writing fails.
        """
        _writing(self._sink.write, np.ascontiguousarray(values, dtype=self._dtype))

    def finish(self) -> np.ndarray:
        """Every value appended, read-only, mapped from the file.

        Raises
        ------
        SpoolError
            When the file cannot be completed or mapped.
        """
        self.close()
        buffer = _writing(_mapped, self._sink.path)
        return np.frombuffer(buffer, dtype=self._dtype)

    def close(self) -> None:
        self._sink.close()


class _Validity:
    """The validity bitmap of a column, packed as rows arrive; nothing is kept while
    no row is null (the column then has no bitmap)."""

    def __init__(self) -> None:
        self.rows = 0
        self.nulls = 0
        self._bits = bytearray()
        self._carry = np.zeros(0, dtype=bool)  # fewer than 8 rows, not yet packed

    def append(self, array: pa.Array) -> None:
        before = self.rows
        self.rows += len(array)
        if not array.null_count and not self.nulls:
            return
        if not self.nulls:  # the first null: every row before it was valid
            self._bits += b"\xff" * (before // 8)
            self._carry = np.ones(before % 8, dtype=bool)
        self.nulls += array.null_count
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        both = np.concatenate((self._carry, valid))
        whole = len(both) // 8 * 8
        self._bits += np.packbits(both[:whole], bitorder="little").tobytes()
        self._carry = both[whole:]

    def buffer(self) -> pa.Buffer | None:
        if not self.nulls:
            return None
        return pa.py_buffer(bytes(self._bits) + np.packbits(self._carry, bitorder="little")
                            .tobytes())


class _SpooledColumn:
    kind: pa.DataType
    spans: list[Span]

    def append(self, array: pa.Array) -> None:
        raise NotImplementedError

    def finish(self) -> pa.Array:
        raise NotImplementedError

    def close(self) -> None:
        """Close open files (after a failure: finish() closes them otherwise)."""


class _FixedColumn(_SpooledColumn):
    def __init__(self, kind: pa.DataType, width: int, path: Path) -> None:
        self.kind = kind
        self._width = width
        self._values = _Sink(path)
        self._validity = _Validity()
        self.spans = []

    def append(self, array: pa.Array) -> None:
        n = len(array)
        data = array.buffers()[1]
        if data is None:  # no values stored (an empty or all-null array): any will do
            self._values.write(bytes(n * self._width))
        else:
            start = array.offset * self._width
            self._values.write(memoryview(data)[start:start + n * self._width])
        self._validity.append(array)

    def finish(self) -> pa.Array:
        self._values.close()
        values = _mapped(self._values.path)
        self.spans = [Span(values.address, values.size, self._values.path)]
        validity = self._validity
        return pa.Array.from_buffers(self.kind, validity.rows, [validity.buffer(), values],
                                     null_count=validity.nulls)

    def close(self) -> None:
        self._values.close()


class _VariableColumn(_SpooledColumn):
    def __init__(self, kind: pa.DataType, offsets: type[np.integer[Any]], offsets_path: Path,
                 data_path: Path) -> None:
        self.kind = kind
        self._type = offsets
        self._limit = int(np.iinfo(offsets).max)
        self._offsets = _Sink(offsets_path)
        self._data = _Sink(data_path)
        self._validity = _Validity()
        self.spans = []

    def append(self, array: pa.Array) -> None:
        n = len(array)
        self._validity.append(array)
        if not n:
            return
        size = np.dtype(self._type).itemsize
        buffers = array.buffers()
        offsets = np.frombuffer(buffers[1], dtype=self._type, count=n + 1,
                                offset=array.offset * size)
        first, last = int(offsets[0]), int(offsets[-1])
        at = self._data.size
        if at + last - first > self._limit:
            raise ValueError(f"a {self.kind} column of more than {self._limit} bytes: Arrow's "
                             "offsets cannot address it")
        if not self._offsets.size:
            self._offsets.write(np.zeros(1, dtype=self._type))
        self._offsets.write((offsets[1:] - (first - at)).astype(self._type, copy=False))
        if last > first:
            self._data.write(memoryview(buffers[2])[first:last])

    def finish(self) -> pa.Array:
        if not self._offsets.size:
            self._offsets.write(np.zeros(1, dtype=self._type))
        self.close()
        offsets, data = _mapped(self._offsets.path), _mapped(self._data.path)
        self.spans = [Span(offsets.address, offsets.size, self._offsets.path),
                      Span(data.address, data.size, self._data.path)]
        validity = self._validity
        return pa.Array.from_buffers(self.kind, validity.rows,
                                     [validity.buffer(), offsets, data], null_count=validity.nulls)

    def close(self) -> None:
        self._offsets.close()
        self._data.close()


class _MemoryColumn(_SpooledColumn):
    def __init__(self, kind: pa.DataType) -> None:
        self.kind = kind
        self._chunks: list[pa.Array] = []
        self.spans = []

    def append(self, array: pa.Array) -> None:
        self._chunks.append(array)

    def finish(self) -> pa.Array:
        chunks, self._chunks = self._chunks, []
        if not chunks:
            return pa.array([], type=self.kind)
        return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
