"""CacheMetrics' repr, and the checks of DefaultLookupCache's bounds and durations."""

from __future__ import annotations

import pytest

from cache import CacheMetrics, DefaultLookupCache
from spark_lookup.errors import ConfigError


def test_the_repr_shows_every_metric_and_is_no_call() -> None:
    metrics = CacheMetrics()
    metrics.inc_hits(3)
    text = repr(metrics)
    assert text.startswith("<CacheMetrics ")
    assert text.endswith(">")
    assert "hit_count=3" in text
    assert "num_cached_bytes=0" in text
    rebuilt = CacheMetrics.from_dict(metrics.as_dict())  # what rebuilds one
    assert repr(rebuilt) == text


@pytest.mark.parametrize(("option", "value"), [
    ("maximum_size", 0), ("maximum_size", -1), ("maximum_size", True), ("maximum_size", "10"),
    ("maximum_bytes", 0), ("maximum_bytes", -5),
])
def test_a_bound_must_be_a_positive_int_built_or_constructed(option: str, value: object) -> None:
    builder = DefaultLookupCache.new_builder()
    with pytest.raises(ConfigError, match=option):
        getattr(builder, option)(value)
    with pytest.raises(ConfigError, match=option):
        DefaultLookupCache(**{option: value})  # type: ignore[arg-type]


def test_a_cache_built_directly_checks_its_durations() -> None:
    with pytest.raises(ConfigError, match="expire_after_write"):
        DefaultLookupCache(expire_after_write=-1)  # type: ignore[arg-type]
    cache = DefaultLookupCache(maximum_size=1, expire_after_access=2.5)  # type: ignore[arg-type]
    assert "maximum_size=1" in repr(cache)


def test_a_cache_built_directly_checks_its_timer() -> None:
    with pytest.raises(ConfigError, match="timer must be a zero-argument callable"):
        DefaultLookupCache(maximum_size=1, timer=5)  # type: ignore[arg-type]
