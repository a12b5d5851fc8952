"""DeltaSource on real Delta tables written by delta-rs: what it reads equals delta-rs's
own read, removed files are never read, deletion vectors are applied, filters prune
files before reading, and bad input fails with a clear error."""

from __future__ import annotations

import datetime as dt
import json
import pickle
import shutil
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from connectors.predicates import Predicate
from scan import DeltaSource, LocalSourceRunner, ReaderOptions, plan_splits, read_arrow
from spark_lookup.errors import ConfigError, ConnectorError


def dim(ids: range, tag: str = "v1") -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": pa.array(list(ids), pa.int64()),
        "region": pa.array([["eu", "us", "apac"][i % 3] for i in ids]),
        "day": pa.array([dt.date(2024, 1, 1 + i % 2) for i in ids]),
        "name": pa.array([f"{tag}-{i}" for i in ids]),
        "score": pa.array([i * 0.5 for i in ids], pa.float64()),
        "small": pa.array([i % 100 for i in ids], pa.int32()),
        "at": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)] * n,
                       pa.timestamp("us", "UTC")),
        "flag": pa.array([i % 2 == 0 for i in ids]),
    })


@pytest.fixture
def table(tmp_path: Path) -> str:
    path = str(tmp_path / "dim")
    # Three commits: files per partition, each with its own id range (statistics).
    for start in (0, 100, 200):
        write_deltalake(path, dim(range(start, start + 100)), partition_by=["region"],
                        mode="append")
    return path


def expected(path: str, **kw: Any) -> pa.Table:
    return DeltaTable(path).to_pyarrow_table(**kw)


def same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.schema.names == want.schema.names
    assert got.sort_by("id").equals(want.select(got.schema.names).sort_by("id"))


def test_rows_and_types_equal_delta_rs_own_read(table: str) -> None:
    source = DeltaSource(table)
    assert source.schema.simpleString() == (
        "struct<id:bigint,region:string,day:date,name:string,score:double,small:int,"
        "at:timestamp,flag:boolean>")
    got = read_arrow(source, 3)
    want = expected(table)
    assert got.schema == want.schema  # partition columns filled with their own types
    same_rows(got, want)
    assert len(plan_splits(source)) == len(DeltaTable(table).file_uris()) == 9


def test_only_the_declared_columns_are_read(table: str) -> None:
    source = DeltaSource(table, columns=["name", "id", "region"])
    assert source.schema.names == ["name", "id", "region"]
    same_rows(read_arrow(source), expected(table, columns=["name", "id", "region"]))


def test_a_declared_schema_casts_to_its_types(table: str) -> None:
    source = DeltaSource(table, schema="id INT, small BIGINT, region STRING")
    got = read_arrow(source)
    assert got.schema == pa.schema([("id", pa.int32()), ("small", pa.int64()),
                                    ("region", pa.string())])
    assert sorted(got.column("id").to_pylist()) == list(range(300))


def test_an_overwrite_leaves_only_the_new_files(table: str) -> None:
    old_files = set(DeltaTable(table).file_uris())
    write_deltalake(table, dim(range(1000, 1010), "v2"), partition_by=["region"],
                    mode="overwrite")
    source = DeltaSource(table)
    splits = plan_splits(source)
    assert {s.file for s in splits} == set(DeltaTable(table).file_uris())
    assert not {s.file for s in splits} & old_files  # removed files: never read
    got = read_arrow(source)
    assert sorted(got.column("id").to_pylist()) == list(range(1000, 1010))
    assert set(got.column("name").to_pylist()) == {f"v2-{i}" for i in range(1000, 1010)}


def test_deleted_rows_are_never_served(table: str) -> None:
    DeltaTable(table).delete("id < 150")  # delta-rs rewrites the files it touches
    source = DeltaSource(table)
    removed = set(DeltaTable(table, version=2).file_uris()) - set(DeltaTable(table).file_uris())
    assert removed
    assert not removed & {s.file for s in plan_splits(source)}
    same_rows(read_arrow(source), expected(table))
    assert min(read_arrow(source).column("id").to_pylist()) == 150


def test_a_pinned_version_reads_that_version(table: str) -> None:
    write_deltalake(table, dim(range(300, 310)), partition_by=["region"], mode="append")
    pinned = DeltaSource(table, version=0)
    assert pinned.current_version()[0] == 0
    assert DeltaSource(table).current_version() == (3, DeltaTable(table).metadata().id)
    same_rows(read_arrow(pinned), DeltaTable(table, version=0).to_pyarrow_table())


def test_partition_filters_prune_files_before_reading(table: str) -> None:
    source = DeltaSource(table, filters=[Predicate("region", "=", "eu")])
    assert len(plan_splits(source)) == 3  # of 9: one file per commit in the partition
    same_rows(read_arrow(source), expected(table, filters=[("region", "=", "eu")]))


