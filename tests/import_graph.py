"""The library's modules and their imports, read with ``ast`` (for the import tests)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cache", "connectors", "lookup", "scan", "spark_lookup", "triggers")


def library_modules() -> dict[str, Path]:
    """Every module of the library packages by dotted name (a package by its own)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(tree: ast.AST, skip_type_checking: bool) -> Iterator[ast.AST]:
    for node in ast.iter_child_nodes(tree):
        if skip_type_checking and isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in [child, *_walk(child, True)])
            continue
        yield node
        yield from _walk(node, skip_type_checking)


def module_imports(module: str, path: Path, modules: dict[str, Path], *,
                   skip_type_checking: bool = False) -> set[str]:
    """The library modules ``module`` imports: at module level, inside functions and
    (unless ``skip_type_checking``) under ``TYPE_CHECKING``."""
    is_package = path.name == "__init__.py"
    targets = set()
    for node in _walk(ast.parse(path.read_text()), skip_type_checking):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            # "from pkg import sub" imports the submodule when there is one.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets
