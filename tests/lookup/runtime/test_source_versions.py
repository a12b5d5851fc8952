"""Reloads of a source still at the version loaded read nothing (``Source.current_version``):
full caches over Delta and Iceberg tables, a pinned Delta version, a host's shared
snapshot store (no republication), staleness, and the metric that counts them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.catalog import load_catalog

from cache import CacheMetrics
from cache.full.store import SnapshotStore
from connectors.files import delta
from lookup import FullCachingLookupProvider, RetryPolicy, open_lookup
from lookup.runtime.full import FullCachingRuntime
from lookup.spark.metrics import parse_report
from scan import CollectionSource, DeltaSource, IcebergSource
from tests.integration.processes import ManualTrigger
from triggers import PeriodicCacheReloadTrigger

HOUR = PeriodicCacheReloadTrigger(timedelta(hours=1))  # loads at open, then when told


def dim(ids: range, tier: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "tier": [tier] * len(ids)})


def reload(handle: Any) -> None:
    runtime = handle.runtime
    assert isinstance(runtime, FullCachingRuntime)
    runtime.trigger_reload().result(timeout=60)


def provider(source: Any, **kw: Any) -> FullCachingLookupProvider:
    kw.setdefault("retry_policy", RetryPolicy(max_retries=0))
    return FullCachingLookupProvider.of(source, HOUR, ["id"], **kw)


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every split planning of a Delta or Iceberg table (where data files are listed)."""
    from pyiceberg.table import DataScan

    planned: list[str] = []
    delta_plan, iceberg_plan = delta.plan_files, DataScan.plan_files

    def plan_delta(*args: Any) -> Any:
        planned.append("delta")
        return delta_plan(*args)

    def plan_iceberg(self: Any) -> Any:
        planned.append("iceberg")
        return iceberg_plan(self)

    monkeypatch.setattr(delta, "plan_files", plan_delta)
    monkeypatch.setattr(DataScan, "plan_files", plan_iceberg)
    return planned


def test_a_delta_full_cache_reloads_only_a_new_version(tmp_path: Path, plans: list[str]) -> None:
    path = str(tmp_path / "dim")
    write_deltalake(path, dim(range(10), "v1"))
    with open_lookup(provider(DeltaSource(path))) as handle:
        assert handle.lookup((1,)) == ((1, "v1"),)
        assert plans == ["delta"]
        for _ in range(2):
            reload(handle)  # the table is still at version 0
        assert plans == ["delta"]  # no file listed, none opened
        metrics = handle.metrics
        assert (metrics.load_count, metrics.reloads_skipped) == (1, 2)
        write_deltalake(path, dim(range(5, 12), "v2"), mode="overwrite")
        reload(handle)
        assert handle.lookup_batch([(1,), (5,), (11,)]) == {
            (1,): (), (5,): ((5, "v2"),), (11,): ((11, "v2"),)}
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (2, 2)
        reload(handle)
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (2, 3)
        assert plans == ["delta", "delta"]


def test_a_pinned_delta_version_is_loaded_once(tmp_path: Path, plans: list[str]) -> None:
    path = str(tmp_path / "dim")
    write_deltalake(path, dim(range(10), "v1"))
    write_deltalake(path, dim(range(10), "v2"), mode="overwrite")
    with open_lookup(provider(DeltaSource(path, version=0))) as handle:
        assert handle.lookup((1,)) == ((1, "v1"),)  # the first load is done
        write_deltalake(path, dim(range(10), "v3"), mode="overwrite")
        reload(handle)
        assert handle.lookup((1,)) == ((1, "v1"),)
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (1, 1)
        assert plans == ["delta"]


def test_an_iceberg_full_cache_reloads_only_a_new_snapshot(tmp_path: Path,
                                                           plans: list[str]) -> None:
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
               "warehouse": f"file://{tmp_path}/warehouse"}
    lake = load_catalog("default", **catalog)
    lake.create_namespace("dim")
    table = lake.create_table("dim.customers", schema=dim(range(1), "").schema)
    table.append(dim(range(10), "v1"))
    with open_lookup(provider(IcebergSource("dim.customers", catalog=catalog))) as handle:
        assert handle.lookup((1,)) == ((1, "v1"),)
        reload(handle)
        assert plans == ["iceberg"]
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (1, 1)
        table.overwrite(dim(range(10), "v2"))
        reload(handle)
        assert handle.lookup((1,)) == ((1, "v2"),)
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (2, 1)
        assert plans == ["iceberg", "iceberg"]


