"""CollectionSource specifics: splitting, schema inference, validation."""

from __future__ import annotations

import datetime as dt
import itertools
import pickle
from decimal import Decimal
from typing import Any

import pytest

from scan import CollectionSource, plan_splits
from scan.sources import CollectionSplit
from spark_lookup.errors import ConfigError
from tests.scan.helpers import run_all


@pytest.mark.parametrize(("rows", "splits"), [(10, 3), (2, 5), (0, 2), (7, 1)])
def test_contiguous_splits_of_near_equal_size(rows: int, splits: int) -> None:
    source = CollectionSource([(i,) for i in range(rows)], num_splits=splits, schema="n INT")
    planned = plan_splits(source)
    assert len(planned) == splits
    assert planned[0].start == 0
    assert planned[-1].end == rows
    assert all(a.end == b.start for a, b in itertools.pairwise(planned))
    sizes = [s.end - s.start for s in planned]
    assert max(sizes) - min(sizes) <= 1
    assert sorted(run_all(source, 2)) == [(i,) for i in range(rows)]


def test_schema_is_inferred_from_the_first_non_null_values() -> None:
    rows = [
        (None, "a", None, b"x", Decimal("1.5"), dt.date(2024, 1, 1), dt.datetime(2024, 1, 1)),
        (True, None, 1.5, None, None, None, None),
        (None, None, None, None, None, None, dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)),
    ]
    source = CollectionSource(rows)
    assert source.schema.simpleString() == (
        "struct<_1:boolean,_2:string,_3:double,_4:binary,_5:decimal(38,18),_6:date,"
        "_7:timestamp_ntz>"
    )


@pytest.mark.parametrize(
    ("rows", "kwargs", "message"),
    [
        ([], {}, "without rows"),
        ([(None,)], {}, "only nulls"),
        ([([1],)], {}, "cannot infer a Spark type"),
        ([(1,), (1, 2)], {}, "row 1 has 2 values"),
        ([(1,)], {"schema": "a INT, b INT"}, "row 0 has 1 values"),
        (["ab"], {}, "row 0 must be a sequence"),
        ([(1,)], {"num_splits": 0}, "num_splits"),
        ([(1,)], {"num_splits": True}, "num_splits"),
    ],
)
def test_invalid_input(rows: list[Any], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CollectionSource(rows, **kwargs)


def test_rows_are_copied_and_the_source_pickles() -> None:
    rows = [[1, "a"], [2, "b"]]
    source = CollectionSource(rows, schema="id INT, v STRING")
    rows.append([3, "c"])
    assert source.rows == ((1, "a"), (2, "b"))
    assert run_all(pickle.loads(pickle.dumps(source)), 1) == [(1, "a"), (2, "b")]


def test_splits_are_frozen_values() -> None:
    import dataclasses

    split = CollectionSplit(0, 0, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        split.start = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(split)) == split
    assert hash(split) == hash(CollectionSplit(0, 0, 5))


# --- Arrow: a table keeps only its declared columns; rows become batches at read time


def test_a_table_keeps_only_the_declared_columns_cast_to_their_types() -> None:
    import pyarrow as pa

    from scan import read_arrow

    wide = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "blob": pa.array([b"x", b"y", b"z"]),
            "odd": pa.array([1, 2, 3], pa.uint64()),  # no Spark type: never converted
            "v": ["a", "b", None],
        }
    )
    source = CollectionSource(wide, num_splits=2, schema="v STRING, id INT")
    copy = pickle.loads(pickle.dumps(source))
    assert copy._table is not None
    assert copy._table.schema.names == ["v", "id"]
    assert copy.rows == (("a", 1), ("b", 2), (None, 3))
    assert sorted(run_all(copy, 2), key=lambda r: r[1]) == [("a", 1), ("b", 2), (None, 3)]
    table = read_arrow(copy, 2)
    assert table.schema.types == [pa.string(), pa.int32()]


def test_a_table_schema_is_inferred_from_its_arrow_types() -> None:
    import pyarrow as pa

    table = pa.table({"id": pa.array([1], pa.int16()),
                      "at": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("ms"))})
    source = CollectionSource(pa.RecordBatch.from_pydict(table.to_pydict(), schema=table.schema))
    assert source.schema.simpleString() == "struct<id:smallint,at:timestamp_ntz>"
    assert run_all(source, 1) == [(1, dt.datetime(2024, 1, 1))]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("id BIGINT, nope STRING", r"has no column\(s\) \['nope'\]; it has \['id', 'v'\]"),
        ("v INT", r"column 'v' of type string does not convert to int32"),
        ("id TINYINT", r"column 'id' of type int64 does not convert to int8"),
        ("v STRING NOT NULL", r"column 'v' is NOT NULL but holds nulls"),
    ],
)
def test_a_table_that_does_not_fit_the_schema_is_refused(schema: str, message: str) -> None:
    import pyarrow as pa

    table = pa.table({"id": [1, 1000], "v": ["a", None]})
    with pytest.raises(ConfigError, match=message):
        CollectionSource(table, schema=schema)


def test_rows_that_do_not_convert_fail_the_read_naming_the_column() -> None:
    from spark_lookup.errors import SourceError

    source = CollectionSource([(1, "x"), (2, "not a number")], schema="a INT, b DOUBLE")
    with pytest.raises(SourceError, match=r"column 'b' does not convert to double"):
        run_all(source, 1)
