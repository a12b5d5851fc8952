"""The bulk path of a local runner: each reader on a thread of its own, handing Arrow
record batches over to the thread that runs the enumerator."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic

from scan._mailboxes import WAIT_SLICE, Mailbox, Message, deliver
from scan.outputs import ArrowBatchOutput
from scan.reader import InputStatus, SourceReader
from scan.source import SplitT

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BulkRead"]

@dataclass(eq=False)  # one read in progress, not a value
class BulkRead(Generic[SplitT]):
    """One ``read_arrow_batches()`` of a runner's opened readers: those not finished
    read on threads of their own, and at most two batches per reader wait for the
    consumer, so a slow consumer slows the readers down.

    The readers, mailboxes, finished flags and coordinator queue are the runner's own;
    ``post`` puts a message on that queue, ``handle`` answers one not about batches
    (split requests, events) on the consuming thread.
    """

    readers: Sequence[SourceReader[SplitT]]
    mailboxes: Sequence[Mailbox]
    finished: list[bool]
    coordinator: queue.SimpleQueue[Message]
    post: Callable[[Message], None]
    handle: Callable[[Message], None]
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False, repr=False)
    _slots: threading.Semaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._slots = threading.Semaphore(2 * len(self.mailboxes))

    def batches(self, schema: pa.Schema, max_batch_rows: int, what: str
                ) -> Iterator[pa.RecordBatch]:
        """The batches of every reader to the end of input, as they come. The readers'
        first requests must have been answered (the runner handled its messages)."""
        # A reader's first poll runs here: its first split starts its fetcher now, and a
        # reader told there are no splits finishes without a thread (3 of 4 readers of a
        # file of one row group).
        outputs: dict[int, ArrowBatchOutput] = {}
        for index, reader in enumerate(self.readers):
            if self.finished[index]:
                continue
            deliver(reader, self.mailboxes[index])
            output = ArrowBatchOutput(schema, max_batch_rows, what)
            if reader.poll_next(output) is InputStatus.END_OF_INPUT:
                yield from output.flush()
                self.finished[index] = True
            else:
                outputs[index] = output
        for index, output in outputs.items():
            thread = threading.Thread(target=self._read, args=(index, output),
                                      name=f"scan-reader-{index}", daemon=True)
            self._threads.append(thread)
            thread.start()
        running = len(self._threads)
        while running:
            message = self.coordinator.get()
            kind = message[0]
            if kind == "batch":
                yield message[1]
                self._slots.release()
            elif kind == "done":
                self.finished[message[1]] = True
                running -= 1
            elif kind == "error":
                raise message[2]
            else:
                self.handle(message)

    def stop(self) -> None:
        """Stop the reader threads and wait for them; idempotent."""
        self._stop.set()
        for mailbox in self.mailboxes:
            mailbox.wake.set()
        if self._threads:
            # Readers blocked on a full hand-over take a slot, see the stop, and leave.
            self._slots.release(len(self._threads))
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def _read(self, index: int, output: ArrowBatchOutput) -> None:
        reader = self.readers[index]
        mailbox = self.mailboxes[index]

        def offer(batch: pa.RecordBatch) -> bool:
            self._slots.acquire()
            if self._stop.is_set():
                return False
            self.post(("batch", batch))
            return True

        try:
            while not self._stop.is_set():
                mailbox.wake.clear()
                deliver(reader, mailbox)
                status = reader.poll_next(output)
                for batch in output.full_batches():
                    if not offer(batch):
                        return
                if status is InputStatus.END_OF_INPUT:
                    for batch in output.flush():
                        if not offer(batch):
                            return
                    self.post(("done", index))
                    return
                if status is InputStatus.NOTHING_AVAILABLE:
                    reader.is_available().add_done_callback(lambda _: mailbox.wake.set())
                    mailbox.wake.wait(WAIT_SLICE)
        except BaseException as exc:
            self.post(("error", index, exc))
