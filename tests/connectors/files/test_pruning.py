"""FileSource filters: row groups that Parquet statistics rule out are never read, and
the rows read are exactly the unfiltered read's rows that SQL would keep."""

from __future__ import annotations

import datetime as dt
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors import Predicate
from connectors.predicates import predicates_mask
from scan import FileSource, LocalSourceRunner, ReaderOptions, plan_splits, read_arrow
from scan.checkpoint import decode_checkpoint
from scan.serializers import unpack_versioned
from scan.sources import FileSplit
from spark_lookup.errors import ConfigError
from tests.scan.helpers import bag

Row = dict[str, Any]


def _sql_holds(value: Any, predicate: Predicate) -> bool:
    """Whether SQL keeps a row whose column holds ``value`` (Python's comparisons, a
    null never equal, greater or less than anything)."""
    op = predicate.op
    if op == "is null":
        return value is None
    if op == "is not null":
        return value is not None
    if value is None:
        return False
    if op in ("in", "not in"):
        listed = [v for v in predicate.value if v is not None]
        if op == "in":
            return any(value == v for v in listed)
        return len(listed) == len(predicate.value) and all(value != v for v in listed)
    compare = {"=": value.__eq__, "!=": value.__ne__, "<": value.__lt__,
               "<=": value.__le__, ">": value.__gt__, ">=": value.__ge__}[op]
    return bool(compare(predicate.value))


def _sql_filter(rows: Sequence[Row], predicates: Sequence[Predicate]) -> list[Row]:
    return [row for row in rows if all(_sql_holds(row[p.column], p) for p in predicates)]


def _corrupt_row_groups(path: Path, groups: Sequence[int]) -> None:
    """Overwrite every column chunk of ``groups`` with garbage: a read of any of them
    fails, so a read that succeeds never touched them."""
    metadata = pq.read_metadata(str(path))
    data = bytearray(path.read_bytes())
    for group in groups:
        for index in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(index)
            start = chunk.dictionary_page_offset or chunk.data_page_offset
            data[start:start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))


def _groups(source: FileSource) -> list[int | None]:
    return [split.row_group for split in plan_splits(source)]


def _write(path: Path, table: pa.Table, group: int) -> None:
    pq.write_table(table, str(path), row_group_size=group, use_dictionary=False,
                   compression="NONE")


def test_a_filter_leaves_the_row_groups_its_statistics_rule_out_unread(tmp_path: Path) -> None:
    ids = list(range(100))
    table = pa.table({"id": ids, "v": [None if i % 7 == 0 else f"v{i}" for i in ids]})
    path = tmp_path / "t.parquet"
    _write(path, table, 10)
    filters = [Predicate("id", ">=", 35), Predicate("id", "<", 52), Predicate("v", "is not null")]
    source = FileSource(path, schema="id BIGINT, v STRING", filters=filters)
    assert _groups(source) == [3, 4, 5]
    assert _groups(FileSource(path, schema="id BIGINT, v STRING")) == list(range(10))
    expected = _sql_filter(table.to_pylist(), filters)
    assert [row["id"] for row in expected] == [i for i in range(36, 52) if i not in (42, 49)]

    _corrupt_row_groups(path, [0, 1, 2, 6, 7, 8, 9])
    with pytest.raises((OSError, ValueError)):
        pq.read_table(str(path))  # the other row groups are unreadable now
    for parallelism in (1, 3):
        loaded = read_arrow(source, parallelism).sort_by("id")
        assert loaded.schema == pa.schema([("id", pa.int64()), ("v", pa.string())])
        assert loaded.to_pylist() == expected


def test_a_file_whose_row_groups_are_all_ruled_out_gets_no_split(tmp_path: Path) -> None:
    _write(tmp_path / "a.parquet", pa.table({"id": range(50)}), 20)
    _write(tmp_path / "b.parquet", pa.table({"id": range(50, 100)}), 20)
    source = FileSource(tmp_path, schema="id BIGINT", filters=[Predicate("id", ">", 60)])
    assert [(Path(s.path).name, s.row_group) for s in plan_splits(source)] == [
        ("b.parquet", 0), ("b.parquet", 1), ("b.parquet", 2)]
    assert sorted(read_arrow(source, 2).column("id").to_pylist()) == list(range(61, 100))
    never = FileSource(tmp_path, schema="id BIGINT", filters=[Predicate("id", "not in", [1, None])])
    assert plan_splits(never) == []  # SQL: id <> 1 AND id <> NULL is never true