class VersionedSource(CollectionSource):
    """Rows whose version a file holds; counts the scans it starts in ``scans``."""

    def __init__(self, version_file: Path, scans: Path) -> None:
        super().__init__([(i, f"n{i}") for i in range(50)], schema="id BIGINT, name STRING")
        self.version_file = str(version_file)
        self.scans = str(scans)

    def current_version(self) -> str:
        return Path(self.version_file).read_text()

    def create_enumerator(self, context: Any) -> Any:
        with open(self.scans, "a") as counter:
            counter.write("scan\n")
        return super().create_enumerator(context)


def scans(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_skipped_reload_renews_staleness(tmp_path: Path) -> None:
    (tmp_path / "version").write_text("a")
    source = VersionedSource(tmp_path / "version", tmp_path / "scans")
    with open_lookup(provider(source, max_staleness=timedelta(seconds=30))) as handle:
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        assert handle.lookup((1,))
        now = runtime.cache.clock()
        runtime.cache.clock = lambda: now + 31
        reload(handle)  # unchanged: nothing read, but the data is known to be current
        assert handle.lookup((1,)) == ((1, "n1"),)
        assert scans(tmp_path / "scans") == 1
        assert runtime.cache.current().loaded_at == now + 31  # type: ignore[union-attr]


def test_a_source_that_cannot_tell_its_version_always_loads() -> None:
    with open_lookup(provider(CollectionSource([(1, "a")], schema="id BIGINT, v STRING"))
                     ) as handle:
        assert handle.lookup((1,)) == ((1, "a"),)
        reload(handle)
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (2, 0)


@pytest.fixture
def opened() -> Iterator[Callable[..., FullCachingRuntime]]:
    runtimes: list[FullCachingRuntime] = []

    def open_runtime(p: FullCachingLookupProvider, store: SnapshotStore) -> FullCachingRuntime:
        runtime = FullCachingRuntime(p, store=store)
        runtime.open()
        runtimes.append(runtime)
        return runtime

    yield open_runtime
    for runtime in runtimes:
        runtime.close()


def test_a_shared_snapshot_is_confirmed_not_republished(
        tmp_path: Path, opened: Callable[..., FullCachingRuntime]) -> None:
    (tmp_path / "version").write_text("a")
    source = VersionedSource(tmp_path / "version", tmp_path / "scans")
    p = FullCachingLookupProvider.of(source, ManualTrigger(interval=3600), ["id"],
                                     share_across_workers=True)
    offset = [0.0]  # hours pass when a test says so, for both "processes"

    def runtime() -> FullCachingRuntime:  # each its own lock files: as two processes
        opened_runtime = opened(p, SnapshotStore(tmp_path / "store",
                                                 fingerprint=p.snapshot_fingerprint()))
        opened_runtime.cache.clock = lambda: time.time() + offset[0]
        opened_runtime.cache.check_interval = 0  # type: ignore[attr-defined]
        return opened_runtime

    def data_files() -> list[str]:
        return sorted(f.name for f in (tmp_path / "store").iterdir() if f.suffix == ".arrow")

    store = SnapshotStore(tmp_path / "store", fingerprint=p.snapshot_fingerprint())
    first = runtime()
    first.trigger_reload().result(30)
    published = store.latest()
    assert published is not None
    assert published.source_version == repr("a")
    files = data_files()

    offset[0] = 2 * 3600  # due: the source is asked, and is unchanged
    first.trigger_reload().result(30)
    confirmed = store.latest()
    assert confirmed is not None
    assert (confirmed.version, confirmed.file) == (published.version, published.file)
    assert confirmed.loaded_at >= published.loaded_at + 2 * 3600
    assert data_files() == files  # nothing written but the pointer
    assert first.metrics.reloads_skipped == 1
    assert first.cache.current().loaded_at == confirmed.loaded_at  # type: ignore[union-attr]

    second = runtime()
    second.trigger_reload().result(30)  # not due since the confirmation: just served
    assert second.lookup((3,)) == ((3, "n3"),)
    offset[0] = 4 * 3600
    second.trigger_reload().result(30)  # due again: confirmed by the other process
    assert second.metrics.reloads_skipped == 1
    assert (first.metrics.load_count, second.metrics.load_count) == (1, 0)
    assert scans(tmp_path / "scans") == 1
    assert data_files() == files
    assert first.lookup((3,)) == ((3, "n3"),)  # switches to the confirmed time, no read
    assert first.cache.current().loaded_at == store.latest().loaded_at  # type: ignore[union-attr]

    (tmp_path / "version").write_text("b")
    offset[0] = 6 * 3600
    first.trigger_reload().result(30)
    assert scans(tmp_path / "scans") == 2
    assert store.latest().version == published.version + 1  # type: ignore[union-attr]


def test_reloads_skipped_travels_in_metrics_reports() -> None:
    metrics = CacheMetrics()
    metrics.inc_reloads_skipped(3)
    assert metrics.as_dict()["reloads_skipped"] == 3
    assert (metrics + metrics).reloads_skipped == 6
    text = json.dumps({"p": "x", "w": "h:1:a", "s": 1, "t": 0, "m": metrics.as_dict()})
    report = parse_report(text)
    assert report is not None
    assert report.values["reloads_skipped"] == 3


# --- versions of SQL tables (a query of the user's) and of files ----------------------


def sqlite_table(path: Path, rows: list[tuple[int, str]]) -> None:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS dim (id INTEGER PRIMARY KEY, name TEXT, "
                   "updated INTEGER NOT NULL DEFAULT 0)")
        db.executemany("INSERT OR REPLACE INTO dim (id, name, updated) VALUES (?, ?, ?)",
                       [(i, n, i) for i, n in rows])
    db.close()


def test_a_sql_version_query_skips_reloads_of_an_unchanged_table(tmp_path: Path) -> None:
    import functools
    import sqlite3

    from scan import SqlTableSource

    path = tmp_path / "dim.db"
    sqlite_table(path, [(i, f"n{i}") for i in range(10)])
    source = SqlTableSource(functools.partial(sqlite3.connect, str(path)), "dim",
                            columns=["id", "name"],
                            version_query="SELECT max(updated), count(*) FROM dim")
    assert source.current_version() == (9, 10)
    with open_lookup(provider(source)) as handle:
        assert handle.lookup((3,)) == ((3, "n3"),)
        reload(handle)
        reload(handle)
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (1, 2)
        sqlite_table(path, [(10, "n10")])
        reload(handle)
        assert handle.lookup((10,)) == ((10, "n10"),)
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (2, 2)


def test_a_sql_source_without_a_version_query_cannot_tell(tmp_path: Path) -> None:
    import functools
    import sqlite3

    from scan import SqlTableSource

    path = tmp_path / "dim.db"
    sqlite_table(path, [(1, "a")])
    assert SqlTableSource(functools.partial(sqlite3.connect, str(path)), "dim"
                          ).current_version() is None


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT id FROM dim", "must return one row, it returned 2"),
    ("SELECT count(*) FROM nowhere", "version query failed"),
])
def test_a_bad_version_query_names_the_table(tmp_path: Path, query: str, message: str) -> None:
    import functools
    import sqlite3

    from scan import SqlTableSource
    from spark_lookup.errors import SparkLookupError

    path = tmp_path / "dim.db"
    sqlite_table(path, [(1, "a"), (2, "b")])
    source = SqlTableSource(functools.partial(sqlite3.connect, str(path)), "dim",
                            version_query=query)
    with pytest.raises(SparkLookupError, match=message) as caught:
        source.current_version()
    assert "'dim'" in str(caught.value)


