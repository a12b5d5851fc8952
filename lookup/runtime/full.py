"""Full caching at run time: load a ``scan.Source`` whole, on the trigger's schedule.

Design notes: DESIGN.md, lookup/ ``lookup/runtime/full.py``.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from cache.answers import Answers
from cache.base import Key, Row
from cache.full.overlay import Overlay
from cache.full.shared import Install, Loader, SharedFullCache, Unchanged
from cache.full.snapshot import FullSnapshot, LookupFullCache
from cache.full.store import SnapshotStore
from cache.keys import CacheKeys
from connectors.errors import should_retry
from lookup.changes.host_listeners import HostListeners
from lookup.changes.listener import Subscription, subscribe
from lookup.changes.overlay import ChangeOverlay
from lookup.changes.reload import ChangeReloads
from lookup.providers import FullCachingLookupProvider
from lookup.runtime.base import (
    LookupRuntime,
    add_rows,
    close_each,
    counting_bad_values,
    probe_answers,
)
from lookup.runtime.due import DueTimer
from lookup.runtime.full_load import load_snapshot
from lookup.versions import (
    VersionIndex,
    describer,
    pick,
    policy_of,
    row_groups,
    version_index,
)
from spark_lookup.adaptive_concurrency import AdaptiveLimit
from spark_lookup.load_priority import loading, lookup_turn
from spark_lookup.schema import to_arrow_schema
from triggers.scheduler import process_scheduler

__all__ = ["FullCachingRuntime"]

log = logging.getLogger("lookup")

class FullCachingRuntime(LookupRuntime):
    """Per-worker runtime of a [`FullCachingLookupProvider`][].

    Parameters
    ----------
    provider
        The provider (its trigger is copied, never opened twice).
    store
        A snapshot store to share (default: the provider's, when
        [`shares_snapshots`][lookup.FullCachingLookupProvider.shares_snapshots] says so here).
        Giving one shares regardless of the provider's setting.
    """

    probes_rows = True  # the snapshot's index answers repeats and nulls in the same pass

    def __init__(
        self, provider: FullCachingLookupProvider, *, store: SnapshotStore | None = None
    ) -> None:
        super().__init__(provider)
        self._provider = provider
        if store is None and provider.shares_snapshots():
            store = SnapshotStore(
                provider.snapshot_directory(), fingerprint=provider.snapshot_fingerprint()
            )
        # A private copy: the provider's trigger is configuration, and one provider may be
        # opened, closed and opened again in a process.
        self._trigger = copy.deepcopy(provider.reload_trigger)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # The cache's clock is read at each call: tests replace it after construction.
        self._due = DueTimer(self._trigger, clock=lambda: self.cache.clock(),
                             fire=self.trigger_reload, closed=self._closed,
                             describe=provider.describe())
        bounds: dict[str, Any] = {"initial_load_timeout": provider.initial_load_timeout,
                                  "max_staleness": provider.max_staleness}
        self._shared: SharedFullCache | None = None
        if store is None:
            self.cache = LookupFullCache(provider.key_columns, **bounds)
        else:
            self._shared = SharedFullCache(
                provider.key_columns, store, on_swap=self._due.arm, **bounds)
            self.cache = self._shared
        # Held while a load's outcome is recorded (a swap, a publication, a count):
        # close() sets _closed under it, so nothing is recorded once close() returned.
        self._recording = threading.Lock()
        # The served table's validity pieces (point-in-time lookups), and who builds them.
        self._versions: tuple[pa.Table, VersionIndex] | None = None
        self._versions_lock = threading.Lock()
        self._running: Future[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._change_reloads: ChangeReloads | None = None
        self._change_overlay: ChangeOverlay | None = None
        self._overlay_keys: CacheKeys | None = None
        self._subscription: Subscription | None = None
        self._unwatch: Callable[[], None] | None = None
        # Lowered by a reload's transient errors only: a reload's duration is no latency
        # to compare (its readers run at once, it reads the whole table).
        self._concurrency: AdaptiveLimit | None = None
        feed = provider.changes
        self._loader = Loader(
            describe=provider.describe(), load=self._load, due=self._due.due, record=self._record,
            closed=self._closed,
            min_interval=None if feed is None else feed.min_interval.total_seconds())

    @property
    def shared(self) -> bool:
        """Whether this runtime serves the host's shared snapshot."""
        return self._shared is not None

    # --- lifecycle

    def open(self) -> None:
        provider = self._provider
        budget = provider.connection_budget()
        if budget is not None:
            limited = provider.source.limit_connections(budget)
            if provider.change_lookup is not None:
                limited = provider.change_lookup.limit_connections(budget) or limited
            if limited:
                self._unwatch = budget.watch(self.metrics.record_connection_wait)
                self._concurrency = budget.concurrency()
        self.cache.open(self.metrics)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="lookup-full-reload")
        feed = provider.changes
        if feed is not None:
            host = None if self._shared is None else HostListeners(self._shared.store.directory)
            # Listening before the first load: what it reads is covered by the feed.
            self._change_reloads = reloads = ChangeReloads(
                served_since=self._served_since, reload=self._reload_for_change,
                min_interval=feed.min_interval.total_seconds(), metrics=self.metrics,
                clock=self.cache.clock, call_later=process_scheduler().call_later,
                describe=provider.describe(), host=host)
            sink: ChangeReloads | ChangeOverlay = reloads
            if provider.change_lookup is not None:
                schema = to_arrow_schema(provider.schema)
                self._overlay_keys = CacheKeys(provider.key_columns, [
                    schema.field(name).type for name in provider.key_columns])
                self._change_overlay = sink = ChangeOverlay(
                    function=provider.change_lookup, feed=feed, provider=provider,
                    schema=schema, reloads=reloads, served_at=self._served_at)
            self._subscription = subscribe(feed, sink)
            if not reloads.subscribed() and self._shared is not None:
                # The host's version may lack a change only other processes heard: it is
                # not served at all; the first lookups wait for a version loaded after
                # now, whose load starts at once (not on the feed's min_interval).
                since = self.cache.clock()
                self._shared.serve_from = since
                self._submit(since, strict=True)
        self._trigger.open(self)

    def close(self) -> None:
        """Stop reloading and drop the snapshot. A load in flight is not waited for (a
        scan cannot be interrupted): it runs on, and its result is discarded uncounted."""
        with self._recording:
            self._closed.set()
        close_each(self._subscription, self._change_overlay, self._change_reloads)
        with self._lock:
            running, self._running = self._running, None
        if running is not None:
            # Ends the firing's future now: the trigger's close() waits for it.
            running.cancel()
        try:
            self._trigger.close()
        finally:
            self._due.cancel()
            executor = self._executor
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
            self.cache.close()
            if self._unwatch is not None:
                self._unwatch()

    def _overloaded(self) -> None:
        concurrency = self._concurrency
        if concurrency is not None:
            change = concurrency.on_overload()
            self._record(partial(self.metrics.record_concurrency, concurrency.limit_seen,
                                 change))

    def _record(self, *actions: Callable[[], object]) -> bool:
        """Run ``actions`` (recording a load's outcome) unless closed; whether they ran."""
        with self._recording:
            if self._closed.is_set():
                return False
            for action in actions:
                action()
            return True

    # --- ReloadContext

    def current_processing_time(self) -> int:
        """Epoch milliseconds (the trigger's view of time)."""
        return int(time.time() * 1000)

    def trigger_reload(self) -> Future[None]:
        """Start a reload, or join the one running; the future ends with the load.

        Shared, "reload" means "make sure the host's snapshot is not due": the future
        may end by switching to a version another process loaded, with no scan.
        """
        return self._submit(self.cache.clock())

    def _reload_for_change(self, since: float) -> Future[None]:
        """A reload for a change seen at ``since``: shared, only a version loaded after
        it will do (not one merely not due on the schedule). Joins a load running."""
        return self._submit(since, strict=True)

    def _served_since(self) -> float | None:
        """When the load of the snapshot served started, or of a newer one published
        in the host's store (None: none yet)."""
        if self._shared is not None:
            return self._shared.newest_load()
        return self._served_at()

    def _served_at(self) -> float | None:
        """When the load of the snapshot served started (None: none yet)."""
        current = self.cache.current()
        return None if current is None else current.loaded_at

    def _submit(self, fired_at: float, *, strict: bool = False) -> Future[None]:
        with self._lock:
            running = self._running
            if running is not None and not running.done():
                return running
            executor = self._executor
            if executor is None or self._closed.is_set():
                future: Future[None] = Future()
                future.set_exception(RuntimeError("the full cache is closed"))
                return future
            self.cache.expect_load()
            # The future handed out is not the executor's: close() can end it while
            # the load still runs.
            outcome: Future[None] = Future()
            executor.submit(self._reload, fired_at, strict).add_done_callback(
                partial(_relay, outcome))
            self._running = outcome
            return outcome

    def _reload(self, fired_at: float, strict: bool = False) -> None:
        if self._shared is None:
            current = self.cache.current()
            unchanged = None
            if current is not None and current.source_version is not None:
                unchanged = (current.source_version, partial(self._confirm, current))
            self._load(self._version() + 1, self.cache.swap, unchanged)
        else:
            self._shared.reload(self._loader, fired_at, strict=strict)
            # Also when nothing was swapped: a firing just before the version came due
            # (that a timer's firing then joined) reloads nothing, and the timer must
            # still fire at the due time.
            current = self.cache.current()
            if current is not None:
                self._due.arm(current)

    def _version(self) -> int:
        current = self.cache.current()
        return 0 if current is None else current.version

    def _confirm(self, snapshot: FullSnapshot, loaded_at: float) -> None:
        """Serve ``snapshot`` on, as loaded at ``loaded_at`` (its source is unchanged)."""
        if self.cache.current() is snapshot:
            self.cache.swap(snapshot.confirmed(loaded_at))

    def _source_version(self) -> str | None:
        """The ``repr`` of the source's current version (None: unknown)."""
        found = self._provider.source.current_version()
        return None if found is None else repr(found)

    def _load(self, version: int, install: Install, unchanged: Unchanged | None = None,
              failed: Callable[[BaseException], object] | None = None) -> None:
        """Scan the source, index it as ``version`` and ``install`` it (swap or publish),
        retrying with backoff.

        With ``unchanged`` (the source version of what is served, and what to do when
        the source is still there), the source's version is read first: when it is the
        same, nothing is read, the action runs with the time of the check, and the
        reload is counted as skipped (``reloads_skipped``), not as a load.

        Once the runtime is closed nothing is installed or counted: a load then in
        flight is discarded. Raises the last error when every attempt failed (counted,
        remembered and handed to ``failed``; the current snapshot keeps serving).
        """
        provider = self._provider
        policy = provider.retry_policy

        def closing(seconds: float) -> bool:
            return self._closed.wait(seconds) or self._closed.is_set()

        tries = policy.retries(
            f"full cache reload of {provider.describe()}", wait=closing,
            on_retry=partial(self._record, self.metrics.inc_retries),
            busy_timeout=provider.connection_wait().total_seconds(),
            on_busy_wait=lambda seconds: self._record(
                partial(self.metrics.record_connection_wait, seconds)),
            on_transient=None if self._concurrency is None else self._overloaded)
        for _ in tries:
            if self._closed.is_set():
                return
            loaded_at = self.cache.clock()
            started = time.perf_counter()
            try:
                # Read before the scan plans: the scan sees this version or a newer one,
                # so an equal version later never hides a change (at worst one more load).
                source_version = self._source_version()
                if unchanged is not None and source_version == unchanged[0]:
                    if self._record(self.metrics.inc_reloads_skipped,
                                    partial(unchanged[1], loaded_at)):
                        log.info("full cache of %s: source still at version %s; reload "
                                 "skipped", provider.describe(), source_version)
                    return
                with loading(), counting_bad_values(provider.source, lambda grown: self._record(
                        partial(self.metrics.inc_bad_values, grown))):
                    # The loaded table is never held here (lookup.runtime.full_load: streamed
                    # into the store when shared, else combined while released).
                    snapshot = load_snapshot(provider, self._shared, version=version,
                                             loaded_at=loaded_at, source_version=source_version)
            except Exception as exc:
                if not tries.failed(exc):
                    break  # permanent (a missing table, FAILFAST): no use repeating it
                continue
            elapsed_ms = (time.perf_counter() - started) * 1000
            if not self._record(self.metrics.inc_loads,
                                partial(self.metrics.record_load_time, elapsed_ms),
                                partial(install, snapshot)):
                log.info("full cache of %s closed during a load; discarded version %d",
                         provider.describe(), version)
                return
            log.info("full cache of %s loaded version %d: %d rows, %d keys in %.0f ms",
                     provider.describe(), snapshot.version, snapshot.num_rows, snapshot.num_keys,
                     elapsed_ms)
            return
        error = tries.error
        if error is None or not self._record(partial(self._fail, error), *(
                () if failed is None else (partial(failed, error),))):
            return  # closed while waiting to retry: nothing more is recorded
        current = self.cache.current()
        log.error("full cache reload of %s failed after %d attempt(s): %r; %s",
                  provider.describe(), tries.tries, error,
                  f"still serving version {current.version}" if current else "no snapshot yet")
        raise error

    def _fail(self, error: BaseException) -> None:
        self.metrics.inc_load_failures()
        self.cache.record_failure(error)

    # --- lookups

    def _before_lookups(self) -> None:
        """With no snapshot yet and a first load that failed for a passing reason (the
        database was down), a lookup starts another load (or joins the one running)
        and waits for it, bounded; a permanent failure is reported at once instead."""
        running = self._running
        error = self.cache.last_error
        if (self.cache.current() is None and error is not None and should_retry(error)
                and (running is None or running.done())):
            self.trigger_reload()

    def _load_coming(self) -> bool:
        """Whether a load was submitted, or the trigger's next one starts soon
        (`DueTimer.soon`): lookups take turns already (see `lookup_turn`)."""
        running = self._running
        return (running is not None and not running.done()) or self._due.soon()

    def probe(self, keys: Sequence[pa.Array], describe: str = "lookup",
              as_of_range: tuple[int, int] | None = None) -> Answers:
        """The keys' groups in the snapshot's index (one vectorized probe; repeats and
        nulls welcome), its offsets and rows; a hit or miss counted per non-null key."""
        self._before_lookups()
        with lookup_turn(self._load_coming()):
            snapshot, overlay = self._serving()
            groups = snapshot.groups(keys)
            answer = None if overlay is None else overlay.answer(snapshot, groups, keys)
        if answer is None:
            probe = Answers(None, groups, snapshot.offsets, snapshot.table,
                          one_row_each=snapshot.unique, views=snapshot.views)
        else:
            probe = Answers(None, *answer)
        hits = int(np.count_nonzero(probe.groups >= 0))
        self.metrics.inc_hits(hits)
        self.metrics.inc_misses(len(groups) - hits - _null_keys(keys))
        return probe

    def pick_at(self, answers: Answers, groups: np.ndarray, as_of: np.ndarray,
                known: np.ndarray | None) -> np.ndarray:
        """As `LookupRuntime.pick_at`, from the snapshot's index (`versions`)."""
        return pick(self.versions(answers), groups, as_of, known)

    def versions(self, answers: Answers) -> VersionIndex:
        """The validity pieces of the served snapshot, built once per snapshot by the
        first probe that needs them, under the source's bad-value policy (bad versions
        counted once per snapshot; FAILFAST refuses every probe of the snapshot). An
        overlay's answer (changed keys) is indexed per probe."""
        validity = self._provider.validity
        current = self.cache.current()
        if validity is None or current is None or answers.rows is not current.table:
            return super().versions(answers)
        built = self._versions
        if built is not None and built[0] is current.table:
            return built[1]
        with self._versions_lock:
            built = self._versions
            if built is not None and built[0] is current.table:
                return built[1]
            table = current.table
            source = self._provider.source
            paths = getattr(source, "paths", None)
            # A SQL table, a lakehouse table's URI, or a FileSource's paths.
            name = (getattr(source, "table", None) or getattr(source, "uri", None)
                    or (", ".join(str(p) for p in paths) if paths else None))
            index = version_index(
                row_groups(current.offsets, table.num_rows), table.column(validity.valid_from),
                None if validity.valid_to is None else table.column(validity.valid_to),
                policy_of(source),
                describer(str(name or type(source).__name__), table, self._provider.key_columns,
                          validity.valid_from, validity.valid_to))
            if index.bad:
                self.metrics.inc_bad_values(index.bad)
            self._versions = (table, index)
            return index

    def _serving(self) -> tuple[FullSnapshot, Overlay | None]:
        """The snapshot served and the changes in front of it (None: none, nor a feed).
        Another thread may have trimmed the overlay for a newer snapshot since this one
        was read: the entries this one lacks are gone, so the newer one is taken."""
        snapshot = self.cache.snapshot()
        changes = self._change_overlay
        if changes is None:
            return snapshot, None
        overlay = changes.serving(snapshot.loaded_at)
        # The snapshot served only moves forward, so one more read finds the newer one;
        # a few tries at most, never a loop that could spin while holding the turn.
        for _ in range(8):
            if snapshot.loaded_at >= changes.trimmed_to:
                break
            snapshot = self.cache.snapshot()
            overlay = changes.serving(snapshot.loaded_at)
        return snapshot, overlay

    def _lookup_distinct(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        self._before_lookups()
        with lookup_turn(self._load_coming()):
            changes = self._change_overlay
            if not keys:
                found = {}
            elif changes is None or changes.current is None:
                found = self.cache.get_all(keys)
            else:
                return self._overlaid(keys)
        return {key: tuple(found[key]) for key in keys}

    def _overlaid(self, keys: list[Key]) -> dict[Key, tuple[Row, ...]]:
        """The rows of distinct keys from the snapshot and the overlay in front of it,
        as the join's probe finds them (a key no key type value equals: none)."""
        assert self._overlay_keys is not None
        snapshot, overlay = self._serving()
        arrays, positions = self._overlay_keys.arrays(keys, strict=False)
        answers: dict[int, tuple[Row, ...]] = {}
        if len(arrays[0]):
            groups = snapshot.groups(arrays)
            answer = None if overlay is None else overlay.answer(snapshot, groups, arrays)
            if answer is None:
                matched, row_numbers = snapshot.expand(groups)
                add_rows(answers, matched, snapshot.table.take(pa.array(row_numbers,
                                                                        type=pa.int64())))
            else:
                answers = probe_answers(answer[0], answer[1], answer[2])
        found = [answers.get(position, ()) if position >= 0 else () for position in
                 positions.tolist()]
        hits = sum(1 for rows in found if rows)
        self.metrics.inc_hits(hits)
        self.metrics.inc_misses(len(keys) - hits)
        return dict(zip(keys, found, strict=True))


def _null_keys(keys: Sequence[pa.Array]) -> int:
    """How many of the keys hold a null (no lookup: neither a hit nor a miss)."""
    with_nulls = [k for k in keys if k.null_count]
    if not with_nulls:
        return 0
    if len(with_nulls) == 1:
        return int(with_nulls[0].null_count)
    valid = np.logical_and.reduce([k.is_valid().to_numpy(zero_copy_only=False)
                                   for k in with_nulls])
    return int(len(valid) - np.count_nonzero(valid))


def _relay(outcome: Future[None], work: Future[None]) -> None:
    """End ``outcome`` as the load ``work`` ended, unless close() cancelled it first."""
    if work.cancelled() or not outcome.set_running_or_notify_cancel():
        outcome.cancel()
    elif (error := work.exception()) is None:
        outcome.set_result(None)
    else:
        outcome.set_exception(error)
