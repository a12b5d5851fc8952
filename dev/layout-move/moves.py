#!/usr/bin/env python3
"""Issue 43's file moves, one step at a time, in a checkout of spark-lookup.

    python plan43_moves.py STEP [--root DIR] [--dry-run] [--force]
    python plan43_moves.py list

STEP is 0..7 (see dev/layout-move/PLAN.md; step 6 is the tests' move). Each step:

1. creates the new packages (an ``__init__.py`` holding a docstring only),
2. ``git mv``-s its modules (history kept),
3. rewrites every tracked text file (``.py``, ``.md``, ``.toml``, ``.yml``, Makefile):
   ``from PARENT import leaf`` of a moved module (AST), dotted module paths
   (``lookup.runtime.REGISTRY``, monkeypatch strings, docstrings: a path followed by
   an attribute is rewritten only when the old module defines or imports that name, so
   Flink keys such as ``lookup.join.cache.ttl`` are left alone) and file paths
   (``lookup/full_caching.py``),
4. makes the package facades lazy where a backend moved above them (step 4: a PEP 562
   ``__getattr__`` from the new ``spark_lookup/lazy.py``, plus ``TYPE_CHECKING`` imports
   for mypy and mkdocstrings),
5. applies the few edits a step needs to stay green (listed in PATCHES),
6. sorts the touched imports (``ruff check --select I --fix``).

Splits, merges and renames of classes are not done here: the plan lists them as the
manual part of each step. Nothing is committed; review with ``git diff -M``.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

# ---------------------------------------------------------------------------- the moves

STEPS: dict[str, list[tuple[str, str]]] = {
    # 0: the shared base's modules the other packages import become public (50 of the
    # 58 cross-package private imports target these six).
    "0": [
        ("spark_lookup/_compat.py", "spark_lookup/compat.py"),
        ("spark_lookup/_shown.py", "spark_lookup/shown.py"),
        ("spark_lookup/_per_process.py", "spark_lookup/per_process.py"),
        ("spark_lookup/_credentials.py", "spark_lookup/credentials.py"),
        ("spark_lookup/_spark_types.py", "spark_lookup/spark_types.py"),
        ("spark_lookup/_load_priority.py", "spark_lookup/load_priority.py"),
    ],
    # 1: lookup/runtime/ (the registry is split out of partial.py by hand).
    "1": [
        ("lookup/_runtime_base.py", "lookup/runtime/base.py"),
        ("lookup/runtime.py", "lookup/runtime/partial.py"),
        ("lookup/full_caching.py", "lookup/runtime/full.py"),
        ("lookup/_full_load.py", "lookup/runtime/full_load.py"),
        ("lookup/_loaders.py", "lookup/runtime/loaders.py"),
        ("lookup/_worker.py", "lookup/runtime/worker.py"),
    ],
    # 2: lookup/changes/.
    "2": [
        ("lookup/changes.py", "lookup/changes/feed.py"),
        ("lookup/_listener.py", "lookup/changes/listener.py"),
        ("lookup/_host_listeners.py", "lookup/changes/host_listeners.py"),
        ("lookup/_invalidation.py", "lookup/changes/partial.py"),
        ("lookup/_change_overlay.py", "lookup/changes/overlay.py"),
        ("lookup/_change_reload.py", "lookup/changes/reload.py"),
        ("lookup/_changed_keys.py", "lookup/changes/keys.py"),
    ],
    # 3: lookup/spark/.
    "3": [
        ("lookup/join.py", "lookup/spark/join.py"),
        ("lookup/_join_plan.py", "lookup/spark/join_plan.py"),
        ("lookup/_join_worker.py", "lookup/spark/join_worker.py"),
        ("lookup/_assemble.py", "lookup/spark/assemble.py"),
        ("lookup/_pandas_wire.py", "lookup/spark/pandas_wire.py"),
        ("lookup/_join_report.py", "lookup/spark/report.py"),
        ("lookup/metrics.py", "lookup/spark/metrics.py"),
        ("lookup/spark_sql.py", "lookup/spark/sql_functions.py"),
        ("lookup/table_join.py", "lookup/spark/table_join.py"),
        ("lookup/refresh.py", "lookup/spark/refresh.py"),
        ("lookup/_session.py", "lookup/spark/session.py"),
        ("lookup/_interpreter.py", "lookup/spark/interpreter.py"),
    ],
    # 4: one place per backend; scan's pull-source base made public first.
    "4": [
        ("scan/sources/_pull.py", "scan/pull.py"),
        ("scan/sources/_enumerator.py", "scan/planners.py"),
        ("scan/sources/_types.py", "scan/types.py"),
        ("scan/sources/collection.py", "scan/collection.py"),
        ("lookup/stores/_keyed.py", "lookup/keyed.py"),
        ("lookup/stores/sql.py", "connectors/sql/lookup_function.py"),
        ("lookup/stores/postgres_changes.py", "connectors/sql/postgres_changes.py"),
        ("scan/sources/sql.py", "connectors/sql/source.py"),
        ("scan/sources/_sql_chunks.py", "connectors/sql/chunks.py"),
        ("lookup/_jdbc_url.py", "connectors/sql/jdbc/url.py"),
        ("lookup/_jdbc_drivers.py", "connectors/sql/jdbc/drivers.py"),
        ("lookup/_secret.py", "connectors/sql/jdbc/secret.py"),
        ("lookup/stores/redis.py", "connectors/redis/lookup_function.py"),
        ("lookup/stores/redis_changes.py", "connectors/redis/keyspace_changes.py"),
        ("scan/sources/redis_scan.py", "connectors/redis/source.py"),
        ("scan/sources/files.py", "connectors/files/source.py"),
        ("scan/sources/delta.py", "connectors/files/delta.py"),
        ("scan/sources/iceberg.py", "connectors/files/iceberg.py"),
        ("scan/sources/_batches.py", "connectors/files/batches.py"),
        ("scan/sources/_side_by_side.py", "connectors/files/side_by_side.py"),
        ("scan/sources/_footers.py", "connectors/files/footers.py"),
        ("scan/sources/_row_groups.py", "connectors/files/row_groups.py"),
    ],
    # 5: cache/default/ and cache/full/; what lookup imports of cache made public.
    "5": [
        ("cache/_fit.py", "cache/fit.py"),
        ("cache/_keys.py", "cache/keys.py"),
        ("cache/_key_hash.py", "cache/key_hash.py"),
        ("cache/_hash_table.py", "cache/hash_table.py"),
        ("cache/default.py", "cache/default/cache.py"),
        ("cache/_segments.py", "cache/default/segments.py"),
        ("cache/full.py", "cache/full/snapshot.py"),
        ("cache/shared_full.py", "cache/full/shared.py"),
        ("cache/snapshot_store.py", "cache/full/store.py"),
        ("cache/_spool.py", "cache/full/spool.py"),
        ("cache/_combine.py", "cache/full/combine.py"),
        ("cache/_release.py", "cache/full/release.py"),
        ("cache/_overlay.py", "cache/full/overlay.py"),
        ("cache/_key_index.py", "cache/full/index.py"),
        ("cache/_dense_keys.py", "cache/full/dense_keys.py"),
        ("cache/_index_file.py", "cache/full/index_file.py"),
        ("cache/_string_views.py", "cache/full/string_views.py"),
    ],
    # 6: tests mirror the packages; cross-cutting suites under tests/integration/.
    "6": [
        ("tests/base/test_options.py", "tests/spark_lookup/test_options.py"),
        ("tests/base/test_schema_and_sql.py", "tests/spark_lookup/test_schema.py"),
        ("tests/test_compat.py", "tests/spark_lookup/test_compat.py"),
        ("tests/cache/test_api_checks.py", "tests/cache/default/test_checks.py"),
        ("tests/cache/test_columnar.py", "tests/cache/default/test_columnar.py"),
        ("tests/cache/test_default_cache.py", "tests/cache/default/test_cache.py"),
        ("tests/cache/test_redis_cache.py", "tests/cache/test_redis.py"),
        ("tests/cache/test_tiered_cache.py", "tests/cache/test_tiered.py"),
        ("tests/connectors/test_codec.py", "tests/cache/test_codec.py"),
        ("tests/cache/test_combine.py", "tests/cache/full/test_combine.py"),
        ("tests/cache/test_dense_keys.py", "tests/cache/full/test_dense_keys.py"),
        ("tests/cache/test_full_cache.py", "tests/cache/full/test_snapshot.py"),
        ("tests/cache/test_key_index.py", "tests/cache/full/test_index.py"),
        ("tests/cache/test_spool.py", "tests/cache/full/test_spool.py"),
        ("tests/cache/test_streamed_snapshot.py", "tests/cache/full/test_streamed_snapshot.py"),
        ("tests/cache/test_string_views.py", "tests/cache/full/test_string_views.py"),
        ("tests/snapshots/test_store.py", "tests/cache/full/test_store.py"),
        ("tests/snapshots/test_damage.py", "tests/cache/full/test_store_damage.py"),
        ("tests/connectors/test_postgres_changes.py",
         "tests/connectors/sql/test_postgres_changes.py"),
        ("tests/connectors/test_sql_mysql.py", "tests/connectors/sql/test_mysql.py"),
        ("tests/connectors/test_sql_postgres.py", "tests/connectors/sql/test_postgres.py"),
        ("tests/connectors/test_sql_sqlite.py", "tests/connectors/sql/test_sqlite.py"),
        ("tests/connectors/test_statement_timeout.py",
         "tests/connectors/sql/test_lookup_function_timeout.py"),
        ("tests/connectors/fuzz.py", "tests/connectors/sql/fuzz.py"),
        ("tests/scan/test_sql.py", "tests/connectors/sql/test_source.py"),
        ("tests/scan/test_sql_default_load.py", "tests/connectors/sql/test_source_defaults.py"),
        ("tests/connectors/test_redis_changes.py",
         "tests/connectors/redis/test_keyspace_changes.py"),
        ("tests/connectors/test_redis_key_safety.py", "tests/connectors/redis/test_key_safety.py"),
        ("tests/connectors/test_redis_lookup.py", "tests/connectors/redis/test_lookup_function.py"),
        ("tests/scan/test_redis.py", "tests/connectors/redis/test_source.py"),
        ("tests/scan/test_files.py", "tests/connectors/files/test_source.py"),
        ("tests/scan/test_file_pruning.py", "tests/connectors/files/test_pruning.py"),
        ("tests/scan/test_row_groups.py", "tests/connectors/files/test_row_groups.py"),
        ("tests/scan/test_delta.py", "tests/connectors/files/test_delta.py"),
        ("tests/scan/test_iceberg.py", "tests/connectors/files/test_iceberg.py"),
        ("tests/lookup/test_change_feed.py", "tests/lookup/changes/test_feed.py"),
        ("tests/lookup/test_change_overlay.py", "tests/lookup/changes/test_overlay.py"),
        ("tests/lookup/test_full_caching.py", "tests/lookup/runtime/test_full.py"),
        ("tests/lookup/test_runtime.py", "tests/lookup/runtime/test_partial.py"),
        ("tests/lookup/test_batch_arrow.py", "tests/lookup/runtime/test_batch_arrow.py"),
        ("tests/lookup/test_key_semantics.py", "tests/lookup/runtime/test_key_semantics.py"),
        ("tests/lookup/test_reload_punctuality.py",
         "tests/lookup/runtime/test_reload_punctuality.py"),
        ("tests/lookup/test_source_versions.py", "tests/lookup/runtime/test_source_versions.py"),
        ("tests/snapshots/test_shared_runtime.py", "tests/lookup/runtime/test_full_shared.py"),
        ("tests/lookup/test_join_plan.py", "tests/lookup/spark/test_join_plan.py"),
        ("tests/lookup/test_metrics_reports.py", "tests/lookup/spark/test_report.py"),
        ("tests/lookup/test_sessions.py", "tests/lookup/spark/test_session.py"),
        ("tests/lookup/test_lookup_options.py", "tests/lookup/test_options.py"),
        ("tests/lookup/test_url_secrets.py", "tests/connectors/sql/jdbc/test_secrets.py"),
        ("tests/spark/test_lookup_join.py", "tests/lookup/spark/test_join.py"),
        ("tests/spark/test_join_engines.py", "tests/lookup/spark/test_join_engines.py"),
        ("tests/spark/test_metrics.py", "tests/lookup/spark/test_metrics.py"),
        ("tests/spark/test_first_run.py", "tests/lookup/spark/test_interpreter.py"),
        ("tests/sql/test_sql.py", "tests/lookup/spark/test_sql_functions.py"),
        ("tests/sql/test_table_join.py", "tests/lookup/spark/test_table_join.py"),
        ("tests/sql/conftest.py", "tests/lookup/spark/conftest.py"),
        ("tests/sql/support.py", "tests/lookup/spark/sql_support.py"),
        ("tests/refresh/test_refresh.py", "tests/lookup/spark/test_refresh.py"),
        ("tests/refresh/test_spark_formats.py", "tests/lookup/spark/test_refresh_formats.py"),
        ("tests/refresh/test_streaming.py", "tests/lookup/spark/test_refresh_streaming.py"),
        ("tests/refresh/support.py", "tests/lookup/spark/refresh_support.py"),
        ("tests/spark/test_data_source.py", "tests/scan/test_spark.py"),
        ("tests/spark/test_change_feed.py", "tests/integration/test_change_feed_spark.py"),
        ("tests/spark/test_lakehouse.py", "tests/integration/test_lakehouse_spark.py"),
        ("tests/spark/test_local_cluster.py", "tests/integration/test_local_cluster.py"),
        ("tests/spark/cluster_job.py", "tests/integration/cluster_job.py"),
        ("tests/snapshots/test_across_processes.py",
         "tests/integration/test_snapshots_across_processes.py"),
        ("tests/snapshots/test_redis_tier.py", "tests/integration/test_redis_tier_churn.py"),
        ("tests/snapshots/test_spark_workers.py", "tests/integration/test_snapshots_spark.py"),
        ("tests/snapshots/helpers.py", "tests/integration/processes.py"),
        ("tests/contract/backends.py", "tests/integration/contract/backends.py"),
        ("tests/contract/cases.py", "tests/integration/contract/cases.py"),
        ("tests/contract/test_contract.py", "tests/integration/contract/test_contract.py"),
        ("tests/reliability/test_bad_input.py", "tests/integration/reliability/test_bad_input.py"),
        ("tests/reliability/test_bad_input_spark.py",
         "tests/integration/reliability/test_bad_input_spark.py"),
        ("tests/reliability/test_concurrency_soak.py",
         "tests/integration/reliability/test_concurrency_soak.py"),
        ("tests/reliability/test_full_cache_reload_failures.py",
         "tests/integration/reliability/test_full_cache_reload_failures.py"),
        ("tests/reliability/test_redis_tier_down.py",
         "tests/integration/reliability/test_redis_tier_down.py"),
        ("tests/reliability/test_source_outage.py",
         "tests/integration/reliability/test_source_outage.py"),
        ("tests/reliability/conftest.py", "tests/integration/reliability/conftest.py"),
        ("tests/reliability/dimensions.py", "tests/integration/reliability/dimensions.py"),
        ("tests/reliability/helpers.py", "tests/integration/reliability/helpers.py"),
        ("tests/spark/test_demo.py", "tests/integration/test_demo.py"),
        ("tests/scan/test_public_api.py", "tests/scan/test_surface.py"),
        # fixtures that tests of several folders use: loaded by tests/conftest.py
        ("tests/refresh/conftest.py", "tests/fixtures/refresh.py"),
        ("tests/scan/conftest.py", "tests/fixtures/scan.py"),
        ("tests/triggers/test_public_api.py", "tests/triggers/test_surface.py"),
    ],
    # 7: the demo leaves the library's packages.
    "7": [
        ("lookup/demo.py", "examples/demo.py"),
        ("lookup/__main__.py", "examples/__main__.py"),
    ],
}

# Packages a step removes: their exported names are imported from where each is
# defined (``from lookup.stores import X`` -> ``from connectors.sql.lookup_function ...``).
REMOVED_PACKAGES: dict[str, list[str]] = {"4": ["lookup/stores/__init__.py"]}

# New packages' docstrings (each __init__.py holds only this).
DOCSTRINGS: dict[str, str] = {
    "lookup/runtime": "The caching runtime of one Python worker: the base every runtime "
                      "extends, the partial\n(function-backed) and full runtimes, and the "
                      "per-process registry of runtimes,\nhandles and worker pins.",
    "lookup/changes": "Change feeds: the feed (configuration and its changes), the listener "
                      "thread of a process,\nand how a partial cache (invalidation) and a "
                      "full cache (overlay, debounced reloads)\napply them.",
    "lookup/spark": "Spark integration: lookup_join (plan, worker, assembly, the pandas "
                    "wire, the metrics report),\nSpark SQL functions and table joins, "
                    "metrics, refreshed temp views, sessions.",
    "connectors/sql/jdbc": "Flink's JDBC connector in Python terms: JDBC URLs, the driver "
                           "that opens one, the password\nthat never shows, the option "
                           "table.",
    "connectors/files": "Files and the table formats over files: Parquet and CSV "
                        "(FileSource), Delta Lake\n(DeltaSource) and Iceberg "
                        "(IcebergSource), read with pyarrow.",
    "cache/default": "DefaultLookupCache: Flink's partial cache (size, bytes and TTL "
                     "eviction), columnar.",
    "cache/full": "The full cache: one immutable indexed snapshot of a whole table, "
                  "shared by the processes of\na host through a snapshot store.",
    "examples": "Programs that use spark-lookup as a user does; not part of the library.",
    "tests/spark_lookup": "", "tests/cache/default": "", "tests/cache/full": "",
    "tests/connectors/sql": "", "tests/connectors/sql/jdbc": "",
    "tests/connectors/redis": "", "tests/connectors/files": "",
    "tests/lookup/changes": "", "tests/lookup/runtime": "", "tests/lookup/spark": "",
    "tests/integration": "", "tests/integration/contract": "",
    "tests/integration/reliability": "",
    "tests/fixtures": "Fixtures shared by test folders, loaded by tests/conftest.py.",
}

# Package facades that re-export a backend which imports the package back: made lazy
# (PEP 562) by step 4, in this order (scan.sources before scan, which re-exports it).
LAZY_FACADES: dict[str, list[str]] = {
    "4": ["scan/sources/__init__.py", "scan/__init__.py", "lookup/__init__.py"],
}

LAZY_MODULE = '''"""Names a package exports without importing them until first use (PEP 562).

