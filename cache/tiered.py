"""TieredLookupCache: an in-process cache in front of a shared one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import pyarrow as pa

from cache.base import Key, LookupCache, Rows, check_key
from cache.metrics import CacheMetrics
from spark_lookup.errors import ConfigError

__all__ = ["TieredLookupCache"]


class _ForwardingMetrics(CacheMetrics):
    """A tier's own metrics that also report its cache errors to the tiered metrics."""

    def __init__(self, parent: CacheMetrics) -> None:
        super().__init__()
        self._parent = parent

    def inc_cache_errors(self, n: int = 1) -> None:
        super().inc_cache_errors(n)
        self._parent.inc_cache_errors(n)


class TieredLookupCache(LookupCache):
    """Two caches in series: ``l1`` (in-process, e.g. [`DefaultLookupCache`][]) in
    front of ``l2`` (shared, e.g. [`RedisLookupCache`][]).

    - get: ``l1`` first; the keys it misses are asked of ``l2`` (one ``get_all``), and
      ``l2`` hits are promoted into ``l1``.
    - put, put_all, invalidate: both tiers (``l1`` first); each applies its own policy
      (TTL, cache-missing-key).
    - size: ``l1``'s (what this process holds); close: both.

    A promoted entry starts a fresh ``l1`` lifetime, so an entry may be served up to
    ``l1``'s expire-after-write plus ``l2``'s TTL after it was loaded. The same holds for
    a missing key: give both tiers ``expire_missing_after`` (each applies its own), or a
    miss that expired in ``l1`` is promoted again from ``l2`` for as long as ``l2``
    keeps it (its ``ttl``), and a late-arriving row is found only after both lives.

    Built on the driver, pickled as its configuration: each tier pickles as its own
    configuration (both must be picklable). Thread-safe when both tiers are.

    Metrics. [`metrics`][cache.TieredLookupCache.metrics] (the one given to [`open`][])
    counts each key once at the tier level: a hit when either tier answered, a miss when
    both missed. ``num_cache_errors`` adds up both tiers' errors (a Redis outage shows
    here), and the gauges are ``l1``'s (records and bytes held in this process). Each
    tier also keeps its own view, [`l1_metrics`][] and [`l2_metrics`][], so that:

        metrics.hit_count  == l1_metrics.hit_count + l2_metrics.hit_count
        metrics.miss_count == l2_metrics.miss_count
        l1_metrics.miss_count == l2_metrics.hit_count + l2_metrics.miss_count

    (``l2`` is only asked about ``l1``'s misses; promotions count in neither.)

    Parameters
    ----------
    l1, l2 : LookupCache
        The near and the far tier; two distinct objects.

    Attributes
    ----------
    l1 : LookupCache
        The near (in-process) tier.
    l2 : LookupCache
        The far (shared) tier.

    Raises
    ------
    ConfigError
        (a ``ValueError``) if a tier is not a [`LookupCache`][], or ``l1`` and
        ``l2`` are the same object.

    Examples
    --------
    >>> from datetime import timedelta
    >>> from cache import DefaultLookupCache, RedisLookupCache
    >>> near = (DefaultLookupCache.new_builder().maximum_size(10_000)
    ...         .expire_after_write(timedelta(minutes=1)).build())
    >>> far = RedisLookupCache("redis://localhost:6379/0", "customers", ttl=600)
    >>> cache = TieredLookupCache(near, far)
    """

    def __init__(self, l1: LookupCache, l2: LookupCache) -> None:
        for name, tier in (("l1", l1), ("l2", l2)):
            if not isinstance(tier, LookupCache):
                raise ConfigError(f"{name} must be a LookupCache, got {type(tier).__name__}")
        if l1 is l2:
            raise ConfigError("l1 and l2 must be two different caches")
        self.l1: Final = l1
        self.l2: Final = l2
        self._metrics = CacheMetrics()
        self._l1_metrics = CacheMetrics()
        self._l2_metrics = CacheMetrics()

    def __getstate__(self) -> dict[str, Any]:
        return {"l1": self.l1, "l2": self.l2}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["l1"], state["l2"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"TieredLookupCache(l1={self.l1!r}, l2={self.l2!r})"

    def bind(self, schema: pa.Schema, key_columns: Sequence[str]) -> None:
        """Bind both tiers (the in-process one then stores rows of the schema's types)."""
        super().bind(schema, key_columns)
        self.l1.bind(schema, key_columns)
        self.l2.bind(schema, key_columns)

    def open(self, metrics: CacheMetrics | None = None) -> None:
        """Open both tiers, each with its own metrics; count tier-level into ``metrics``."""
        super().open(metrics)
        self._l1_metrics = _ForwardingMetrics(self._metrics)
        self._l2_metrics = _ForwardingMetrics(self._metrics)
        self.l1.open(self._l1_metrics)
        self.l2.open(self._l2_metrics)
        l1_metrics = self._l1_metrics
        self._metrics.register_gauges(
            lambda: (l1_metrics.num_cached_records, l1_metrics.num_cached_bytes)
        )

    @property
    def l1_metrics(self) -> CacheMetrics:
        """``l1``'s own metrics: its hits, and its misses (each asked of ``l2``)."""
        return self._l1_metrics

    @property
    def l2_metrics(self) -> CacheMetrics:
        """``l2``'s own metrics, over the keys ``l1`` missed."""
        return self._l2_metrics

    def get_if_present(self, key: Key) -> Rows | None:
        """``l1``'s rows for ``key``, else ``l2``'s (promoted into ``l1``), else None."""
        rows = self.l1.get_if_present(check_key(key))
        if rows is None:
            rows = self.l2.get_if_present(key)
            if rows is not None:
                self.l1.put(key, rows)
        return self._counted(rows)

    def get_all(self, keys: Iterable[Key]) -> dict[Key, Rows]:
        """``l1.get_all``, then one ``l2.get_all`` of its misses (promoted into ``l1``)."""
        wanted = list(dict.fromkeys(check_key(key) for key in keys))
        found = self.l1.get_all(wanted)
        missing = [key for key in wanted if key not in found]
        if missing:
            promoted = self.l2.get_all(missing)
            if promoted:
                self.l1.put_all(promoted)
                found.update(promoted)
        self._metrics.inc_hits(len(found))
        self._metrics.inc_misses(len(wanted) - len(found))
        return found

    def put(self, key: Key, rows: Rows) -> None:
        """Put into both tiers."""
        self.l1.put(key, rows)
        self.l2.put(key, rows)

    def put_all(self, entries: Mapping[Key, Rows]) -> None:
        """Put every entry into both tiers (one batched call per tier)."""
        self.l1.put_all(entries)
        self.l2.put_all(entries)

    def invalidate(self, key: Key) -> None:
        """Remove ``key`` from both tiers."""
        self.l1.invalidate(key)
        self.l2.invalidate(key)

    def invalidate_arrow(self, keys: Sequence[pa.Array]) -> int:
        """Remove the keys from both tiers; returns what ``l2`` (the shared tier) removed."""
        self.l1.invalidate_arrow(keys)
        return self.l2.invalidate_arrow(keys)

    def invalidate_all(self) -> None:
        """Drop every entry of both tiers."""
        self.l1.invalidate_all()
        self.l2.invalidate_all()

    def size(self) -> int:
        """Keys held by ``l1`` (in this process)."""
        return self.l1.size()

    def close(self) -> None:
        """Close both tiers (``l2`` even if closing ``l1`` fails)."""
        try:
            self.l1.close()
        finally:
            self.l2.close()