@pytest.mark.parametrize(
    ("values", "declared", "predicate"),
    [
        # Floating statistics leave NaN out: min = max = 5.0, yet NaN != 5.0 holds.
        (pa.array([5.0, math.nan, 5.0, 5.0]), "x DOUBLE", Predicate("x", "!=", 5.0)),
        (pa.array([5.0, math.nan, 5.0, 5.0]), "x DOUBLE", Predicate("x", "not in", [5.0])),
        # pyarrow 26 rules 0.0 out of a row group of 0.0 by the value set.
        (pa.array([1.0, 1.0, 0.0, 0.0]), "x DOUBLE", Predicate("x", "in", [0.0])),
        # Statistics of a file's type other than the declared one are not the values
        # read: 'x' read as bigint is a bad value (null), though the file has no null.
        (pa.array(["1", "2", "3", "x"]), "x BIGINT", Predicate("x", "is null")),
        (pa.array([1, 2, 3, 4], pa.int32()), "x BIGINT", Predicate("x", "=", 4)),
    ],
)
def test_predicates_that_statistics_cannot_decide_leave_the_row_groups_in(
    tmp_path: Path, values: pa.Array, declared: str, predicate: Predicate
) -> None:
    path = tmp_path / "t.parquet"
    _write(path, pa.table({"x": values}), 2)
    source = FileSource(path, schema=declared, filters=[predicate])
    unfiltered = read_arrow(FileSource(path, schema=declared)).to_pylist()
    expected = _sql_filter(unfiltered, [predicate])
    assert expected  # the row group that statistics would rule out holds a match
    assert _keys(read_arrow(source).to_pylist()) == _keys(expected)


def test_is_null_on_a_timestamp_leaves_row_groups_in_for_values_out_of_range(
    tmp_path: Path,
) -> None:
    """A timestamp out of Spark's range reads as null (counted as bad): ``is null``
    holds for it, though the file's null count is 0."""
    year_10000 = 253_402_300_800_000_000  # microseconds
    stamps = pa.array([0, 1, 2, year_10000], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    path = tmp_path / "t.parquet"
    _write(path, pa.table({"t": stamps}), 2)
    source = FileSource(path, schema="t TIMESTAMP", filters=[Predicate("t", "is null")])
    assert _groups(source) == [0, 1]
    assert read_arrow(source).to_pylist() == [{"t": None}]
    assert source.bad_value_count == 1
    later = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=1)
    source = FileSource(path, schema="t TIMESTAMP", filters=[Predicate("t", "<=", later)])
    assert _groups(source) == [0]


def test_a_restore_mid_row_group_with_a_filter_skips_exactly_the_rows_emitted(
    tmp_path: Path,
) -> None:
    ids = list(range(300))
    table = pa.table({"id": ids, "region": [("eu", "us", None)[i % 3] for i in ids]})
    path = tmp_path / "t.parquet"
    _write(path, table, 50)
    filters = [Predicate("id", ">=", 120), Predicate("region", "in", ["eu", None])]
    source = FileSource(path, schema="id BIGINT, region STRING", filters=filters)
    assert _groups(source) == [2, 3, 4, 5]
    expected = [(r["id"], r["region"]) for r in _sql_filter(table.to_pylist(), filters)]
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=3)) as runner:
        first = runner.run(30)
        saved = runner.checkpoint()
    state = decode_checkpoint(saved)
    (packed,) = state.readers[0]
    split = unpack_versioned(source.split_serializer, packed, "split")
    # The filters keep 10 rows of row group 2 (ids 120-147 of region eu) and 17 of row
    # group 3: the 30 records end 3 rows into row group 4, where the restore goes on.
    assert first == expected[:30]
    assert split == FileSplit(str(path), 4, 3)
    enumerator = unpack_versioned(source.enumerator_state_serializer, state.enumerator, "state")
    assert enumerator.progress["row_groups"] == [5]  # the pruned plan, kept
    with LocalSourceRunner(source, 3, restore_from=saved) as runner:
        rest = runner.run()
    assert bag(first + rest) == bag(expected)  # nothing lost or repeated


def test_planner_progress_of_a_checkpoint_without_pruned_row_groups_restores(
    tmp_path: Path,
) -> None:
    """Progress written before row groups were pruned: the next row group and the
    count; the rest of that file is read in full."""
    path = tmp_path / "t.parquet"
    _write(path, pa.table({"id": range(40)}), 10)
    source = FileSource(path, schema="id BIGINT", filters=[Predicate("id", "<", 5)])
    planner = source.planner({"paths": [], "file": str(path), "next": 2, "groups": 4})
    assert [planner.next_split(), planner.next_split(), planner.next_split()] == [
        FileSplit(str(path), 2), FileSplit(str(path), 3), None]
    planner = source.planner(None)
    assert planner.next_split() == FileSplit(str(path), 0)
    assert planner.progress() == {"paths": [], "file": str(path), "row_groups": []}