A package whose backends import the package's own modules (``scan`` and its sources in
``connectors``, ``lookup`` and its connectors' lookup functions and change feeds, the
``spark_lookup`` namespace) cannot import them at its top: the first import of a backend
would find the package half made. ``__getattr__ = lazy_attributes(__name__, table)``
imports each name's module when the name is first read, and keeps the value.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, table: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``: ``table`` maps each lazily exported
    name to the module that defines it."""

    def __getattr__(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
'''

TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".txt"}
TEXT_NAMES = {"Makefile", "run"}


def _module(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _names(source: str) -> set[str]:
    """What a module defines or imports at its top level (or in top-level ifs/trys)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            names.add(sub.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
    visit(ast.parse(source).body)
    return names


class Rewriter:
    def __init__(self, root: Path, moves: list[tuple[str, str]],
                 removed: list[str]) -> None:
        self.root = root
        self.modules = {_module(old): _module(new) for old, new in moves}
        self.paths = dict(moves)
        self.attrs = {_module(old): _names((root / old).read_text()) for old, _ in moves}
        # A removed package: each exported name -> its defining module after the move.
        self.removed: dict[str, dict[str, str]] = {}
        for init in removed:
            table: dict[str, str] = {}
            for node in ast.parse((root / init).read_text()).body:
                if isinstance(node, ast.ImportFrom) and node.module:
                    for alias in node.names:
                        table[alias.name] = self.modules.get(node.module, node.module)
            self.removed[_module(init)] = table
        alternatives = sorted(self.modules, key=len, reverse=True)
        self.dotted = re.compile(
            r"(?<![\w.])(" + "|".join(re.escape(m) for m in alternatives) + r")(?![\w])")
        # A path at a word's start, or after "../" (a Markdown link from a subfolder).
        self.slashed = re.compile(
            r"(?:(?<=\.\./)|(?<![\w/.-]))("
            + "|".join(re.escape(p) for p in sorted(self.paths, key=len, reverse=True))
            + r")(?![\w])")
        self.skipped: list[str] = []

    # -- from PARENT import leaf, and from REMOVED import names
    def rewrite_imports(self, text: str, where: str) -> str:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return text
        lines = text.splitlines(keepends=True)
        edits: list[tuple[int, int, str]] = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
                continue
            moved, kept = [], []
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in self.modules:
                    new_parent, _, new_leaf = self.modules[full].rpartition(".")
                    local = alias.asname or alias.name
                    suffix = "" if new_leaf == local else f" as {local}"
                    moved.append(f"from {new_parent} import {new_leaf}{suffix}")
                elif node.module in self.removed and alias.name in self.removed[node.module]:
                    target = self.removed[node.module][alias.name]
                    suffix = f" as {alias.asname}" if alias.asname else ""
                    moved.append(f"from {target} import {alias.name}{suffix}")
                else:
                    kept.append(alias)
            if not moved:
                continue
            indent = " " * node.col_offset
            statements = list(moved)
            if kept:
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in kept)
                statements.insert(0, f"from {node.module} import {names}")
            body = "".join(f"{indent if i else ''}{s}\n" for i, s in enumerate(statements))
            edits.append((node.lineno, node.end_lineno or node.lineno, body))
        for start, end, body in sorted(edits, reverse=True):
            first = lines[start - 1]
            prefix = first[: len(first) - len(first.lstrip())]
            lines[start - 1 : end] = [prefix + body]
        return "".join(lines)

    # -- dotted module paths and file paths anywhere in the text
    def rewrite_text(self, text: str, where: str) -> str:
        def dotted(match: re.Match[str]) -> str:
            old = match.group(1)
            rest = text[match.end():]
            attribute = re.match(r"\.([A-Za-z_]\w*)", rest)
            if attribute and attribute.group(1) not in self.attrs[old]:
                self.skipped.append(f"{where}: {old}{attribute.group(0)}")
                return old
            return self.modules[old]

        text = self.dotted.sub(dotted, text)
        return self.slashed.sub(lambda m: self.paths[m.group(1)], text)


