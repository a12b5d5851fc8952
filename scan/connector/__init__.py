"""The connector base of FLIP-27: split readers on fetcher threads feeding a reader.

A connector implements a :class:`SplitReader` (blocking reads on a fetcher thread) and a
:class:`RecordEmitter` (rows out, split state forward); :class:`SourceReaderBase` and
the fetcher managers do the threading, hand-over and back-pressure.

Writing a connector: a frozen :class:`~scan.SourceSplit`, its versioned serializer, a
mutable split state with ``to_split()``, a :class:`SplitReader`, a
:class:`RecordEmitter`, and a :class:`~scan.Source` whose ``create_reader`` returns a
:class:`PullingSourceReader` of them. ``scan/sources/collection.py`` is the smallest
complete example; ``scan/sources/sql.py`` one with a lazy split planner and a client.
"""

from scan.connector.emitter import RecordEmitter
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
    "ElementQueue",
    "MultiThreadFetcherManager",
    "PullingSourceReader",
    "RecordEmitter",
    "RecordsBySplits",
    "RecordsWithSplitIds",
    "SingleThreadFetcherManager",
    "SourceReaderBase",
    "SplitFetcher",
    "SplitFetcherManager",
    "SplitReader",
    "SplitState",
    "SplitsAddition",
    "SplitsChange",
]
