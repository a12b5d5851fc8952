"""The connector base of FLIP-27: split readers on fetcher threads feeding a reader.

A connector implements a `SplitReader` (blocking reads on a fetcher thread) and a
`RecordEmitter` (records out, split state forward); `SourceReaderBase` and
the fetcher managers do the threading, hand-over and back-pressure.

Records travel as rows (`RecordsBySplits` of tuples, emitted with
``collect_batch``) or as Arrow record batches (`ArrowRecordsBySplits`, emitted by
`ArrowRecordEmitter` with ``collect_arrow``, the split state advanced by row
count); the second moves no Python object per row from the file or driver to the
Arrow table a full cache or Spark receives.

Writing a connector: a frozen [`SourceSplit`][], its versioned serializer, a
mutable split state with ``to_split()``, a `SplitReader`, a
`RecordEmitter`, and a [`Source`][] whose ``create_reader`` returns a
`PullingSourceReader` of them. ``scan/collection.py`` is the smallest
complete example (Arrow records); ``connectors/files/source.py`` reads Arrow from files;
``connectors/sql/source.py`` has a lazy split planner and a client (row records).
"""

from scan.connector.arrow_records import ArrowRecordsBySplits
from scan.connector.emitter import ArrowRecordEmitter, RecordEmitter, RowOffsetState
from scan.connector.fetcher import (
    MultiThreadFetcherManager,
    SingleThreadFetcherManager,
    SplitFetcher,
    SplitFetcherManager,
)
from scan.connector.pulling import PullingSourceReader, SplitState
from scan.connector.queue import ElementQueue
from scan.connector.reader_base import SourceReaderBase
from scan.connector.records import RecordsBySplits, RecordsWithSplitIds
from scan.connector.split_reader import SplitReader, SplitsAddition, SplitsChange

__all__ = [
    "ArrowRecordEmitter",
    "ArrowRecordsBySplits",
    "ElementQueue",
    "MultiThreadFetcherManager",
    "PullingSourceReader",
    "RecordEmitter",
    "RecordsBySplits",
    "RecordsWithSplitIds",
    "RowOffsetState",
    "SingleThreadFetcherManager",
    "SourceReaderBase",
    "SplitFetcher",
    "SplitFetcherManager",
    "SplitReader",
    "SplitState",
    "SplitsAddition",
    "SplitsChange",
]