def _lazy_facade(path: Path, lazy: dict[str, dict[str, str]]) -> list[str]:
    """Turn a facade's imports of backends into PEP 562 lazy attributes; returns the
    names made lazy. ``lazy`` maps facade module -> {name: defining module}."""
    text = path.read_text()
    tree = ast.parse(text)
    table: dict[str, str] = {}
    drop: list[tuple[int, int]] = []
    keep: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            later, now = [], []
            for alias in node.names:
                if node.module.startswith("connectors."):
                    later.append((alias.name, node.module))
                elif node.module in lazy and alias.name in lazy[node.module]:
                    later.append((alias.name, lazy[node.module][alias.name]))
                else:
                    now.append(alias.name)
            if later:
                table.update(dict(later))
                drop.append((node.lineno, node.end_lineno or node.lineno))
                if now:
                    keep.append(f"from {node.module} import {', '.join(now)}\n")
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and sub.module:
                    for alias in sub.names:
                        table[alias.name] = sub.module
            start = node.lineno
            while start > 1 and text.splitlines()[start - 2].lstrip().startswith("#"):
                start -= 1
            drop.append((start, node.end_lineno or node.lineno))
    if not table:
        return []
    lines = text.splitlines(keepends=True)
    # The TYPE_CHECKING block goes after the last top-level import that stays.
    dropped = {n for start, end in drop for n in range(start, end + 1)}
    last_import = max((node.end_lineno or node.lineno for node in tree.body
                       if isinstance(node, (ast.Import, ast.ImportFrom))
                       and node.lineno not in dropped), default=0)
    by_module: dict[str, list[str]] = {}
    for name, module in sorted(table.items()):
        by_module.setdefault(module, []).append(name)
    checking = "".join(f"    from {m} import {', '.join(ns)}\n"
                       for m, ns in sorted(by_module.items()))
    entries = "".join(f'    "{n}": "{m}",\n' for n, m in sorted(table.items()))
    block = "".join(keep) + "\nif TYPE_CHECKING:\n" + checking
    out = []
    for number, line in enumerate(lines, 1):
        if number not in dropped:
            out.append(line)
        if number == last_import:
            out.append(block)
    text = "".join(out).rstrip("\n") + "\n"
    text += (
        "\n# Backends import this package's modules, so they load on first use (PEP 562), not\n"
        "# here (a cycle); the TYPE_CHECKING imports above give mypy and the docs their types.\n"
        f"__getattr__ = lazy_attributes(__name__, {{\n{entries}}})\n"
    )
    # The two imports the lazy block needs, after the docstring and __future__ imports.
    body = ast.parse(text).body
    after = 0
    for index, node in enumerate(body):
        docstring = (index == 0 and isinstance(node, ast.Expr)
                     and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))
        if docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            after = node.end_lineno or 0
        else:
            break
    lines = text.splitlines(keepends=True)
    lines[after:after] = ["\nfrom typing import TYPE_CHECKING\n\n"
                          "from spark_lookup.lazy import lazy_attributes\n"]
    path.write_text("".join(lines))
    return sorted(table)


