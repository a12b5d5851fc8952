"""IcebergSource on real Iceberg tables (pyiceberg's SQL catalog on SQLite, a local
warehouse): what it reads equals pyiceberg's own scan, files of replaced snapshots are
never read, filters prune files through pyiceberg's planning, and bad input fails with
a clear error."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual

from connectors.predicates import Predicate
from scan import IcebergSource, plan_splits, read_arrow
from spark_lookup.errors import ConfigError, ConnectorError


def dim(ids: range, tag: str = "v1") -> pa.Table:
    return pa.table({
        "id": pa.array(list(ids), pa.int64()),
        "region": pa.array([["eu", "us", "apac"][i % 3] for i in ids]),
        "name": pa.array([f"{tag}-{i}" for i in ids]),
        "score": pa.array([i * 0.5 for i in ids], pa.float64()),
        "flag": pa.array([i % 2 == 0 for i in ids]),
    })


@pytest.fixture
def catalog(tmp_path: Path) -> dict[str, str]:
    return {"name": "lake", "type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": f"file://{tmp_path}/warehouse"}


@pytest.fixture
def lake(catalog: dict[str, str]) -> Catalog:
    properties = dict(catalog)
    lake = load_catalog(properties.pop("name"), **properties)
    lake.create_namespace("dim")
    return lake


@pytest.fixture
def table(lake: Catalog) -> Any:
    table = lake.create_table("dim.customers", schema=dim(range(1)).schema)
    with table.update_spec() as spec:
        spec.add_identity("region")
    for start in (0, 100, 200):  # three commits, a file per partition each
        table.append(dim(range(start, start + 100)))
    return table


def same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.schema.names == want.schema.names
    assert got.sort_by("id").equals(want.sort_by("id"))


def test_rows_and_types_equal_pyiceberg_own_scan(table: Any, catalog: dict[str, str]) -> None:
    source = IcebergSource("dim.customers", catalog=catalog)
    assert source.schema.simpleString() == (
        "struct<id:bigint,region:string,name:string,score:double,flag:boolean>")
    got = read_arrow(source, 2)
    want = table.scan().to_arrow()
    assert got.schema == want.schema
    same_rows(got, want)
    assert len(plan_splits(source)) == len(list(table.scan().plan_files())) == 9


def test_only_the_declared_columns_are_read(table: Any, catalog: dict[str, str]) -> None:
    source = IcebergSource("dim.customers", catalog=catalog, columns=["id", "name"])
    same_rows(read_arrow(source), table.scan(selected_fields=("id", "name")).to_arrow())
    cast = IcebergSource("dim.customers", catalog=catalog, schema="id INT, flag BOOLEAN")
    assert read_arrow(cast).schema == pa.schema([("id", pa.int32()), ("flag", pa.bool_())])


def test_files_of_replaced_snapshots_are_never_read(table: Any, lake: Catalog,
                                                     catalog: dict[str, str]) -> None:
    old = {t.file.file_path for t in table.scan().plan_files()}
    table.delete(EqualTo("region", "eu"))  # drops that partition's files
    table.overwrite(dim(range(1000, 1003), "v2"), overwrite_filter=EqualTo("region", "us"))
    table = lake.load_table("dim.customers")
    source = IcebergSource("dim.customers", catalog=catalog)
    files = {s.file for s in plan_splits(source)}
    assert files == {t.file.file_path for t in table.scan().plan_files()}
    assert not files & (old - {t.file.file_path for t in table.scan().plan_files()})
    same_rows(read_arrow(source), table.scan().to_arrow())
    rows = read_arrow(source).to_pylist()
    assert not [r for r in rows if r["region"] == "eu" and r["id"] < 1000]  # deleted
    assert not [r for r in rows if r["region"] == "us" and r["id"] < 1000]  # overwritten


def test_row_deletes_are_honoured(table: Any, lake: Catalog, catalog: dict[str, str]) -> None:
    table.delete(GreaterThanOrEqual("id", 250))  # rewrites the files it touches
    want = lake.load_table("dim.customers").scan().to_arrow()
    got = read_arrow(IcebergSource("dim.customers", catalog=catalog))
    same_rows(got, want)
    assert max(got.column("id").to_pylist()) == 249


def test_filters_prune_partitions_and_statistics(table: Any, catalog: dict[str, str]) -> None:
    by_partition = IcebergSource("dim.customers", catalog=catalog,
                                 filters=[Predicate("region", "=", "eu")])
    assert len(plan_splits(by_partition)) == 3  # of 9
    same_rows(read_arrow(by_partition), table.scan(row_filter=EqualTo("region", "eu")).to_arrow())
    by_stats = IcebergSource("dim.customers", catalog=catalog,
                             filters=[Predicate("id", ">=", 250), Predicate("flag", "=", True)])
    assert len(plan_splits(by_stats)) == 3  # only the last commit's files hold ids >= 250
    same_rows(read_arrow(by_stats), table.scan(
        row_filter=And(GreaterThanOrEqual("id", 250), EqualTo("flag", True))).to_arrow())
    listed = IcebergSource("dim.customers", catalog=catalog,
                           filters=[Predicate("id", "in", [5, 105]), Predicate("name", "!=", "x")])
    assert sorted(read_arrow(listed).column("id").to_pylist()) == [5, 105]


def test_the_version_is_the_current_snapshot(table: Any, lake: Catalog,
                                             catalog: dict[str, str]) -> None:
    source = IcebergSource("dim.customers", catalog=catalog)
    before = source.current_version()
    assert before == (table.metadata.current_snapshot_id, table.metadata.current_schema_id,
                      str(table.metadata.table_uuid))
    assert source.current_version() == before  # nothing changed
    table.append(dim(range(300, 301)))
    assert source.current_version() != before


def test_an_empty_table_reads_no_rows(lake: Catalog, catalog: dict[str, str]) -> None:
    lake.create_table("dim.empty", schema=dim(range(1)).schema)
    source = IcebergSource("dim.empty", catalog=catalog)
    assert plan_splits(source) == []
    assert read_arrow(source).num_rows == 0


def test_bad_input_is_a_config_error(table: Any, catalog: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="cannot load the Iceberg table 'dim.nowhere'"):
        IcebergSource("dim.nowhere", catalog=catalog)
    with pytest.raises(ConfigError, match=r"no column\(s\) \['nope'\]"):
        IcebergSource("dim.customers", catalog=catalog, columns=["id", "nope"])
    with pytest.raises(ConfigError, match="unknown column"):
        IcebergSource("dim.customers", catalog=catalog, filters=[Predicate("nope", "=", 1)])
    with pytest.raises(ConfigError, match="not read"):
        IcebergSource("dim.customers", catalog=catalog, columns=["id"],
                      filters=[Predicate("region", "=", "eu")])
    with pytest.raises(ConfigError, match="catalog must be"):
        IcebergSource("dim.customers", catalog=3)  # type: ignore[arg-type]


def test_a_table_that_has_gone_is_a_permanent_error_naming_it(
        table: Any, lake: Catalog, catalog: dict[str, str]) -> None:
    source = IcebergSource("dim.customers", catalog=catalog)
    lake.drop_table("dim.customers")
    with pytest.raises(ConnectorError, match="Iceberg table 'dim.customers' not found") as raised:
        read_arrow(source)
    assert type(raised.value) is ConnectorError  # not retried
    with pytest.raises(ConnectorError, match="dim.customers"):
        source.current_version()


def test_it_ships_as_configuration(table: Any, catalog: dict[str, str]) -> None:
    source = IcebergSource("dim.customers", catalog=catalog, columns=["id"],
                           filters=[Predicate("id", "<", 10)])
    shipped = pickle.loads(pickle.dumps(source))
    assert shipped._tables is None  # no catalog or table travels
    assert sorted(read_arrow(shipped).column("id").to_pylist()) == list(range(10))
