"""The public surface of ``triggers`` is deliberate, documented, and its examples run."""

from __future__ import annotations

import doctest
import importlib
import inspect

import pytest

import triggers

MODULES = ["triggers.base", "triggers.periodic", "triggers.timed", "triggers.factory"]


def test_exported_names_are_pinned() -> None:
    assert sorted(triggers.__all__) == [
        "CacheReloadTrigger",
        "PeriodicCacheReloadTrigger",
        "ReloadContext",
        "ScheduleMode",
        "TimedCacheReloadTrigger",
        "reload_trigger_from_options",
    ]


@pytest.mark.parametrize("name", triggers.__all__)
def test_every_public_name_is_documented(name: str) -> None:
    obj = getattr(triggers, name)
    assert inspect.getdoc(obj)
    for attr, member in vars(obj).items() if inspect.isclass(obj) else ():
        if not attr.startswith("_") and (callable(member) or isinstance(member, property)):
            assert inspect.getdoc(member), f"{name}.{attr} has no docstring"


def test_errors_are_value_errors() -> None:
    from spark_lookup.errors import ConfigError

    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name: str) -> None:
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
