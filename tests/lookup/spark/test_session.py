"""The library runs on classic and Spark Connect sessions alike: it never reaches into
the JVM side of PySpark, and tells the two kinds of session apart by their class."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lookup.spark.session import is_connect, is_session

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("spark_lookup", "cache", "triggers", "scan", "lookup")
# What only a classic session has: a Connect session raises on each of them.
JVM_ONLY = {"sparkContext", "_jvm", "_jsc", "_jdf", "_jsparkSession", "_gateway", "rdd"}


def test_the_library_never_touches_what_only_a_classic_session_has() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                name = None
                if isinstance(node, ast.Attribute):
                    name = node.attr
                elif isinstance(node, ast.Name):
                    name = node.id
                elif isinstance(node, ast.ImportFrom):
                    imported = {alias.name for alias in node.names}
                    if "SparkContext" in imported:
                        name = "SparkContext"
                if name in JVM_ONLY or name == "SparkContext":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not found, found


@pytest.mark.parametrize("value", [None, object(), "spark", 42])
def test_anything_else_is_no_session(value: object) -> None:
    assert not is_session(value)
    assert not is_connect(value)


@pytest.mark.spark
def test_both_kinds_of_session_are_sessions(spark: object, spark_kind: str) -> None:
    from pyspark.sql import SparkSession

    assert is_session(spark)
    assert is_connect(spark) == (spark_kind == "connect")
    # Why the library cannot just ask isinstance(spark, SparkSession):
    assert isinstance(spark, SparkSession) == (spark_kind == "classic")
