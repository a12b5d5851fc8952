"""ColumnSpool: batches written to files as they arrive give back the table they make,
one chunk a column, its plain columns mapped from the files; a reorder, a discard,
refused batches, failed writes."""

from __future__ import annotations

import datetime as dt
import decimal
import errno
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import cache.full.spool as spool_module
from cache.full.spool import ColumnSpool, SpoolError

COLUMNS: dict[str, tuple[pa.DataType, list[Any]]] = {
    "int64": (pa.int64(), [1, None, 3, 4, 5, None, 7, 8, 9, 10]),
    "int8": (pa.int8(), list(range(10))),
    "double": (pa.float64(), [0.5, 1.5, None, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5]),
    "string": (pa.string(), ["a", "", None, "ccc", "dd", "é", "f", None, "hhhh", "i"]),
    "binary": (pa.binary(), [b"\x00", b"", b"ab", None, b"c", b"d", b"e", b"f", b"g", b"h"]),
    "large_string": (pa.large_string(), [str(i) for i in range(9)] + [None]),
    "fixed_binary": (pa.binary(3), [bytes([i]) * 3 for i in range(9)] + [None]),
    "date": (pa.date32(), [dt.date(2024, 1, d) for d in range(1, 11)]),
    "timestamp": (pa.timestamp("us", "UTC"), [dt.datetime(2024, 1, 1, h, tzinfo=dt.timezone.utc)
                                              for h in range(10)]),
    "decimal": (pa.decimal128(10, 2), [decimal.Decimal(i) / 4 for i in range(10)]),
    "bool": (pa.bool_(), [True, False, None, True, True, False, False, True, None, True]),
    "list": (pa.list_(pa.int32()), [[i] for i in range(9)] + [None]),
    "dictionary": (pa.dictionary(pa.int8(), pa.string()), list("abcabcabca")),
}
PLAIN = {"int64", "int8", "double", "string", "binary", "large_string", "fixed_binary", "date",
         "timestamp", "decimal"}


def table() -> pa.Table:
    return pa.table({name: pa.array(values, kind) for name, (kind, values) in COLUMNS.items()})


def pieces(whole: pa.Table) -> list[pa.RecordBatch]:
    """Uneven batches, an empty one, the nulls of some columns only in later ones, and
    slices of a larger batch (offsets not zero)."""
    batch = whole.combine_chunks().to_batches()[0]
    return [batch.slice(0, 2), batch.slice(2, 0), batch.slice(2, 5), batch.slice(7, 1),
            batch.slice(8)]


def spooled(tmp_path: Path, batches: list[pa.RecordBatch], schema: pa.Schema) -> ColumnSpool:
    spool = ColumnSpool(tmp_path, f".spool-{uuid.uuid4().hex[:8]}-", schema)
    for batch in batches:
        spool.append(batch)
    return spool


def test_the_spooled_table_is_the_batches_table_one_chunk_a_column(tmp_path: Path) -> None:
    whole = table()
    spool = spooled(tmp_path, pieces(whole), whole.schema)
    got = spool.finish()
    got.validate(full=True)
    assert got.equals(whole)
    assert got.schema.equals(whole.schema, check_metadata=True)
    assert all(column.num_chunks == 1 for column in got.columns)
    for name, (_, values) in COLUMNS.items():
        assert got.column(name).null_count == values.count(None), name
        assert got.column(name).to_pylist() == whole.column(name).to_pylist(), name
    assert spool.finish() is got  # finished once


def test_plain_columns_are_mapped_from_the_files_others_kept_in_memory(tmp_path: Path) -> None:
    whole = table()
    spool = spooled(tmp_path, pieces(whole), whole.schema)
    got = spool.finish()
    spans = spool.spans()
    mapped = set()
    for name in COLUMNS:
        for buffer in got.column(name).chunk(0).buffers():
            if buffer is not None and buffer.size and any(
                    span.address <= buffer.address < span.address + span.size for span in spans):
                mapped.add(name)
    assert mapped == PLAIN
    for span in spans:  # each span is its file, whole
        assert span.size == span.path.stat().st_size
        assert spool.holds(span.path.name)


