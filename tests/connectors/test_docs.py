"""The connectors' public names are exported, and their docstring examples run."""

from __future__ import annotations

import doctest
import importlib

import pytest

import cache
import lookup


def test_public_names_are_exported() -> None:
    assert {"SqlLookupFunction", "RedisLookupFunction"} <= set(lookup.__all__)
    assert {"RedisLookupCache", "TieredLookupCache"} <= set(cache.__all__)
    for name in ("SqlLookupFunction", "RedisLookupFunction"):
        assert getattr(lookup, name).__doc__
    for name in ("RedisLookupCache", "TieredLookupCache"):
        assert getattr(cache, name).__doc__


@pytest.mark.parametrize(
    "module",
    ["connectors.sql.lookup_function", "connectors.redis.lookup_function",
     "cache.redis", "cache.tiered",
     "cache._codec", "connectors.predicates", "connectors.keys", "connectors.convert",
     "connectors.sql.table", "connectors.redis.template"],
)
def test_docstring_examples_run(module: str) -> None:
    failures, _ = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert failures == 0


def test_the_connector_layer_exports_a_small_surface() -> None:
    import connectors
    import connectors.redis
    import connectors.sql

    assert connectors.__all__ == ["BadValuePolicy", "KeyCodec", "Predicate"]
    assert connectors.sql.__all__ == ["SqlConnection", "SqlPlan", "SqlTable"]
    assert connectors.redis.__all__ == ["VALUE_TYPES", "KeyTemplate", "RedisTable"]
    for module in (connectors, connectors.sql, connectors.redis):
        for name in module.__all__:
            assert getattr(module, name).__doc__ or name == "VALUE_TYPES", name
