"""FileSource specifics: directories, schema inference and casting, positions, errors."""

from __future__ import annotations

import datetime as dt
import os
import pickle
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scan import FileSource, LocalSourceRunner, ReaderOptions, plan_splits, read_arrow, read_split
from scan.checkpoint import decode_checkpoint
from scan.serializers import unpack_versioned
from scan.sources import FileSplit
from spark_lookup.errors import BadValueError, ConfigError, ConnectorError, SourceError
from tests.scan.helpers import bag, run_all


def _parquet(path: Path, rows: int, group: int, start: int = 0) -> list[tuple[Any, ...]]:
    ids = list(range(start, start + rows))
    pq.write_table(
        pa.table({"id": ids, "v": [f"v{i}" for i in ids]}), str(path), row_group_size=group
    )
    return [(i, f"v{i}") for i in ids]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"paths": "x", "format": "orc"}, "format must be one of"),
        ({"paths": []}, "at least one"),
        ({"paths": [""]}, "invalid path"),
        ({"paths": "x", "schema": "a WHAT"}, "unknown type"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FileSource(**kwargs)


def test_one_split_per_row_group_in_path_order(tmp_path: Path) -> None:
    rows = _parquet(tmp_path / "b.parquet", 10, 4) + _parquet(tmp_path / "a.parquet", 3, 4, 10)
    source = FileSource([tmp_path / "b.parquet", tmp_path / "a.parquet"])
    splits = plan_splits(source)
    assert [(Path(s.path).name, s.row_group) for s in splits] == [
        ("b.parquet", 0),
        ("b.parquet", 1),
        ("b.parquet", 2),
        ("a.parquet", 0),
    ]
    assert run_all(source, 1) == rows


def test_a_directory_stands_for_its_data_files_sorted(tmp_path: Path) -> None:
    _parquet(tmp_path / "part-1.parquet", 2, 10, 2)
    _parquet(tmp_path / "part-0.parquet", 2, 10, 0)
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / ".part-0.parquet.crc").write_text("")
    (tmp_path / "nested").mkdir()
    splits = plan_splits(FileSource(tmp_path))
    assert [Path(s.path).name for s in splits] == ["part-0.parquet", "part-1.parquet"]


def test_parquet_schema_is_inferred_and_a_declared_one_casts(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "price": pa.array([Decimal("1.50"), None], pa.decimal128(10, 2)),
            "day": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2)]),
            "at": pa.array([dt.datetime(2024, 1, 1, 12), None], pa.timestamp("ms", tz="UTC")),
            "tags": pa.array([["a"], []]),
            "extra": pa.array([True, False]),
        }
    )
    pq.write_table(table, str(path))
    inferred = FileSource(path)
    assert inferred.schema.simpleString() == (
        "struct<id:bigint,price:decimal(10,2),day:date,at:timestamp,tags:array<string>,"
        "extra:boolean>"
    )
    assert run_all(inferred, 1)[0][:2] == (1, Decimal("1.50"))
    declared = FileSource(path, schema="at TIMESTAMP, id INT")  # a subset, reordered
    assert read_arrow(declared).schema.types == [pa.timestamp("us", tz="UTC"), pa.int32()]
    assert run_all(declared, 1) == [
        (dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc), 1),
        (None, 2),
    ]


