"""Columns combined while their chunks are released: the same table as Arrow's
``combine_chunks``, for every kind of column."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from cache.full.combine import combine_releasing


def chunked(values: list[object], kind: pa.DataType) -> pa.ChunkedArray:
    array = pa.array(values, kind)
    # Sliced chunks (offsets not zero), an empty one, uneven lengths.
    return pa.chunked_array([array.slice(0, 3), array.slice(3, 0), array.slice(3, 4),
                             array.slice(7)], kind)


COLUMNS: dict[str, tuple[pa.DataType, list[object]]] = {
    "int64": (pa.int64(), [1, None, 3, 4, 5, None, 7, 8, 9, 10]),
    "int8": (pa.int8(), list(range(10))),
    "double": (pa.float64(), [0.5, 1.5, None, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5]),
    "string": (pa.string(), ["a", "", None, "ccc", "dd", "é", "f", None, "hhhh", "i"]),
    "binary": (pa.binary(), [b"\x00", b"", b"ab", None, b"c", b"d", b"e", b"f", b"g", b"h"]),
    "large_string": (pa.large_string(), [str(i) for i in range(10)]),
    "date": (pa.date32(), [dt.date(2024, 1, d) for d in range(1, 11)]),
    "timestamp": (pa.timestamp("us", "UTC"), [dt.datetime(2024, 1, 1, h, tzinfo=dt.timezone.utc)
                                              for h in range(10)]),
    "decimal": (pa.decimal128(10, 2), [decimal.Decimal(i) / 4 for i in range(10)]),
    "bool": (pa.bool_(), [True, False, None, True, True, False, False, True, None, True]),
    "list": (pa.list_(pa.int32()), [[i] for i in range(10)]),
}


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_a_combined_column_equals_arrows(name: str) -> None:
    kind, values = COLUMNS[name]
    table = pa.table({name: chunked(values, kind), "one": pa.chunked_array([list(range(10))])})
    expected = table.combine_chunks()
    got = combine_releasing([table])
    got.validate(full=True)
    assert got.equals(expected)
    assert all(column.num_chunks == 1 for column in got.columns)
    assert got.column(name).null_count == values.count(None)


def test_the_table_is_taken_from_its_holder() -> None:
    holder = [pa.table({"k": pa.chunked_array([[1], [2]])})]
    assert combine_releasing(holder).column("k").to_pylist() == [1, 2]
    assert holder == []
