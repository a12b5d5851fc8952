"""The examples in the library's docstrings run, so they cannot rot: each module's
doctests, and those that use a SparkSession (``spark``) on the tests' shared session."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cache", "connectors", "lookup", "scan", "spark_lookup", "triggers")
SKIP = {"examples.demo", "examples.__main__"}  # a program, run by tests/integration/test_demo.py


def _examples() -> tuple[list[str], list[str]]:
    plain, with_spark = [], []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            text = path.read_text()
            if name in SKIP or ">>>" not in text:
                continue
            (with_spark if ">>> " in text and "spark." in text and "(spark" in text
             else plain).append(name)
    return plain, with_spark


PLAIN, WITH_SPARK = _examples()


def _run(name: str, globs: dict[str, Any]) -> None:
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = doctest.DocTestFinder().find(module, name, extraglobs=globs)
    assert any(test.examples for test in tests), f"{name} has no examples"
    for test in tests:
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{failed} of {attempted} examples of {name} failed (output above)"


@pytest.mark.parametrize("name", PLAIN)
def test_the_examples_run(name: str) -> None:
    _run(name, {})


NEEDS = {"lookup.spark.refresh": ("PYTHON_DATA_SOURCE", "SESSION_TAGS")}
"""The modules whose examples use a mechanism of spark_lookup.compat (where a PySpark
line lacks it, tests/spark_lookup/test_compat.py checks the refusal)."""


@pytest.mark.spark
@pytest.mark.every_line
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.needs(*NEEDS[name])) if name in NEEDS else name
    for name in WITH_SPARK])
def test_the_examples_run_on_spark(name: str, spark: Any) -> None:
    _run(name, {"spark": spark})
