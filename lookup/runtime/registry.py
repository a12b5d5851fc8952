"""The process's one registry of lookup runtimes (Flink's ``LookupCacheManager``).

[`open_lookup`][] returns a handle on the runtime of a provider, creating and opening
it on first use and sharing it (reference counted) with every later ``open_lookup`` of
the same provider in the process, and with the worker's joins and SQL functions
(``lookup.runtime.worker``); the last reference released closes it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cache.base import Key, Row
from cache.metrics import CacheMetrics
from lookup.providers import (
    AsyncLookupFunctionProvider,
    FullCachingLookupProvider,
    LookupFunctionProvider,
    LookupProvider,
)
from lookup.runtime.as_of import versions_at
from lookup.runtime.base import LookupRuntime
from lookup.runtime.full import FullCachingRuntime
from lookup.runtime.partial import LoadingRuntime
from spark_lookup.errors import ConfigError

__all__ = ["REGISTRY", "LookupHandle", "open_lookup"]


def _new_runtime(provider: LookupProvider) -> LookupRuntime:
    if isinstance(provider, FullCachingLookupProvider):
        return FullCachingRuntime(provider)
    if isinstance(provider, (LookupFunctionProvider, AsyncLookupFunctionProvider)):
        return LoadingRuntime(provider)
    raise ConfigError(f"expected a lookup provider, got {type(provider).__name__}")


@dataclass
class _Entry:
    runtime: LookupRuntime
    references: int = 0
    pinned: bool = False  # one of the references is the process's own


class _RuntimeRegistry:
    """Process-wide runtimes by provider id, reference counted (Flink's LookupCacheManager).

    A reference is held by every open [`LookupHandle`][], and by a Spark worker once
    a task used the provider (its *pin*, one at most, released at exit), so later tasks
    find the cache warm. Reads take no lock: it is held while a runtime opens.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def acquire(self, provider: LookupProvider, *, pin: bool = False) -> LookupRuntime:
        """``provider``'s runtime, opened on first use, with one more reference (``pin``:
        the process's own, taken once)."""
        entry = self._entries.get(provider.provider_id)
        if pin and entry is not None and entry.pinned:  # every task of a worker asks
            return entry.runtime
        with self._lock:
            entry = self._entries.get(provider.provider_id)
            if entry is None:
                runtime = _new_runtime(provider)
                runtime.open()
                entry = self._entries[provider.provider_id] = _Entry(runtime)
            if not (pin and entry.pinned):
                entry.references += 1
                entry.pinned |= pin
            return entry.runtime

    def release(self, provider_id: str, *, pin: bool = False) -> None:
        """Drop a reference (``pin``: the process's own, if held); the last closes it."""
        with self._lock:
            entry = self._entries.get(provider_id)
            if entry is None or (pin and not entry.pinned):
                return
            entry.pinned &= not pin
            entry.references -= 1
            if entry.references:
                return
            del self._entries[provider_id]
        entry.runtime.close()

    def unpin_all(self) -> None:
        """Release every pin: at exit, and for tests that need a cold process."""
        for provider_id in [key for key, entry in list(self._entries.items()) if entry.pinned]:
            with contextlib.suppress(Exception):  # at exit there is no one left to tell
                self.release(provider_id, pin=True)

    def runtime(self, provider_id: str) -> LookupRuntime | None:
        """The open runtime of ``provider_id``, if any (no reference taken)."""
        entry = self._entries.get(provider_id)
        return None if entry is None else entry.runtime

    def references(self, provider_id: str) -> int:
        """How many references the runtime of ``provider_id`` has (0: not open)."""
        entry = self._entries.get(provider_id)
        return 0 if entry is None else entry.references


REGISTRY = _RuntimeRegistry()


class LookupHandle:
    """A handle on the shared runtime of a provider in this process.

    Returned by [`open_lookup`][]; a context manager. ``close`` is idempotent and
    releases this handle's reference only.
    """

    def __init__(self, provider: LookupProvider) -> None:
        self._provider = provider
        self._provider_id = provider.provider_id
        self._runtime: LookupRuntime | None = REGISTRY.acquire(provider)
        self._close_lock = threading.Lock()
        self.clock: Callable[[], float] = time.time
        """What "now" is for a provider with validity asked without ``as_of`` (epoch
        seconds; tests set another)."""
        self.time_zone = "UTC"
        """Whose wall clock "now" is read on against TIMESTAMP_NTZ or DATE versions."""

    @property
    def runtime(self) -> LookupRuntime:
        """The shared runtime (raises once this handle is closed)."""
        runtime = self._runtime
        if runtime is None:
            raise RuntimeError("this lookup handle is closed")
        return runtime

    @property
    def metrics(self) -> CacheMetrics:
        """Metrics of the shared runtime: cache hits and misses, loads, failures, sizes."""
        return self.runtime.metrics

    def lookup(self, key: Key, as_of: object = None) -> tuple[Row, ...]:
        """The rows of ``key`` (a tuple in key-column order); empty when none match.

        For a provider with a validity, the one version valid at ``as_of`` (a
        ``datetime``: aware against TIMESTAMP versions, naive or a ``date`` against
        TIMESTAMP_NTZ and DATE ones), or now without it. An ``as_of`` older than now
        minus the validity's retention gets none (counted in ``num_out_of_retention``),
        as in a join.

        Raises
        ------
        TypeError
            When ``key`` is not a tuple of as many values as there are key columns.
        LookupLoadError
            When loading from the source failed after all retries.
        ConfigError
            For ``as_of`` given to a provider without validity, or of the wrong kind.
        """
        if self._provider.validity is None:
            if as_of is not None:
                raise ConfigError(f"as_of: {self._provider.describe()} has no validity")
            return self.runtime.lookup(key)
        return self._at([key], None if as_of is None else [as_of])[0]

    def lookup_batch(self, keys: Iterable[Key], as_of: Sequence[object] | None = None
                     ) -> dict[Key, tuple[Row, ...]] | list[tuple[Row, ...]]:
        """The rows of every distinct key of ``keys``: cache first, then one batched load
        of the misses (chunked above the provider's ``batch_size``).

        For a provider with a validity, the version of each key valid now; with
        ``as_of`` (a time per key, as `lookup` takes them), a list: the version of
        ``keys[i]`` valid at ``as_of[i]`` (one row or none), in order, since one key may
        come at several times.
        """
        if self._provider.validity is None:
            if as_of is not None:
                raise ConfigError(f"as_of: {self._provider.describe()} has no validity")
            return self.runtime.lookup_batch(keys)
        given = list(keys)
        picked = self._at(given, None if as_of is None else list(as_of))
        if as_of is not None:
            return picked
        return dict(zip(given, picked, strict=True))

    def _at(self, keys: list[Key], times: list[object] | None) -> list[tuple[Row, ...]]:
        runtime = self.runtime
        found = runtime.lookup_batch(keys)
        return versions_at(self._provider, found, keys, times, self.clock, self.time_zone,
                           runtime.metrics.inc_out_of_retention)

    def close(self) -> None:
        """Release this handle; the last handle of a provider closes its runtime."""
        with self._close_lock:
            if self._runtime is None:
                return
            self._runtime = None
        REGISTRY.release(self._provider_id)

    def __enter__(self) -> LookupHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_lookup(provider: LookupProvider) -> LookupHandle:
    """Open (or join) this process's runtime of ``provider`` and return a handle.

    Runs where lookups run: in each Spark Python worker (the join does this), or in any
    Python process. Two ``open_lookup`` calls on the same provider (or on copies of it
    unpickled in one process) share one cache; the last ``close`` releases it.

    Examples
    --------
    >>> from lookup import LookupFunction, LookupFunctionProvider
    >>> class Squares(LookupFunction):
    ...     schema, key_columns = "n BIGINT, square BIGINT", ["n"]
    ...     def lookup(self, key):
    ...         return [(key[0], key[0] ** 2)]
    >>> with open_lookup(LookupFunctionProvider.of(Squares())) as handle:
    ...     handle.lookup_batch([(2,), (3,), (2,), (None,)])
    {(2,): ((2, 4),), (3,): ((3, 9),), (None,): ()}

    Raises
    ------
    ConfigError
        If ``provider`` is not a lookup provider.
    """
    if not isinstance(provider, LookupProvider):
        raise ConfigError(f"expected a lookup provider, got {type(provider).__name__}")
    return LookupHandle(provider)