def test_in_and_not_in_follow_sql() -> None:
    batch = pa.record_batch({"x": [1, 2, None]})
    assert predicates_mask(batch, [Predicate("x", "not in", [1, None])]).to_pylist() == [
        False, False, False]
    assert predicates_mask(batch, [Predicate("x", "not in", [1])]).to_pylist() == [
        False, True, False]
    assert predicates_mask(batch, [Predicate("x", "in", [1, None])]).to_pylist() == [
        True, False, False]
    floats = pa.record_batch({"x": pa.array([-0.0, 0.0, 1.0], pa.float32())})
    for op, expected in (("in", [True, True, False]), ("not in", [False, False, True])):
        # -0.0 = 0.0, so -0.0 is in (0.0), as the comparison says
        assert predicates_mask(floats, [Predicate("x", op, [0.0])]).to_pylist() == expected
        assert predicates_mask(floats, [Predicate("x", op, [-0.0])]).to_pylist() == expected
    assert predicates_mask(floats, [Predicate("x", "=", 0.0)]).to_pylist() == [True, True, False]


# --- property: a filtered read is the unfiltered read filtered by SQL's rules

_COLUMNS = {
    "i": (pa.int64(), "BIGINT", st.integers(-3, 3)),
    "f": (pa.float64(), "DOUBLE", st.sampled_from([-1.5, -0.0, 0.0, 1.0, 2.5, math.inf])),
    "s": (pa.string(), "STRING", st.sampled_from(["", "a", "ab", "b", "é", "z"])),
    "d": (pa.date32(), "DATE", st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 5))),
}
_OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null")


@st.composite
def _predicates(draw: Any) -> list[Predicate]:
    found = []
    for _ in range(draw(st.integers(1, 3))):
        column = draw(st.sampled_from(sorted(_COLUMNS)))
        values = _COLUMNS[column][2]
        op = draw(st.sampled_from(_OPERATORS))
        if op in ("is null", "is not null"):
            found.append(Predicate(column, op))
        elif op in ("in", "not in"):
            found.append(Predicate(column, op, draw(st.lists(st.none() | values, min_size=1,
                                                             max_size=3))))
        else:
            found.append(Predicate(column, op, draw(values)))
    return found


@st.composite
def _tables(draw: Any) -> pa.Table:
    rows = draw(st.integers(0, 40))
    columns = {}
    for name, (arrow_type, _, values) in _COLUMNS.items():
        drawn = draw(st.lists(st.none() | values, min_size=rows, max_size=rows))
        if name == "f":  # NaN too, which no statistic counts
            drawn = [math.nan if v == 1.0 and draw(st.booleans()) else v for v in drawn]
        columns[name] = pa.array(drawn, arrow_type)
    return pa.table(columns)


@settings(max_examples=int(os.environ.get("SCAN_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(table=_tables(), group=st.integers(1, 8), predicates=_predicates())
def test_a_filtered_read_is_the_unfiltered_read_filtered_by_sql_rules(
    table: pa.Table, group: int, predicates: list[Predicate]
) -> None:
    directory = tempfile.mkdtemp()
    try:
        path = Path(directory) / "t.parquet"
        pq.write_table(table, str(path), row_group_size=group)
        schema = ", ".join(f"{name} {spark}" for name, (_, spark, _) in _COLUMNS.items())
        unfiltered = read_arrow(FileSource(path, schema=schema)).to_pylist()
        filtered = read_arrow(FileSource(path, schema=schema, filters=predicates), 2)
        assert _keys(filtered.to_pylist()) == _keys(_sql_filter(unfiltered, predicates))
    finally:
        shutil.rmtree(directory)


def _keys(rows: Sequence[Row]) -> list[str]:
    """Rows as comparable text (NaN equal to itself), sorted: a bag."""
    return sorted(repr(sorted(row.items())) for row in rows)


def test_a_filter_on_a_column_the_inferred_schema_lacks_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "t.parquet", pa.table({"id": [1, 2]}), 2)
    source = FileSource(tmp_path / "t.parquet", filters=[Predicate("nope", "=", 1)])
    with pytest.raises(ConfigError, match=r"unknown column\(s\) \['nope'\]"):
        read_arrow(source)
    with pytest.raises(ConfigError, match="no column 'nope'"):
        predicates_mask(pa.record_batch({"id": [1]}), [Predicate("nope", "=", 1)])
