"""The Python examples of README.md and docs/ run, so they cannot rot.

Every fenced ``python`` block of a page runs, in page order, in one namespace per page
(a page reads as a notebook: a later block uses what an earlier one defined). Two HTML
comments, invisible on GitHub and in the built site, steer a block:

- ``<!-- skip: reason -->`` on the line before a block: it does not run (it needs a
  server of its own, or is a fragment), and the test says why;
- ``<!-- test: ... -->`` (any number of lines of Python): hidden code run before the
  next block (after the last block, if none follows), for the data an example assumes
  and for cleaning up after it;
- ``<!-- needs: GATE[, GATE] -->`` on the line before a block: it uses a mechanism of
  ``spark_lookup.compat`` that not every PySpark line has. Where the installed one
  lacks it, the block must stop at its first call with the ``ConfigError`` that names
  the line that has it (the test matrix runs the pages on every line: noxfile.py).

A page whose code mentions ``spark`` runs on the tests' shared classic SparkSession,
given to it as ``spark``; the others run without Spark.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from spark_lookup.errors import ConfigError
from tests.snippets import PAGES, ROOT, Page, Snippet, parse_page

pytestmark = pytest.mark.matrix  # every PySpark line: noxfile.py

_PARSED = [parse_page(path) for path in PAGES]
PLAIN = [s for p in _PARSED if not p.uses_spark for s in p.snippets]
WITH_SPARK = [s for p in _PARSED if p.uses_spark for s in p.snippets]
_PAGES = {p.name: p for p in _PARSED}


def _missing(snippet: Snippet) -> str | None:
    """The refusal a snippet must stop at on this PySpark (a pattern of its message), or
    None when the line has every gate it needs."""
    from spark_lookup import compat as _compat

    for name in snippet.needs:
        gate = getattr(_compat, name)
        if not gate.available():
            return re.escape(f"needs {gate.mechanism}") + ".*" + re.escape(
                f"which PySpark has from {gate.since} on")
    return None


class _Run:
    """The namespace of a page and how far it has run."""

    def __init__(self, page: Page, spark: Any) -> None:
        self.page = page
        self.spark = spark
        self.namespace: dict[str, Any] = {"__name__": "__docs_snippets__"}
        if spark is not None:
            self.namespace["spark"] = spark
            self.views = {t.name for t in spark.catalog.listTables() if t.isTemporary}
        self.done = 0  # snippets run (or skipped) so far
        self.failed: Snippet | None = None

    def run_through(self, snippet: Snippet) -> None:
        """Run the page's snippets up to ``snippet`` (the earlier ones first, if a test
        of this page is run alone)."""
        index = self.page.snippets.index(snippet)
        while self.done <= index:
            current = self.page.snippets[self.done]
            self.done += 1
            if current.skip is not None:
                continue
            if self.failed is not None:
                pytest.fail(f"an earlier snippet of the page failed: {self.failed.id}")
            missing = _missing(current)
            try:
                # As a file of the reader's runs: without this module's __future__ import,
                # which would make a snippet's dataclass look its module up by name.
                code = compile(current.code, current.id, "exec", dont_inherit=True)
                if missing is None:
                    exec(code, self.namespace)
                else:
                    with pytest.raises(ConfigError, match=missing):
                        exec(code, self.namespace)
            except BaseException:
                self.failed = current
                raise
        if snippet.skip is not None:
            pytest.skip(f"{snippet.id}: {snippet.skip}")

    def close(self) -> None:
        """Stop the page's streaming queries and drop its temp views (once)."""
        spark, self.spark = self.spark, None
        if spark is None:
            return
        for query in spark.streams.active:
            query.stop()
        for table in spark.catalog.listTables():
            if table.isTemporary and table.name not in self.views:
                spark.catalog.dropTempView(table.name)


@pytest.fixture(scope="module")
def page_runs() -> Iterator[dict[str, _Run]]:
    runs: dict[str, _Run] = {}
    yield runs
    for run in runs.values():
        run.close()


def _run(runs: dict[str, _Run], snippet: Snippet, spark: Any) -> None:
    page = _PAGES[snippet.page]
    run = runs.get(page.name)
    if run is None:
        run = runs[page.name] = _Run(page, spark)
    try:
        run.run_through(snippet)
    finally:
        if snippet is page.snippets[-1]:
            run.close()


@pytest.mark.parametrize("snippet", PLAIN, ids=lambda s: s.id)
def test_snippet(snippet: Snippet, page_runs: dict[str, _Run]) -> None:
    _run(page_runs, snippet, None)


@pytest.mark.spark
@pytest.mark.classic_only
@pytest.mark.parametrize("snippet", WITH_SPARK, ids=lambda s: s.id)
def test_snippet_on_spark(snippet: Snippet, spark: Any, page_runs: dict[str, _Run]) -> None:
    _run(page_runs, snippet, spark)


def test_the_pages_have_examples() -> None:
    assert len(PLAIN) + len(WITH_SPARK) >= 20
    readme = _PAGES["README.md"].snippets
    assert readme, "README.md has no python blocks"
    assert all(s.skip is None for s in readme), "every README example runs"


def test_one_table_of_error_classes() -> None:
    """The Errors table is the README's; the docs include it rather than copy it."""
    row = "| `ConfigError` |"
    assert (ROOT / "README.md").read_text().count(row) == 1
    for path in (ROOT / "docs").rglob("*.md"):
        assert row not in path.read_text(), f"{path} copies the README's Errors table"
    assert '--8<-- "README.md:errors"' in (ROOT / "docs" / "errors.md").read_text()
