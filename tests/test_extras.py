"""The extras check (``make test-extras``, noxfile.py) covers every extra that has an
example in docs/extras.md, and every extra a user installs has one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_user_extra_has_an_example_the_check_runs() -> None:
    import noxfile
    from tests.extras_examples import extras

    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras_of_the_project = set(re.findall(r"^([\w-]+) = \[", section, re.MULTILINE))
    # For this repository (dev, test, docs), parts of adbc, and PySpark 3.5 (the matrix).
    not_examples = {"dev", "test", "docs", "adbc-postgresql", "adbc-sqlite", "pyspark35"}
    assert set(extras()) == set(extras_of_the_project) - not_examples
    assert tuple(extras()) == noxfile.EXTRA_EXAMPLES
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"EXTRAS \?= " + " ".join(noxfile.EXTRA_EXAMPLES), make)