@pytest.mark.parametrize("query", ["", "  ", 3])
def test_a_version_query_must_be_sql(query: Any) -> None:
    import sqlite3

    from scan import SqlTableSource
    from spark_lookup.errors import ConfigError

    with pytest.raises(ConfigError, match="version_query must be a SQL statement"):
        SqlTableSource(sqlite3.connect, "dim", version_query=query)


def test_a_postgres_version_query(postgres_dsn: str) -> None:
    import functools
    import uuid

    import psycopg

    from scan import SqlTableSource

    table = f"versions_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text, "
                     "updated timestamptz NOT NULL DEFAULT now())")
        conn.execute(f"INSERT INTO {table} (id, name) VALUES (1, 'a'), (2, 'b')")
    try:
        source = SqlTableSource(functools.partial(psycopg.connect, postgres_dsn), table,
                                columns=["id", "name"],
                                version_query=f"SELECT max(updated), count(*) FROM {table}")
        with open_lookup(provider(source)) as handle:
            assert handle.lookup((2,)) == ((2, "b"),)
            reload(handle)
            assert handle.metrics.reloads_skipped == 1
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute(f"UPDATE {table} SET name = 'c', updated = now() WHERE id = 2")
            reload(handle)
            assert handle.lookup((2,)) == ((2, "c"),)
            assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (2, 1)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")


def test_a_file_source_reloads_only_changed_files(tmp_path: Path) -> None:
    import os

    import pyarrow.parquet as pq

    from scan import FileSource

    folder = tmp_path / "dim"
    folder.mkdir()
    pq.write_table(dim(range(5), "v1"), folder / "a.parquet")
    source = FileSource(str(folder))
    first = source.current_version()
    assert source.current_version() == first
    with open_lookup(provider(source)) as handle:
        assert handle.lookup((1,)) == ((1, "v1"),)
        reload(handle)
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (1, 1)
        pq.write_table(dim(range(5, 8), "v2"), folder / "b.parquet")  # a file added
        reload(handle)
        assert handle.lookup((6,)) == ((6, "v2"),)
        # The same size, the same modification time: replaced all the same.
        stat = os.stat(folder / "a.parquet")
        pq.write_table(dim(range(5), "v3"), folder / "a.tmp")
        os.replace(folder / "a.tmp", folder / "a.parquet")
        os.utime(folder / "a.parquet", ns=(stat.st_atime_ns, stat.st_mtime_ns))
        reload(handle)
        assert handle.lookup((1,)) == ((1, "v3"),)
        (folder / "b.parquet").unlink()  # a file removed
        reload(handle)
        assert handle.lookup((6,)) == ()
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (4, 1)


