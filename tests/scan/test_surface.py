"""The deliberate public surface of scan/, its documentation, and its examples."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import inspect
import pickle
import pkgutil

import pytest

import scan
import scan.connector
import scan.sources

EXPECTED = {
    # framework
    "Boundedness",
    "InputStatus",
    "ReaderOptions",
    "ReaderOutput",
    "Source",
    "SourceReader",
    "SourceReaderContext",
    "SourceSplit",
    "SplitEnumerator",
    "SplitEnumeratorContext",
    # running
    "LocalSourceRunner",
    "plan_splits",
    "read_arrow",
    "read_split",
    "read_split_arrow",
    # the PySpark data source adapter (scan/spark.py, loaded lazily)
    "register_data_source",
    # the base of custom sources (scan/pull.py)
    "SplitListSource",
    # the built-in sources
    "CollectionSource",
    "DeltaSource",
    "FileSource",
    "IcebergSource",
    "RedisScanSource",
    "SqlTableSource",
}

# For writing a connector (scan.connector), the built-in splits (scan.sources) and
# split serializers (scan.serializers): public, but not at the top.
CONNECTOR = {
    "ArrowRecordEmitter",
    "ArrowRecordsBySplits",
    "ElementQueue",
    "MultiThreadFetcherManager",
    "PullingSourceReader",
    "RecordEmitter",
    "RecordsBySplits",
    "RecordsWithSplitIds",
    "RowOffsetState",
    "SingleThreadFetcherManager",
    "SourceReaderBase",
    "SplitFetcher",
    "SplitFetcherManager",
    "SplitReader",
    "SplitState",
    "SplitsAddition",
    "SplitsChange",
}
SOURCES = {
    "CollectionSource",
    "CollectionSplit",
    "DeltaHistorySplit",
    "DeltaSource",
    "DeltaSplit",
    "FileSource",
    "FileSplit",
    "IcebergSource",
    "IcebergSplit",
    "RedisKeysSplit",
    "RedisScanSource",
    "SqlChunkSplit",
    "SqlTableSource",
}


def test_exported_names_are_pinned() -> None:
    assert set(scan.__all__) == EXPECTED
    assert len(scan.__all__) == len(EXPECTED) <= 23
    for name in scan.__all__:
        assert getattr(scan, name) is not None
    assert set(scan.connector.__all__) == CONNECTOR
    assert set(scan.sources.__all__) == SOURCES


_DOCUMENTED = sorted({("scan", n) for n in EXPECTED} | {("scan.connector", n) for n in CONNECTOR}
                     | {("scan.sources", n) for n in SOURCES}
                     | {("scan.serializers", "SimpleVersionedSerializer"),
                        ("scan.serializers", "JsonVersionedSerializer")})


@pytest.mark.parametrize(("module", "name"), _DOCUMENTED)
def test_every_public_name_is_documented(module: str, name: str) -> None:
    obj = getattr(importlib.import_module(module), name)
    assert inspect.getdoc(obj), f"{name} has no docstring"
    if inspect.isclass(obj):
        for attribute, member in vars(obj).items():
            public = not attribute.startswith("_")
            if not public or (not callable(member) and not isinstance(member, property)):
                continue
            assert inspect.getdoc(getattr(obj, attribute)), f"{name}.{attribute} undocumented"


def _modules() -> list[str]:
    return ["scan", *sorted(info.name for info in pkgutil.walk_packages(scan.__path__, "scan."))]


@pytest.mark.parametrize("module", _modules())
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_the_main_entry_points_have_examples() -> None:
    for obj in (
        scan.LocalSourceRunner,
        scan.CollectionSource,
        scan.SplitListSource,
        scan.SqlTableSource,
        scan.FileSource,
        scan.DeltaSource,
        scan.IcebergSource,
        scan.RedisScanSource,
        scan.read_arrow,
        scan.plan_splits,
    ):
        assert "Examples" in (obj.__doc__ or ""), obj


@pytest.mark.parametrize(
    "split",
    [
        scan.sources.CollectionSplit(0, 0, 1),
        scan.sources.FileSplit("p", 1, 2),
        scan.sources.DeltaSplit("t", 3, "t/f.parquet", (("p", 1),), True, 2),
        scan.sources.DeltaHistorySplit("t", 3, 2),
        scan.sources.IcebergSplit(7, "f.parquet", 2),
        scan.sources.RedisKeysSplit(0, (b"k",)),
        scan.sources.SqlChunkSplit(0, 1, 2),
    ],
)
def test_splits_are_frozen_and_picklable(split: scan.SourceSplit) -> None:
    assert dataclasses.is_dataclass(split)
    field = dataclasses.fields(split)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(split, field, None)
    assert pickle.loads(pickle.dumps(split)) == split


def test_reading_needs_no_jvm_and_importing_needs_no_drivers() -> None:
    import subprocess
    import sys

    code = (
        "import sys, scan\n"
        "drivers = [m for m in ('psycopg', 'redis') if m in sys.modules]\n"
        "scan.read_arrow(scan.CollectionSource([(1, 'a')], 2), 2)\n"
        "from pyspark import SparkContext\n"
        "print(drivers, SparkContext._gateway, SparkContext._active_spark_context)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="."
    )
    assert out.stdout.strip() == "[] None None"
