"""The bounded element queue, fetcher threads and fetcher managers."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import scan.connector.fetcher as fetcher_module
from scan import ReaderOptions
from scan.connector import ElementQueue, MultiThreadFetcherManager, SingleThreadFetcherManager
from scan.connector.records import RecordsWithSplitIds
from spark_lookup.errors import ConfigError, ConnectorError, SourceError
from tests.scan.helpers import Faults, ListSplit, MockSplitReader, wait_done

Row = tuple[Any, ...]


def _eventually(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.001)


# --- queue


def test_queue_is_fifo_and_bounded() -> None:
    queue: ElementQueue[str] = ElementQueue(capacity=2)
    assert queue.capacity == 2
    assert queue.put(0, "a")
    assert queue.put(0, "b")
    assert queue.size() == 2
    assert queue.poll() == "a"
    assert queue.poll() == "b"
    assert queue.poll() is None
    assert queue.is_empty()


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "2"])
def test_queue_capacity_must_be_positive(capacity: Any) -> None:
    with pytest.raises(ConfigError, match="capacity"):
        ElementQueue(capacity)


def test_full_queue_blocks_the_putter_until_polled() -> None:
    queue: ElementQueue[int] = ElementQueue(capacity=1)
    queue.put(0, 1)
    done = threading.Event()

    def put() -> None:
        queue.put(0, 2)
        done.set()

    thread = threading.Thread(target=put)
    thread.start()
    assert not done.wait(0.05), "a put into a full queue must block"
    assert queue.poll() == 1
    assert done.wait(5)
    thread.join()
    assert queue.poll() == 2


def test_wake_up_releases_a_blocked_putter_without_enqueuing() -> None:
    queue: ElementQueue[int] = ElementQueue(capacity=1)
    queue.put(0, 1)
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(queue.put(7, 2)))
    thread.start()
    time.sleep(0.02)
    queue.wake_up_putter(7)
    thread.join(5)
    assert result == [False]
    assert queue.size() == 1


def test_a_stale_wake_up_does_not_drop_a_later_put() -> None:
    queue: ElementQueue[int] = ElementQueue(capacity=1)
    queue.wake_up_putter(0)  # not blocked: nothing to release
    assert queue.put(0, 1)
    assert queue.poll() == 1


def test_availability_future_completes_on_put_and_rearms_on_empty_poll() -> None:
    queue: ElementQueue[int] = ElementQueue()
    assert queue.poll() is None
    future = queue.available_future()
    assert not future.done()
    queue.put(0, 1)
    assert future.done()
    assert queue.available_future().done()
    assert queue.poll() == 1
    assert queue.poll() is None
    rearmed = queue.available_future()
    assert not rearmed.done()
    queue.notify_availability()
    assert rearmed.done()


def test_availability_completes_across_threads() -> None:
    queue: ElementQueue[int] = ElementQueue()
    assert queue.poll() is None
    future = queue.available_future()
    threading.Timer(0.01, lambda: queue.put(0, 1)).start()
    assert wait_done(future)


# --- fetchers


def _drain(
    queue: ElementQueue[RecordsWithSplitIds[Row]], split_ids: set[str], timeout: float = 5.0
) -> dict[str, list[Row]]:
    """Records per split until every split in ``split_ids`` finished."""
    got: dict[str, list[Row]] = {s: [] for s in split_ids}
    finished: set[str] = set()
    deadline = time.monotonic() + timeout
    while finished != split_ids:
        batch = queue.poll()
        if batch is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {finished} of {split_ids} finished")
            wait_done(queue.available_future(), 0.1)
            continue
        while (split_id := batch.next_split()) is not None:
            while records := batch.next_records_from_split(100):
                got[split_id].extend(records)
        finished |= batch.finished_splits()
    return got


def _splits(count: int, size: int = 10) -> list[ListSplit]:
    return [ListSplit(i, i * size, (i + 1) * size) for i in range(count)]


def test_single_thread_manager_reads_splits_in_order() -> None:
    faults = Faults()
    manager = SingleThreadFetcherManager(lambda: MockSplitReader(faults), 2)
    try:
        splits = _splits(3)
        manager.add_splits(splits)
        got = _drain(manager.queue, {s.split_id for s in splits})
        for split in splits:
            assert got[split.split_id] == [(i,) for i in range(split.start, split.end)]
        manager.check_errors()
        _eventually(manager.all_idle)
    finally:
        manager.close()
    assert faults.closed == 1


@pytest.mark.parametrize("release", [True, False])
def test_fetchers_release_freed_memory_after_every_fetch_when_asked(
        release: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    monkeypatch.setattr(fetcher_module, "_release_thread_memory",
                        lambda: threads.append(threading.current_thread().name))
    faults = Faults()
    manager = MultiThreadFetcherManager(lambda: MockSplitReader(faults), 2, 2,
                                        release_memory=release)
    try:
        splits = _splits(2)
        manager.add_splits(splits)
        _drain(manager.queue, {s.split_id for s in splits})
        _eventually(manager.all_idle)
    finally:
        manager.close()
    if release:  # on the fetchers' own threads, whose heaps hold what they freed
        assert len(threads) >= 2
        assert all(name.startswith("scan-fetcher") for name in threads)
    else:
        assert threads == []
    with pytest.raises(ConfigError, match="release_memory must be a bool"):
        ReaderOptions(release_memory=1)  # type: ignore[arg-type]


def test_splits_added_to_a_blocked_fetcher_wake_it_up() -> None:
    faults = Faults()
    manager = SingleThreadFetcherManager(lambda: MockSplitReader(faults), 2)
    try:
        first, second = _splits(2)
        manager.add_splits([first])
        _drain(manager.queue, {first.split_id})
        faults.block.set()  # the next fetch blocks until it is woken up
        manager.add_splits([second])
        faults.block.clear()
        got = _drain(manager.queue, {second.split_id})
        assert got[second.split_id] == [(i,) for i in range(10, 20)]
        assert faults.added == [first.split_id, second.split_id]
    finally:
        manager.close()


def test_adding_a_split_while_fetching_blocks_calls_wake_up() -> None:
    faults = Faults()
    manager = SingleThreadFetcherManager(lambda: MockSplitReader(faults), 2)
    try:
        first, second = _splits(2)
        faults.block.set()
        manager.add_splits([first])
        assert faults.blocked.wait(5)  # the fetcher is now blocked in fetch()
        manager.add_splits([second])
        _eventually(lambda: faults.wakeups >= 1)
        faults.block.clear()
        got = _drain(manager.queue, {first.split_id, second.split_id})
        assert len(got[first.split_id]) == len(got[second.split_id]) == 10
    finally:
        manager.close()


def test_full_queue_back_pressures_the_fetcher() -> None:
    faults = Faults()
    manager = SingleThreadFetcherManager(lambda: MockSplitReader(faults, batch=1), 2)
    try:
        manager.add_splits(_splits(1, size=100))
        _eventually(lambda: manager.queue.size() == 2)
        time.sleep(0.02)
        # Two batches queued, one fetched and waiting to be put: no more.
        assert faults.fetches <= 3
        manager.queue.poll()
        _eventually(lambda: faults.fetches >= 4)
    finally:
        manager.close()


def test_fetch_error_is_kept_and_signalled() -> None:
    faults = Faults()
    faults.fail_after_fetches = 1
    manager = SingleThreadFetcherManager(lambda: MockSplitReader(faults), 2)
    try:
        assert manager.queue.poll() is None
        future = manager.queue.available_future()
        manager.add_splits(_splits(1))
        assert wait_done(future)
        _eventually(lambda: _raises(manager))
        with pytest.raises(SourceError, match="split fetcher failed") as raised:
            manager.check_errors()
        assert isinstance(raised.value.__cause__, RuntimeError)
        with pytest.raises(SourceError):
            manager.check_errors()  # and again: a failed manager stays failed
    finally:
        manager.close()
    assert faults.closed == 1, "the failed fetcher closed its split reader"


def _raises(manager: Any) -> bool:
    try:
        manager.check_errors()
    except Exception:
        return True
    return False


def test_our_own_errors_are_re_raised_unwrapped() -> None:
    class Failing(MockSplitReader):
        def fetch(self) -> Any:
            raise ConnectorError("reading table 'dim' failed")

    manager = SingleThreadFetcherManager(lambda: Failing(Faults()), 2)
    try:
        manager.add_splits(_splits(1))
        _eventually(lambda: _raises(manager))
        with pytest.raises(ConnectorError, match="'dim'"):
            manager.check_errors()
    finally:
        manager.close()


def test_multi_thread_manager_spreads_splits_over_fetchers() -> None:
    faults = Faults()
    created: list[MockSplitReader] = []

    def factory() -> MockSplitReader:
        reader = MockSplitReader(faults)
        created.append(reader)
        return reader

    manager = MultiThreadFetcherManager(factory, num_fetchers=3, element_queue_capacity=4)
    try:
        splits = _splits(7)
        manager.add_splits(splits)
        got = _drain(manager.queue, {s.split_id for s in splits})
        for split in splits:
            assert got[split.split_id] == [(i,) for i in range(split.start, split.end)]
        assert len(created) == 3
    finally:
        manager.close()
    assert faults.closed == 3


def test_multi_thread_manager_reuses_idle_fetchers() -> None:
    faults = Faults()
    created: list[int] = []

    def factory() -> MockSplitReader:
        created.append(1)
        return MockSplitReader(faults)

    manager = MultiThreadFetcherManager(factory, num_fetchers=4)
    try:
        for split in _splits(3):
            manager.add_splits([split])
            _drain(manager.queue, {split.split_id})
            _eventually(manager.all_idle)
        assert len(created) == 1, "one split at a time needs one fetcher"
    finally:
        manager.close()


@pytest.mark.parametrize("num_fetchers", [0, -2, 1.0, None])
def test_multi_thread_manager_validates_num_fetchers(num_fetchers: Any) -> None:
    with pytest.raises(ConfigError, match="num_fetchers"):
        MultiThreadFetcherManager(lambda: MockSplitReader(Faults()), num_fetchers)


def test_closed_manager_starts_no_fetcher() -> None:
    manager = SingleThreadFetcherManager(lambda: MockSplitReader(Faults()), 2)
    manager.close()
    with pytest.raises(SourceError, match="closed"):
        manager.add_splits(_splits(1))
