"""Reload triggers for full lookup caches, on APScheduler (Flink's FLIP-221 triggers).

A trigger decides when a full cache reloads its whole table. It is built on the driver,
pickled to executors as its configuration, and opened there by the full cache with a
[`ReloadContext`][]; its scheduler thread starts in ``open`` and stops in ``close``.

- [`PeriodicCacheReloadTrigger`][]: every interval, ``FIXED_DELAY`` (end to start)
  or ``FIXED_RATE`` (start to start, never overlapping).
- [`TimedCacheReloadTrigger`][]: at a wall-clock time of day every N days, correct
  across DST changes.
- [`reload_trigger_from_options`][]: the one Flink's ``lookup.full-cache.*`` keys ask for.

Depends on nothing of ours but the shared base ``spark_lookup``. Logs on the
``triggers`` logger.
"""

from triggers.base import CacheReloadTrigger, ReloadContext
from triggers.factory import reload_trigger_from_options
from triggers.periodic import PeriodicCacheReloadTrigger, ScheduleMode
from triggers.timed import TimedCacheReloadTrigger

__all__ = [
    "CacheReloadTrigger",
    "PeriodicCacheReloadTrigger",
    "ReloadContext",
    "ScheduleMode",
    "TimedCacheReloadTrigger",
    "reload_trigger_from_options",
]
