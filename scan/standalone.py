"""Planning and reading splits separately: the driver/executor split of a Spark read.

A Spark Python data source plans partitions on the driver and reads each on an
executor with nothing but the (pickled) source and that partition. These helpers are
that shape: [`plan_splits`][] runs the enumerator alone and returns every split;
[`read_split`][] reads one split with a fresh reader, anywhere.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, wait
from typing import TYPE_CHECKING, Any, TypeVar

from scan import _mailboxes
from scan.outputs import ArrowBatchOutput, RowListOutput
from scan.reader import InputStatus, ReaderOptions
from scan.source import Boundedness, Source, SplitT
from spark_lookup.errors import ConfigError, SourceError
from spark_lookup.options import check_int
from spark_lookup.schema import parse_schema, to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["plan_splits", "read_split", "read_split_arrow"]

R = TypeVar("R")
Row = tuple[Any, ...]


class _InlineExecutor(Executor):
    """Runs submitted work at once; planning has no other thread to wait for."""

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        future: Future[R] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def plan_splits(source: Source[SplitT, Any], parallelism: int = 1) -> list[SplitT]:
    """Every split of a bounded source, in the order its enumerator hands them out.

    Runs the enumerator with one registered reader and answers its requests until it
    signals no more splits; ``call_async`` work runs inline. Meant for the driver.
    Sources that discover splits lazily (SQL chunks, Redis SCAN pages) do all their
    discovery here.

    Parameters
    ----------
    source
        A bounded source.
    parallelism
        The ``current_parallelism`` the enumerator is told: how many readers will read
        the splits (a ``SqlTableSource`` of default ``chunk_size`` plans one chunk per
        reader).

    Raises
    ------
    ConfigError
        For an unbounded source.
    SourceError
        If the enumerator answers a request with neither a split nor no-more-splits.

    Examples
    --------
    >>> from scan import CollectionSource, plan_splits, read_split
    >>> source = CollectionSource([(i,) for i in range(5)], num_splits=2, schema="n INT")
    >>> [split.split_id for split in plan_splits(source)]
    ['split-0', 'split-1']
    >>> [list(read_split(source, split)) for split in plan_splits(source)]
    [[(0,), (1,)], [(2,), (3,), (4,)]]
    """
    if source.boundedness is not Boundedness.BOUNDED:
        raise ConfigError("plan_splits() needs a bounded source")
    check_int(parallelism, "parallelism")
    pending: queue.SimpleQueue[_mailboxes.Message] = queue.SimpleQueue()
    mailbox = _mailboxes.Mailbox(lambda: None)
    # Reader 0 asks for every split; the others only count for the planning.
    context: _mailboxes.EnumeratorContext[SplitT] = _mailboxes.EnumeratorContext(
        parallelism, [mailbox], pending.put, _InlineExecutor)
    enumerator = source.create_enumerator(context)
    splits: list[SplitT] = []
    try:
        enumerator.start()
        context.register(0)
        enumerator.add_reader(0)
        while True:
            enumerator.handle_split_request(0)
            while not pending.empty():
                _mailboxes.run_async_handler(pending.get())
            answered = False
            finished = False
            for item in mailbox.drain():
                if item[0] == "splits":
                    splits.extend(item[1])
                    answered = True
                elif item[0] == "no_more_splits":
                    finished = True
            if finished:
                return splits
            if not answered:
                raise SourceError(
                    f"the enumerator of {type(source).__name__} answered a split request with "
                    "neither a split nor no-more-splits; plan_splits() needs a pull-based "
                    "enumerator"
                )
    finally:
        enumerator.close()


def _drive(source: Source[SplitT, Any], splits: list[SplitT],
           output: RowListOutput | ArrowBatchOutput, options: ReaderOptions | None
           ) -> Iterator[None]:
    # A reader alone, subtask 0 of 1: its split requests and events have no one to go to.
    context = _mailboxes.ReaderContext(0, 1, lambda message: None, options or ReaderOptions())
    reader = source.create_reader(context)
    try:
        reader.add_splits(splits)
        reader.start()
        reader.notify_no_more_splits()
        while True:
            status = reader.poll_next(output)
            if status is InputStatus.END_OF_INPUT:
                return
            if status is InputStatus.NOTHING_AVAILABLE:
                wait([reader.is_available()])
            yield None
    finally:
        reader.close()


def read_split(
    source: Source[SplitT, Any], split: SplitT, *, options: ReaderOptions | None = None
) -> Iterator[Row]:
    """The rows of one split, in split order, read by a fresh reader of ``source``.

    Runs wherever it is called (an executor task): it needs only the source and the
    split, both picklable. The reader's fetcher thread is stopped when the iterator is
    exhausted or closed.

    Parameters
    ----------
    source, split
        The (unpickled) source and one of its planned splits.
    options
        Reader tuning (records per poll, queue capacity).

    Raises
    ------
    SparkLookupError
        The reader's error (a ``ConnectorError`` names the table, file or URL).
    """
    rows: list[Row] = []
    output = RowListOutput(rows, parse_schema(source.schema), type(source).__name__)
    for _ in _drive(source, [split], output, options):
        if rows:
            yield from rows
            rows.clear()
    yield from rows


def read_split_arrow(
    source: Source[SplitT, Any],
    split: SplitT,
    *,
    max_batch_rows: int = 65_536,
    options: ReaderOptions | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of one split as Arrow record batches of the source's schema (what a
    Spark Python data source's ``read`` may yield).

    Runs wherever it is called, like [`read_split`][]. Batches a source fetches as
    Arrow are checked against the declared schema and passed on (re-chunked by Arrow
    slicing and concatenation, no Python object per row); rows are converted column by
    column.

    Parameters
    ----------
    source, split
        The (unpickled) source and one of its planned splits.
    max_batch_rows
        The most rows per batch (batches may be smaller: a fetched batch is not copied
        only to fill one).
    options
        Reader tuning; by default polls of ``max_batch_rows`` records (no checkpoint is
        taken here).

    Raises
    ------
    SparkLookupError
        The reader's error, a value that does not convert to its column's type, or a
        batch not of the declared schema.
    ConfigError
        For an invalid ``max_batch_rows``.
    """
    _mailboxes.check_max_batch_rows(max_batch_rows)
    options = _mailboxes.bulk_options(options, max_batch_rows)
    output = ArrowBatchOutput(to_arrow_schema(source.schema), max_batch_rows, type(source).__name__)
    for _ in _drive(source, [split], output, options):
        yield from output.full_batches()
    yield from output.flush()
