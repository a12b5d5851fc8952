"""Pick the reload trigger a Flink option set asks for."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from triggers._config import check_full_cache
from triggers._scheduled import DEFAULT_CLOSE_TIMEOUT
from triggers.periodic import PeriodicCacheReloadTrigger
from triggers.timed import TimedCacheReloadTrigger

__all__ = ["reload_trigger_from_options"]


def reload_trigger_from_options(
    options: Mapping[str, Any],
    *,
    close_timeout: timedelta | float = DEFAULT_CLOSE_TIMEOUT,
) -> PeriodicCacheReloadTrigger | TimedCacheReloadTrigger:
    """The trigger for ``lookup.full-cache.reload-strategy``: ``PERIODIC`` (the default,
    as in Flink) or ``TIMED``; runs on the driver.

    Delegates to [`PeriodicCacheReloadTrigger.from_options`][] or
    [`TimedCacheReloadTrigger.from_options`][], which document the keys they read.

    Raises
    ------
    ConfigError
        (a ``ValueError``) naming the key that is missing, unknown or invalid.

    Examples
    --------
    >>> reload_trigger_from_options({
    ...     "lookup.cache": "FULL",
    ...     "lookup.full-cache.reload-strategy": "TIMED",
    ...     "lookup.full-cache.timed-reload.iso-time": "03:00Z",
    ... })
    TimedCacheReloadTrigger(time_of_day=03:00:00, interval_in_days=1, tz='UTC')
    >>> reload_trigger_from_options({
    ...     "lookup.cache": "FULL",
    ...     "lookup.full-cache.periodic-reload.interval": "1 h",
    ... })
    PeriodicCacheReloadTrigger(interval=datetime.timedelta(seconds=3600), schedule_mode=FIXED_DELAY)
    """
    # The option's parser admits only PERIODIC and TIMED.
    if check_full_cache(options, "reload trigger") == "TIMED":
        return TimedCacheReloadTrigger.from_options(options, close_timeout=close_timeout)
    return PeriodicCacheReloadTrigger.from_options(options, close_timeout=close_timeout)