def test_a_missing_file_fails_the_version(tmp_path: Path) -> None:
    from scan import FileSource
    from spark_lookup.errors import ConnectorError

    with pytest.raises(ConnectorError, match="nothing.parquet"):
        FileSource(str(tmp_path / "nothing.parquet")).current_version()


# --- a table replaced at its path, a column dropped (issue 40, defects 2 and 3) -------


@pytest.mark.parametrize("replacement_commits", [1, 3], ids=["same-version", "past-it"])
def test_a_delta_table_replaced_at_its_path_is_reloaded(tmp_path: Path,
                                                        replacement_commits: int) -> None:
    """``rm -rf`` and a new table at the same path starts again at version 0: the new
    table's rows are served (its version number alone would equal, or continue, the old
    one's)."""
    import shutil

    path = str(tmp_path / "dim")
    write_deltalake(path, dim(range(10), "old"))
    if replacement_commits == 3:
        write_deltalake(path, dim(range(10), "old"), mode="overwrite")  # served: version 1
    with open_lookup(provider(DeltaSource(path))) as handle:
        assert handle.lookup((1,)) == ((1, "old"),)
        shutil.rmtree(path)
        for _ in range(replacement_commits):
            write_deltalake(path, dim(range(3), "new"), mode="overwrite")
        reload(handle)
        assert handle.lookup_batch([(1,), (5,)]) == {(1,): ((1, "new"),), (5,): ()}
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (2, 0)
        assert handle.metrics.num_load_failures == 0


def test_an_iceberg_table_replaced_in_its_catalog_is_reloaded(tmp_path: Path) -> None:
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
               "warehouse": f"file://{tmp_path}/warehouse"}
    lake = load_catalog("default", **catalog)
    lake.create_namespace("dim")
    table = lake.create_table("dim.customers", schema=dim(range(1), "").schema)
    table.append(dim(range(10), "old"))
    with open_lookup(provider(IcebergSource("dim.customers", catalog=catalog))) as handle:
        assert handle.lookup((1,)) == ((1, "old"),)
        lake.drop_table("dim.customers")
        table = lake.create_table("dim.customers", schema=dim(range(1), "").schema)
        table.append(dim(range(3), "new"))
        reload(handle)
        assert handle.lookup_batch([(1,), (5,)]) == {(1,): ((1, "new"),), (5,): ()}
        assert (handle.metrics.load_count, handle.metrics.reloads_skipped) == (2, 0)


def _drop_column(kind: str, tmp_path: Path) -> tuple[Any, Callable[[], None]]:
    """A source over a table with columns id, tier, v, and what drops ``v`` from it."""
    rows = dim(range(5), "t").append_column("v", pa.array(["x"] * 5))
    if kind == "delta":
        path = str(tmp_path / "dim")
        write_deltalake(path, rows)

        def drop() -> None:
            write_deltalake(path, dim(range(5), "t2"), mode="overwrite",
                            schema_mode="overwrite")

        return DeltaSource(path), drop
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
               "warehouse": f"file://{tmp_path}/warehouse"}
    lake = load_catalog("default", **catalog)
    lake.create_namespace("dim")
    table = lake.create_table("dim.customers", schema=rows.schema)
    table.append(rows)

    def drop_iceberg() -> None:
        with table.update_schema() as update:
            update.delete_column("v")
        table.overwrite(dim(range(5), "t2"))

    return IcebergSource("dim.customers", catalog=catalog), drop_iceberg


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_dropped_column_fails_the_reload_and_keeps_the_last_good_version(
        tmp_path: Path, kind: str) -> None:
    source, drop = _drop_column(kind, tmp_path)
    with open_lookup(provider(source)) as handle:
        assert handle.lookup((1,)) == ((1, "t", "x"),)
        drop()
        with pytest.raises(Exception, match=r"column.*'v'") as raised:
            reload(handle)
        assert "ConnectorError" in type(raised.value).__name__ or any(
            type(e).__name__ == "ConnectorError" for e in _chain(raised.value)), raised.value
        assert handle.lookup((1,)) == ((1, "t", "x"),)  # the last good version, not NULL
        assert handle.metrics.num_load_failures >= 1


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__  # type: ignore[assignment]
    return seen
