"""Adaptive concurrency of a connection budget: how many of its slots a host uses now.

A budget's ceiling is the user's ``max_source_connections``; below it, the host's
processes lower the number of slots they may take when the source slows down or fails
(multiplicative decrease) and raise it one at a time while it keeps up (additive
increase), as TCP's congestion window does. The limit lives in one record of the
budget's directory (`SharedLimit`), changed under a ``flock`` and read without one:
every process of the host obeys the same number, whichever of them measured.

What each process measures (`AdaptiveLimit`): the latency of its loads against a
baseline, the lowest recent latency of loads of about the same number of keys (a
Vegas-like ``minRTT``); a window whose loads took more than `TOLERANCE` times their
baseline on average is slow. A timeout, a transient error or a busy source is an
overload at once. Either lowers the limit at most once per window host-wide, so the
loads already in flight do not lower it again for the same cause.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

__all__ = ["AdaptiveLimit", "LimitState", "SharedLimit"]

BACKOFF = 0.75
"""The multiplicative decrease: a small budget steps down one at a time (4, 3, 2, 1), a
larger one by a quarter per window, gentler than TCP's half because each step is only
known to have helped a window later."""
TOLERANCE = 2.0
"""A window is slow when its loads took more than this many times their baseline: below
it lie the noise of a shared machine and the spread of batch sizes within a bucket."""
MIN_WINDOW = 0.1
"""The shortest window between two changes of the limit, in seconds; otherwise one round
of loads (their smoothed latency), the time a change takes to show in what is measured."""
RECOVERY_INTERVAL = 10.0
"""Seconds after which a lowered limit rises by one without anyone measuring: a process
that lowered it and died, or a host whose loads stopped, does not leave it low."""
BASELINE_DOUBLING = 60.0
"""Seconds in which a baseline not renewed by a faster load doubles: a source that became
slower for good (a larger table) is the new normal within minutes, not a permanent
overload."""
_SMOOTHING = 0.25
_BUCKETS = 48  # half octaves of keys per load: 1 to 2**24
_RECORD = "concurrency-limit"
_MAGIC = b"SLc1"
_FIELDS = struct.Struct("<4sIdd")
_CHECKSUM = struct.Struct("<I")
_SIZE = _FIELDS.size + _CHECKSUM.size
_READS = 3


class LimitState(NamedTuple):
    """The host's limit, and when (by the clock) it last changed and last went down."""

    limit: int
    changed_at: float
    decreased_at: float


class SharedLimit:
    """The current limit of the budget in ``directory``: at most ``ceiling``, at least 1.

    A fixed-size record (limit, when it changed, when it went down, a CRC-32) written in
    one ``pwrite`` under an exclusive ``flock`` of its file and read with ``pread``,
    never locked: a torn read (a writer meanwhile) fails its checksum and is read again.
    A record that fails it (a writer killed mid-write), stamped after ``now`` (another
    boot's: the clock is ``CLOCK_MONOTONIC``, the same for all processes of a host), or
    missing means the ceiling. A lowered limit rises by one per `RECOVERY_INTERVAL`
    without a write (see there).
    """

    def __init__(self, directory: str | os.PathLike[str], ceiling: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(directory) / _RECORD
        self.ceiling = ceiling
        self.clock = clock
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)

    def close(self) -> None:
        """Close the record's file (idempotent)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def current(self) -> int:
        """The limit now."""
        return self.state(self.clock()).limit

    def state(self, now: float) -> LimitState:
        """The limit at ``now``, with its times (-inf: never changed)."""
        return self._effective(self._read(), now)

    def update(self, decide: Callable[[LimitState, float], LimitState | None]
               ) -> tuple[LimitState, bool]:
        """Apply ``decide(state, now)`` under the record's lock: its answer is written (None:
        nothing). Returns the state after, and whether it changed."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            now = self.clock()
            state = self._effective(self._read(), now)
            new = decide(state, now)
            if new is None:
                return state, False
            fields = _FIELDS.pack(_MAGIC, new.limit, new.changed_at, new.decreased_at)
            os.pwrite(self._fd, fields + _CHECKSUM.pack(zlib.crc32(fields)), 0)
            return new, True
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _read(self) -> LimitState | None:
        for _ in range(_READS):
            data = os.pread(self._fd, _SIZE, 0)
            if len(data) != _SIZE:
                return None
            fields = data[:_FIELDS.size]
            if _CHECKSUM.unpack_from(data, _FIELDS.size)[0] == zlib.crc32(fields):
                magic, limit, changed_at, decreased_at = _FIELDS.unpack(fields)
                return LimitState(limit, changed_at, decreased_at) if magic == _MAGIC else None
        return None

    def _effective(self, state: LimitState | None, now: float) -> LimitState:
        if state is None or state.changed_at > now or state.limit < 1:
            return LimitState(self.ceiling, -math.inf, -math.inf)
        recovered = int((now - state.changed_at) / RECOVERY_INTERVAL)
        return state._replace(limit=min(self.ceiling, state.limit + recovered))


