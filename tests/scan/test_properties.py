"""Property tests: exactly-once across random checkpoint points, parallelism changes and
chains of restores; a failing source never ends a run as if it had finished."""

from __future__ import annotations

import functools
import os
import sqlite3
import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scan import CollectionSource, FileSource, LocalSourceRunner, ReaderOptions, SqlTableSource
from spark_lookup.errors import SourceError
from tests.scan.helpers import MockSource, bag

Row = tuple[Any, ...]

FAST = settings(
    max_examples=int(os.environ.get("SCAN_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _restore_chain(
    make: Any, rows: list[Row], steps: list[tuple[int, int]], records_per_poll: int
) -> None:
    """Run, and at each (parallelism, records) step read that many records, checkpoint,
    and restore with the next parallelism; the rows seen add up to ``rows`` exactly."""
    options = ReaderOptions(records_per_poll=records_per_poll)
    seen: list[Row] = []
    checkpoint: bytes | None = None
    for parallelism, records in steps:
        with LocalSourceRunner(make(), parallelism, checkpoint, options=options) as runner:
            seen += runner.run(max_records=records)
            checkpoint = runner.checkpoint()
    with LocalSourceRunner(make(), 2, checkpoint) as runner:
        seen += runner.run()
    assert bag(seen) == bag(rows)


steps = st.lists(st.tuples(st.integers(1, 5), st.integers(0, 60)), min_size=1, max_size=4)


@FAST
@given(
    count=st.integers(0, 150),
    num_splits=st.integers(1, 8),
    steps=steps,
    records_per_poll=st.integers(1, 17),
)
def test_collection_restore_chains_are_exactly_once(
    count: int, num_splits: int, steps: list[tuple[int, int]], records_per_poll: int
) -> None:
    rows = [(i,) for i in range(count)]
    source = CollectionSource(rows, num_splits, schema="n BIGINT")
    _restore_chain(lambda: source, rows, steps, records_per_poll)


@FAST
@given(
    count=st.integers(0, 150),
    num_splits=st.integers(1, 8),
    steps=steps,
    records_per_poll=st.integers(1, 17),
)
def test_collection_of_a_table_restore_chains_are_exactly_once(
    count: int, num_splits: int, steps: list[tuple[int, int]], records_per_poll: int
) -> None:
    rows = [(i, f"v{i}") for i in range(count)]
    table = pa.table({"junk": [0.5] * count, "v": [r[1] for r in rows], "n": list(range(count))})
    source = CollectionSource(table, num_splits, schema="n BIGINT, v STRING")
    _restore_chain(lambda: source, rows, steps, records_per_poll)


@FAST
@given(
    sizes=st.lists(st.integers(0, 90), min_size=1, max_size=3),
    row_group=st.integers(1, 40),
    csv=st.booleans(),
    steps=steps,
    records_per_poll=st.integers(1, 17),
)
def test_file_restore_chains_are_exactly_once(
    sizes: list[int], row_group: int, csv: bool, steps: list[tuple[int, int]],
    records_per_poll: int,
) -> None:
    """Parquet row groups and CSV files are fetched as batches larger than a poll, so
    checkpoints fall inside fetched batches."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as directory:
        for number, size in enumerate(sizes):
            part = [(len(rows) + i, f"v{len(rows) + i}") for i in range(size)]
            rows += part
            path = os.path.join(directory, f"part-{number}.{'csv' if csv else 'parquet'}")
            if csv:
                with open(path, "w") as file:
                    file.write("v,n\n" + "".join(f"{v},{n}\n" for n, v in part))
            else:
                table = pa.table({"n": pa.array([r[0] for r in part], pa.int64()),
                                  "v": pa.array([r[1] for r in part], pa.string())})
                pq.write_table(table, path, row_group_size=row_group)
        source = FileSource(directory, "csv" if csv else "parquet", schema="n BIGINT, v STRING")
        _restore_chain(lambda: source, rows, steps, records_per_poll)


keys = st.sampled_from(["dense", "sparse", "duplicates", "nulls", "text"])


def _table(shape: str, count: int) -> tuple[str, list[Row], str]:
    """DDL, rows, and the split column of a table of the given shape."""
    if shape == "dense":
        return (
            "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)",
            [(i, f"v{i}") for i in range(count)],
            "k",
        )
    if shape == "sparse":
        return (
            "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)",
            [(i**3 - 50, f"v{i}") for i in range(count)],
            "k",
        )
    if shape == "text":
        return (
            "CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)",
            [(f"{(i * 7919) % 1000:03d}-{i}", f"v{i}") for i in range(count)],
            "k",
        )
    if shape == "duplicates":
        return (
            "CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v TEXT)",
            [(i, i % 5, f"v{i}") for i in range(count)],
            "k",
        )
    return (
        "CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER, v TEXT)",
        [(i, None if i % 3 == 0 else i // 2, f"v{i}") for i in range(count)],
        "k",
    )


@settings(
    max_examples=int(os.environ.get("SCAN_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    shape=keys,
    count=st.integers(0, 120),
    chunk_size=st.integers(1, 40),
    steps=steps,
    records_per_poll=st.integers(1, 13),
)
def test_sqlite_restore_chains_are_exactly_once(
    shape: str, count: int, chunk_size: int, steps: list[tuple[int, int]], records_per_poll: int
) -> None:
    ddl, rows, split_column = _table(shape, count)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "t.db")
        with sqlite3.connect(path) as db:
            db.execute(ddl)
            if rows:
                marks = ", ".join("?" * len(rows[0]))
                db.executemany(f"INSERT INTO t VALUES ({marks})", rows)
        source = SqlTableSource(
            functools.partial(sqlite3.connect, path),
            "t",
            split_column=split_column,
            chunk_size=chunk_size,
        )
        _restore_chain(lambda: source, rows, steps, records_per_poll)


@FAST
@given(
    fail_after=st.integers(0, 12),
    on_finish=st.booleans(),
    parallelism=st.integers(1, 4),
    bulk=st.booleans(),
)
def test_a_failing_source_never_ends_like_a_finished_one(
    fail_after: int, on_finish: bool, parallelism: int, bulk: bool
) -> None:
    source = MockSource("property-failing", 3, 7, batch=2)
    source.faults.__init__()  # type: ignore[misc]
    source.faults.fail_after_fetches = fail_after
    source.faults.fail_on_finish = on_finish
    with LocalSourceRunner(source, parallelism) as runner:
        try:
            if bulk:
                seen = [r for b in runner.read_arrow_batches() for r in b.to_pylist()]
            else:
                seen = runner.run()
        except SourceError:
            assert not runner.is_finished()
            return
    # Only a run that never hit a fault may finish, and then it has every row.
    assert not on_finish
    assert len(seen) == len(source.rows())


@pytest.mark.parametrize("parallelism", [1, 3])
def test_every_single_record_is_a_valid_checkpoint_point(parallelism: int) -> None:
    rows = [(i,) for i in range(60)]
    source = CollectionSource(rows, 4, schema="n BIGINT")
    options = ReaderOptions(records_per_poll=1)
    with LocalSourceRunner(source, parallelism, options=options) as runner:
        seen: list[Row] = []
        while not runner.is_finished():
            seen += runner.run(max_records=1)
            checkpoint = runner.checkpoint()
            with LocalSourceRunner(source, 2, restore_from=checkpoint) as restored:
                assert bag(seen + restored.run()) == bag(rows)
