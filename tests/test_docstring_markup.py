"""The library's docstrings are Markdown, as the docs site renders them (mkdocstrings,
numpy style): no Sphinx roles or reST literal blocks, which the API pages would show raw.

A cross-reference is autorefs' ``[`Name`][]`` (Name resolved in the docstring's scope:
its class, its module, the module's imports) or ``[`Name`][package.Name]``; the docs
build (``mkdocs build --strict``) fails on one that does not resolve.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("spark_lookup", "connectors", "cache", "scan", "triggers", "lookup")

_ROLE = re.compile(r":(?:py:)?(?:meth|class|func|attr|mod|exc|data|obj|ref|const):`")
_LITERAL_BLOCK = re.compile(r"\S::[ \t]*$", re.MULTILINE)
_DIRECTIVE = re.compile(r"^\s*\.\. [\w-]+::", re.MULTILINE)

_FIX = {
    _ROLE: "a Sphinx role: write [`Name`][] (or [`Name`][package.Name]; plain `Name` for "
    "what the site does not render)",
    _LITERAL_BLOCK: "a reST literal block (::): end the line with one colon, the indented "
    "block after it is code",
    _DIRECTIVE: "a reST directive: use Markdown (an admonition is !!! note)",
}


def _docstrings(path: Path) -> Iterator[tuple[int, str]]:
    """Every bare string statement of a module: the docstrings of modules, classes and
    functions, and the attribute docstrings griffe reads after an assignment."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            yield node.lineno, node.value.value


def _files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_packages_have_docstrings_to_check() -> None:
    assert sum(1 for f in _files() for _ in _docstrings(f)) > 500


@pytest.mark.parametrize("package", PACKAGES)
def test_docstrings_hold_no_rest_markup(package: str) -> None:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, text in _docstrings(path):
            for pattern, fix in _FIX.items():
                for match in pattern.finditer(text):
                    at = line + text.count("\n", 0, match.start())
                    snippet = text[match.start():match.start() + 40].splitlines()[0]
                    found.append(f"{path.relative_to(ROOT)}:{at}: {snippet!r}: {fix}")
    assert not found, "\n".join(found)


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""See :meth:`connect`."""\n\nX = 1\n"""Layout::\n\n    a b\n"""\n')
    texts = [text for _, text in _docstrings(module)]
    assert texts == ["See :meth:`connect`.", "Layout::\n\n    a b\n"]
    assert _ROLE.search(texts[0])
    assert _LITERAL_BLOCK.search(texts[1])
    assert not _ROLE.search("See [`connect`][] and ``a: b``; 'jdbc:sqlite:' URLs")
    assert not _LITERAL_BLOCK.search("a PostgreSQL cast ($1::int8[])")