# ---------------------------------------------------------------------------- patches

_PARENTS = re.compile(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)(\])")


def _deepen(path: Path, depth: int) -> None:
    """A moved file's ``Path(__file__).parents[N]`` (the checkout's root) keeps its
    target when the file moves ``depth`` folders deeper (or up, negative)."""
    text = path.read_text()
    new = _PARENTS.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + depth}{m.group(3)}", text)
    if new != text:
        path.write_text(new)
        print(f"  {path.name}: parents[N] + {depth}")


def _patch_step6(root: Path) -> list[str]:
    """Fixtures of a folder's conftest that a test moved out of it still uses: moved to
    the root conftest's plugin list (tests/fixtures/), so any folder sees them."""
    done = []
    for init in sorted(root.glob("tests/*/__init__.py")):
        rel = str(init.relative_to(root))
        if _git(root, "ls-files", str(init.parent.relative_to(root))).split() == [rel]:
            _git(root, "rm", "-q", rel)  # a folder left with nothing but its __init__.py
            done.append(f"git rm {rel}")
    nox = root / "noxfile.py"
    text = nox.read_text()
    long = ("(the README and docs snippets, the PySpark gates of "
            "``tests/spark_lookup/test_compat.py``). Each line\n"
            "gets a virtualenv of its own under ``.nox/``, made by uv (its cache under "
            "``~/.cache/uv``\n")
    if long in text:
        nox.write_text(text.replace(long, (
            "(the README and docs snippets, the PySpark gates of\n"
            "``tests/spark_lookup/test_compat.py``). Each line gets a virtualenv of its own "
            "under\n``.nox/``, made by uv (its cache under ``~/.cache/uv``\n")))
        done.append("noxfile.py: a line rewrapped")
    root_conftest = root / "tests/conftest.py"
    text = root_conftest.read_text()
    if "pytest_plugins" not in text:
        marker = "\nROOT = "
        head, _, tail = text.partition(marker)
        root_conftest.write_text(
            head + '\n# Fixtures of more than one folder (a test finds them wherever it lives).\n'
            'pytest_plugins = ["tests.fixtures.refresh", "tests.fixtures.scan"]\n'
            + marker + tail)
        done.append("tests/conftest.py: pytest_plugins")
    return done

