"""Flat numpy arrays in one file, written once and mapped by every reader without a copy.

The layout (little-endian):

    b"SLKEYIDX"                 magic, 8 bytes
    header length               uint64
    header                      JSON: {"header": {...}, "arrays": {name: [dtype, offset, length]}}
    arrays                      each at a 64-byte aligned offset from the file's start

A reader checks that every array lies inside the file and has an allowed type before it
makes a view of it, so a damaged header raises ``ValueError``; damaged array values are
the checksum's business (the snapshot store checks it before a reader gets here).
Depends on nothing of ours.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["ComputedArray", "map_arrays", "write_arrays"]

_MAGIC = b"SLKEYIDX"
_ALIGN = 64
_MAX_HEADER = 1 << 20
_DTYPES = {"<i4": np.int32, "<i8": np.int64, "<u8": np.uint64}


@dataclass(frozen=True)
class ComputedArray:
    """An array written as it is computed, a piece at a time, never whole in memory."""

    dtype: np.dtype[Any]
    length: int
    pieces: Callable[[], Iterator[np.ndarray]]
    """Its values in order, in pieces of ``dtype`` that add up to ``length``."""

    ndim = 1

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array."""
        return self.length * self.dtype.itemsize


def _aligned(position: int) -> int:
    return -(-position // _ALIGN) * _ALIGN


def write_arrays(path: Path, header: Mapping[str, Any],
                 arrays: Mapping[str, np.ndarray | ComputedArray]) -> None:
    """Write ``header`` (JSON-able) and ``arrays`` (1-d, of int32, int64 or uint64) to
    ``path``, and fsync it.

    Raises
    ------
    ValueError
        When a `ComputedArray`'s pieces do not add up to its length.
    """
    layout: dict[str, list[Any]] = {}
    position = 0
    for name, array in arrays.items():
        dtype = np.dtype(array.dtype).newbyteorder("<").str
        if dtype not in _DTYPES or array.ndim != 1:
            raise TypeError(f"array {name!r} of {array.dtype}, {array.ndim}-d cannot be stored")
        layout[name] = [dtype, position, array.length if isinstance(array, ComputedArray)
                        else len(array)]
        position = _aligned(position + array.nbytes)
    # Offsets are relative to the data start, which depends on the header's own length.
    text = json.dumps({"header": dict(header), "arrays": layout}, sort_keys=True).encode()
    start = _aligned(len(_MAGIC) + 8 + len(text))
    for entry in layout.values():
        entry[1] += start
    text = json.dumps({"header": dict(header), "arrays": layout}, sort_keys=True).encode()
    start_again = _aligned(len(_MAGIC) + 8 + len(text))
    if start_again != start:  # the offsets' digits pushed the header over an alignment
        for entry in layout.values():
            entry[1] += start_again - start
        text = json.dumps({"header": dict(header), "arrays": layout}, sort_keys=True).encode()
    with open(path, "wb") as file:
        file.write(_MAGIC + len(text).to_bytes(8, "little") + text)
        for name, array in arrays.items():
            file.write(b"\0" * (layout[name][1] - file.tell()))
            pieces = array.pieces() if isinstance(array, ComputedArray) else iter([array])
            written = 0
            for piece in pieces:
                # A C-contiguous little-endian view: written straight from its memory.
                file.write(np.ascontiguousarray(piece, dtype=layout[name][0]).data)
                written += len(piece)
            if written != layout[name][2]:
                raise ValueError(f"array {name!r}: {written} values written, not "
                                 f"{layout[name][2]}")
        file.flush()
        os.fsync(file.fileno())


def map_arrays(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and read-only views of the arrays of a file written by
    `write_arrays`, memory-mapped (no copy: the pages are the page cache's).

    Raises
    ------
    ValueError
        When the file is not such a file, or an array lies outside it.
    OSError
        When it cannot be opened (``FileNotFoundError``: it is gone).
    """
    with pa.memory_map(str(path), "r") as source:
        buffer = source.read_buffer()
    size = buffer.size
    if size < len(_MAGIC) + 8 or buffer[: len(_MAGIC)].to_pybytes() != _MAGIC:
        raise ValueError(f"{path} is not a key index file")
    length = int.from_bytes(buffer[len(_MAGIC): len(_MAGIC) + 8].to_pybytes(), "little")
    if length > min(_MAX_HEADER, size - len(_MAGIC) - 8):
        raise ValueError(f"{path}: header length {length} is past the file's end")
    try:
        raw = json.loads(buffer[len(_MAGIC) + 8: len(_MAGIC) + 8 + length].to_pybytes())
        header, layout = raw["header"], raw["arrays"]
        if not isinstance(header, dict) or not isinstance(layout, dict):
            raise TypeError("not objects")
        arrays: dict[str, np.ndarray] = {}
        for name, (dtype, offset, count) in layout.items():
            kind = _DTYPES[dtype]
            if not (isinstance(offset, int) and isinstance(count, int)
                    and offset >= 0 and count >= 0
                    and offset + count * np.dtype(kind).itemsize <= size):
                raise ValueError(f"array {name!r} lies outside the file")
            arrays[name] = np.frombuffer(buffer, dtype=kind, count=count, offset=offset)
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} has a bad header: {exc}") from None
    return header, arrays
