"""Retry policies for loads: on errors (exponential backoff) and on misses (FLIP-234)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from connectors.errors import is_source_busy, should_retry
from spark_lookup.errors import ConfigError
from spark_lookup.options import as_timedelta, check_int

__all__ = ["MissRetry", "Retries", "RetryPolicy"]

log = logging.getLogger("lookup")

BUSY_FIRST_WAIT = 0.05
"""Seconds of the first wait for a source over its connection limit; doubling, jittered."""
BUSY_MAX_WAIT = 2.0
"""The longest single wait for a busy source: a connection freed is taken within it."""


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of a failed load with exponential backoff (Flink's ``lookup.max-retries``).

    A load is attempted once and retried up to ``max_retries`` times; before retry ``n``
    (1-based) the runtime waits ``min(initial_backoff * multiplier ** (n - 1), max_backoff)``.

    Parameters
    ----------
    max_retries
        Retries after the first attempt (default 3, as in Flink); 0 disables retrying.
    initial_backoff, max_backoff
        ``timedelta`` or seconds.
    multiplier
        Growth of the wait between consecutive retries (>= 1).
    sleep
        How to wait (``time.sleep``); tests inject a recorder. Must be picklable.
    """

    max_retries: int = 3
    initial_backoff: timedelta = timedelta(milliseconds=100)
    max_backoff: timedelta = timedelta(seconds=10)
    multiplier: float = 2.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        check_int(self.max_retries, "max_retries", min_value=0)
        for name in ("initial_backoff", "max_backoff"):
            object.__setattr__(self, name, as_timedelta(getattr(self, name), name, allow_zero=True))
        if not isinstance(self.multiplier, (int, float)) or not self.multiplier >= 1:
            raise ConfigError(f"multiplier must be a number >= 1, got {self.multiplier!r}")

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        seconds = self.initial_backoff.total_seconds() * self.multiplier ** (retry - 1)
        return min(seconds, self.max_backoff.total_seconds())

    def retries(
        self,
        what: str,
        *,
        on_retry: Callable[[], object] | None = None,
        wait: Callable[[float], bool] | None = None,
        retryable: Callable[[BaseException], bool] = should_retry,
        busy_timeout: float | None = None,
        on_busy_wait: Callable[[float], object] | None = None,
        busy_sleep: Callable[[float], object] | None = None,
        on_transient: Callable[[], object] | None = None,
    ) -> Retries:
        """The tries of one operation (``what``, for the log) under this policy;
        ``retryable`` tells a transient error from a permanent one. A source refusing
        connections for being over its limit (`connectors.errors.is_source_busy`) is
        waited for with jittered exponential backoff until ``busy_timeout`` seconds
        after the first try (None: such errors are retried as any transient one), each
        wait reported to ``on_busy_wait``, not counted as a retry, and waited with
        ``busy_sleep`` when given (a connection budget's, which asks the host's idle
        connections to close meanwhile). ``on_transient`` is told of each failed try
        whose error is worth another (a timeout, a transient error, a busy source: the
        host's adaptive concurrency lowers its limit), never of a permanent one."""
        return Retries(self, what, on_retry, wait, retryable, busy_timeout, on_busy_wait,
                       busy_sleep, on_transient)