def test_statistics_filters_prune_files_before_reading(table: str) -> None:
    source = DeltaSource(table, filters=[Predicate("id", ">=", 250), Predicate("flag", "=", True)])
    assert len(plan_splits(source)) == 3  # only the last commit's files hold ids >= 250
    same_rows(read_arrow(source),
              expected(table, filters=[("id", ">=", 250), ("flag", "=", True)]))
    in_list = DeltaSource(table, filters=[Predicate("id", "in", [5, 105])])
    assert len(plan_splits(in_list)) == 6
    assert sorted(read_arrow(in_list).column("id").to_pylist()) == [5, 105]


def test_filters_keep_sql_null_rules(tmp_path: Path) -> None:
    path = str(tmp_path / "nulls")
    write_deltalake(path, pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                                    "tier": ["gold", None, "silver"]}))
    source = DeltaSource(path, filters=[Predicate("tier", "!=", "gold")])
    assert read_arrow(source).column("id").to_pylist() == [3]  # null != 'gold' is not true
    nulls = DeltaSource(path, filters=[Predicate("tier", "is null")])
    assert read_arrow(nulls).column("id").to_pylist() == [2]


def test_columns_added_later_read_as_null_in_older_files(tmp_path: Path) -> None:
    path = str(tmp_path / "evolving")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64())}))
    write_deltalake(path, pa.table({"id": pa.array([2], pa.int64()), "extra": ["x"]}),
                    mode="append", schema_mode="merge")
    got = read_arrow(DeltaSource(path)).sort_by("id")
    assert got.to_pylist() == [{"id": 1, "extra": None}, {"id": 2, "extra": "x"}]


# --- deletion vectors (delta-rs does not write them: the log entry is made here, as the
# Delta protocol describes an inline vector)

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _z85(data: bytes) -> str:
    data += b"\0" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i:i + 4], "big")
        digits = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            digits.append(_Z85[digit])
        out.extend(reversed(digits))
    return "".join(out)


def delete_with_a_vector(path: str, positions: list[int]) -> None:
    """Commit a deletion vector marking ``positions`` of the table's only file deleted."""
    from pyroaring import BitMap

    log = Path(path) / "_delta_log"
    commits = sorted(log.glob("*.json"))
    add = next(json.loads(line)["add"] for line in commits[-1].read_text().splitlines()
               if '"add"' in line)
    # A RoaringTreemap: magic, one 32-bit bitmap (high key 0), in the portable format.
    data = (struct.pack("<I", 1681511377) + struct.pack("<Q", 1) + struct.pack("<I", 0)
            + BitMap(positions).serialize())
    vector = {"storageType": "i", "pathOrInlineDv": _z85(data), "sizeInBytes": len(data),
              "cardinality": len(positions)}
    at = add["modificationTime"] + 1
    remove = {"path": add["path"], "deletionTimestamp": at, "dataChange": True,
              "extendedFileMetadata": True, "size": add["size"],
              "partitionValues": add["partitionValues"]}
    actions = [{"commitInfo": {"timestamp": at, "operation": "DELETE"}}, {"remove": remove},
               {"add": {**add, "deletionVector": vector, "dataChange": True}}]
    (log / f"{len(commits):020d}.json").write_text(
        "".join(json.dumps(a) + "\n" for a in actions))


@pytest.fixture
def with_vector(tmp_path: Path) -> str:
    path = str(tmp_path / "dv")
    write_deltalake(path, pa.table({"id": pa.array(range(100), pa.int64()),
                                    "v": [f"r{i}" for i in range(100)]}),
                    configuration={"delta.enableDeletionVectors": "true"})
    delete_with_a_vector(path, [3, 7, 50, 99])
    return path


def test_deletion_vectors_are_applied(with_vector: str) -> None:
    (split,) = plan_splits(DeltaSource(with_vector))
    assert split.deletes
    kept = [i for i in range(100) if i not in (3, 7, 50, 99)]
    assert read_arrow(DeltaSource(with_vector)).column("id").to_pylist() == kept
    # delta-rs's own engine agrees (its pyarrow path refuses such tables).
    assert sorted(pa.table(DeltaTable(with_vector).scan()).column("id").to_pylist()) == kept
    filtered = DeltaSource(with_vector, filters=[Predicate("id", ">=", 40)])
    assert read_arrow(filtered).column("id").to_pylist() == [i for i in kept if i >= 40]


def test_a_restore_inside_a_file_with_a_deletion_vector_is_exactly_once(with_vector: str
                                                                         ) -> None:
    source = DeltaSource(with_vector)
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=7)) as runner:
        first = runner.run(max_records=30)
        saved = runner.checkpoint()
    with LocalSourceRunner(DeltaSource(with_vector), 2, restore_from=saved) as runner:
        rest = runner.run()
    ids = [row[0] for row in first + rest]
    assert ids == [i for i in range(100) if i not in (3, 7, 50, 99)]


