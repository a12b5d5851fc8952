"""The direction of imports, not only their lack of cycles: each library module has a
rank (DESIGN.md, "Layers"), and imports only modules of its rank or below; no module
imports another package's private module, and none imports through a facade.

A facade (``lookup``, ``scan``, ``scan.sources``, ``spark_lookup``) gathers names for
users: it may name a higher module under ``TYPE_CHECKING`` and in its table of lazily
imported names (PEP 562, ``spark_lookup.lazy``), which are strings, not imports.
"""

from __future__ import annotations

import pytest

from tests.import_graph import library_modules, module_imports

FACADES = {"lookup", "scan", "scan.sources", "spark_lookup"}

# Lowest first. A module's rank is that of the longest prefix listed; the ranks say what
# may build on what: the shared base, the engines (a trigger, a database's or Redis's
# table), caches and the scan framework, then lookup's layers up to Spark, and last the
# adapters that bind an engine to lookup and scan (a backend's lookup function, scan
# source, change feed and Flink options).
RANKS: list[tuple[int, tuple[str, ...]]] = [
    (0, ("spark_lookup",)),
    (1, ("triggers", "connectors")),
    (2, ("cache", "scan")),
    (3, ("lookup.function", "lookup.retry", "lookup.keyed", "lookup.changes.feed",
         "lookup.validity", "lookup.versions")),
    (4, ("lookup.providers",)),
    (5, ("lookup.options", "lookup.table_options", "lookup._flink_ddl",
         "lookup.runtime.base")),
    (6, ("lookup.changes",)),
    (7, ("lookup.runtime",)),
    (8, ("lookup.spark", "lookup")),
    (9, ("connectors.sql.lookup_function", "connectors.sql.postgres_changes",
         "connectors.sql.source", "connectors.sql.chunks", "connectors.sql.jdbc",
         "connectors.redis.lookup_function", "connectors.redis.keyspace_changes",
         "connectors.redis.source", "connectors.redis.options", "connectors.files")),
]


def rank(module: str) -> int:
    """The rank of ``module``: that of the longest listed prefix it starts with."""
    best, found = -1, -1
    for level, prefixes in RANKS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), level
    if found < 0:
        raise AssertionError(f"{module} has no rank: add it to RANKS")
    return found


def _package(module: str) -> str:
    return module.split(".")[0]


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def _edges() -> list[tuple[str, str]]:
    modules = library_modules()
    edges = []
    for name, path in modules.items():
        # A facade's TYPE_CHECKING block names what its lazy table loads.
        for target in module_imports(name, path, modules,
                                     skip_type_checking=name in FACADES):
            edges.append((name, target))
    return edges


def test_every_module_has_a_rank() -> None:
    for module in library_modules():
        rank(module)


def test_imports_go_down_the_layers() -> None:
    upward = [f"{source} ({rank(source)}) -> {target} ({rank(target)})"
              for source, target in _edges()
              if rank(target) > rank(source)
              and not (source in FACADES and _package(target) == _package(source))]
    assert upward == []


def test_no_module_imports_another_packages_private_module() -> None:
    private = [f"{source} -> {target}" for source, target in _edges()
               if _package(source) != _package(target) and _is_private(target)]
    assert private == []


def test_no_library_module_imports_through_a_facade() -> None:
    through = [f"{source} -> {target}" for source, target in _edges()
               if target in FACADES and source not in FACADES]
    assert through == []


def test_the_default_and_the_full_cache_stay_apart() -> None:
    crossing = [f"{source} -> {target}" for source, target in _edges()
                if {source.split(".")[:2][-1], target.split(".")[:2][-1]} == {"default", "full"}
                and _package(source) == _package(target) == "cache"]
    assert crossing == []


@pytest.mark.parametrize(("module", "expected"), [
    ("spark_lookup.errors", 0), ("connectors.sql.table", 1), ("connectors.sql.source", 9),
    ("cache.full.store", 2), ("lookup.changes.feed", 3), ("lookup.changes.overlay", 6),
    ("lookup.runtime.base", 5), ("lookup.runtime.full", 7), ("lookup.spark.join", 8),
])
def test_ranks_go_by_the_longest_prefix(module: str, expected: int) -> None:
    assert rank(module) == expected
