"""One concept, one home, one name: found by grep, kept so by these checks."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cache", "connectors", "lookup", "scan", "spark_lookup", "triggers")
FAMILIES_HOME = ROOT / "spark_lookup" / "type_families.py"


def _library() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_spark_type_families_are_defined_once() -> None:
    # Two members of one family side by side is a family spelled out again.
    family = re.compile(
        r"T\.(ByteType|ShortType|IntegerType),\s*T\.(ShortType|IntegerType|LongType)"
        r"|T\.FloatType,\s*T\.DoubleType|T\.StringType,\s*T\.VarcharType"
        r"|T\.TimestampType,\s*T\.TimestampNTZType|T\.DateType,\s*T\.TimestampType")
    spelled = [f"{p.relative_to(ROOT)}:{n}" for p in _library() if p != FAMILIES_HOME
               for n, line in enumerate(p.read_text().splitlines(), 1) if family.search(line)]
    assert spelled == [], "use spark_lookup.type_families"


def test_session_means_a_spark_session() -> None:
    # A database connection is a connection and a trigger's open period a run.
    word = re.compile(r"\b[Ss]essions?\b")
    for package in ("cache", "connectors", "scan", "triggers"):
        for path in (ROOT / package).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if word.search(line):
                    assert "session sets it" in line or "session kinds" in line, (
                        f"{path.relative_to(ROOT)}:{number}: {line.strip()}")


def test_sql_names_a_database_module() -> None:
    # Spark SQL lives in lookup/spark/sql_functions.py, identifier quoting in
    # spark_lookup/identifiers.py: a module called sql talks to a database.
    named_sql = {str(p.relative_to(ROOT)) for p in _library() if p.stem == "sql"}
    # A database's modules live in connectors/sql/, none of them named sql.
    assert named_sql == set()
    assert (ROOT / "connectors" / "sql" / "__init__.py").is_file()


def test_private_class_names_are_not_reused_across_modules() -> None:
    # Except each scan source's own split reader and serializer, one per source by design.
    per_source = {"_SplitReader", "_SplitSerializer"}
    names: Counter[str] = Counter()
    for path in _library():
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.ClassDef) and node.name.startswith("_")
                    and node.name not in per_source):
                names[node.name] += 1
    assert [name for name, count in names.items() if count > 1] == []


def _classes() -> list[tuple[Path, ast.ClassDef]]:
    return [(path, node) for path in _library() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef)]


def test_one_type_answers_a_batch_of_keys() -> None:
    # cache.answers.Answers; CachedAnswers is only its former name, an alias.
    others = [f"{p.relative_to(ROOT)}:{c.lineno}" for p, c in _classes()
              if c.name in {"Probe", "CachedAnswers", "ProbeAnswers"}]
    assert others == []


def test_refresh_names_only_the_refreshed_views() -> None:
    # Re-reading a table is a reload; "refresh" is ScheduledTableRefresh, RefreshStatus
    # and the refreshed views they make, all in lookup/spark/.
    word = re.compile(r"\b[Rr]efresh(es|ing|ed)?\b")
    allowed = re.compile(r"refreshed( (temp )?views?|$)|ScheduledTableRefresh|RefreshStatus"
                         r"|lookup\.spark\.refresh\w*")
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in _library()
             if p.parent != ROOT / "lookup" / "spark"
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if word.search(allowed.sub("", line))]
    assert found == []


def test_a_store_is_the_snapshot_store() -> None:
    stores = sorted(c.name for _, c in _classes() if "Store" in c.name)
    assert stores == ["SnapshotStore", "StoredSnapshot"]


def test_a_runtime_is_a_lookup_runtime() -> None:
    # A table's per-process state is its reading; the runner's queues are mailboxes.
    elsewhere = [f"{p.relative_to(ROOT)}:{c.name}" for p, c in _classes()
                 if "Runtime" in c.name and p.parent != ROOT / "lookup" / "runtime"]
    assert elsewhere == []


def test_a_change_feed_is_named_for_its_source_and_lives_with_it() -> None:
    feeds = {(p.relative_to(ROOT).parts[0], c.name) for p, c in _classes()
             if c.name.endswith("Changes")}
    assert feeds
    assert {package for package, _ in feeds} == {"connectors"}
    for _, node in _classes():
        if node.name.endswith("Changes"):
            assert [ast.unparse(base) for base in node.bases] == ["ChangeFeed"]


def test_a_snapshot_is_a_full_caches_version() -> None:
    # In memory (FullSnapshot) or in the store; a checkpoint's state keeps Flink's name
    # (snapshot_state), a planner's discovery is its progress, metrics are a dict.
    homes = ("cache/full/", "lookup/runtime/full", "lookup/runtime/due.py", "lookup/changes/",
             "lookup/providers.py", "connectors/files/iceberg.py")
    names = {"snapshot_state", "FullSnapshot", "SnapshotUnavailableError", "snapshot_gauges"}
    former = {("cache/metrics.py", "snapshot"), ("cache/metrics.py", "from_snapshot")}
    found = set()
    for path in _library():
        where = str(path.relative_to(ROOT))
        if where.startswith(homes):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            ident = (node.id if isinstance(node, ast.Name) else
                     node.attr if isinstance(node, ast.Attribute) else
                     node.arg if isinstance(node, ast.arg) else
                     getattr(node, "name", ""))
            if ("snapshot" in str(ident).lower() and ident not in names
                    and (where, ident) not in former):
                found.add(f"{where}: {ident}")
    assert sorted(found) == []