def _replace_in(path: Path, old: str, new: str, what: str, done: list[str]) -> None:
    """Replace ``old`` by ``new`` in ``path`` if it is there, and say so in ``done``."""
    text = path.read_text()
    if old in text:
        path.write_text(text.replace(old, new))
        done.append(what)


def _patch_step4(root: Path) -> list[str]:
    done: list[str] = []
    _replace_in(
        root / "tests/test_one_name.py",
        '    assert named_sql == {"connectors/sql/lookup_function.py", '
        '"connectors/sql/source.py"}\n',
        "    # A database's modules live in connectors/sql/, none of them named sql.\n"
        "    assert named_sql == set()\n"
        '    assert (ROOT / "connectors" / "sql" / "__init__.py").is_file()\n',
        "tests/test_one_name.py: test_sql_names_a_database_module", done)
    _replace_in(
        root / "tests/connectors/test_docs.py",
        '    ["connectors.sql.lookup_function", "connectors.redis.lookup_function", '
        '"cache.redis", "cache.tiered",\n',
        '    ["connectors.sql.lookup_function", "connectors.redis.lookup_function",\n'
        '     "cache.redis", "cache.tiered",\n',
        "tests/connectors/test_docs.py: a line rewrapped", done)
    # In connectors/, "session" means a Spark session (test_one_name).
    _replace_in(
        root / "connectors/sql/jdbc/url.py",
        "# Connector/J parameters whose effect the Python sessions already have: they pin the\n"
        "# session's time zone to UTC (values are instants either way) and speak utf8mb4.\n",
        "# Connector/J parameters whose effect our MySQL connections already have: they pin\n"
        "# the connection's time zone to UTC (values are instants either way) and speak\n"
        "# utf8mb4.\n",
        "connectors/sql/jdbc/url.py: a database session is a connection", done)
    return done


