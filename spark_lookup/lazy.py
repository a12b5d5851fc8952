"""Names a package exports without importing them until first use (PEP 562).

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
    name to the module that defines it. Also gives ``package`` a ``__dir__`` that lists
    those names before their first use (completion in a notebook or shell)."""

    def __getattr__(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    sys.modules[package].__dir__ = __dir__  # type: ignore[method-assign]
    return __getattr__

