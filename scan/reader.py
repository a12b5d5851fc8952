"""The source reader and its context (Flink's ``SourceReader``)."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

from scan.arrow import record_batch_to_rows
from scan.split import SplitT
from spark_lookup.errors import ConfigError
from spark_lookup.options import check_int

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["InputStatus", "ReaderOptions", "ReaderOutput", "SourceReader", "SourceReaderContext"]

Row = tuple[Any, ...]


class InputStatus(enum.Enum):
    """What [`SourceReader.poll_next`][] found."""

    MORE_AVAILABLE = "MORE_AVAILABLE"
    """Records were emitted or more are ready: poll again."""
    NOTHING_AVAILABLE = "NOTHING_AVAILABLE"
    """Nothing ready now: wait for [`SourceReader.is_available`][], then poll."""
    END_OF_INPUT = "END_OF_INPUT"
    """The reader is finished; it will emit nothing more."""


@dataclass(frozen=True)
class ReaderOptions:
    """Tuning of readers, provided by whoever runs them (Flink's ``source.reader.*``).

    Parameters
    ----------
    element_queue_capacity
        Batches a reader's fetchers may queue ahead of it; a fetcher with a full queue
        blocks (back-pressure). Flink's default is 2.
    records_per_poll
        The most records (rows, also when they travel as Arrow batches) one
        [`SourceReader.poll_next`][] emits. Checkpoints fall between polls, so this
        bounds how far past a requested record count a run goes. The bulk paths
        ([`read_arrow`][], [`read_split_arrow`][]), which take no
        checkpoints, default it to their ``max_batch_rows`` so that a poll hands over a
        whole batch.
    checkpoints
        Whether a checkpoint may be taken of the read. The bulk paths default it to
        False (they take none); a source may then read a split in any order (a
        ``SqlTableSource`` drops the ``ORDER BY`` that resuming inside a chunk needs),
        and [`LocalSourceRunner.checkpoint`][] refuses.
    release_memory
        Whether each fetcher thread hands the memory pyarrow's default pool freed back
        to the system after every fetch (honoured by the fetchers of
        `SplitFetcherManager`). A full cache's load sets it:
        mimalloc, pyarrow's default, keeps what a thread freed in that thread's heap,
        so the reader threads of a load would hold their decoding buffers as well as
        the batches they handed over. Costs fresh pages for every fetch.
    """

    element_queue_capacity: int = 2
    records_per_poll: int = 1024
    checkpoints: bool = True
    release_memory: bool = False

    def __post_init__(self) -> None:
        for name in ("element_queue_capacity", "records_per_poll"):
            check_int(getattr(self, name), f"ReaderOptions.{name}")
        for name in ("checkpoints", "release_memory"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"ReaderOptions.{name} must be a bool, got "
                                  f"{type(getattr(self, name)).__name__}")


class ReaderOutput(ABC):
    """Where a reader emits records; provided by whoever polls the reader.

    Called only from the reader's thread, inside [`SourceReader.poll_next`][]. A
    reader emits rows (tuples in the order of the source's schema: [`collect`][],
    [`collect_batch`][]) or Arrow record batches of the source's declared schema
    ([`collect_arrow`][]); the runner's outputs check rows for their width and
    batches for the schema where they enter. An output that only implements
    [`collect`][] receives batches as rows.
    """

    @abstractmethod
    def collect(self, record: Row) -> None:
        """Emit one row."""

    def collect_batch(self, records: Sequence[Row]) -> None:
        """Emit rows in order; overridden where a bulk append is cheaper."""
        for record in records:
            self.collect(record)

    def collect_arrow(self, batch: pa.RecordBatch) -> None:
        """Emit the rows of a ``pyarrow.RecordBatch`` in order.

        The default converts the batch to tuple rows and calls [`collect_batch`][];
        outputs that keep Arrow (the bulk path's) override it and take the batch as it
        is, with no Python object per row.
        """
        self.collect_batch(record_batch_to_rows(batch))


class SourceReaderContext(ABC):
    """What a reader may do and know; provided by whoever runs the reader (the local
    runner, or a Spark task reading planned splits), where the reader runs. Never
    pickled; its methods are called from the reader's thread.

    An implementation sets the attributes (plain fields or properties) and the two
    methods.
    """

    index_of_subtask: int
    """This reader's subtask index, ``0 .. current_parallelism - 1``."""

    current_parallelism: int
    """The number of parallel readers of this read."""

    options: ReaderOptions = ReaderOptions()
    """Reader tuning (queue capacity, records per poll); defaults unless overridden."""

    @abstractmethod
    def send_split_request(self) -> None:
        """Ask the enumerator for a split (answered later, through ``add_splits`` or
        ``notify_no_more_splits``)."""

    @abstractmethod
    def send_source_event_to_coordinator(self, event: Any) -> None:
        """Deliver a custom event to the enumerator's ``handle_source_event``."""


class SourceReader(ABC, Generic[SplitT]):
    """Reads the splits assigned to one parallel subtask.

    Runs where its subtask runs (an executor task, or a reader of the local runner). All
    methods are called from one thread (the task's), never concurrently; a reader does
    its blocking I/O elsewhere (fetcher threads) so that [`poll_next`][] never blocks.
    """

    @abstractmethod
    def start(self) -> None:
        """Called once, after any restored splits were added with [`add_splits`][]."""

    @abstractmethod
    def poll_next(self, output: ReaderOutput) -> InputStatus:
        """Emit what is ready into ``output`` without blocking, and say what is next.

        Raises
        ------
        SparkLookupError
            The error of a failed fetch, re-raised here (and on every later poll).
        """

    @abstractmethod
    def is_available(self) -> Future[None]:
        """A future that completes when [`poll_next`][] may have something to do.

        Returned completed when data is already available; a caller that got
        ``NOTHING_AVAILABLE`` waits on it instead of spinning.
        """

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> list[SplitT]:
        """The splits this reader owns, rebuilt at the position of the last emitted
        record: restoring them emits exactly what was not emitted before."""

    @abstractmethod
    def add_splits(self, splits: Sequence[SplitT]) -> None:
        """Take ownership of ``splits`` (assigned by the enumerator, or restored)."""

    @abstractmethod
    def notify_no_more_splits(self) -> None:
        """The enumerator will assign no further splits to this reader."""

    def handle_source_events(self, event: Any) -> None:  # optional hook
        """A custom event from the enumerator; ignored unless overridden."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # optional hook
        """Checkpoint ``checkpoint_id`` is durable; ignored unless overridden."""

    def close(self) -> None:  # optional hook
        """Stop fetchers and release clients; the reader is not used afterwards."""

    def __enter__(self) -> SourceReader[SplitT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def completed_future() -> Future[None]:
    """A future that is already done (``is_available`` when data is ready)."""
    future: Future[None] = Future()
    future.set_result(None)
    return future
