"""How ``FileSource`` decodes one Parquet row group: in units of a bounded size in bytes,
each unit flagged when it is the row group's last.

A unit is one ``ParquetFile.iter_batches`` batch: one fetch, one queue element. Its
size trades speed against what a reader holds (the units in its queue, the one being
handed over, the decoder's state):

- pyarrow decodes each unit's columns in parallel and then waits for all of them, and
  every unit costs the fetcher its conversion and hand-over, so small units leave
  cores idle: on 2 CPUs, 4 columns of 44 bytes a row, the decoding loop alone read
  64K-row units (2.8 MB) at 0.77-0.85x of ``pq.read_table``, 256K-row units at 1.00x
  (benchmarks/README.md, "Decode units of about 8 MB");
- a unit of a fixed number of rows is any size: 64K rows of a table of 1 KB rows are
  64 MB. So the rows of a unit follow from the row group's footer (the width of each
  column read: its uncompressed size over the rows, at least its fixed width, for
  strings at least the length of its min and max values), between a floor (a few
  per-unit costs per MB of very wide rows) and a ceiling (an estimate can still fall
  short: dictionary-encoded values of many lengths).

The last unit is known by counting rows against the footer's, not by decoding one unit
ahead (which would hold one more unit per reader).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DECODE_BYTES", "decode_rows", "row_group_batches"]

DECODE_BYTES = 8 << 20
"""The decoded bytes a unit aims at."""
MIN_DECODE_ROWS = 1 << 12
MAX_DECODE_ROWS = 1 << 18


def _fixed_width(data_type: pa.DataType) -> int:
    """Bytes a value of ``data_type`` takes decoded, if that is fixed (else 0)."""
    try:
        return max(int(data_type.bit_width) // 8, 1)
    except ValueError:  # not a fixed-width type (strings, lists, structs...)
        return 0


def _stored_width(chunk: Any, rows: int) -> float:
    """Bytes a row of column chunk ``chunk`` takes, by the footer: its uncompressed size
    over the rows, or for byte arrays at least the mean length of its min and max (a
    dictionary stores each distinct value once, so its size says little about what
    the values decode to)."""
    width = chunk.total_uncompressed_size / rows
    statistics = chunk.statistics
    if (chunk.physical_type == "BYTE_ARRAY" and statistics is not None
            and statistics.has_min_max):
        width = max(width, 4 + (len(statistics.min) + len(statistics.max)) / 2)
    return float(width)


def decode_rows(group: Any, schema: pa.Schema, scale: int = 1) -> int:
    """Rows per unit for row group ``group`` (its ``RowGroupMetaData``) read as the
    columns of ``schema``: about ``scale`` x `DECODE_BYTES`, within the floor and
    ``scale`` x the ceiling."""
    rows = group.num_rows
    if rows <= 0:
        return MIN_DECODE_ROWS
    chunks = [group.column(index) for index in range(group.num_columns)]
    width = 0.0
    for field in schema:
        # A nested column is stored as several leaf chunks, "name.child..." each.
        stored = sum(_stored_width(chunk, rows) for chunk in chunks
                     if chunk.path_in_schema == field.name
                     or chunk.path_in_schema.startswith(field.name + "."))
        width += max(stored, _fixed_width(field.type))
    if width <= 0:
        return MAX_DECODE_ROWS * scale
    return int(min(max(DECODE_BYTES * scale / width, MIN_DECODE_ROWS), MAX_DECODE_ROWS * scale))


def row_group_batches(parquet: Any, row_group: int, schema: pa.Schema, scale: int = 1
                      ) -> Iterator[tuple[pa.RecordBatch, bool]]:
    """The columns of ``schema`` of row group ``row_group`` of ``parquet`` (an open
    ``ParquetFile``), unit by unit (``scale`` x the usual size), each with whether it is
    the last."""
    group = parquet.metadata.row_group(row_group)
    total = group.num_rows
    done = 0
    for batch in parquet.iter_batches(batch_size=decode_rows(group, schema, scale),
                                      row_groups=[row_group], columns=schema.names):
        done += batch.num_rows
        yield batch, done >= total