def test_unknown_reader_features_are_refused_naming_the_table(with_vector: str) -> None:
    log = Path(with_vector) / "_delta_log" / f"{0:020d}.json"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for action in lines:
        if "protocol" in action:
            action["protocol"]["readerFeatures"].append("columnMapping")
            action["protocol"]["writerFeatures"].append("columnMapping")
    log.write_text("".join(json.dumps(a) + "\n" for a in lines))
    source = DeltaSource(with_vector)
    with pytest.raises(ConnectorError, match=r"(?s)Delta table .*dv.*columnMapping"):
        read_arrow(source)


# --- errors and configuration


def test_bad_input_is_a_config_error(table: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot open the Delta table.*nowhere"):
        DeltaSource(str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"no column\(s\) \['nope'\]"):
        DeltaSource(table, columns=["id", "nope"])
    with pytest.raises(ConfigError, match="unknown column"):
        DeltaSource(table, filters=[Predicate("nope", "=", 1)])
    with pytest.raises(ConfigError, match="not read"):
        DeltaSource(table, columns=["id"], filters=[Predicate("region", "=", "eu")])
    with pytest.raises(ConfigError, match="version"):
        DeltaSource(table, version=-1)
    with pytest.raises(ConfigError, match="columns or schema"):
        DeltaSource(table, columns=["id"], schema="id BIGINT")
    with pytest.raises(ConfigError, match="storage_options"):
        DeltaSource(table, storage_options={"k": 1})  # type: ignore[dict-item]


def test_a_table_that_has_gone_is_a_permanent_error_naming_it(table: str) -> None:
    source = DeltaSource(table)
    shutil.rmtree(table)
    with pytest.raises(ConnectorError, match="Delta table .*dim") as raised:
        read_arrow(source)
    assert type(raised.value) is ConnectorError  # not retried
    with pytest.raises(ConnectorError, match="Delta table .*dim"):
        source.current_version()


def test_it_ships_as_configuration(table: str) -> None:
    source = DeltaSource(table, columns=["id"], filters=[Predicate("id", "<", 10)])
    assert source.current_version()[0] == 2  # opens the table in this process
    shipped = pickle.loads(pickle.dumps(source))
    assert shipped._latest is None  # no DeltaTable travels
    assert sorted(read_arrow(shipped).column("id").to_pylist()) == list(range(10))


def test_a_nan_row_is_kept_by_a_not_equal_filter(tmp_path: Any) -> None:
    # Float statistics leave NaN out: a row group whose other values all equal 5.0 must
    # still be read for x != 5.0 (SQL: NaN != 5.0 holds).
    import pyarrow as pa
    from deltalake import write_deltalake

    from connectors import Predicate
    from scan import DeltaSource, read_arrow

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1, 2, 3, 4],
                                    "x": pa.array([5.0, float("nan"), 5.0, 5.0])}))
    table = read_arrow(DeltaSource(path, filters=[Predicate("x", "!=", 5.0)]))
    assert table.column("id").to_pylist() == [2]


@pytest.mark.parametrize(("filters", "ids"), [
    ([Predicate("f", "=", 0.0)], [1, 2]), ([Predicate("f", ">=", 0.0)], [1, 2, 3]),
    ([Predicate("f", "<=", 0.0)], [1, 2]), ([Predicate("f", "=", -0.0)], [1, 2]),
    ([Predicate("f", "in", [0.0])], [1, 2]), ([Predicate("f", "<", 0.5)], [1, 2]),
    ([Predicate("f", ">", -0.5)], [1, 2, 3]), ([Predicate("f", ">", 0.0)], [3]),
    ([Predicate("f", "!=", 0.0)], [3]), ([Predicate("f", "not in", [-0.0])], [3]),
], ids=lambda value: (f"{value[0].op} {value[0].value}"
                      if isinstance(value[0], Predicate) else "ids"))
def test_partitions_of_minus_zero_compare_as_zero(tmp_path: Path, filters: list[Predicate],
                                                  ids: list[int]) -> None:
    """A table partitioned by a DOUBLE holding -0.0 and 0.0: SQL's -0.0 = 0.0 holds for
    the partition values too (issue 40, defect 4)."""
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                     "f": pa.array([-0.0, 0.0, 1.0], pa.float64())})
    partitioned, flat = str(tmp_path / "partitioned"), str(tmp_path / "flat")
    write_deltalake(partitioned, rows, partition_by=["f"])
    write_deltalake(flat, rows)
    for path in (partitioned, flat):
        got = read_arrow(DeltaSource(path, filters=filters))
        assert sorted(got.column("id").to_pylist()) == ids, (path, filters)
