"""Point-in-time answers of the per-key API (`lookup.runtime.registry.LookupHandle`):
the version of each key valid at a time given in Python, or now.

Not a join's hot path: keys and rows are Python tuples here already; the pick itself
is `lookup.versions.pick`, as a join's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import types as T

from cache.base import Key, Row
from lookup.providers import LookupProvider
from lookup.versions import now_micros, pick, version_index
from spark_lookup.errors import ConfigError
from spark_lookup.schema import to_arrow_type

__all__ = ["versions_at"]

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=dt.timezone.utc)
_MICRO = dt.timedelta(microseconds=1)


def _micros(value: object, instants: bool) -> int | None:
    """``value`` (a datetime, or a date for wall-clock versions; None: no time) as
    microseconds comparable with the versions, never read through a guessed zone."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        aware = value.tzinfo is not None and value.utcoffset() is not None
        if aware != instants:
            raise ConfigError(
                f"as_of {value!r}: the versions are "
                + ("TIMESTAMP (instants): give an aware datetime" if instants else
                   "TIMESTAMP_NTZ or DATE (wall-clock times): give a naive datetime or a date"))
        return ((value - _EPOCH_UTC) if aware else (value - _EPOCH)) // _MICRO
    if isinstance(value, dt.date) and not instants:
        return (dt.datetime.combine(value, dt.time()) - _EPOCH) // _MICRO
    raise ConfigError(f"as_of must be a datetime{'' if instants else ' or a date'}, "
                      f"got {type(value).__name__}: {value!r}")


def versions_at(provider: LookupProvider, found: dict[Key, tuple[Row, ...]],
                keys: Sequence[Key], times: Sequence[object] | None,
                clock: Callable[[], float], time_zone: str,
                out_of_retention: Callable[[int], None] | None = None
                ) -> list[tuple[Row, ...]]:
    """The version of each of ``keys`` valid at ``times[i]`` (None: now, on the wall
    clock of ``time_zone`` for TIMESTAMP_NTZ and DATE versions), from ``found``: every
    version of each key, as a runtime's ``lookup_batch`` answers. One row or none each.

    A time older than now minus the validity's retention gets none, as in a join (a
    load may have dropped its version): counted through ``out_of_retention``.

    Raises
    ------
    ConfigError
        For a time that is no datetime (or date, against wall-clock versions), or whose
        kind (aware, naive) is not the versions'.
    """
    validity = provider.validity
    assert validity is not None
    schema = provider.schema
    names = schema.fieldNames()
    instants = isinstance(schema[validity.valid_from].dataType, T.TimestampType)
    distinct = list(found)
    slot = {key: i for i, key in enumerate(distinct)}
    rows = [row for key in distinct for row in found[key]]
    group = np.repeat(np.arange(len(distinct), dtype=np.int64),
                      [len(found[key]) for key in distinct])

    def column(name: str) -> pa.Array:
        at = names.index(name)
        return pa.array([row[at] for row in rows], to_arrow_type(schema[name].dataType))

    index = version_index(group, column(validity.valid_from),
                          None if validity.valid_to is None else column(validity.valid_to))
    if times is None:
        now = now_micros(clock, None if instants else time_zone)
        micros: list[int | None] = [now] * len(keys)
    else:
        if len(times) != len(keys):
            raise ConfigError(f"as_of has {len(times)} time(s) for {len(keys)} key(s)")
        micros = [_micros(value, instants) for value in times]
    known = np.array([m is not None for m in micros], dtype=bool)
    at = np.array([0 if m is None else m for m in micros], dtype=np.int64)
    old = np.zeros(len(keys), dtype=bool)
    if times is not None and validity.retention is not None:
        # The cutoff a join reads (`lookup.spark.assemble.PointInTime`), never before
        # the loads' (`lookup.versions.load_cutoff`).
        cutoff = (now_micros(clock, None if instants else time_zone)
                  - validity.retention // _MICRO)
        old = known & (at < cutoff)
        if old.any() and out_of_retention is not None:
            out_of_retention(int(np.count_nonzero(old)))
    picked = pick(index, np.array([slot.get(key, -1) for key in keys], dtype=np.int64),
                  at, known & ~old)
    return [(rows[r],) if r >= 0 else () for r in picked.tolist()]