def test_nulls_first_seen_late_keep_the_rows_before_valid(tmp_path: Path) -> None:
    values = [1] * 21 + [None, 3]  # the first null past two whole bytes of the bitmap
    batches = [pa.record_batch([pa.array(values[i:i + 5], pa.int64())], names=["v"])
               for i in range(0, len(values), 5)]
    got = spooled(tmp_path, batches, batches[0].schema).finish()
    got.validate(full=True)
    assert got.column("v").to_pylist() == values
    assert spooled(tmp_path, batches[:2], batches[0].schema).finish().column(
        "v").chunk(0).buffers()[0] is None  # no null: no bitmap


def test_a_spool_of_no_rows_is_an_empty_table_of_its_schema(tmp_path: Path) -> None:
    whole = table()
    got = spooled(tmp_path, [pieces(whole)[1]], whole.schema).finish()  # one empty batch
    got.validate(full=True)
    assert got.num_rows == 0
    assert got.schema.equals(whole.schema)
    empty = ColumnSpool(tmp_path, ".spool-none-", whole.schema).finish()
    empty.validate(full=True)
    assert empty.num_rows == 0


def test_a_reorder_writes_the_rows_anew_and_deletes_the_old_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool_module, "_TAKE_ROWS", 3)  # several takes per column
    whole = table()
    spool = spooled(tmp_path, pieces(whole), whole.schema)
    before = {path.name for path in tmp_path.iterdir()}
    order = pc.sort_indices(whole, [("int8", "descending")])
    got = spool.reorder(order)
    got.validate(full=True)
    assert got.equals(whole.take(order))
    assert all(column.num_chunks == 1 for column in got.columns)
    after = {path.name for path in tmp_path.iterdir()}
    assert not before & after
    assert after == {span.path.name for span in spool.spans()}


def test_discard_deletes_the_files_and_the_table_stays_readable(tmp_path: Path) -> None:
    whole = table()
    spool = spooled(tmp_path, pieces(whole), whole.schema)
    hashes = spool.array("hashes", np.uint64)
    hashes.append(np.arange(4, dtype=np.uint64))
    hashes.append(np.arange(4, 10, dtype=np.uint64))
    assert hashes.finish().tolist() == list(range(10))
    got = spool.finish()
    spool.discard()
    spool.discard()
    assert list(tmp_path.iterdir()) == []
    assert got.equals(whole)  # the maps outlive the names (POSIX)


def test_a_batch_not_of_the_schema_or_not_valid_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([("s", pa.string())])
    spool = ColumnSpool(tmp_path, ".spool-bad-", schema)
    with pytest.raises(ValueError, match="schema"):
        spool.append(pa.record_batch([pa.array([1])], names=["s"]))
    offsets = pa.py_buffer(np.array([0, 2, 1, 3], dtype=np.int32).tobytes())  # going back
    broken = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"abc")])
    with pytest.raises(ValueError, match="not valid Arrow data"):
        spool.append(pa.record_batch([broken], schema=schema))
    spool.append(pa.record_batch([pa.array(["ok"])], schema=schema))
    assert spool.finish().column("s").to_pylist() == ["ok"]


def test_text_past_what_its_offsets_address_is_refused(tmp_path: Path) -> None:
    schema = pa.schema([("s", pa.string())])
    spool = ColumnSpool(tmp_path, ".spool-big-", schema)
    spool._columns[0]._limit = 8  # type: ignore[attr-defined]  # as if 2 GiB were written
    spool.append(pa.record_batch([pa.array(["abcd"])], schema=schema))
    with pytest.raises(ValueError, match="offsets cannot address it"):
        spool.append(pa.record_batch([pa.array(["efghi"])], schema=schema))


def test_a_failed_write_is_a_spool_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schema = pa.schema([("v", pa.int64())])
    with pytest.raises(SpoolError):
        ColumnSpool(tmp_path / "missing", ".spool-x-", schema)
    spool = ColumnSpool(tmp_path, ".spool-full-", schema)

    def full(self: Any, data: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool_module._Sink, "write", full)
    with pytest.raises(SpoolError) as raised:
        spool.append(pa.record_batch([pa.array([1])], schema=schema))
    assert raised.value.errno == errno.ENOSPC
    spool.discard()
    assert list(tmp_path.iterdir()) == []
