"""Checks shared by the triggers' ``from_options``: Flink's full-cache keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_lookup import options as opts
from spark_lookup.errors import ConfigError

__all__ = ["STRATEGY_KEYS", "check_full_cache", "check_strategy_options"]

_FULL_CACHE_PREFIX = "lookup.full-cache."

STRATEGY_KEYS: dict[str, tuple[str, ...]] = {
    "PERIODIC": (
        opts.PERIODIC_RELOAD_INTERVAL.key,
        opts.PERIODIC_RELOAD_SCHEDULE_MODE.key,
    ),
    "TIMED": (
        opts.TIMED_RELOAD_ISO_TIME.key,
        opts.TIMED_RELOAD_INTERVAL_IN_DAYS.key,
    ),
}
"""The keys that only make sense with each ``lookup.full-cache.reload-strategy``."""


def check_full_cache(options: Mapping[str, Any], built: str) -> str:
    """Check that ``options`` configure a full cache; return its reload strategy.

    Raises
    ------
    ConfigError
        When ``options`` is not a mapping, ``lookup.cache`` is not ``FULL``, a
        ``lookup.full-cache.*`` key is unknown (a typo), or the strategy is invalid.
    """
    if not isinstance(options, Mapping):
        raise ConfigError(
            f"options must be a mapping of option keys to values, got {type(options).__name__}"
        )
    cache = opts.CACHE.get(options)
    if cache != "FULL":
        given = "" if options.get(opts.CACHE.key) is not None else " (the default)"
        raise ConfigError(
            f"option {opts.CACHE.key!r} must be FULL to build a {built}, got {cache}{given}"
        )
    known = [o.key for o in opts.LOOKUP_OPTIONS if o.key.startswith(_FULL_CACHE_PREFIX)]
    opts.check_known_keys(options, known, _FULL_CACHE_PREFIX)
    strategy = opts.FULL_CACHE_RELOAD_STRATEGY.get(options)
    assert strategy is not None  # the option has a default
    return strategy


def check_strategy_options(options: Mapping[str, Any], strategy: str, built: str) -> None:
    """`check_full_cache`, and the reload strategy must be ``strategy``.

    Keys of the other strategy are refused rather than silently ignored.

    Raises
    ------
    ConfigError
        Naming the key at fault.
    """
    actual = check_full_cache(options, built)
    key = opts.FULL_CACHE_RELOAD_STRATEGY.key
    if actual != strategy:
        given = "" if options.get(key) is not None else " (the default)"
        raise ConfigError(
            f"option {key!r} must be {strategy} to build a {built}, got {actual}{given}"
        )
    for other, keys in STRATEGY_KEYS.items():
        if other == strategy:
            continue
        for foreign in keys:
            if options.get(foreign) is not None:
                raise ConfigError(f"option {foreign!r} applies to reload strategy {other}, but "
                                  f"{key!r} is {strategy}; remove it or change the strategy")