class AdaptiveLimit:
    """One process's view and measurements of a `SharedLimit`; thread-safe.

    `on_load` after each load that succeeded (its seconds spent on the source, not
    waiting for a slot or connecting, and its number of keys), `on_overload` after a
    timeout, transient error or busy source; each returns -1 when it lowered the host's
    limit, +1 when it raised it, else 0. Acts per load, never per key.
    """

    def __init__(self, shared: SharedLimit, *, min_window: float = MIN_WINDOW) -> None:
        self.shared = shared
        self.min_window = min_window
        self.limit_seen = shared.ceiling
        """The limit when this process last read or changed it."""
        self._clock = shared.clock
        self._lock = threading.Lock()
        # Per bucket of keys per load: the lowest latency seen, and when.
        self._baseline = [math.inf] * _BUCKETS
        self._baseline_at = [0.0] * _BUCKETS
        self._latency = 0.0
        self._window_start = self._clock()
        self._ratios = 0.0
        self._loads = 0
        self._decreased_at = -math.inf

    def limit(self) -> int:
        """The host's limit now (the slots a taker may use)."""
        self.limit_seen = limit = self.shared.current()
        return limit

    def window(self) -> float:
        """Seconds between two changes of the limit: one round of loads, at least
        `min_window`."""
        return max(self.min_window, self._latency)

    def on_load(self, seconds: float, keys: int) -> int:
        """Count a load that succeeded; at the end of a window, lower or raise the limit."""
        now = self._clock()
        with self._lock:
            ratio = self._ratio(max(seconds, 1e-9), keys, now)
            self._latency = seconds if not self._latency else (
                self._latency + _SMOOTHING * (seconds - self._latency))
            # A load begun before the latest decrease ran under the old limit: it already
            # had its say.
            if now - seconds >= self._decreased_at:
                self._ratios += ratio
                self._loads += 1
            if now - self._window_start < self.window():
                return 0
            loads, ratios = self._loads, self._ratios
            self._start_window(now)
        if not loads:
            return 0
        return self._decrease() if ratios / loads > TOLERANCE else self._increase()

    def on_overload(self) -> int:
        """Count a timeout, transient error or busy source: lower the limit, unless it
        went down within the last window."""
        with self._lock:
            self._start_window(self._clock())
        return self._decrease()

    def _ratio(self, seconds: float, keys: int, now: float) -> float:
        """``seconds`` over the baseline of loads of about ``keys`` keys (which it renews
        when lower)."""
        bucket = min(_BUCKETS - 1, int(2 * math.log2(max(keys, 1))))
        baseline = self._baseline[bucket] * 2 ** ((now - self._baseline_at[bucket])
                                                  / BASELINE_DOUBLING)
        if seconds <= baseline:
            self._baseline[bucket], self._baseline_at[bucket] = seconds, now
            return 1.0
        return seconds / baseline

    def _start_window(self, now: float) -> None:
        self._window_start, self._ratios, self._loads = now, 0.0, 0

    def _decrease(self) -> int:
        window = self.window()

        def lower(state: LimitState, now: float) -> LimitState | None:
            if state.limit <= 1 or now - state.decreased_at < window:
                return None
            return LimitState(max(1, min(state.limit - 1, int(state.limit * BACKOFF))), now, now)

        state, changed = self.shared.update(lower)
        self._seen(state)
        return -1 if changed else 0

    def _increase(self) -> int:
        window, ceiling = self.window(), self.shared.ceiling

        def raise_(state: LimitState, now: float) -> LimitState | None:
            if state.limit >= ceiling or now - state.changed_at < window:
                return None
            return state._replace(limit=state.limit + 1, changed_at=now)

        state, changed = self.shared.update(raise_)
        self._seen(state)
        return 1 if changed else 0

    def _seen(self, state: LimitState) -> None:
        self.limit_seen = state.limit
        with self._lock:
            self._decreased_at = max(self._decreased_at, state.decreased_at)

    def close(self) -> None:
        """Close the shared record's file."""
        with contextlib.suppress(OSError):
            self.shared.close()