def _patch_step7(root: Path) -> list[str]:
    done = []
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    block = '[project.scripts]\nspark-lookup = "examples.__main__:main"\n\n'
    if block in text:
        text = text.replace(block, "")
        text = text.replace('files = ["spark_lookup", "connectors", "cache", "triggers", '
                            '"scan", "lookup"]',
                            'files = ["spark_lookup", "connectors", "cache", "triggers", '
                            '"scan", "lookup", "examples"]')
        pyproject.write_text(text)
        done.append("pyproject.toml: no console script; mypy checks examples/")
    makefile = root / "Makefile"
    text = makefile.read_text()
    if "$(BIN)/python -m lookup demo" in text:
        makefile.write_text(text.replace("$(BIN)/python -m lookup demo",
                                         "$(BIN)/python -m examples demo"))
        done.append("Makefile: make demo runs python -m examples demo")
    said = {  # the command line the docs, the demo and its test show
        "python -m lookup demo": "python -m examples demo",
        ' (or the installed `spark-lookup demo`)': "",
        '[sys.executable, "-m", "lookup", "demo"': '[sys.executable, "-m", "examples", "demo"',
        '"spark-lookup" if invoked_as == "spark-lookup" else "python -m lookup"':
            '"python -m examples"',
        '    invoked_as = os.path.basename(sys.argv[0]) if sys.argv else ""\n': "",
        "import argparse\nimport os\nimport re\n": "import argparse\nimport re\n",
        ' (also installed as\n``spark-lookup demo``)': "",
        'SKIP = {"examples.demo", "examples.__main__"}  # a program, run by tests/spark/test_demo*':
            "SKIP: set[str] = set()  # the demo is a program of examples/, outside PACKAGES",
    }
    for name in _git(root, "ls-files", "*.md", "*.py").split():
        path = root / name
        if name.startswith("dev/layout-move/") or not path.is_file():
            continue
        text = path.read_text()
        new = text
        for before, after in said.items():
            new = new.replace(before, after)
        if new != text:
            path.write_text(new)
            done.append(f"{name}: the demo's command line")
    return done


