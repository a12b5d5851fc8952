"""In-process plumbing shared by the runner and the standalone helpers: the contexts an
enumerator and its readers talk through, and the per-reader mailboxes.

Messages from readers to the enumerator (split requests, events) and results of
``call_async`` are posted to one coordinator queue and handled on the coordinator
thread; actions of the enumerator on a reader (splits, no-more-splits, events) go to
that reader's mailbox and are applied on the reader's own thread before it polls. So
neither side is ever called from two threads.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, TypeVar

from scan.enumerator import ReaderInfo, SplitEnumeratorContext
from scan.reader import ReaderOptions, SourceReader, SourceReaderContext
from scan.source import SplitT
from spark_lookup.errors import SourceError
from spark_lookup.options import check_int

R = TypeVar("R")

Message = tuple[Any, ...]

WAIT_SLICE = 1.0
"""Seconds a waiting runner or reader thread sleeps at most before it looks again; every
wake-up is signalled, so this only bounds the cost of a missed signal, it is not a poll
interval."""


class Mailbox:
    """Actions waiting for one reader; thread-safe. ``wake`` is set on every put."""

    def __init__(self, on_put: Callable[[], None]) -> None:
        self._items: deque[Message] = deque()
        self._lock = threading.Lock()
        self._on_put = on_put
        self.wake = threading.Event()

    def put(self, item: Message) -> None:
        with self._lock:
            self._items.append(item)
        self.wake.set()
        self._on_put()

    def drain(self) -> list[Message]:
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._items)


def deliver(reader: SourceReader[Any], mailbox: Mailbox) -> None:
    """Apply a reader's pending actions, in the order the enumerator made them."""
    for item in mailbox.drain():
        kind = item[0]
        if kind == "splits":
            reader.add_splits(item[1])
        elif kind == "no_more_splits":
            reader.notify_no_more_splits()
        else:
            reader.handle_source_events(item[1])


class EnumeratorContext(SplitEnumeratorContext[SplitT]):
    """The enumerator's view of in-process readers."""

    def __init__(self, parallelism: int, mailboxes: Sequence[Mailbox],
                 post: Callable[[Message], None], executor: Callable[[], Executor]) -> None:
        self._parallelism = parallelism
        self._mailboxes = mailboxes
        self._post = post
        self._executor = executor
        self._registered: dict[int, ReaderInfo] = {}
        self._no_more_sent: set[int] = set()

    def register(self, subtask_id: int) -> None:
        """Register a reader; a new registration may receive no-more-splits again."""
        self._registered[subtask_id] = ReaderInfo(subtask_id)
        self._no_more_sent.discard(subtask_id)

    @property
    def current_parallelism(self) -> int:
        return self._parallelism

    @property
    def registered_readers(self) -> Mapping[int, ReaderInfo]:
        return dict(self._registered)

    def _check_registered(self, subtask_id: int, action: str) -> None:
        if subtask_id not in self._registered:
            raise SourceError(f"cannot {action} subtask {subtask_id!r}: registered readers are "
                              f"{sorted(self._registered)}")

    def assign_splits(self, assignment: Mapping[int, Sequence[SplitT]]) -> None:
        for subtask_id in assignment:
            self._check_registered(subtask_id, "assign splits to")
            if subtask_id in self._no_more_sent:
                raise SourceError(
                    f"cannot assign splits to subtask {subtask_id}: it was already told "
                    "there are no more splits"
                )
        for subtask_id, splits in assignment.items():
            if splits:
                self._mailboxes[subtask_id].put(("splits", list(splits)))

    def signal_no_more_splits(self, subtask_id: int) -> None:
        self._check_registered(subtask_id, "signal no more splits to")
        if subtask_id in self._no_more_sent:
            return
        self._no_more_sent.add(subtask_id)
        self._mailboxes[subtask_id].put(("no_more_splits",))

    def send_event_to_reader(self, subtask_id: int, event: Any) -> None:
        self._check_registered(subtask_id, "send an event to")
        self._mailboxes[subtask_id].put(("event", event))

    def call_async(
        self, callable: Callable[[], R], handler: Callable[[R | None, BaseException | None], None]
    ) -> None:
        future = self._executor().submit(callable)

        def done(f: Future[R]) -> None:
            self._post(("async", handler, f))

        future.add_done_callback(done)


def run_async_handler(message: Message) -> None:
    """Run the handler of a finished ``call_async`` on the coordinator thread."""
    _, handler, future = message
    error = future.exception()
    handler(None if error is not None else future.result(), error)


@dataclass(frozen=True)
class ReaderContext(SourceReaderContext):
    """A reader's view of the in-process coordinator: subtask ``index_of_subtask`` of
    ``current_parallelism``, whose requests and events go to ``_post``."""

    index_of_subtask: int
    current_parallelism: int
    _post: Callable[[Message], None]
    options: ReaderOptions

    def send_split_request(self) -> None:
        self._post(("request", self.index_of_subtask))

    def send_source_event_to_coordinator(self, event: Any) -> None:
        self._post(("event", self.index_of_subtask, event))


def check_max_batch_rows(max_batch_rows: Any) -> int:
    """``max_batch_rows`` if it is a positive int.

    Raises
    ------
    ConfigError
        Otherwise, naming the argument.
    """
    return check_int(max_batch_rows, "max_batch_rows")


def bulk_options(options: ReaderOptions | None, max_batch_rows: int) -> ReaderOptions:
    """The reader options of a bulk read: ``options`` if given, else polls of a whole
    batch and no checkpoints (a bulk read takes none, so nothing needs smaller polls or
    splits read in order)."""
    if options is not None:
        return options
    return ReaderOptions(records_per_poll=check_max_batch_rows(max_batch_rows),
                         checkpoints=False)
