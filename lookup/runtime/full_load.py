"""One load of a full cache: the source read whole, built into a snapshot.

Shared across the processes of a host, the loading process streams the source into the
host's snapshot store as it is read (`cache.full.shared.SharedFullCache.stage`),
so its memory does not grow with the table; if the store's directory cannot take it (a
full disk), the table is loaded in memory instead and served by this process alone. A
cache of one process loads in memory (`cache.full.snapshot.FullSnapshot.load`).

Either way the readers hand the memory they free back to the system as they go
(`scan.ReaderOptions.release_memory`): a load's peak is what it holds, not what
the allocator of each reader thread kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator
from functools import partial

import pyarrow as pa
from pyspark.sql import types as T

from cache.full.shared import SharedFullCache
from cache.full.snapshot import FullSnapshot
from cache.full.spool import SpoolError
from lookup.providers import FullCachingLookupProvider
from lookup.versions import load_cutoff, retained
from scan.reader import ReaderOptions
from scan.runner import LocalSourceRunner, read_arrow
from spark_lookup.schema import to_arrow_schema

__all__ = ["load_snapshot"]

log = logging.getLogger("lookup")

_BATCH_ROWS = 1 << 15
"""The most rows per batch handed over by the readers of a streamed load: a few MB (a
batch waits in a reader's queue and in the hand-over, a few per reader), and the unit a
``FileSource`` decodes (smaller pieces are merged, larger ones sliced)."""

_MEMORY_BATCH_ROWS = 1 << 16
"""The same for a load in memory, whose batches are the table's chunks until they are
combined: fewer, larger chunks combine with less memory (a 16M-row table peaked at
1.4x its size with these, 1.7x with the streamed load's)."""

_LOAD_OPTIONS = ReaderOptions(records_per_poll=_BATCH_ROWS, checkpoints=False,
                              release_memory=True)
_MEMORY_LOAD_OPTIONS = ReaderOptions(records_per_poll=_MEMORY_BATCH_ROWS, checkpoints=False,
                                     release_memory=True)


def load_snapshot(
    provider: FullCachingLookupProvider,
    shared: SharedFullCache | None,
    *,
    version: int,
    loaded_at: float,
    source_version: str | None,
) -> FullSnapshot:
    """Read ``provider``'s source whole and build it as ``version``: staged in the
    store of ``shared`` (the caller holds its lock, and publishes it next), or in
    memory when there is no store or it cannot take the table.

    Raises
    ------
    Exception
        The source's error (the runtime retries it), or the build's.
    """
    source = provider.source
    keys = provider.key_columns
    # A key's versions in valid_from order: a point-in-time probe searches them.
    order_by = () if provider.validity is None else (provider.validity.valid_from,)
    screen = _retention_screen(provider, loaded_at)
    if shared is not None:
        batches = _batches(provider)
        if screen is not None:
            batches = _screened(batches, screen)
        try:
            return shared.stage(batches, to_arrow_schema(source.schema), loaded_at=loaded_at,
                                version=version, source_version=source_version,
                                order_by=order_by)
        except SpoolError as exc:
            log.warning("full cache of %s: the snapshot store %s cannot take the table "
                        "(%s); loading it in memory, for this process only",
                        provider.describe(), shared.store.directory, exc)
        finally:
            batches.close()  # the readers stop now, not when the generator is collected
    read: Callable[[], pa.Table] = partial(
        read_arrow, source, provider.parallelism, max_batch_rows=_MEMORY_BATCH_ROWS,
        options=_MEMORY_LOAD_OPTIONS)
    if screen is not None:
        read_all, keep = read, screen

        def read() -> pa.Table:
            return keep(read_all())
    return FullSnapshot.load(read, keys, loaded_at=loaded_at, version=version,
                             source_version=source_version, order_by=order_by)


def _retention_screen(provider: FullCachingLookupProvider, loaded_at: float
                      ) -> Callable[[pa.Table | pa.RecordBatch], pa.Table | pa.RecordBatch] | None:
    """What drops the versions a validity's retention lets go of, batch by batch (None:
    nothing to drop).

    Only with a ``valid_to`` column: a version's end is then on its own row. Without
    one it is the next version's start, maybe in another batch of a streamed load, so
    the snapshot keeps those versions (a join still answers no row older than the
    retention, `lookup.spark.assemble.PointInTime.out_of_retention`).
    """
    validity = provider.validity
    if validity is None or validity.retention is None or validity.valid_to is None:
        return None
    instants = isinstance(provider.source.schema[validity.valid_from].dataType,
                          T.TimestampType)
    cutoff = load_cutoff(lambda: loaded_at, validity.retention, instants)
    valid_from, valid_to = validity.valid_from, validity.valid_to

    def keep(rows: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
        mask = retained(None, rows.column(valid_from), rows.column(valid_to), cutoff)
        return rows if mask.all() else rows.filter(pa.array(mask))

    return keep


def _screened(batches: Iterator[pa.RecordBatch],
              keep: Callable[[pa.Table | pa.RecordBatch], pa.Table | pa.RecordBatch]
              ) -> Generator[pa.RecordBatch, None, None]:
    try:
        for batch in batches:
            kept = keep(batch)
            assert isinstance(kept, pa.RecordBatch)
            if kept.num_rows:
                yield kept
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # the readers stop with the load, however it ends


def _batches(provider: FullCachingLookupProvider) -> Generator[pa.RecordBatch, None, None]:
    """The source's rows as record batches, as its readers hand them over (at most
    ``2 * parallelism`` wait, so a slow consumer slows the readers down); the runner
    stops when the iteration ends, however it ends."""
    with LocalSourceRunner(provider.source, provider.parallelism,
                           options=_LOAD_OPTIONS) as runner:
        yield from runner.read_arrow_batches(_BATCH_ROWS)