PATCHES = {"4": _patch_step4, "6": _patch_step6, "7": _patch_step7}


# ---------------------------------------------------------------------------- driver

def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,  # noqa: S603, S607
                          text=True).stdout


def run(step: str, root: Path, dry_run: bool, force: bool) -> int:
    if step not in STEPS:
        print(f"no step {step!r}; steps: {', '.join(STEPS)}", file=sys.stderr)
        return 2
    if not force and _git(root, "status", "--porcelain", "--untracked-files=no").strip():
        print("the work tree has changes; commit them first (or --force)", file=sys.stderr)
        return 2
    moves = [(o, n) for o, n in STEPS[step] if o != n]
    missing = [o for o, _ in moves if not (root / o).is_file()]
    if missing:
        print(f"not found (step already done?): {missing}", file=sys.stderr)
        return 2
    rewriter = Rewriter(root, moves, REMOVED_PACKAGES.get(step, []))
    if dry_run:
        for old, new in moves:
            print(f"git mv {old} {new}")
        return 0

    new_dirs = sorted({str(Path(n).parent) for _, n in moves} - {"."})
    for directory in new_dirs:
        for parent in [*reversed(Path(directory).parents[:-1]), Path(directory)]:
            init = root / parent / "__init__.py"
            if init.exists():
                continue
            init.parent.mkdir(parents=True, exist_ok=True)
            doc = DOCSTRINGS.get(str(parent), "")
            init.write_text(f'"""{doc}"""\n' if doc else "")
            _git(root, "add", str(init.relative_to(root)))
            print(f"new {init.relative_to(root)}")
    for old, new in moves:
        _git(root, "mv", old, new)
        print(f"git mv {old} {new}")
        depth = len(Path(new).parts) - len(Path(old).parts)
        if depth and new.endswith(".py"):
            _deepen(root / new, depth)
    for init in REMOVED_PACKAGES.get(step, []):
        _git(root, "rm", "-q", init)
        print(f"git rm {init}")

    touched: list[str] = []
    for name in _git(root, "ls-files").splitlines():
        path = root / name
        if name.startswith("dev/layout-move/"):  # the move's own table and plan
            continue
        if not path.is_file() or (path.suffix not in TEXT_SUFFIXES
                                  and path.name not in TEXT_NAMES):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        # Paths first: an import written below names the new package, which may carry
        # an old module's name (lookup.runtime, lookup.changes, cache.full).
        new = rewriter.rewrite_text(text, name)
        if path.suffix == ".py":
            new = rewriter.rewrite_imports(new, name)
        if new != text:
            path.write_text(new)
            touched.append(name)

    lazy: dict[str, dict[str, str]] = {}
    if LAZY_FACADES.get(step) and not (root / "spark_lookup/lazy.py").exists():
        (root / "spark_lookup/lazy.py").write_text(LAZY_MODULE)
        _git(root, "add", "spark_lookup/lazy.py")
        touched.append("spark_lookup/lazy.py")
        print("new spark_lookup/lazy.py")
    for facade in LAZY_FACADES.get(step, []):
        names = _lazy_facade(root / facade, lazy)
        if names:
            text = (root / facade).read_text()
            table = ast.literal_eval(
                text.split("lazy_attributes(__name__, ", 1)[1].rsplit(")", 1)[0])
            lazy[_module(facade)] = table
            touched.append(facade)
            print(f"lazy {facade}: {', '.join(names)}")
    patch = PATCHES.get(step)
    for line in patch(root) if patch else []:
        print(f"patched {line}")

    py = sorted({t for t in touched if t.endswith(".py")})
    if py:
        subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "I", "--fix",  # noqa: S603
                        "--quiet", *py], cwd=root, check=False)
        long_lines = subprocess.run(  # noqa: S603
            [sys.executable, "-m", "ruff", "check", "--select", "E501", "--output-format",
             "concise", "--quiet", *py], cwd=root, check=False, capture_output=True,
            text=True).stdout.strip()
        if long_lines:
            print(f"lines to wrap by hand:\n{long_lines}")
    print(f"rewrote {len(touched)} files")
    if rewriter.skipped:
        print("left alone (the old module has no such name; check by hand):")
        for line in sorted(set(rewriter.skipped)):
            print(f"  {line}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", help="0..7, or 'list'")
    parser.add_argument("--root", type=Path, default=Path.cwd())
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--force", action="store_true", help="run on a dirty work tree")
    args = parser.parse_args(argv)
    if args.step == "list":
        for step, moves in STEPS.items():
            print(f"step {step}: {len(moves)} moves")
        return 0
    return run(args.step, args.root.resolve(), args.dry_run, args.force)


if __name__ == "__main__":
    sys.exit(main())
