"""Each package's exported names, pinned: a name added to or dropped from the public
API is a deliberate change of this list (``scan``'s own test pins its names).
``spark_lookup`` exports its errors and, as one namespace, every other package's names."""

from __future__ import annotations

import importlib
import inspect

import pytest

EXPORTS = {
    "cache": {
        "CacheMetrics", "DefaultLookupCache", "DefaultLookupCacheBuilder", "Key",
        "LookupCache", "MetricsAsOf", "RedisLookupCache", "Row", "Rows",
        "TieredLookupCache",
    },
    "connectors": {"BadValuePolicy", "KeyCodec", "Predicate"},
    "lookup": {
        "AsyncLookupFunction", "AsyncLookupFunctionProvider", "ChangeFeed",
        "FullCachingLookupProvider",
        "LookupFunction", "LookupFunctionBase", "LookupFunctionProvider", "LookupHandle",
        "LookupOptions", "LookupProvider", "Materialization", "MissRetry",
        "PartialCachingAsyncLookupProvider", "PartialCachingLookupProvider",
        "PostgresChanges", "RedisKeyspaceChanges", "RedisLookupFunction", "RefreshStatus",
        "RetryPolicy", "ScheduledTableRefresh",
        "SqlLookupFunction", "Validity", "lookup_join", "lookup_metrics", "open_lookup",
        "register_lookup_function", "register_lookup_join", "register_lookup_table_function",
    },
    "spark_lookup.errors": {
        "BadValueError", "ConfigError", "ConfigWarning", "ConnectorError", "KeyKindError",
        "LookupLoadError",
        "MetricsUnavailableError", "SnapshotUnavailableError", "SourceBusyError", "SourceError",
        "SparkLookupError", "TransientConnectorError",
    },
    "triggers": {
        "CacheReloadTrigger", "PeriodicCacheReloadTrigger", "ReloadContext", "ScheduleMode",
        "TimedCacheReloadTrigger", "reload_trigger_from_options",
    },
}


def test_spark_lookup_is_the_whole_api_in_one_namespace() -> None:
    import scan
    import spark_lookup

    everything = set().union(*EXPORTS.values(), scan.__all__)
    assert set(spark_lookup.__all__) == everything
    assert len(spark_lookup.__all__) == len(everything)  # no name in two packages
    for name in spark_lookup.__all__:
        package = next((p for p, names in EXPORTS.items() if name in names), "scan")
        package = "spark_lookup" if package == "spark_lookup.errors" else package
        # The same object as where the docs show it, not a copy.
        assert getattr(spark_lookup, name) is getattr(importlib.import_module(package), name)
    assert set(spark_lookup.__all__) <= set(dir(spark_lookup))  # completion sees them


def test_importing_spark_lookup_loads_no_other_package() -> None:
    import subprocess
    import sys

    code = ("import sys, spark_lookup; "
            "print(sorted(m for m in ('lookup', 'cache', 'scan', 'connectors', 'triggers', "
            "'pyspark', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_exported_names_are_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == EXPORTS[package]
    assert len(module.__all__) == len(EXPORTS[package])  # no name twice


@pytest.mark.parametrize(("package", "name"),
                         sorted((p, n) for p, names in EXPORTS.items() for n in names))
def test_every_exported_name_is_there_and_documented(package: str, name: str) -> None:
    value = getattr(importlib.import_module(package), name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert inspect.getdoc(value), f"{package}.{name} has no docstring"


def test_the_public_api_stays_small() -> None:
    import scan

    total = sum(len(names) for names in EXPORTS.values()) + len(scan.__all__)
    # 89 before the API was curated; 74 then, + ChangeFeed, PostgresChanges and
    # RedisKeyspaceChanges (issue 31); + KeyKindError, - LookupFullCache (issue 32);
    # + MetricsAsOf and ConfigWarning (the category of a likely mistaken option value)
    # (issue 42); + scan.SplitListSource, the base of custom sources (issue 43);
    # + SourceBusyError, a source over its connection limit, waited for (issue 44);
    # + Validity, a dimension's version columns (issue 45)
    assert total <= 82


def test_the_namespace_page_links_every_name() -> None:
    from pathlib import Path

    import spark_lookup

    page = (Path(__file__).resolve().parents[1] / "docs/api/spark_lookup.md").read_text()
    errors = EXPORTS["spark_lookup.errors"]
    missing = [n for n in spark_lookup.__all__ if n not in errors and f"[`{n}`](" not in page]
    assert missing == [], "docs/api/spark_lookup.md must link each name to its page"
