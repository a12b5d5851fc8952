"""A busy source (over its connection limit) is waited for with jittered backoff up to
the provider's load timeout, counted as connection waits, never as retries; other
errors keep the retry count."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from cache import DefaultLookupCache
from cache.base import Key, Row
from lookup import PartialCachingLookupProvider, RetryPolicy, open_lookup
from lookup.retry import BUSY_MAX_WAIT
from spark_lookup.errors import ConnectorError, LookupLoadError, SourceBusyError
from tests.lookup.functions import DictLookup, RecordingSleep

ROWS = [(1, "Julian"), (2, "Jark")]


class BusyLookup(DictLookup):
    """Refuses the next ``busy`` loads as a source at its connection limit does."""

    def __init__(self, busy: int, error: BaseException | None = None) -> None:
        super().__init__(ROWS)
        self.busy = busy
        self.error = error or SourceBusyError("too many connections for role \"x\"")

    def lookup_batch(self, keys: Sequence[Key]) -> Mapping[Key, Sequence[Row]]:
        if self.busy:
            self.busy -= 1
            raise self.error
        return super().lookup_batch(keys)


def _provider(fn: Any, policy: RetryPolicy, load_timeout: float = 60.0
              ) -> PartialCachingLookupProvider:
    cache = DefaultLookupCache.new_builder().maximum_size(100).build()
    return PartialCachingLookupProvider.of(fn, cache, retry_policy=policy,
                                           load_timeout=load_timeout)


def test_a_busy_source_is_waited_for_beyond_the_retry_count() -> None:
    sleep = RecordingSleep()
    fn = BusyLookup(busy=8)
    with open_lookup(_provider(fn, RetryPolicy(max_retries=1, sleep=sleep))) as handle:
        assert handle.lookup((1,)) == ((1, "Julian"),)
        metrics = handle.metrics
        assert metrics.num_connection_waits == 8
        assert (metrics.num_retries, metrics.num_load_failures) == (0, 0)
        assert abs(metrics.connection_wait_ms - sum(sleep.waits) * 1000) <= 8  # rounded
    waits = sleep.waits
    assert len(waits) == 8
    assert all(0 < wait <= BUSY_MAX_WAIT for wait in waits)
    assert waits[-1] > waits[0]  # growing, jittered


def test_a_driver_over_limit_error_is_waited_for_too() -> None:
    import psycopg

    sleep = RecordingSleep()
    refused = psycopg.OperationalError(
        'connection failed: FATAL:  too many connections for role "x"')
    fn = BusyLookup(busy=5, error=refused)
    with open_lookup(_provider(fn, RetryPolicy(max_retries=0, sleep=sleep))) as handle:
        assert handle.lookup((2,)) == ((2, "Jark"),)
        assert handle.metrics.num_connection_waits == 5


def test_a_busy_source_fails_once_the_load_timeout_is_past() -> None:
    fn = BusyLookup(busy=10**6)
    with open_lookup(_provider(fn, RetryPolicy(max_retries=2, initial_backoff=0.01),
                               load_timeout=0.3)) as handle:
        with pytest.raises(LookupLoadError, match="too many connections") as failed:
            handle.lookup((1,))
        assert isinstance(failed.value.__cause__, SourceBusyError)
        metrics = handle.metrics
        assert metrics.num_connection_waits >= 2
        assert 200 <= metrics.connection_wait_ms <= 1000
        # Past the timeout the busy error is one more transient failure: retried as such.
        assert metrics.num_retries == 2
        assert metrics.num_load_failures == 1


def test_other_errors_keep_their_classification() -> None:
    sleep = RecordingSleep()
    fn = BusyLookup(busy=1, error=ConnectorError("no such table"))
    with open_lookup(_provider(fn, RetryPolicy(max_retries=3, sleep=sleep))) as handle:
        with pytest.raises(LookupLoadError, match="no such table"):
            handle.lookup((1,))
        assert sleep.waits == []  # permanent: at once
        assert handle.metrics.num_connection_waits == 0
    fn = BusyLookup(busy=2, error=ConnectionError("connection refused"))
    sleep = RecordingSleep()
    with open_lookup(_provider(fn, RetryPolicy(max_retries=3, initial_backoff=0.1,
                                               sleep=sleep))) as handle:
        assert handle.lookup((1,)) == ((1, "Julian"),)
        assert sleep.waits == [0.1, 0.2]
        assert (handle.metrics.num_retries, handle.metrics.num_connection_waits) == (2, 0)


# --- adaptive concurrency: what lowers the host's limit


class BudgetedBusyLookup(BusyLookup):
    """A `BusyLookup` whose connections are budgeted (as a connector's are)."""

    def limit_connections(self, budget: object) -> bool:
        return True


def _budgeted(fn: Any, adaptive: bool = True) -> PartialCachingLookupProvider:
    cache = DefaultLookupCache.new_builder().maximum_size(100).build()
    return PartialCachingLookupProvider.of(
        fn, cache, retry_policy=RetryPolicy(max_retries=3, sleep=RecordingSleep()),
        adaptive_concurrency=adaptive)


@pytest.mark.parametrize("error", [
    SourceBusyError("too many connections"), TimeoutError("timed out"),
    ConnectionError("connection reset")])
def test_a_busy_timed_out_or_failing_source_lowers_the_hosts_limit(error: Exception) -> None:
    with open_lookup(_budgeted(BudgetedBusyLookup(busy=3, error=error))) as handle:
        assert handle.lookup((1,)) == ((1, "Julian"),)
        metrics = handle.metrics
        assert metrics.num_concurrency_decreases >= 1
        if not isinstance(error, SourceBusyError):  # its waits take real time: windows pass
            assert metrics.num_concurrency_decreases == 1  # three failures, one window
            assert metrics.source_concurrency_limit == 3


def test_a_permanent_error_or_an_adaptive_budget_turned_off_lowers_nothing() -> None:
    with open_lookup(_budgeted(BudgetedBusyLookup(
            busy=1, error=ConnectorError("no such table")))) as handle:
        with pytest.raises(LookupLoadError):
            handle.lookup((1,))
        assert handle.lookup((2,)) == ((2, "Jark"),)
        assert handle.metrics.num_concurrency_decreases == 0
        assert handle.metrics.source_concurrency_limit == 4
    with open_lookup(_budgeted(BudgetedBusyLookup(busy=3), adaptive=False)) as handle:
        assert handle.lookup((1,)) == ((1, "Julian"),)
        assert handle.metrics.num_concurrency_decreases == 0
        assert handle.metrics.source_concurrency_limit == -1