@dataclass(eq=False)
class Retries:
    """The one retry loop of every caller: iterate it (once per try), report a failed
    try with `failed`, and break out on success or when it says the error is not
    worth retrying. Before each retry it logs the failure and the backoff, calls
    ``on_retry`` (to count it) and waits the backoff: with the policy's ``sleep``, or
    ``wait(seconds)``, which ends the tries by returning True (a closing runtime).
    A busy source's refusals are waited for apart (see `RetryPolicy.retries`).
    """

    policy: RetryPolicy
    what: str
    on_retry: Callable[[], object] | None
    wait: Callable[[float], bool] | None
    retryable: Callable[[BaseException], bool] = should_retry
    busy_timeout: float | None = None
    on_busy_wait: Callable[[float], object] | None = None
    busy_sleep: Callable[[float], object] | None = None
    on_transient: Callable[[], object] | None = None
    tries: int = field(default=0, init=False)
    retried: int = field(default=0, init=False)
    """Retries counted against the policy's ``max_retries`` (busy waits are not)."""
    error: BaseException | None = field(default=None, init=False)
    """The error of the latest failed try."""
    _busy_waits: int = field(default=0, init=False)
    _deadline: float = field(default=0.0, init=False)

    def __iter__(self) -> Iterator[int]:
        policy = self.policy
        if self.busy_timeout is not None:
            self._deadline = time.monotonic() + self.busy_timeout
        while True:
            if self.tries:
                busy = self._busy_wait()
                if busy is not None:
                    seconds = busy
                    log.info("%s: the source is busy (%r); waiting %.3f s", self.what,
                             self.error, seconds)
                    if self.on_busy_wait is not None:
                        self.on_busy_wait(seconds)
                    if self.busy_sleep is not None:
                        self.busy_sleep(seconds)
                        seconds = 0.0  # waited; a closing runtime still ends the tries
                else:
                    if self.retried >= policy.max_retries:
                        return
                    self.retried += 1
                    seconds = policy.backoff(self.retried)
                    log.warning("%s failed (%r); retry %d of %d in %.3f s", self.what,
                                self.error, self.retried, policy.max_retries, seconds)
                    if self.on_retry is not None:
                        self.on_retry()
                if self.wait is None:
                    if seconds:
                        policy.sleep(seconds)
                elif self.wait(seconds):
                    return
            self.tries += 1
            yield self.retried

    def _busy_wait(self) -> float | None:
        """Seconds to wait for a busy source before the next try, or None when the
        latest error is not a busy source's (or its time is up: it becomes a retry)."""
        error = self.error
        if self.busy_timeout is None or error is None or not is_source_busy(error):
            return None
        left = self._deadline - time.monotonic()
        if left <= 0:
            return None
        ceiling = min(BUSY_MAX_WAIT, BUSY_FIRST_WAIT * 2 ** self._busy_waits)
        self._busy_waits += 1
        # Jittered so the processes refused together do not all come back together.
        return min(left, random.uniform(ceiling / 2, ceiling))  # noqa: S311  # jitter, no secret

    @property
    def last(self) -> bool:
        """Whether the current try is the last: no busy wait is left for its error, and
        the policy allows no more retries."""
        if self.busy_timeout is not None and self.error is not None and is_source_busy(
                self.error) and self._deadline > time.monotonic():
            return False
        return self.retried >= self.policy.max_retries

    def failed(self, error: BaseException, what: str | None = None) -> bool:
        """The current try failed with ``error`` (``what`` now describes the operation,
        if it changed: fewer keys left, say). Returns whether the error is worth another
        try (transient); a permanent one is reported at once, never repeated."""
        self.error = error
        if what is not None:
            self.what = what
        transient = self.retryable(error)
        if transient and self.on_transient is not None:
            self.on_transient()
        return transient


@dataclass(frozen=True)
class MissRetry:
    """Retry keys that found no rows, for dimension rows that arrive late (Flink's
    FLIP-234 ``lookup_miss`` predicate with the ``fixed_delay`` strategy).

    After a load, keys with no rows are looked up again after ``delay``, up to
    ``max_attempts`` lookups in all (the first included). A synchronous lookup waits
    the delay in the calling thread, as Flink's synchronous retry does, so it delays
    the whole batch: keep ``delay * (max_attempts - 1)`` small next to the trigger interval.
    """

    delay: timedelta = timedelta(seconds=1)
    max_attempts: int = 3

    def __post_init__(self) -> None:
        object.__setattr__(self, "delay", as_timedelta(self.delay, "delay", allow_zero=True))
        check_int(self.max_attempts, "max_attempts")
