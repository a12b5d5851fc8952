"""One error class per kind of mistake (the README's table): a key of the wrong kind is
a ``KeyKindError`` on every path that takes keys, and it is still caught as the
``TypeError`` or the ``ValueError`` (``ConfigError``) that those paths raised before."""

from __future__ import annotations

from collections.abc import Callable
from datetime import time
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from cache import DefaultLookupCache, TieredLookupCache
from connectors import KeyCodec
from lookup import LookupFunctionProvider, open_lookup
from spark_lookup import ConfigError, KeyKindError, SparkLookupError
from tests.lookup.functions import DictLookup


def test_a_key_kind_error_is_caught_as_either_class_it_replaced() -> None:
    assert issubclass(KeyKindError, ConfigError)
    assert issubclass(KeyKindError, TypeError)
    assert issubclass(KeyKindError, ValueError)
    assert issubclass(KeyKindError, SparkLookupError)


def _bound_cache() -> DefaultLookupCache:
    cache = DefaultLookupCache.new_builder().maximum_size(10).build()
    cache.bind(pa.schema([("id", pa.int64()), ("name", pa.string())]), ["id"])
    cache.open()
    return cache


def _opened(cache: DefaultLookupCache) -> DefaultLookupCache:
    cache.open()
    return cache


def _tiered() -> TieredLookupCache:
    return TieredLookupCache(_bound_cache(), _bound_cache())


def _handle_lookup(key: Any) -> Any:
    with open_lookup(LookupFunctionProvider.of(DictLookup([(1, "one")]))) as handle:
        return handle.lookup(key)


def _codec() -> KeyCodec:
    return KeyCodec(["id"], [T.LongType()], "the test")


PATHS: dict[str, Callable[[Any], Any]] = {
    "DefaultLookupCache.get_if_present": lambda key: _bound_cache().get_if_present(key),
    "DefaultLookupCache.put": lambda key: _bound_cache().put(key, [(1, "one")]),
    "DefaultLookupCache.put, unbound": lambda key: _opened(
        DefaultLookupCache.new_builder().maximum_size(10).build()).put(key, [(1, "one")]),
    "TieredLookupCache.get_if_present": lambda key: _tiered().get_if_present(key),
    "LookupHandle.lookup": _handle_lookup,
    "KeyCodec.encode": lambda key: _codec().encode([key]),
}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("key", ["1", [1], (1, 2)], ids=["a scalar", "a list", "two values"])
def test_a_key_of_the_wrong_shape_is_a_key_kind_error(path: str, key: Any) -> None:
    if isinstance(key, tuple) and ("unbound" in path or "get_if_present" in path):
        # An unbound cache takes its arity from its first put; a read of a key that no
        # key of the cache can equal finds nothing (a put refuses it).
        assert PATHS[path](key) is None
        return
    with pytest.raises(KeyKindError):
        PATHS[path](key)


@pytest.mark.parametrize("path", ["DefaultLookupCache.put", "LookupHandle.lookup",
                                  "KeyCodec.encode"])
def test_a_key_value_of_the_wrong_kind_is_a_key_kind_error(path: str) -> None:
    with pytest.raises(KeyKindError, match="'x'"):
        PATHS[path](("x",))


def test_an_unbound_cache_refuses_keys_it_cannot_hold_with_a_key_kind_error() -> None:
    cache = _opened(DefaultLookupCache.new_builder().maximum_size(10).build())
    with pytest.raises(KeyKindError, match="cannot be cached"):
        cache.put((time(1, 2),), [(1,)])


def test_key_arrays_of_the_wrong_kind_are_a_key_kind_error() -> None:
    with pytest.raises(KeyKindError, match="can never equal"):
        _codec().encode_arrays([pa.array(["1"])])
    with pytest.raises(KeyKindError, match="2 key array"):
        _codec().encode_arrays([pa.array([1]), pa.array([2])])


def test_bad_arguments_at_construction_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="l2 must be a LookupCache"):
        TieredLookupCache(_bound_cache(), object())  # type: ignore[arg-type]
    cache = _bound_cache()
    with pytest.raises(ConfigError, match="two different caches"):
        TieredLookupCache(cache, cache)
    with pytest.raises(ConfigError, match="expected a lookup provider"):
        open_lookup(object())  # type: ignore[arg-type]
