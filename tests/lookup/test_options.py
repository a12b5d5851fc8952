"""LookupOptions from Flink's option keys: one call, ``provider(target, key_columns=...)``,
for every ``lookup.cache`` mode."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from lookup import LookupFunctionProvider, LookupOptions, PartialCachingAsyncLookupProvider
from scan import CollectionSource
from spark_lookup.errors import ConfigError
from tests.lookup.functions import AsyncDictLookup, DictLookup

ROWS = [(1, "Ada"), (2, "Bob")]


def test_partial_options_build_a_partial_provider_with_key_columns_restated() -> None:
    options = LookupOptions.from_dict({
        "connector": "jdbc",
        "lookup.cache": "PARTIAL",
        "lookup.partial-cache.max-rows": "100",
        "lookup.partial-cache.expire-after-write": "10 min",
        "lookup.partial-cache.cache-missing-key": "false",
        "lookup.max-retries": "2",
    })
    provider = options.provider(DictLookup(ROWS), key_columns=["id"])
    assert provider.kind == "PARTIAL"
    assert provider.key_columns == ("id",)
    assert provider.retry_policy.max_retries == 2
    cache = provider.cache  # type: ignore[attr-defined]
    assert "maximum_size=100" in repr(cache)
    assert cache._expire_after_write == timedelta(minutes=10)
    assert cache._cache_missing_key is False
    assert options.provider(DictLookup(ROWS), key_columns="id").kind == "PARTIAL"


def test_key_columns_cannot_change_a_functions_keys() -> None:
    options = LookupOptions.from_dict({"lookup.cache": "PARTIAL",
                                       "lookup.partial-cache.max-rows": "10"})
    with pytest.raises(ConfigError, match=r"key_columns=\['name'\] differ.*\['id'\]"):
        options.provider(DictLookup(ROWS), key_columns=["name"])


def test_none_and_full_modes() -> None:
    assert LookupOptions.from_dict({}).provider(DictLookup(ROWS), key_columns=["id"]).kind == (
        "NONE")
    full = LookupOptions.from_dict({
        "lookup.cache": "FULL",
        "lookup.full-cache.reload-strategy": "PERIODIC",
        "lookup.full-cache.periodic-reload.interval": "1 h",
    }).provider(CollectionSource(ROWS, schema="id BIGINT, name STRING"), key_columns=["id"])
    assert (full.kind, full.key_columns) == ("FULL", ("id",))
    with pytest.raises(ConfigError, match="needs key_columns"):
        LookupOptions.from_dict({"lookup.cache": "full",
                                 "lookup.full-cache.periodic-reload.interval": "1 h"}).provider(
            CollectionSource(ROWS, schema="id BIGINT, name STRING"))


def test_key_columns_restated_for_a_function_that_declares_one_as_a_string() -> None:
    # A function may declare key_columns = "id"; restating it is the same key, not ['i', 'd'].
    class OneKey(DictLookup):
        key_columns = "id"  # type: ignore[assignment]

    fn = OneKey(ROWS)
    options = LookupOptions.from_dict({"lookup.cache": "PARTIAL",
                                       "lookup.partial-cache.max-rows": "10"})
    assert options.provider(fn, key_columns="id").key_columns == ("id",)
    assert options.provider(fn, key_columns=["id"]).key_columns == ("id",)


def test_partial_options_over_an_async_function_build_a_partial_async_provider() -> None:
    options = LookupOptions.from_dict({
        "lookup.cache": "partial",
        "lookup.partial-cache.expire-after-access": "PT30S",
        "lookup.partial-cache.max-bytes": "64 mb",
        "lookup.async.capacity": "7",
        "lookup.async.timeout": "5 s",
    })
    provider = options.provider(AsyncDictLookup(ROWS), key_columns=["id"])
    assert isinstance(provider, PartialCachingAsyncLookupProvider)
    assert (provider.kind, provider.key_columns) == ("PARTIAL", ("id",))
    assert (provider.capacity, provider.timeout) == (7, timedelta(seconds=5))
    assert provider.cache._expire_after_access == timedelta(seconds=30)
    assert provider.cache._maximum_bytes == 64 << 20


def test_a_source_given_to_a_partial_cache_is_refused_as_no_function() -> None:
    options = LookupOptions.from_dict({"lookup.cache": "PARTIAL",
                                       "lookup.partial-cache.max-rows": "10"})
    with pytest.raises(ConfigError, match="lookup.cache=PARTIAL needs a LookupFunction or "
                                          "AsyncLookupFunction, got CollectionSource"):
        options.provider(CollectionSource(ROWS, schema="id BIGINT, name STRING"),
                         key_columns=["id"])


# --- Flink's deprecated lookup-cache keys (issue 27) --------------------------------------


def test_flinks_legacy_cache_keys_give_a_partial_cache_with_a_warning() -> None:
    from cache import DefaultLookupCache

    legacy = {"connector": "jdbc", "lookup.cache.max-rows": "500", "lookup.cache.ttl": "10 min",
              "lookup.cache.caching-missing-key": "false"}
    with pytest.warns(FutureWarning) as caught:
        options = LookupOptions.from_dict(legacy)
    messages = [str(w.message) for w in caught]
    assert any("'lookup.cache.max-rows' is deprecated" in m
               and "'lookup.partial-cache.max-rows'" in m for m in messages)
    assert any("'lookup.cache.ttl' is deprecated" in m
               and "'lookup.partial-cache.expire-after-write'" in m for m in messages)
    assert any("'lookup.partial-cache.cache-missing-key'" in m for m in messages)
    assert options.cache_type == "PARTIAL"  # as Flink's JDBC connector reads them
    cache = options.build_cache()  # the options kept are the current keys: no warning again
    assert isinstance(cache, DefaultLookupCache)
    assert "maximum_size=500" in repr(cache)
    assert "expire_after_write=0:10:00" in repr(cache)
    assert "cache_missing_key=False" in repr(cache)


def test_a_current_key_given_beside_its_legacy_one_wins() -> None:
    with pytest.warns(FutureWarning, match="given too and wins"):
        options = LookupOptions.from_dict({"lookup.cache": "PARTIAL",
                                           "lookup.cache.max-rows": "5",
                                           "lookup.partial-cache.max-rows": "7"})
    assert "maximum_size=7" in repr(options.build_cache())


# --- the library's own key: spark.lookup.partial-cache.expire-missing-after (issue 44) --


MISSING_LIFE = "spark.lookup.partial-cache.expire-missing-after"


@pytest.mark.parametrize("target", [DictLookup(ROWS), AsyncDictLookup(ROWS)])
def test_expire_missing_after_reaches_the_providers_cache(target: Any) -> None:
    options = LookupOptions.from_dict({
        "connector": "jdbc",
        "lookup.cache": "PARTIAL",
        "lookup.partial-cache.expire-after-write": "10 min",
        MISSING_LIFE: "30 s",
    })
    cache = options.provider(target).cache  # type: ignore[attr-defined]
    assert cache.expire_missing_after == timedelta(seconds=30)
    assert cache._expire_after_write == timedelta(minutes=10)


def test_expire_missing_after_as_a_bare_number_is_milliseconds_as_flink_reads_it() -> None:
    options = LookupOptions.from_dict({"lookup.cache": "PARTIAL",
                                       "lookup.partial-cache.max-rows": "10",
                                       MISSING_LIFE: "45000"})
    assert options.options[MISSING_LIFE] == "45000 ms"
    cache = options.build_cache()
    assert cache is not None
    assert cache.expire_missing_after == timedelta(seconds=45)  # type: ignore[attr-defined]


def test_expire_missing_after_from_a_flink_ddl() -> None:
    options = LookupOptions.from_ddl(f'''
        CREATE TABLE customers (id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED)
        WITH ('connector' = 'kafka', 'lookup.cache' = 'PARTIAL',
              'lookup.partial-cache.max-rows' = '1000', '{MISSING_LIFE}' = '1 min')''')
    cache = options.provider(DictLookup(ROWS)).cache  # type: ignore[attr-defined]
    assert cache.expire_missing_after == timedelta(minutes=1)


@pytest.mark.parametrize(("options", "message"), [
    ({"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1 h",
      MISSING_LIFE: "30 s"},
     f"option '{MISSING_LIFE}' does not apply when 'lookup.cache' is FULL"),
    ({MISSING_LIFE: "30 s"},
     f"option '{MISSING_LIFE}' does not apply when 'lookup.cache' is NONE"),
    ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10", MISSING_LIFE: "0 ms"},
     f"option '{MISSING_LIFE}': must be a positive duration"),
    ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10",
      "lookup.partial-cache.cache-missing-key": "false", MISSING_LIFE: "30 s"},
     f"option '{MISSING_LIFE}' \\(0:00:30\\) is given while "
     "'lookup.partial-cache.cache-missing-key' is false"),
    # A typo of the library's key is refused whatever the connector (here one that this
    # library does not build, whose own keys are left alone).
    ({"connector": "kafka", "lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10",
      "spark.lookup.partial-cache.expire-missing": "30 s"},
     "unknown option 'spark.lookup.partial-cache.expire-missing'; did you mean "
     f"'{MISSING_LIFE}'"),
])
def test_bad_expire_missing_after_options_are_refused_naming_the_key(
        options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LookupOptions.from_dict(options)


# --- the host's connection budget: spark.lookup.max-source-connections and
# spark.lookup.load-timeout (issue 44) ----------------------------------------------------


BUDGET = "spark.lookup.max-source-connections"
LOAD_WAIT = "spark.lookup.load-timeout"
FULL = {"lookup.cache": "FULL", "lookup.full-cache.periodic-reload.interval": "1 h"}
SOURCE = CollectionSource(ROWS, schema="id BIGINT, name STRING")


@pytest.mark.parametrize(("options", "target"), [
    ({}, DictLookup(ROWS)),
    ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10"}, DictLookup(ROWS)),
    ({}, AsyncDictLookup(ROWS)),
    ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10"}, AsyncDictLookup(ROWS)),
    (FULL, SOURCE),
])
def test_max_source_connections_reaches_every_modes_provider(options: dict[str, str],
                                                              target: Any) -> None:
    provider = LookupOptions.from_dict({**options, BUDGET: "2"}).provider(
        target, key_columns=["id"])
    assert provider.max_source_connections == 2
    assert provider.connection_budget().limit == 2  # type: ignore[union-attr]
    unlimited = LookupOptions.from_dict({**options, BUDGET: " Unlimited "}).provider(
        target, key_columns=["id"])
    assert unlimited.max_source_connections is None
    assert unlimited.connection_budget() is None
    default = LookupOptions.from_dict(options).provider(target, key_columns=["id"])
    assert default.max_source_connections == 4  # the Python API's default


def test_an_argument_given_to_provider_wins_over_the_budget_option() -> None:
    options = LookupOptions.from_dict({BUDGET: "2", LOAD_WAIT: "1 min"})
    provider = options.provider(DictLookup(ROWS), max_source_connections=None,
                                load_timeout=timedelta(seconds=5))
    assert provider.max_source_connections is None
    assert provider.load_timeout == timedelta(seconds=5)  # type: ignore[attr-defined]


@pytest.mark.parametrize("options", [
    {}, {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10"}])
def test_load_timeout_reaches_the_sync_providers(options: dict[str, str]) -> None:
    provider = LookupOptions.from_dict({**options, LOAD_WAIT: "5 min"}).provider(
        DictLookup(ROWS))
    assert provider.load_timeout == timedelta(minutes=5)  # type: ignore[attr-defined]
    assert provider.connection_budget().timeout == 300  # type: ignore[union-attr]
    default = LookupOptions.from_dict(options).provider(DictLookup(ROWS))
    assert default.load_timeout == timedelta(seconds=180)  # type: ignore[attr-defined]


def test_load_timeout_as_a_bare_number_is_milliseconds_as_flink_reads_it() -> None:
    options = LookupOptions.from_dict({LOAD_WAIT: "90000"})
    assert options.options[LOAD_WAIT] == "90000 ms"
    provider = options.provider(DictLookup(ROWS))
    assert provider.load_timeout == timedelta(seconds=90)  # type: ignore[attr-defined]


def test_the_budget_options_from_a_flink_ddl() -> None:
    options = LookupOptions.from_ddl(f'''
        CREATE TABLE customers (id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED)
        WITH ('connector' = 'kafka', 'lookup.cache' = 'PARTIAL',
              'lookup.partial-cache.max-rows' = '1000',
              '{BUDGET}' = '3', '{LOAD_WAIT}' = '2 min')''')
    provider = options.provider(DictLookup(ROWS))
    assert provider.max_source_connections == 3
    assert provider.load_timeout == timedelta(minutes=2)  # type: ignore[attr-defined]


def test_load_timeout_with_an_async_function_is_refused_naming_the_key() -> None:
    options = LookupOptions.from_dict({LOAD_WAIT: "1 min"})
    with pytest.raises(ConfigError, match=f"option '{LOAD_WAIT}' does not apply to an async "
                                          "lookup function \\(AsyncDictLookup\\): its loads "
                                          "wait for the source up to 'lookup.async.timeout'"):
        options.provider(AsyncDictLookup(ROWS))


@pytest.mark.parametrize(("options", "message"), [
    ({**FULL, LOAD_WAIT: "1 min"},
     f"option '{LOAD_WAIT}' does not apply when 'lookup.cache' is FULL: a full cache's "
     "loads wait up to its initial_load_timeout"),
    ({BUDGET: "0"}, f"option '{BUDGET}': must be >= 1, got 0 \\(or 'unlimited'\\)"),
    ({BUDGET: "four"}, f"option '{BUDGET}': expected an integer, got 'four' "
                       "\\(or 'unlimited'\\)"),
    ({BUDGET: "none"}, f"option '{BUDGET}': expected an integer"),
    ({LOAD_WAIT: "0 s"}, f"option '{LOAD_WAIT}': must be a positive duration"),
    ({LOAD_WAIT: "soon"}, f"option '{LOAD_WAIT}': cannot parse duration 'soon'"),
    ({"connector": "kafka", "spark.lookup.max-source-connection": "2"},
     f"unknown option 'spark.lookup.max-source-connection'; did you mean '{BUDGET}'"),
])
def test_bad_budget_options_are_refused_naming_the_key(options: dict[str, str],
                                                       message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LookupOptions.from_dict(options)


ADAPTIVE = "spark.lookup.adaptive-concurrency"


@pytest.mark.parametrize(("options", "target"), [
    ({}, DictLookup(ROWS)),
    ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10"}, AsyncDictLookup(ROWS)),
    (FULL, SOURCE),
])
def test_adaptive_concurrency_is_on_by_default_and_an_option_turns_it_off(
        options: dict[str, str], target: Any) -> None:
    default = LookupOptions.from_dict(options).provider(target, key_columns=["id"])
    assert default.adaptive_concurrency is True
    assert default.connection_budget().adaptive is True  # type: ignore[union-attr]
    off = LookupOptions.from_dict({**options, ADAPTIVE: " FALSE "}).provider(
        target, key_columns=["id"])
    assert off.adaptive_concurrency is False
    assert off.connection_budget().concurrency() is None  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=ADAPTIVE):
        LookupOptions.from_dict({**options, ADAPTIVE: "sometimes"})


def test_adaptive_concurrency_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="adaptive_concurrency must be True or False"):
        LookupFunctionProvider.of(DictLookup(ROWS), adaptive_concurrency=1)  # type: ignore[arg-type]
    provider = LookupFunctionProvider.of(DictLookup(ROWS), adaptive_concurrency=False)
    assert provider.connection_budget().adaptive is False  # type: ignore[union-attr]
