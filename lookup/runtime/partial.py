"""The function-backed lookup runtime of one Python worker: caching, batched loads,
retries (Flink's ``CachingLookupFunction``). `lookup.runtime.registry` shares it."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from cache.answers import Answers
from cache.base import (
    Key,
    LookupCache,
    Row,
    answers_to_arrow,
    key_tuples,
    row_ranges,
)
from cache.default.cache import DefaultLookupCache
from cache.fit import misfit_check
from cache.host.tier import HostAnswers, HostTier
from connectors.keys import EncodedKeys, KeyCodec
from connectors.policy import BadValuePolicy
from connectors.predicates import VersionBoundedLookup, VersionBounds
from lookup.changes.feed import ChangeFeed
from lookup.changes.listener import Subscription, subscribe
from lookup.changes.partial import CacheInvalidation, put_answers
from lookup.function import LookupFunction, LookupFunctionBase
from lookup.providers import (
    AsyncLookupFunctionProvider,
    LookupFunctionProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
)
from lookup.retry import Retries
from lookup.runtime.base import (
    EMPTY,
    LookupRuntime,
    add_rows,
    close_each,
    counting_bad_values,
    place_probe_answers,
)
from lookup.runtime.loaders import Loader, PartialLoad, loader_for
from lookup.versions import describer, instants, load_cutoff, policy_of, retained, version_index
from spark_lookup.adaptive_concurrency import AdaptiveLimit
from spark_lookup.connection_budget import setup_seconds
from spark_lookup.errors import ConfigError, LookupLoadError
from spark_lookup.schema import to_arrow_schema, to_arrow_type
from spark_lookup.shown import shown

__all__ = ["LoadingRuntime"]

log = logging.getLogger("lookup")

_NO_OFFSETS = np.zeros(0, dtype=np.int64)  # of an answer of one row a key
_NO_OFFSETS.flags.writeable = False


def _preview(keys: Sequence[Key], limit: int = 3) -> str:
    first = ", ".join(shown(k, 60) for k in keys[:limit])
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"[{first}{more}]"


class LoadingRuntime(LookupRuntime):
    """Function-backed runtime: optional partial cache, batched loads, retries."""

    def __init__(self, provider: LookupFunctionProvider | AsyncLookupFunctionProvider) -> None:
        super().__init__(provider)
        self._cache: LookupCache | None = getattr(provider, "cache", None)
        # An in-process cache holds only rows this runtime checked and put; any other
        # (Redis, tiered, a user's) may serve rows someone else wrote.
        self._check_cached = not isinstance(self._cache, DefaultLookupCache)
        self._loader: Loader = loader_for(provider)
        self._policy = provider.retry_policy
        miss_retry = provider.retry_on_miss
        self._miss_attempts = 1 if miss_retry is None else miss_retry.max_attempts
        self._miss_delay = 0.0 if miss_retry is None else miss_retry.delay.total_seconds()
        self._batch_size = provider.batch_size
        self._schema = to_arrow_schema(provider.schema)
        self._no_rows = self._schema.empty_table()
        self._misfit = misfit_check(self._schema)
        table = getattr(provider.function, "table", None)
        self._codec = KeyCodec(
            list(provider.key_columns), provider.key_types,
            f"table {table!r}" if isinstance(table, str) else provider.describe(),
        )
        # Synchronous functions answer a batch in Arrow (lookup_arrow); asynchronous
        # ones key by key, through the per-key path.
        self._arrow_function = (
            provider.function if isinstance(provider, LookupFunctionProvider) else None
        )
        # The per-key API goes the Arrow way too when the function answers in Arrow
        # itself (the connectors); one that answers in Python tuples is asked for them.
        self._arrow_native = self._arrow_function is not None and (
            type(self._arrow_function).lookup_arrow is not LookupFunction.lookup_arrow)
        # With a change feed, loads put through its guard (see lookup.changes.partial).
        self._feed: ChangeFeed | None = getattr(provider, "changes", None)
        self.clock: Callable[[], float] = time.time
        """"Now" of a validity's retention at load (epoch seconds); tests replace it."""
        feed = self._feed
        self._guard: CacheInvalidation | None = None
        if feed is not None and self._cache is not None:
            self._guard = CacheInvalidation(
                self._cache, self._codec, feed, list(provider.key_columns), provider.key_types,
                self.metrics, provider.describe())
        self._subscription: Subscription | None = None
        # A source over its connection limit is waited for up to the provider's load
        # timeout, each wait counted (see lookup.retry).
        self._busy_timeout = provider.connection_wait().total_seconds()
        self._budget = provider.connection_budget()
        self._function: LookupFunctionBase = provider.function
        self._unwatch: Callable[[], None] | None = None
        self._host: HostTier | None = None
        self._host_failure_logged = False
        # The host's adaptive limit, where the function's connections are budgeted.
        self._concurrency: AdaptiveLimit | None = None

    def _retries(self, what: str) -> Retries:
        budget = self._budget if self._unwatch is not None else None
        return self._policy.retries(what, on_retry=self.metrics.inc_retries,
                                    busy_timeout=self._busy_timeout,
                                    on_busy_wait=self.metrics.record_connection_wait,
                                    busy_sleep=None if budget is None else budget.wait_queued,
                                    on_transient=None if self._concurrency is None
                                    else self._overloaded)

    def _overloaded(self) -> None:
        concurrency = self._concurrency
        if concurrency is not None:
            change = concurrency.on_overload()
            self.metrics.record_concurrency(concurrency.limit_seen, change)

    def open(self) -> None:
        budget = self._budget
        if budget is not None and self._function.limit_connections(budget):
            self._unwatch = budget.watch(self.metrics.record_connection_wait)
            self._concurrency = budget.concurrency()
        try:
            self._open()
        except BaseException:
            if self._unwatch is not None:
                self._unwatch()
            raise

    def _open(self) -> None:
        # Retried as a failed load is: a worker that starts during an outage (Spark hands
        # a batch to any idle worker, or starts one) waits it out instead of failing its
        # task at once. ConfigError and TypeError are raised at once.
        tries = self._retries(f"opening {self.provider.describe()}")
        for _ in tries:
            try:
                self._loader.open()
                break
            except Exception as exc:
                if not tries.failed(exc) or tries.last:
                    raise
        if self._cache is not None:
            try:
                if (self.provider.validity is not None
                        and isinstance(self._cache, DefaultLookupCache)):
                    self._cache.count_rows()  # an entry holds a key's versions
                self._cache.bind(self._schema, list(self.provider.key_columns))
                self._cache.open(self.metrics)
                # Before the feed listens: its first connection flushes the tier too.
                self._host = self._open_host_tier()
                if self._guard is not None and self._feed is not None:
                    self._subscription = subscribe(self._feed, self._guard)
                    self._guard.subscribed(self._subscription)
            except BaseException:
                close_each(self._host)
                self._loader.close()
                raise

    def _open_host_tier(self) -> HostTier | None:
        """The host tier behind the in-process cache, where the provider shares one (a
        [`DefaultLookupCache`][]). With a change feed, the tier tracks changes, noted
        through an instance of its own on the feed's thread (see lookup.changes.partial)."""
        provider = self.provider
        cache = self._cache
        if (not isinstance(cache, DefaultLookupCache)
                or not isinstance(provider, (PartialCachingLookupProvider,
                                             PartialCachingAsyncLookupProvider))
                or not provider.shares_cache()):
            return None
        guard = self._guard

        def tier() -> HostTier:
            return HostTier(provider.host_tier_directory(), self._schema,
                            list(provider.key_columns), tracks_changes=guard is not None,
                            **cache.host_tier_bounds())

        opened: list[HostTier] = []
        try:
            for _ in range(1 if guard is None else 2):
                opened.append(tier())
                opened[-1].open()
        except OSError as exc:
            close_each(*opened)
            log.warning("%s: no host tier (%s); each worker caches alone",
                        provider.describe(), exc)
            return None
        if guard is not None:
            guard.share_through(opened[1])
        return opened[0]

    def close(self) -> None:
        try:
            close_each(self._subscription, self._guard, self._cache, self._host)
        finally:
            try:
                self._loader.close()
            finally:
                if self._unwatch is not None:
                    self._unwatch()

    # --- the batch path of joins and SQL functions, in Arrow

    def probe(self, keys: Sequence[pa.Array], describe: str = "lookup",
              as_of_range: tuple[int, int] | None = None) -> Answers:
        """Distinct keys: cast to the key columns' types (a key that cannot be, or holds
        a null, never matches), then answered as `_answer` says; a load may leave out
        the versions no time of ``as_of_range`` needs (`_version_bounds`)."""
        function = self._arrow_function
        if function is None:
            return super().probe(keys, describe)
        total = len(keys[0]) if keys else 0
        encoded = self._codec.encode_arrays(keys)
        answered = self._answer(
            function, encoded.arrays, self._version_bounds(function, as_of_range))
        if encoded.kept is None:
            return answered
        groups = np.full(total, -1, dtype=np.int64)
        groups[encoded.kept.to_numpy(zero_copy_only=False)] = answered.groups
        return replace(answered, groups=groups)

    def _version_bounds(self, function: LookupFunction, as_of_range: tuple[int, int] | None
                        ) -> VersionBounds | None:
        """What a load may leave out for a batch whose known ``as_of`` times lie in
        ``as_of_range`` (microseconds, as `lookup.versions.instants` reads them), or
        None: every version of the keys is read.

        Only without a cache (a cache keeps a key's versions for every later time),
        from a function that can (`VersionBoundedLookup`), and only where the versions
        left out cannot change what `lookup.versions.version_index` makes of the rest
        for a time t in [lo, hi] (rows with a NULL ``as_of`` match nothing anyway):

        - No valid_to, PERMISSIVE or DROPMALFORMED: the version at t is the one with
          the latest usable valid_from <= t, ending at the next later start, which is
          after t wherever it lies. Versions starting after hi are never it; the only
          overlaps are equal starts, all on one side of hi together, so the ties that
          are read are the same ones, counted, dropped (DROPMALFORMED, each earlier
          version then running on to the next start kept) or resolved (PERMISSIVE) as
          before. Without valid_to a version ends where the next begins, so no bound
          below.
        - valid_to, PERMISSIVE: the version at t is the latest-starting one with
          valid_from <= t < valid_to; a version starting after hi or ending at or
          before lo holds at no such t, and leaving it out changes no other version's
          pieces there. (Under DROPMALFORMED such a version still drops every version
          it overlaps, ones that would answer: no bound.)
        - FAILFAST: no bound: a bad version anywhere in a key's history refuses the
          load, as a cache's or a full snapshot's load does.

        NULL valid_from rows are read still (they are counted as before); versions left
        out are not, so their bad values are not counted. A version's place among ties
        of equal times is its place in the load, which no statement orders, with or
        without the bound. A retention is applied to what is read: the version it
        keeps that would have ended at a start beyond hi ends before the cutoff, so
        the rows it would answer are out of retention and answer nothing anyway.
        """
        validity = self.provider.validity
        if (as_of_range is None or validity is None or self._cache is not None
                or not isinstance(function, VersionBoundedLookup)):
            return None
        low, high = as_of_range
        policy = policy_of(function)
        if policy is BadValuePolicy.FAILFAST:
            return None
        if validity.valid_to is None:
            return VersionBounds(validity.valid_from, high)
        if policy is BadValuePolicy.PERMISSIVE:
            return VersionBounds(validity.valid_from, high, validity.valid_to, low)
        return None

    def _fetch(self, load: _Load, arrays: list[pa.Array]) -> _Fetched:
        """The answers of distinct keys of the key types: the cache's, in Arrow, and the
        misses loaded by ``load`` (`_arrow_load`: one ``lookup_arrow`` call per
        ``batch_size`` keys) and put back in bulk. No Python object per key or row for
        a [`DefaultLookupCache`][] and a connector's function."""
        count = len(arrays[0]) if arrays else 0
        cache = self._cache
        cached = None
        if cache is not None and count:
            cached = self._cached(cache, arrays)
            hit, groups, offsets, rows = cached
        else:
            hit = np.zeros(count, dtype=bool)
            groups = np.full(count, -1, dtype=np.int64)
            offsets = np.zeros(1, dtype=np.int64)
            rows = self._no_rows
            if cache is None:
                self.metrics.inc_misses(count)
        miss = np.flatnonzero(~hit)
        if not len(miss):
            return _Fetched(groups, offsets, rows, miss, miss, None, cached)
        take = pa.array(miss, type=pa.int64())
        miss_keys = [array.take(take) for array in arrays] if len(miss) < count else arrays
        guard = self._guard
        if self._host is not None and cache is not None:
            index, loaded = self._through_host(self._host, load, cache, miss_keys)
        elif guard is None:
            index, loaded = load(miss_keys)
            if cache is not None:
                cache.put_arrow(miss_keys, index, loaded)
        else:
            token = guard.begin()
            try:
                index, loaded = load(miss_keys)
                guard.put_arrow(token, miss_keys, index, loaded)
            finally:
                guard.end(token)
        return _Fetched(groups, offsets, rows, miss, index.to_numpy(zero_copy_only=False),
                        _as_table(loaded, self._schema))

    def _answer(self, function: LookupFunction, arrays: list[pa.Array],
                bounds: VersionBounds | None = None) -> Answers:
        """The rows of distinct keys of the key types (see `_fetch`), every key answered."""
        fetched = self._fetch(self._arrow_load(function, bounds), arrays)
        groups, offsets, rows, miss = fetched.groups, fetched.offsets, fetched.rows, fetched.miss
        loaded = fetched.loaded
        if loaded is None:
            cached = fetched.cached
            views = None if cached is None else cached.views
            if (cached is not None and cached.key_rows is not None
                    and self.provider.validity is None):
                # (A point-in-time pick searches a warm cache's rows by their groups.)
                return Answers(None, cached.key_rows, _NO_OFFSETS, rows, one_row_each=True,
                               views=views)
            return Answers(None, groups, offsets, rows, views=views)
        positions = fetched.row_keys
        if len(positions) and not bool((np.diff(positions) >= 0).all()):
            order = np.argsort(positions, kind="stable")
            loaded = loaded.take(pa.array(order, type=pa.int64()))
        miss_counts = np.bincount(positions, minlength=len(miss)).astype(np.int64)
        # The hits' rows, copied out of the cache's answer, then the loaded rows,
        # one group per key, in one chunk (a join takes from it).
        holders = np.flatnonzero(groups >= 0)
        found = groups[holders]
        counts = offsets[found + 1] - offsets[found]
        if len(holders):
            hit_rows = _as_table(rows, self._schema).take(
                pa.array(row_ranges(offsets[found], counts), type=pa.int64()))
            loaded = pa.concat_tables([hit_rows, loaded])
        rows = loaded.combine_chunks()
        offsets = np.zeros(len(holders) + len(miss) + 1, dtype=np.int64)
        np.cumsum(np.concatenate((counts, miss_counts)), out=offsets[1:])
        groups[holders] = np.arange(len(holders), dtype=np.int64)
        groups[miss] = np.where(
            miss_counts > 0, len(holders) + np.arange(len(miss), dtype=np.int64), -1)
        return Answers(None, groups, offsets, rows)

    def _through_host(self, host: HostTier, load: _Load, cache: LookupCache,
                      keys: list[pa.Array]) -> tuple[pa.Array, pa.Table]:
        """The rows of keys the in-process cache missed: the host tier's, then what
        this process claimed and loaded, then what others were loading (waited for up
        to the load timeout, then loaded here). All of it is put in-process too,
        through the change feed's guard where there is one."""
        guard = self._guard
        batch = _HostBatch(cache, guard, 0 if guard is None else guard.begin(), host.now_ms())
        try:
            return self._through_host_tier(host, load, batch, keys)
        except _HostTierFailed as failed:
            # The host tier is a cache: a file it cannot use (deleted, damaged, a full
            # disk) costs loads, never a lookup. Keys answered before it failed are
            # answered again from the source.
            self.metrics.inc_cache_errors()
            if not self._host_failure_logged:
                self._host_failure_logged = True
                log.warning("%s: the host tier failed (%s); loading from the source",
                            self.provider.describe(), failed.__cause__)
            index, loaded = load(keys)
            batch.put_in_process(keys, index, loaded)
            return index, _as_table(loaded, self._schema)
        finally:
            if guard is not None:
                guard.end(batch.token)

    def _through_host_tier(self, host: HostTier, load: _Load,
                           batch: _HostBatch, keys: list[pa.Array]
                           ) -> tuple[pa.Array, pa.Table]:
        host = _Guarded(host)  # type: ignore[assignment]
        n = len(keys[0])
        parts = _Parts(self._schema)
        found = host.get(keys)
        self._took_host(found, np.arange(n, dtype=np.int64), keys, batch, parts)
        rest = np.flatnonzero(~found.hit)
        if not len(rest):
            return parts.result()
        mine, others = host.claim(_taken(keys, rest))
        if mine.any():
            self._load_shared(host, load, batch, keys, rest[mine], parts)
        waiting = rest[others]
        if len(waiting):
            self.metrics.inc_host_waits(len(waiting))
            give_up = time.monotonic() + self._busy_timeout
            pause = 0.002
            while len(waiting):
                self._policy.sleep(pause)
                pause = min(pause * 2, 0.05)
                found = host.get(_taken(keys, waiting))
                self._took_host(found, waiting, keys, batch, parts)
                orphaned = waiting[~found.hit & ~found.claimed]
                waiting = waiting[~found.hit & found.claimed]
                if len(waiting) and time.monotonic() >= give_up:
                    orphaned, waiting = np.concatenate([orphaned, waiting]), waiting[:0]
                if len(orphaned):  # its loader failed or died: load it here
                    self._load_shared(host, load, batch, keys, orphaned, parts)
        return parts.result()

    def _took_host(self, found: HostAnswers, positions: np.ndarray, keys: list[pa.Array],
                   batch: _HostBatch, parts: _Parts) -> None:
        """Add the host tier's answers (to the keys at ``positions``) to ``parts``, and
        put them in-process, their lives counted from their loads."""
        hit = np.flatnonzero(found.hit)
        if not len(hit):
            return
        self.metrics.inc_host_hits(len(hit))
        owners = np.repeat(np.arange(len(found.hit), dtype=np.int64), found.counts)
        local = np.full(len(found.hit), -1, dtype=np.int64)
        local[hit] = np.arange(len(hit), dtype=np.int64)
        index = pa.array(local[owners], type=pa.int64())
        batch.put_in_process(_taken(keys, positions[hit]), index, found.rows, found.age[hit])
        parts.add(positions[owners], found.rows)

    def _load_shared(self, host: HostTier, load: _Load, batch: _HostBatch,
                     keys: list[pa.Array], positions: np.ndarray, parts: _Parts) -> None:
        """Load the keys at ``positions`` from the source and put them in both tiers
        (in the host tier only where the change feed, if any, listened since the batch
        began); a failed load ends this process's claims first, so no one waits for
        it."""
        wanted = _taken(keys, positions)
        try:
            index, loaded = load(wanted)
        except BaseException:
            host.release(wanted)
            raise
        guard = batch.guard
        if guard is None or guard.listened_since(batch.began):
            # A tier that tracks changes checks the load's start against them.
            host.put(wanted, index.to_numpy(zero_copy_only=False),
                     _as_table(loaded, self._schema), None if guard is None else batch.began)
        else:
            host.release(wanted)
        batch.put_in_process(wanted, index, loaded)
        parts.add(positions[index.to_numpy(zero_copy_only=False)], loaded)

    def _python_answer(self, load: _Load, arrays: list[pa.Array]) -> list[tuple[Row, ...]]:
        """The rows of distinct keys of the key types (see `_fetch`) as Python
        tuples, by key position, and one empty answer more at the end (so that
        position -1, a key that never matches, reads as none): only the answer is
        turned into Python values, a column at a time, and the loaded rows are placed
        as they came (never reordered in Arrow)."""
        fetched = self._fetch(load, arrays)
        answers = [EMPTY] * (len(arrays[0]) + 1)
        if self._cache is not None:
            place_probe_answers(answers, fetched.groups, fetched.offsets, fetched.rows)
        if fetched.loaded is not None:
            add_rows(answers, fetched.miss[fetched.row_keys], fetched.loaded)
        return answers

    def _cached(self, cache: LookupCache, arrays: list[pa.Array]) -> Answers:
        """The cache's answers in Arrow, checked unless the cache is the in-process one."""
        if not self._check_cached:
            return cache.get_arrow(arrays)
        keys = key_tuples(arrays)
        found: dict[Key, Any] = cache.get_all(keys)
        self._drop_malformed(found)
        return answers_to_arrow(keys, found, self._schema)

    def _arrow_load(self, function: LookupFunction, bounds: VersionBounds | None = None
                    ) -> _Load:
        """Loads in Arrow from ``function`` (see `_load_arrow`)."""
        return lambda keys: self._load_arrow(function, keys, bounds)

    def _tuples_load(self, keys: list[pa.Array]) -> tuple[pa.Array, pa.Table]:
        """Load distinct keys of the key types from a function answering Python tuples
        (or an asynchronous one), the rows in Arrow, as `_load_arrow` gives them (the
        host tier's way for such functions).

        Raises
        ------
        LookupLoadError
            If a row does not convert to the schema's types.
        """
        tuples = key_tuples(keys)
        loaded = self._load_screened(tuples)
        try:
            answers = answers_to_arrow(tuples, loaded, self._schema)
        except TypeError as exc:
            raise LookupLoadError(f"{self.provider.describe()}: {exc}") from exc
        counts = np.diff(answers.offsets)
        return (pa.array(np.repeat(np.arange(len(tuples), dtype=np.int64), counts),
                         type=pa.int64()), answers.rows)

    def _load_arrow(self, function: LookupFunction, keys: list[pa.Array],
                    bounds: VersionBounds | None = None) -> tuple[pa.Array, pa.Table]:
        """The rows of distinct keys (one array per key column), misses retried as
        configured; ``bounds``: versions the function may leave out."""
        index, rows = self._load_arrow_chunked(function, keys, bounds)
        for _ in range(self._miss_attempts - 1):
            answered = np.zeros(len(keys[0]), dtype=bool)
            answered[index.to_numpy(zero_copy_only=False)] = True
            missing = np.flatnonzero(~answered)
            if not len(missing):
                break
            self._policy.sleep(self._miss_delay)
            take = pa.array(missing, type=pa.int64())
            more_index, more = self._load_arrow_chunked(
                function, [a.take(take) for a in keys], bounds)
            index = pa.concat_arrays([index, take.take(more_index)])
            rows = pa.concat_tables([rows, more])
        if self.provider.validity is not None:
            return self._screened(function, index, rows)
        return index, rows

    def _screened(self, function: LookupFunction, index: pa.Array, rows: pa.Table
                  ) -> tuple[pa.Array, pa.Table]:
        """Loaded versions under the function's bad-value policy (counted, dropped or
        refused: `lookup.versions.version_index`) and the validity's retention, each
        key's in valid_from order, as the cache keeps them: a probe then finds them in
        order."""
        if not rows.num_rows:
            return index, rows
        positions = index.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        take = pa.array(self._version_order(function, positions, rows), type=pa.int64())
        return index.take(take), rows.take(take)

    def _version_order(self, function: object, positions: np.ndarray, rows: pa.Table
                       ) -> np.ndarray:
        """Which of the loaded ``rows`` (``positions``: each one's key) to keep, in the
        order to keep them: those the retention and the bad-value policy leave, each
        key's by valid_from. Both load paths (Arrow, Python tuples) screen alike."""
        validity = self.provider.validity
        assert validity is not None
        kept = np.arange(rows.num_rows, dtype=np.int64)
        starts = rows.column(validity.valid_from)
        ends = None if validity.valid_to is None else rows.column(validity.valid_to)
        if validity.retention is not None:
            instants_ = isinstance(self.provider.schema[validity.valid_from].dataType,
                                   T.TimestampType)
            keep = retained(positions, starts, ends,
                            load_cutoff(self.clock, validity.retention, instants_))
            if not keep.all():
                kept = np.flatnonzero(keep)
                if not len(kept):
                    return kept
                rows, positions = rows.take(pa.array(kept, type=pa.int64())), positions[keep]
                starts = rows.column(validity.valid_from)
                ends = None if validity.valid_to is None else rows.column(validity.valid_to)
        table = getattr(function, "table", None)
        policy = policy_of(function)
        found = version_index(
            positions, starts, ends, policy,
            describer(table if isinstance(table, str) else self.provider.describe(), rows,
                      self.provider.key_columns, validity.valid_from, validity.valid_to))
        if found.bad:
            self.metrics.inc_bad_values(found.bad)
        order = np.lexsort((instants(starts)[0], positions))
        if policy is BadValuePolicy.DROPMALFORMED and found.bad:
            good = np.zeros(rows.num_rows, dtype=bool)
            good[found.row] = True
            order = order[good[order]]
        return kept[order]

    def _screened_rows(self, loaded: dict[Key, tuple[Row, ...]]
                       ) -> dict[Key, tuple[Row, ...]]:
        """`_screened` for versions loaded as Python tuples (asynchronous functions,
        and functions answering in tuples asked per key): the same screening, so every
        kind of provider answers alike. Only the key and validity columns go to Arrow."""
        validity = self.provider.validity
        assert validity is not None
        keys = [key for key, rows in loaded.items() if rows]
        if not keys:
            return loaded
        flat = [row for key in keys for row in loaded[key]]
        positions = np.repeat(np.arange(len(keys), dtype=np.int64),
                              [len(loaded[key]) for key in keys])
        schema = self.provider.schema
        names = schema.fieldNames()
        columns = {}
        for name in dict.fromkeys([*self.provider.key_columns, *validity.columns]):
            at = names.index(name)
            data_type = schema[name].dataType
            try:
                columns[name] = pa.array([row[at] for row in flat], to_arrow_type(data_type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
                raise LookupLoadError(
                    f"{self.provider.describe()}: column {name!r} holds a value that is no "
                    f"{data_type.simpleString()}: {exc}") from exc
        order = self._version_order(self._function, positions, pa.table(columns))
        screened: dict[Key, tuple[Row, ...]] = dict.fromkeys(loaded, EMPTY)
        if len(order):
            # order groups each key's rows together: one slice per key, no Python per row
            # beyond the tuple the answer is made of.
            cuts = np.flatnonzero(np.diff(positions[order])) + 1
            for span in np.split(order, cuts):
                screened[keys[int(positions[span[0]])]] = tuple(map(flat.__getitem__, span))
        return screened

    def _load_arrow_chunked(self, function: LookupFunction, keys: list[pa.Array],
                            bounds: VersionBounds | None = None) -> tuple[pa.Array, pa.Table]:
        size = self._batch_size
        indices: list[pa.Array] = []
        tables: list[pa.Table] = []
        for start in range(0, len(keys[0]), size):
            index, rows = self._load_arrow_with_retries(
                function, [array.slice(start, size) for array in keys], bounds)
            indices.append(pc.add(index, start) if start else index)
            tables.append(_as_table(rows, self._schema))
        if len(tables) == 1:
            return indices[0], tables[0]
        return pa.concat_arrays(indices), pa.concat_tables(tables)

    def _load_arrow_with_retries(self, function: LookupFunction, keys: list[pa.Array],
                                 bounds: VersionBounds | None = None) -> tuple[pa.Array, Any]:
        tries = self._retries(f"lookup of {len(keys[0])} key(s)")
        for _ in tries:
            try:
                with self._one_load(function, len(keys[0])):
                    if bounds is not None and isinstance(function, VersionBoundedLookup):
                        index, rows = function.lookup_arrow_between(keys, bounds)
                    else:
                        index, rows = function.lookup_arrow(keys)
            except Exception as exc:
                if not tries.failed(exc):
                    break  # permanent (a missing table, a bad value): reported at once
                continue
            if not (isinstance(index, pa.Array) and index.type == pa.int64()):
                index = pa.array(index, pa.int64())
            return index, rows
        first = key_tuples([array.slice(0, 4) for array in keys])
        raise self._failure(tries, len(keys[0]), _preview(first))

    @contextmanager
    def _one_load(self, function: object, keys: int) -> Iterator[None]:
        """Count ``function``'s bad values, and the load and its time if it succeeds
        (which the host's adaptive limit measures, less the time spent getting a
        connection)."""
        started = time.perf_counter()
        setup = setup_seconds()
        with counting_bad_values(function, self.metrics.inc_bad_values):
            yield
        seconds = time.perf_counter() - started
        self.metrics.inc_loads()
        self.metrics.record_load_time(seconds * 1000)
        concurrency = self._concurrency
        if concurrency is not None:
            change = concurrency.on_load(max(0.0, seconds - (setup_seconds() - setup)), keys)
            self.metrics.record_concurrency(concurrency.limit_seen, change)

    def _failure(self, tries: Retries, count: int, keys_text: str) -> BaseException:
        """Count a failed load; the error to raise (ConfigError, TypeError: as they are)."""
        self.metrics.inc_load_failures()
        error = tries.error
        if isinstance(error, (ConfigError, TypeError)):
            return error
        failure = LookupLoadError(
            f"{self.provider.describe()}: lookup of {count} key(s) {keys_text} "
            f"failed after {tries.tries} attempt(s): {type(error).__name__}: {error}"
        )
        failure.__cause__ = error
        return failure

    # --- the per-key API

    def _answers(self, encoded: EncodedKeys) -> list[tuple[Row, ...]]:
        # A function answering in Arrow is asked as a join's probe asks it (the cache's
        # get_arrow/put_arrow); only the answer is turned into Python rows.
        if self._arrow_native:
            assert self._arrow_function is not None
            return self._python_answer(self._arrow_load(self._arrow_function),
                                       encoded.arrays)
        if self._host is not None:  # shared through the host tier, in Arrow
            return self._python_answer(self._tuples_load, encoded.arrays)
        return super()._answers(encoded)

    def _lookup_distinct(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        """Rows of distinct encoded keys (values of their columns' types), in Python:
        the way of functions that answer in Python tuples (and of asynchronous ones)."""
        cache = self._cache
        found: dict[Key, Any] = {}
        if cache is None:
            self.metrics.inc_misses(len(keys))
        elif keys:
            found = cache.get_all(keys)
            if self._check_cached:
                self._drop_malformed(found)
        misses = [key for key in keys if key not in found]
        if misses:
            guard = self._guard
            if guard is None:
                loaded = self._load_screened(misses)
                if cache is not None:
                    cache.put_all(loaded)
            else:
                token = guard.begin()
                try:
                    loaded = self._load_screened(misses)
                    guard.put_all(token, loaded)
                finally:
                    guard.end(token)
            found.update(loaded)
        return {key: rows if type(rows) is tuple else tuple(rows)
                for key, rows in found.items()}

    def _drop_malformed(self, found: dict[Key, Any]) -> None:
        """Drop cached entries whose rows are not exactly values of the schema's types
        (no truncation, no bool as int, no int as text, nothing out of range)."""
        problems = {key: self._misfit(rows) for key, rows in found.items()}
        bad = [key for key, problem in problems.items() if problem is not None]
        if bad:
            self._drop_cached(found, bad, f"do not fit the schema ({problems[bad[0]]})")

    def _drop_cached(self, found: dict[Key, Any], bad: list[Key], problem: str) -> None:
        """Reload ``bad`` entries: a shared cache serves what anyone with write access stored."""
        if not bad:
            return
        for key in bad:
            del found[key]
        self.metrics.inc_cache_errors(len(bad))
        log.warning("%s: %d cached entries %s (e.g. key %.80r); reloading them",
                    self.provider.describe(), len(bad), problem, bad[0])

    # --- loading

    def _load_screened(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        """`_load`, then with a validity its versions screened as the Arrow path's are."""
        loaded = self._load(keys)
        return loaded if self.provider.validity is None else self._screened_rows(loaded)

    def _load(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        """Rows of null-free keys, ``batch_size`` a call, misses retried as configured."""
        results: dict[Key, tuple[Row, ...]] = {}
        size = self._batch_size
        for attempt in range(self._miss_attempts):
            if attempt:
                keys = [key for key in keys if not results[key]]
                if not keys:
                    break
                self._policy.sleep(self._miss_delay)
            for start in range(0, len(keys), size):
                results.update(self._load_with_retries(keys[start : start + size]))
        return results

    def _load_with_retries(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        results: dict[Key, tuple[Row, ...]] = {}
        pending = keys
        tries = self._retries(f"lookup of {len(keys)} key(s)")
        function = getattr(self.provider, "function", None)
        for _ in tries:
            try:
                with self._one_load(function, len(pending)):
                    loaded: Mapping[Key, Sequence[Row]] = self._loader.load(pending)
            except PartialLoad as partial:
                results.update(self._freeze(partial.results, pending))
                pending = partial.failed
                if not tries.failed(partial.error, f"lookup of {len(pending)} key(s)"):
                    break
                continue
            except Exception as exc:
                if not tries.failed(exc):
                    break  # permanent (a missing table, a bad value): reported at once
                continue
            results.update(self._freeze(loaded, pending))
            return results
        raise self._failure(tries, len(pending), _preview(pending))

    def _freeze(self, loaded: Mapping[Key, Sequence[Row]], asked: Sequence[Key]
                ) -> dict[Key, tuple[Row, ...]]:
        """Rows of every asked key as tuples of tuples, checked against the schema width."""
        if not isinstance(loaded, Mapping):
            raise LookupLoadError(
                f"{self.provider.describe()}: lookup_batch must return a mapping of key to "
                f"rows, got {type(loaded).__name__}"
            )
        width = self._width
        frozen: dict[Key, tuple[Row, ...]] = {}
        for key in asked:
            rows = loaded.get(key) or EMPTY
            out = tuple(rows) if type(rows) is not tuple else rows
            for row in out:
                if type(row) is not tuple or len(row) != width:
                    raise LookupLoadError(
                        f"{self.provider.describe()}: the rows of key {shown(key)} must be "
                        f"tuples of {width} values (the schema's columns), got {shown(row, 120)}"
                    )
            frozen[key] = out
        return frozen


_Load = Callable[[list[pa.Array]], tuple[pa.Array, pa.Table]]
"""Loads distinct keys of the key types: each row's key position, and the rows."""


class _HostBatch(NamedTuple):
    """One batch's way through the host tier: the in-process cache, the change feed's
    guard and the batch's token from it, and when the batch began (ms, the tier's
    clock: before any of its reads)."""

    cache: LookupCache
    guard: CacheInvalidation | None
    token: int
    began: int

    def put_in_process(self, keys: list[pa.Array], index: pa.Array, rows: Any,
                       age: np.ndarray | None = None) -> None:
        """Put answers in-process (``age``: of the host tier's answers, see
        `DefaultLookupCache.put_arrow_aged`), without keys the feed named since."""
        if self.guard is not None:
            self.guard.put_arrow(self.token, keys, index, rows, age)
        else:
            put_answers(self.cache, keys, index, rows, age)


class _HostTierFailed(Exception):
    """The host tier raised (its ``__cause__``): the batch is answered without it."""


class _Guarded:
    """A host tier whose failures (``OSError``, a damaged file's ``ValueError``) are
    `_HostTierFailed`; nothing else of the lookup is caught by mistake."""

    def __init__(self, tier: HostTier) -> None:
        self._tier = tier

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._tier, name)

        def guarded(*args: Any) -> Any:
            try:
                return method(*args)
            except (OSError, ValueError, struct.error) as exc:
                raise _HostTierFailed() from exc
        return guarded


class _Parts:
    """Rows gathered for some of a batch's keys, with each row's key position."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._positions: list[np.ndarray] = []
        self._tables: list[pa.Table] = []

    def add(self, positions: np.ndarray, rows: Any) -> None:
        self._positions.append(np.asarray(positions, dtype=np.int64))
        self._tables.append(_as_table(rows, self._schema))

    def result(self) -> tuple[pa.Array, pa.Table]:
        if not self._tables:
            return pa.array([], type=pa.int64()), self._schema.empty_table()
        return (pa.array(np.concatenate(self._positions), type=pa.int64()),
                pa.concat_tables(self._tables))


def _taken(arrays: list[pa.Array], positions: np.ndarray) -> list[pa.Array]:
    take = pa.array(positions, type=pa.int64())
    return [array.take(take) for array in arrays]


class _Fetched(NamedTuple):
    """What `LoadingRuntime._fetch` found: the cache's answer in the form of a
    `cache.answers.Answers` (-1 for a miss), the positions of the missed keys, and the rows
    loaded for them (``None``: nothing was loaded) with ``row_keys``, the position
    among the misses of each row's key."""

    groups: np.ndarray
    offsets: np.ndarray
    rows: pa.Table
    miss: np.ndarray
    row_keys: np.ndarray
    loaded: pa.Table | None
    cached: Answers | None = None  # the cache's own answer, where it answered every key


def _as_table(data: Any, schema: pa.Schema) -> pa.Table:
    """A table or record batch as a table of exactly ``schema`` (a function's own schema
    may differ from the provider's only in nullability or metadata)."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    return table if table.schema.equals(schema) else table.cast(schema)
