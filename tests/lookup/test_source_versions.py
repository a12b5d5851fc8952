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
from cache.snapshot_store import SnapshotStore
from lookup import FullCachingLookupProvider, RetryPolicy, open_lookup
from lookup.full_caching import FullCachingRuntime
from lookup.metrics import parse_report
from scan import CollectionSource, DeltaSource, IcebergSource
from scan.sources import delta
from tests.snapshots.helpers import ManualTrigger
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
    assert metrics.snapshot()["reloads_skipped"] == 3
    assert (metrics + metrics).reloads_skipped == 6
    text = json.dumps({"p": "x", "w": "h:1:a", "s": 1, "t": 0, "m": metrics.snapshot()})
    report = parse_report(text)
    assert report is not None
    assert report.values["reloads_skipped"] == 3
