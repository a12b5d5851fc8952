"""The checks of ``expire_missing_after``, shared by the partial caches that take it."""

from __future__ import annotations

from datetime import timedelta

from spark_lookup import options as opts
from spark_lookup.errors import ConfigError

__all__ = ["check_missing_life", "refuse_idle_missing_life"]


def check_missing_life(value: object, name: str) -> timedelta:
    """A missing key's life: a positive duration (a ``timedelta`` or seconds). Zero is
    refused with a pointer to ``cache_missing_key=False``, which is what it would mean."""
    if isinstance(value, (timedelta, int, float)) and not isinstance(value, bool) and not value:
        raise ConfigError(f"{name} must be positive, got {value!r}: to cache no missing key, "
                          "set cache_missing_key=False instead")
    return opts.as_timedelta(value, name)


def refuse_idle_missing_life(life: timedelta | None, cache_missing_key: bool,
                             bound: timedelta | None, names: tuple[str, str, str]) -> None:
    """Refuse a missing key's ``life`` that could never apply (no missing key cached, or
    every entry ended sooner by ``bound``), which would otherwise be a setting silently
    doing nothing. ``names``: how to name the life, ``cache_missing_key`` and the bound
    (arguments or option keys)."""
    if life is None:
        return
    missing, cached, bounded = names
    if not cache_missing_key:
        raise ConfigError(f"{missing} ({life}) is given while {cached} is false, so no missing "
                          "key is cached: drop one of them")
    if bound is not None and life > bound:
        raise ConfigError(f"{missing} ({life}) is longer than {bounded} ({bound}), which ends "
                          "every entry sooner: make it shorter, or leave it unset")
