"""The Parquet footers this process has parsed, by their bytes, so that inferring a
``FileSource``'s schema, planning its splits and reading them parse a file's footer once
(three reads of 0.25-0.3 ms each were a tenth of a 1M-row load's fixed cost).

A footer is looked up by the bytes at the end of the file, read each time (a few tens
of microseconds): a file rewritten in place within the clock's tick, to the same size,
which ``stat`` cannot tell from the old one, is still read with its own footer. Equal
footer bytes describe the same layout, so the parsed footer is right for either.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import TYPE_CHECKING, NamedTuple

from cachetools import LRUCache

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["Footer", "read_footer"]

# Footers are kept up to this many bytes (as stored): wide files with many row groups
# have footers of megabytes, and a process may read many files.
_BUDGET = 32 << 20
_MAGIC = b"PAR1"  # an encrypted footer ends with PARE: parsed by pyarrow, not kept


class Footer(NamedTuple):
    """A file's Parquet footer and its columns as Arrow reads them."""

    metadata: pq.FileMetaData
    schema: pa.Schema


_FOOTERS: LRUCache[tuple[str, bytes], Footer] = LRUCache(
    _BUDGET, getsizeof=lambda footer: max(int(footer.metadata.serialized_size), 1))
_LOCK = threading.Lock()


def _tail(path: str) -> bytes | None:
    """The footer's bytes followed by its length and the magic, or None when the file
    does not end as a plain Parquet file."""
    with open(path, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        if size < 12:
            return None
        file.seek(size - 8)
        end = file.read(8)
        length = int.from_bytes(end[:4], "little")
        if end[4:] != _MAGIC or length > size - 12:
            return None
        file.seek(size - 8 - length)
        return file.read(length) + end


def read_footer(path: str) -> Footer:
    """The footer of the Parquet file at ``path``, parsed once per footer.

    Raises
    ------
    OSError, ValueError
        As ``pyarrow.parquet.read_metadata`` (a missing file, not Parquet).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    tail = _tail(path)
    if tail is None:
        metadata = pq.read_metadata(path)  # raises pyarrow's own error, or reads it
        return Footer(metadata, metadata.schema.to_arrow_schema())
    key = (path, hashlib.blake2b(tail, digest_size=16).digest())
    with _LOCK:
        footer = _FOOTERS.get(key)
    if footer is None:
        metadata = pq.read_metadata(pa.BufferReader(tail))
        footer = Footer(metadata, metadata.schema.to_arrow_schema())
        if metadata.serialized_size <= _BUDGET:
            with _LOCK:
                _FOOTERS[key] = footer
    return footer
