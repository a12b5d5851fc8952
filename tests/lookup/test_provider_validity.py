"""Providers take ``validity=`` (issue 45): checked against the schema where it is
known, kept on the provider, pickled with it and shown in its repr."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

from cache import DefaultLookupCache
from lookup import (
    AsyncLookupFunctionProvider,
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
    Validity,
)
from scan import CollectionSource
from spark_lookup.errors import ConfigError
from tests.lookup.functions import AsyncDictLookup, DictLookup
from triggers import PeriodicCacheReloadTrigger

SCHEMA = "id BIGINT, rate DOUBLE, valid_from TIMESTAMP, valid_to TIMESTAMP, note STRING"
VALIDITY = Validity("valid_from", "valid_to")


def _cache() -> DefaultLookupCache:
    return DefaultLookupCache.new_builder().maximum_size(10).build()


def _function() -> DictLookup:
    return DictLookup(schema=SCHEMA, key_columns=["id"])


def _async() -> AsyncDictLookup:
    function = AsyncDictLookup()
    function.schema = SCHEMA
    return function


def _full(validity: object, schema: str = SCHEMA) -> FullCachingLookupProvider:
    return FullCachingLookupProvider.of(
        CollectionSource([], schema=schema), PeriodicCacheReloadTrigger(timedelta(hours=1)),
        ["id"], validity=validity)  # type: ignore[arg-type]


BUILDERS = {
    "none": lambda v: LookupFunctionProvider.of(_function(), validity=v),
    "partial": lambda v: PartialCachingLookupProvider.of(_function(), _cache(), validity=v),
    "async": lambda v: AsyncLookupFunctionProvider.of(_async(), validity=v),
    "partial-async": lambda v: PartialCachingAsyncLookupProvider.of(_async(), _cache(),
                                                                    validity=v),
    "full": _full,
}


@pytest.mark.parametrize("kind", BUILDERS)
def test_validity_is_kept_pickled_and_shown(kind: str) -> None:
    provider = BUILDERS[kind](VALIDITY)
    assert provider.validity == VALIDITY
    assert "validity=Validity('valid_from', 'valid_to')" in repr(provider)
    copy = pickle.loads(pickle.dumps(provider))
    assert copy.validity == VALIDITY
    assert copy.provider_id == provider.provider_id
    assert BUILDERS[kind](None).validity is None


@pytest.mark.parametrize("kind", BUILDERS)
@pytest.mark.parametrize(("validity", "message"), [
    (Validity("since"), "'since' is not a column"),
    (Validity("valid_from", "until"), "'until' is not a column"),
    (Validity("rate"), "'rate' of .* is double"),
    (Validity("valid_from", "note"), "'note' of .* is string"),
    (Validity("id"), "'id' is a key column"),
    ("valid_from", "validity must be a lookup.Validity"),
])
def test_bad_validity_is_a_config_error_naming_the_column(kind: str, validity: object,
                                                          message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BUILDERS[kind](validity)


@pytest.mark.parametrize("types", ["TIMESTAMP_NTZ, TIMESTAMP_NTZ", "DATE, DATE",
                                   "DATE, TIMESTAMP_NTZ"])
def test_version_columns_may_be_ntz_or_dates(types: str) -> None:
    first, second = types.split(", ")
    provider = _full(VALIDITY, f"id BIGINT, valid_from {first}, valid_to {second}")
    assert provider.validity == VALIDITY


def test_validity_changes_the_snapshot_fingerprint() -> None:
    # A snapshot orders a key's rows by valid_from: a store made without it must not serve.
    assert _full(VALIDITY).snapshot_fingerprint() != _full(None).snapshot_fingerprint()