def test_csv_schema_is_inferred_from_the_first_file(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("id,name,score\n1,x,1.5\n2,y,\n")
    source = FileSource(tmp_path / "a.csv", "csv")
    assert source.schema.simpleString() == "struct<id:bigint,name:string,score:double>"
    assert run_all(source, 1) == [(1, "x", 1.5), (2, "y", None)]


def test_a_missing_parquet_column_fails_planning_naming_file_and_column(
    tmp_path: Path,
) -> None:
    _parquet(tmp_path / "t.parquet", 3, 3)
    source = FileSource(tmp_path / "t.parquet", schema="id BIGINT, nope STRING")
    with pytest.raises(ConfigError, match=r"t\.parquet.* has no column\(s\) \['nope'\]"):
        plan_splits(source)
    with pytest.raises(ConfigError, match=r"t\.parquet.*\['nope'\].*it has \['id', 'v'\]"):
        run_all(source, 1)


def test_a_missing_column_of_a_split_read_elsewhere_fails_its_first_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.parquet"
    _parquet(path, 3, 3)
    source = FileSource(path, schema="id BIGINT, v STRING")
    (split,) = plan_splits(source)
    pq.write_table(pa.table({"id": [1]}), str(path))  # the file changed after planning
    with pytest.raises(ConfigError, match=r"t\.parquet.*\['v'\]"):
        list(read_split(source, split))


def test_a_missing_csv_column_fails_its_first_read_naming_file_and_column(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.csv").write_text("id,name\n1,x\n")
    source = FileSource(tmp_path / "a.csv", "csv", schema="id BIGINT, nope STRING")
    with pytest.raises(ConfigError, match=r"a\.csv.*\['nope'\].*it has \['id', 'name'\]"):
        run_all(source, 1)


def test_csv_values_that_do_not_convert_name_file_and_column(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("v,id,name\nq,1,x\nr,zwei,y\n")
    source = FileSource(tmp_path / "a.csv", "csv", schema="id BIGINT, name STRING")
    with pytest.raises(SourceError, match=r"a\.csv.*column 'id' does not convert to int64"):
        run_all(source, 1)


def test_a_malformed_csv_file_is_a_connector_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("id,name\n1,x,surplus\n")
    source = FileSource(tmp_path / "a.csv", "csv", schema="id BIGINT, name STRING")
    with pytest.raises(ConnectorError, match=r"a\.csv"):
        run_all(source, 1)


def test_parquet_values_that_do_not_cast_name_file_and_column(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": ["1", "two"], "v": ["a", "b"]}), str(path))
    source = FileSource(path, schema="id BIGINT, v STRING", mode="FAILFAST")
    with pytest.raises(
        BadValueError, match=r"t\.parquet', key row 1, column 'id': cannot read 'two' as bigint"
    ):
        read_arrow(source)
    lenient = FileSource(path, schema="id BIGINT, v STRING")  # PERMISSIVE: null, counted
    assert read_arrow(lenient).to_pylist() == [{"id": 1, "v": "a"}, {"id": None, "v": "b"}]
    assert lenient.bad_value_count == 1
    dropping = FileSource(path, schema="id BIGINT, v STRING", mode="DROPMALFORMED")
    assert read_arrow(dropping).num_rows == 1
    narrowing = FileSource(path, schema="v STRING, id TINYINT", mode="FAILFAST")
    pq.write_table(pa.table({"id": [1, 300], "v": ["a", "b"]}), str(path))
    with pytest.raises(BadValueError, match=r"column 'id': cannot read 300 as tinyint"):
        read_arrow(narrowing)  # never silently wrapped
    with pytest.raises(ConfigError, match="cannot be read as"):
        read_arrow(FileSource(path, schema="v STRING, id DATE"))  # no such cast at all


def test_nulls_in_a_not_null_column_name_file_and_column(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [1, None]}), str(path))
    with pytest.raises(SourceError, match=r"t\.parquet.*column 'id' is NOT NULL"):
        read_arrow(FileSource(path, schema="id BIGINT NOT NULL"))


def test_missing_file_is_a_connector_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConnectorError, match="gone.parquet"):
        plan_splits(FileSource(tmp_path / "gone.parquet", schema="id BIGINT"))
    with pytest.raises(ConnectorError, match="gone.csv"):
        run_all(FileSource(tmp_path / "gone.csv", "csv", schema="id BIGINT"), 1)
    with pytest.raises(ConnectorError, match="gone.parquet"):
        FileSource(tmp_path / "gone.parquet").schema  # noqa: B018


def test_no_data_files_and_no_schema(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no data files"):
        FileSource(tmp_path).schema  # noqa: B018


def test_empty_parquet_file_has_no_rows(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": pa.array([], pa.int64())}), str(tmp_path / "e.parquet"))
    assert run_all(FileSource(tmp_path / "e.parquet"), 2) == []


@pytest.mark.parametrize("file_format", ["parquet", "csv"])
def test_checkpoint_records_the_offset_within_a_split(tmp_path: Path, file_format: str) -> None:
    path = tmp_path / f"t.{file_format}"
    if file_format == "parquet":
        rows = _parquet(path, 100, 60)
    else:
        rows = [(i, f"v{i}") for i in range(100)]
        path.write_text("id,v\n" + "".join(f"{i},{v}\n" for i, v in rows))
    source = FileSource(path, file_format, schema="id BIGINT, v STRING")
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=4)) as runner:
        before = runner.run(17)
        checkpoint = runner.checkpoint()
    packed = decode_checkpoint(checkpoint).readers[0]
    (split,) = [unpack_versioned(source.split_serializer, p, "split") for p in packed]
    assert split == FileSplit(str(path), 0 if file_format == "parquet" else None, 20)
    assert before == rows[:20]
    with LocalSourceRunner(source, 2, restore_from=checkpoint) as runner:
        assert bag(before + runner.run()) == bag(rows)


def test_source_pickles_as_its_paths(tmp_path: Path) -> None:
    rows = _parquet(tmp_path / "t.parquet", 5, 2)
    source = FileSource(str(tmp_path / "t.parquet"))
    copy = pickle.loads(pickle.dumps(source))
    assert copy.paths == [str(tmp_path / "t.parquet")]
    assert bag(run_all(copy, 2)) == bag(rows)


# --- column projection: only the declared columns are read


def _wide(path: Path, rows: int, columns: int = 50) -> pa.Table:
    table = pa.table({f"c{j}": pa.array([i * 100 + j for i in range(rows)], pa.int64())
                      for j in range(columns)})
    pq.write_table(table, str(path), row_group_size=max(1, rows // 3),
                   use_dictionary=False, compression="NONE")
    return table


def _corrupt_columns_except(path: Path, keep: set[str]) -> None:
    """Overwrite the data of every other column chunk with garbage: reading any of them
    fails, so a read that succeeds decoded only ``keep``."""
    metadata = pq.read_metadata(str(path))
    data = bytearray(path.read_bytes())
    for group in range(metadata.num_row_groups):
        for index in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(index)
            if chunk.path_in_schema in keep:
                continue
            start = chunk.data_page_offset
            size = chunk.total_compressed_size
            data[start : start + size] = b"\xff" * size
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_wide_parquet_file_reads_only_the_declared_columns(
    tmp_path: Path, parallelism: int
) -> None:
    path = tmp_path / "wide.parquet"
    table = _wide(path, 30)
    _corrupt_columns_except(path, {"c3", "c17", "c42"})
    with pytest.raises((OSError, ValueError)):
        pq.read_table(str(path))  # the other columns are unreadable now
    source = FileSource(path, schema="c42 BIGINT, c3 INT, c17 STRING")
    loaded = read_arrow(source, parallelism).sort_by("c3")
    assert loaded.schema.names == ["c42", "c3", "c17"]
    assert loaded.column("c42").to_pylist() == table.column("c42").to_pylist()
    assert loaded.column("c3").type == pa.int32()
    assert loaded.column("c17").to_pylist() == [str(v) for v in table.column("c17").to_pylist()]
    assert sorted(run_all(source, parallelism)) == sorted(
        zip(*(table.column(c).to_pylist() for c in ("c42", "c3")),
            map(str, table.column("c17").to_pylist()), strict=True)
    )


def test_a_declared_schema_needs_no_conversion_of_the_other_columns(tmp_path: Path) -> None:
    """Columns whose type has no Spark counterpart (so a schema inferred from the file
    would fail) are no obstacle when the declared schema leaves them out."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [1, 2], "odd": pa.array([1, 2], pa.uint64()),
                             "span": pa.array([1, 2], pa.duration("s"))}), str(path))
    with pytest.raises(ConfigError):
        FileSource(path).schema  # noqa: B018
    assert run_all(FileSource(path, schema="id BIGINT"), 1) == [(1,), (2,)]


def test_a_csv_file_parses_only_the_declared_columns(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("id,when,v\n1,not a date,x\n2,2024-13-45,y\n")
    source = FileSource(tmp_path / "a.csv", "csv", schema="v STRING, id BIGINT")
    assert run_all(source, 1) == [("x", 1), ("y", 2)]
    assert read_arrow(source).schema.names == ["v", "id"]


def test_filters_are_applied_to_files_and_restores_count_the_rows_kept(tmp_path: Path) -> None:
    from connectors import Predicate
    from scan import LocalSourceRunner, ReaderOptions

    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"id": list(range(100)), "region": ["eu", "us"] * 50}), str(path),
                   row_group_size=30)
    source = FileSource(path, schema="id BIGINT, region STRING",
                        filters=[Predicate("region", "=", "eu"), Predicate("id", ">=", 10)])
    expected = [(i, "eu") for i in range(10, 100, 2)]
    assert sorted(tuple(r.values()) for r in read_arrow(source, 2).to_pylist()) == expected
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=7)) as runner:
        first = runner.run(12)
        saved = runner.checkpoint()
    with LocalSourceRunner(source, 3, restore_from=saved) as runner:
        rest = runner.run()
    assert sorted(first + rest) == expected  # nothing lost or repeated
    with pytest.raises(ConfigError, match="unknown column"):
        FileSource(path, schema="id BIGINT", filters=[Predicate("region", "=", "eu")])


def test_a_footer_is_parsed_once_per_version_of_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Inferring the schema, planning and reading share one parse of the footer; a file
    # rewritten in place to the same size (what stat may not tell from the old one
    # within the clock's tick) is read with its new footer, and its new values.
    parsed: list[object] = []
    real = pq.read_metadata

    def counting(where: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(where)
        return real(where, *args, **kwargs)

    monkeypatch.setattr(pq, "read_metadata", counting)
    path = tmp_path / "dim.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"]}), path,
                   row_group_size=2)
    assert read_arrow(FileSource(path), 2).sort_by("id").column("v").to_pylist() == list("abcd")
    assert len(parsed) == 1
    assert read_arrow(FileSource(path), 1).num_rows == 4
    assert len(parsed) == 1

    before = path.stat()
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "v": ["w", "x", "y", "z"]}), path,
                   row_group_size=2)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert read_arrow(FileSource(path)).sort_by("id").column("v").to_pylist() == list("wxyz")
    assert len(parsed) == 2  # the new statistics: a new footer
    pq.write_table(pa.table({"id": [1, 2, 3, 4], "v": ["w", "x", "y", "z"]}), path,
                   row_group_size=4)
    assert [s.row_group for s in plan_splits(FileSource(path))] == [0]
    assert read_arrow(FileSource(path)).sort_by("id").column("v").to_pylist() == list("wxyz")
    assert len(parsed) == 3


def test_a_file_that_is_not_parquet_is_a_connector_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "dim.parquet"
    path.write_bytes(b"not a parquet file, only some text that ends oddly")
    with pytest.raises(ConnectorError, match="dim.parquet"):
        plan_splits(FileSource(path, schema="id BIGINT"))
