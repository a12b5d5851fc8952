"""Runs a source in process: one enumerator, N readers, with checkpoints."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Generic

from scan._mailboxes import (
    WAIT_SLICE,
    EnumeratorContext,
    Mailbox,
    Message,
    ReaderContext,
    bulk_options,
    check_max_batch_rows,
    deliver,
    run_async_handler,
)
from scan.bulk import BulkRead
from scan.checkpoint import CheckpointData, decode_checkpoint, encode_checkpoint, spread_splits
from scan.enumerator import SplitEnumerator
from scan.outputs import RowListOutput
from scan.reader import InputStatus, ReaderOptions, SourceReader
from scan.serializers import pack_versioned, unpack_versioned
from scan.source import Boundedness, EnumStateT, Source, SplitT
from spark_lookup.errors import ConfigError, SourceError
from spark_lookup.options import check_instance, check_int
from spark_lookup.schema import parse_schema, to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["LocalSourceRunner", "read_arrow"]

_log = logging.getLogger(__name__)

Row = tuple[Any, ...]

def _source_type(source: Source[Any, Any]) -> str:
    cls = type(source)
    return f"{cls.__module__}.{cls.__qualname__}"


class LocalSourceRunner(Generic[SplitT, EnumStateT]):
    """Runs a [`Source`][] in this process: one enumerator and ``parallelism``
    readers, with consistent checkpoints and restore.

    Runs on the thread that calls it (it is not thread-safe: use it from one thread);
    each reader's fetchers run on threads of their own, and
    [`read_arrow_batches`][] also runs each reader on a thread of its own. Nothing is
    opened until the first [`run`][], [`read_arrow_batches`][] or [`checkpoint`][].

    Parameters
    ----------
    source
        The source to read.
    parallelism
        The number of readers (subtasks). Readers with no split simply finish.
    restore_from
        Bytes from [`checkpoint`][] (of a runner of the same source class, with any
        parallelism): reading continues right after the records emitted before that
        checkpoint. Splits of the checkpointed readers are redistributed over the new
        readers (each reader keeps its own splits when the parallelism is unchanged).
    options
        Reader tuning (queue capacity, records per poll).

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an invalid ``parallelism`` or ``options``.
    SourceError
        If ``restore_from`` is not a checkpoint of this source class, is malformed, or
        was written by a newer format.

    Notes
    -----
    Guarantees: records of one split are emitted in split order; after a restore,
    every record is emitted exactly once across the run before the checkpoint and the
    run after it (for sources reading data that does not change in between); a reader
    reports the end only after no-more-splits, all its splits finished and its queue
    empty, and a failed fetch fails the run instead of ending it.

    Examples
    --------
    >>> from scan import CollectionSource, LocalSourceRunner
    >>> source = CollectionSource([(i,) for i in range(10)], num_splits=2, schema="n BIGINT")
    >>> runner = LocalSourceRunner(source, parallelism=2)
    >>> first = runner.run(max_records=4)
    >>> saved = runner.checkpoint()
    >>> runner.close()
    >>> with LocalSourceRunner(source, parallelism=3, restore_from=saved) as restored:
    ...     rest = restored.run()
    >>> sorted(first + rest) == [(i,) for i in range(10)]
    True
    """

    def __init__(
        self,
        source: Source[SplitT, EnumStateT],
        parallelism: int,
        restore_from: bytes | None = None,
        *,
        options: ReaderOptions | None = None,
    ) -> None:
        check_instance(source, Source, "source", "a scan.Source")
        check_int(parallelism, "parallelism")
        if options is not None:
            check_instance(options, ReaderOptions, "options")
        self._source = source
        self._parallelism = parallelism
        self._options = options or ReaderOptions()
        self._what = type(source).__name__
        self._restore: CheckpointData | None = None
        self._next_checkpoint_id = 1
        if restore_from is not None:
            data = decode_checkpoint(restore_from)
            if data.source != _source_type(source):
                raise SourceError(
                    f"the checkpoint is of a {data.source} source, not of {_source_type(source)}"
                )
            self._restore = data
            self._next_checkpoint_id = data.checkpoint_id + 1
        self._coordinator: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self._wakeup = threading.Event()
        self._mailboxes = [Mailbox(self._wakeup.set) for _ in range(parallelism)]
        self._enumerator: SplitEnumerator[SplitT, EnumStateT] | None = None
        self._readers: list[SourceReader[SplitT]] = []
        self._finished = [False] * parallelism
        self._executor: ThreadPoolExecutor | None = None
        self._opened = False
        self._closed = False
        self._failure: BaseException | None = None
        self._bulk: BulkRead[SplitT] | None = None

    # --- public API

    @property
    def source(self) -> Source[SplitT, EnumStateT]:
        """The source being run."""
        return self._source

    @property
    def parallelism(self) -> int:
        """The number of readers."""
        return self._parallelism

    def is_finished(self) -> bool:
        """True once every reader has reported the end of input."""
        return self._opened and all(self._finished)

    def run(self, max_records: int | None = None) -> list[Row]:
        """Poll the readers until the end of input, or until at least ``max_records``
        records were emitted by this call (at most ``records_per_poll - 1`` more).

        Returns
        -------
        list of tuple
            The emitted rows, each split's rows in split order (splits interleave).
            After the end of input, an empty list.

        Raises
        ------
        ConfigError
            For an invalid ``max_records``, or no ``max_records`` on an unbounded source.
        SparkLookupError
            A reader's or the enumerator's error (a ``ConnectorError`` names the table,
            file or URL); the runner is unusable afterwards except for [`close`][].
        """
        if max_records is not None:
            check_int(max_records, "max_records", min_value=0)
        if max_records is None and self._source.boundedness is not Boundedness.BOUNDED:
            raise ConfigError("run() of an unbounded source needs max_records")
        self._check_usable()
        rows: list[Row] = []
        if max_records == 0:
            return rows
        try:
            self._open()
            output = RowListOutput(
                rows, parse_schema(self._source.schema, f"{self._what}.schema"), self._what
            )
            while not all(self._finished):
                self._wakeup.clear()
                self._handle_coordinator_messages()
                progressed = False
                for index, reader in enumerate(self._readers):
                    if self._finished[index]:
                        continue
                    deliver(reader, self._mailboxes[index])
                    status = reader.poll_next(output)
                    if status is InputStatus.END_OF_INPUT:
                        self._finished[index] = True
                    if status is not InputStatus.NOTHING_AVAILABLE:
                        progressed = True
                    if max_records is not None and len(rows) >= max_records:
                        return rows
                if not progressed:
                    self._wait_for_work()
            return rows
        except BaseException as exc:
            self._failure = exc
            raise

    def checkpoint(self) -> bytes:
        """A consistent checkpoint of the read so far.

        The enumerator is snapshotted first, then each reader; a split assigned but not
        yet received by its reader is handed over first, so every split is in exactly
        one of them. Each split is saved at the position of the last emitted record.

        Returns
        -------
        bytes
            Versioned, pickle-free checkpoint bytes (see `scan.checkpoint`) for
            ``LocalSourceRunner(source, n, restore_from=...)``.

        Raises
        ------
        SourceError
            While [`read_arrow_batches`][] is running, or after a failure.
        ConfigError
            If the runner's ``options`` say ``checkpoints=False`` (splits may be read
            out of order: a checkpoint could not say where a split stands).
        """
        self._check_usable()
        if not self._options.checkpoints:
            raise ConfigError(f"this {self._what} read takes no checkpoints "
                              "(ReaderOptions.checkpoints=False)")
        try:
            self._open()
            for index, reader in enumerate(self._readers):
                deliver(reader, self._mailboxes[index])
            checkpoint_id = self._next_checkpoint_id
            self._next_checkpoint_id += 1
            assert self._enumerator is not None
            enumerator_state = pack_versioned(self._source.enumerator_state_serializer,
                                              self._enumerator.snapshot_state(checkpoint_id))
            serializer = self._source.split_serializer
            readers = [[pack_versioned(serializer, s) for s in r.snapshot_state(checkpoint_id)]
                       for r in self._readers]
            blob = encode_checkpoint(
                CheckpointData(_source_type(self._source), checkpoint_id, enumerator_state, readers)
            )
            self._enumerator.notify_checkpoint_complete(checkpoint_id)
            for reader in self._readers:
                reader.notify_checkpoint_complete(checkpoint_id)
            return blob
        except BaseException as exc:
            self._failure = exc
            raise

    def read_arrow_batches(self, max_batch_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Read to the end of input as Arrow record batches: the bulk-load path.

        Each reader runs on a thread of its own (one told at once that there are no
        splits for it finishes without one) and hands over record batches of the
        source's declared Arrow schema: batches a source emits (``collect_arrow``) are
        checked against that schema and passed on, re-chunked by Arrow slicing and
        concatenation only; rows a source emits are converted column by column. This
        thread runs the enumerator and yields batches as they come (batches of different
        readers interleave; rows of one split stay in order). At most ``2 * parallelism``
        batches wait for the consumer, so a slow consumer slows the readers down.

        Continues from wherever [`run`][] stopped. Stopping the iteration early
        leaves the runner unusable except for [`close`][] (rows converted but not
        yet yielded are gone), and [`checkpoint`][] is refused while it runs.

        Parameters
        ----------
        max_batch_rows
            The most rows per batch. Batches may be smaller (a source's batch is not
            copied only to fill one), but small pieces are merged while they fit.
            Pass ``options`` with ``records_per_poll=max_batch_rows`` to the runner for
            polls that hand over whole batches (as [`read_arrow`][] does).

        Raises
        ------
        ConfigError
            For an unbounded source or an invalid ``max_batch_rows``.
        SparkLookupError
            A reader's or the enumerator's error, a value that does not convert to its
            column's type, or a batch that is not of the declared schema
            (``SourceError`` naming the column, or the expected and actual schemas).
        """
        check_max_batch_rows(max_batch_rows)
        if self._source.boundedness is not Boundedness.BOUNDED:
            raise ConfigError("read_arrow_batches() reads to the end: the source must be bounded")
        self._check_usable()
        return self._bulk_read(max_batch_rows)

    def close(self) -> None:
        """Stop readers and fetchers and close the enumerator; idempotent.

        Raises
        ------
        SparkLookupError
            The first error of closing a reader or the enumerator, after all of them
            were closed.
        """
        if self._closed:
            return
        self._closed = True
        if self._bulk is not None:
            self._bulk.stop()
        errors: list[BaseException] = []
        for reader in self._readers:
            try:
                reader.close()
            except Exception as exc:
                errors.append(exc)
        if self._enumerator is not None:
            try:
                self._enumerator.close()
            except Exception as exc:
                errors.append(exc)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if errors:
            raise errors[0]

    def __enter__(self) -> LocalSourceRunner[SplitT, EnumStateT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- lifecycle

    def _check_usable(self) -> None:
        if self._closed:
            raise SourceError(f"the runner of {self._what} is closed")
        if self._bulk is not None:
            raise SourceError(f"read_arrow_batches() of {self._what} is still running")
        if self._failure is not None:
            raise SourceError(
                f"the runner of {self._what} failed earlier and cannot continue; restore "
                f"from a checkpoint instead (earlier failure: {self._failure!r})"
            ) from self._failure

    def _post(self, message: Message) -> None:
        self._coordinator.put(message)
        self._wakeup.set()

    def _async_executor(self) -> Executor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(2, thread_name_prefix="scan-enumerator-async")
        return self._executor

    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        source = self._source
        context: EnumeratorContext[SplitT] = EnumeratorContext(
            self._parallelism, self._mailboxes, self._post, self._async_executor
        )
        restore = self._restore
        if restore is None:
            self._enumerator = source.create_enumerator(context)
        else:
            state = unpack_versioned(
                source.enumerator_state_serializer, restore.enumerator, "the enumerator state"
            )
            self._enumerator = source.restore_enumerator(context, state)
        self._enumerator.start()
        for index in range(self._parallelism):
            reader_context = ReaderContext(index, self._parallelism, self._post, self._options)
            self._readers.append(source.create_reader(reader_context))
        if restore is not None:
            for reader, splits in zip(self._readers, self._restored_splits(restore), strict=True):
                if splits:
                    reader.add_splits(splits)
        for index, reader in enumerate(self._readers):
            context.register(index)
            self._enumerator.add_reader(index)
            reader.start()

    def _restored_splits(self, restore: CheckpointData) -> list[list[SplitT]]:
        serializer = self._source.split_serializer
        saved = [
            [unpack_versioned(serializer, packed, "a checkpointed split") for packed in splits]
            for splits in restore.readers
        ]
        return spread_splits(saved, self._parallelism)

    # --- coordination

    def _handle_coordinator_message(self, message: Message) -> None:
        enumerator = self._enumerator
        assert enumerator is not None
        kind = message[0]
        if kind == "request":
            enumerator.handle_split_request(message[1])
        elif kind == "event":
            enumerator.handle_source_event(message[1], message[2])
        elif kind == "async":
            run_async_handler(message)
        else:  # pragma: no cover - every kind is posted by this module
            raise SourceError(f"unexpected coordinator message {kind!r}")

    def _handle_coordinator_messages(self) -> None:
        while True:
            try:
                message = self._coordinator.get_nowait()
            except queue.Empty:
                return
            self._handle_coordinator_message(message)

    def _wait_for_work(self) -> None:
        if not self._coordinator.empty() or any(self._mailboxes):
            return
        for index, reader in enumerate(self._readers):
            if not self._finished[index]:
                reader.is_available().add_done_callback(lambda _: self._wakeup.set())
        self._wakeup.wait(WAIT_SLICE)

    # --- bulk path

    def _bulk_read(self, max_batch_rows: int) -> Iterator[pa.RecordBatch]:
        self._check_usable()
        self._bulk = bulk = BulkRead(self._readers, self._mailboxes, self._finished,
                                     self._coordinator, self._post,
                                     self._handle_coordinator_message)
        completed = False
        try:
            self._open()
            self._handle_coordinator_messages()  # the readers' first requests
            yield from bulk.batches(to_arrow_schema(self._source.schema), max_batch_rows,
                                    self._what)
            completed = True
        except GeneratorExit:
            raise
        except BaseException as exc:
            self._failure = exc
            raise
        finally:
            bulk.stop()
            self._bulk = None
            if not completed and self._failure is None:
                self._failure = SourceError("read_arrow_batches() was stopped before the end")

def read_arrow(
    source: Source[Any, Any],
    parallelism: int = 1,
    *,
    max_batch_rows: int = 65_536,
    options: ReaderOptions | None = None,
) -> pa.Table:
    """Read a bounded source whole into an Arrow table (what a full cache loads).

    Runs a [`LocalSourceRunner`][] with ``parallelism`` reader threads through
    [`LocalSourceRunner.read_arrow_batches`][] and closes it, on the calling thread
    (readers and fetchers on threads of their own). Sources that fetch Arrow batches
    (files, collections) reach the table with no Python object per row.

    Parameters
    ----------
    source
        A bounded source.
    parallelism
        The number of readers.
    max_batch_rows
        The most rows per record batch (chunk) of the table.
    options
        Reader tuning; by default ``ReaderOptions(records_per_poll=max_batch_rows)``
        (no checkpoint is taken, so a poll may hand over a whole batch).

    Returns
    -------
    pyarrow.Table
        With the source's declared schema (as Arrow types); row order across splits is
        unspecified.

    Raises
    ------
    SparkLookupError
        As [`LocalSourceRunner.read_arrow_batches`][].

    Examples
    --------
    >>> from scan import CollectionSource, read_arrow
    >>> table = read_arrow(CollectionSource([(1, "a"), (2, "b")], schema="id INT, v STRING"))
    >>> table.num_rows, table.schema.names
    (2, ['id', 'v'])
    """
    import pyarrow as pa

    with LocalSourceRunner(
        source, parallelism, options=bulk_options(options, max_batch_rows)
    ) as runner:
        batches = list(runner.read_arrow_batches(max_batch_rows))
    return pa.Table.from_batches(batches, schema=to_arrow_schema(source.schema))
