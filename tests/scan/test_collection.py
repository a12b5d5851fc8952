"""CollectionSource specifics: splitting, schema inference, validation."""

from __future__ import annotations

import datetime as dt
import itertools
import pickle
from decimal import Decimal
from typing import Any

import pytest

from scan import CollectionSource, CollectionSplit, plan_splits
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
