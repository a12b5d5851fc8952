"""Parquet and CSV files, read with pyarrow: a split per Parquet row group or CSV file."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from scan.connector.emitter import RecordEmitter
from scan.connector.pulling import PullingSourceReader
from scan.connector.records import RecordsBySplits
from scan.connector.split_reader import SplitReader, SplitsChange
from scan.enumerator import SplitEnumerator, SplitEnumeratorContext
from scan.reader import ReaderOutput, SourceReader, SourceReaderContext
from scan.serializers import JsonVersionedSerializer, SimpleVersionedSerializer
from scan.source import Boundedness, Source
from scan.sources._enumerator import (
    PullEnumeratorState,
    PullEnumeratorStateSerializer,
    PullSplitEnumerator,
    SplitPlanner,
)
from scan.sources._types import arrow_to_spark
from scan.split import SourceSplit
from spark_lookup.errors import ConfigError, ConnectorError, SourceError, SparkLookupError
from spark_lookup.schema import SchemaLike, parse_schema, to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FileSource", "FileSplit"]

Row = tuple[Any, ...]

_FORMATS = ("parquet", "csv")
_FETCH_ROWS = 4096


@dataclass(frozen=True)
class FileSplit(SourceSplit):
    """A Parquet row group (``row_group``) or a whole CSV file (``row_group`` None);
    ``offset`` rows of it were emitted before a checkpoint and are skipped."""

    path: str
    row_group: int | None = None
    offset: int = 0

    @property
    def split_id(self) -> str:
        return self.path if self.row_group is None else f"{self.path}#{self.row_group}"


class _SplitSerializer(JsonVersionedSerializer[FileSplit]):
    VERSION = 1
    WHAT = "a FileSource split"

    def to_json(self, obj: FileSplit) -> Any:
        return [obj.path, obj.row_group, obj.offset]

    def from_json(self, version: int, value: Any) -> FileSplit:
        path, row_group, offset = value
        return FileSplit(str(path), None if row_group is None else int(row_group), int(offset))


def _is_data_file(name: str) -> bool:
    # As Spark: files starting with "_" or "." (markers, checksums) are not data.
    return not name.startswith(("_", "."))


def _expand(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(
            os.path.join(path, name)
            for name in os.listdir(path)
            if _is_data_file(name) and os.path.isfile(os.path.join(path, name))
        )
    return [path]


def _io_error(what: str, exc: BaseException) -> ConnectorError:
    return ConnectorError(f"{what} failed: {type(exc).__name__}: {exc}")


class _FilePlanner(SplitPlanner[FileSplit]):
    """Walks the paths (directories listed when reached) and, for Parquet, the row
    groups of one file at a time, read from its footer."""

    def __init__(self, paths: Sequence[str], file_format: str, progress: Any = None) -> None:
        self._format = file_format
        if progress is None:
            progress = {"paths": list(paths), "file": None, "next": 0, "groups": 0}
        if not isinstance(progress, dict) or not isinstance(progress.get("paths"), list):
            raise SourceError(f"malformed FileSource planner progress: {progress!r:.120}")
        self._state: dict[str, Any] = dict(progress)

    def snapshot(self) -> Any:
        return {**self._state, "paths": list(self._state["paths"])}

    def next_split(self) -> FileSplit | None:
        state = self._state
        while True:
            if state["file"] is not None and state["next"] < state["groups"]:
                state["next"] += 1
                return FileSplit(state["file"], state["next"] - 1)
            state["file"] = None
            if not state["paths"]:
                return None
            path = state["paths"].pop(0)
            if os.path.isdir(path):
                state["paths"][:0] = _expand(path)
                continue
            if self._format == "csv":
                return FileSplit(path)
            import pyarrow.parquet as pq

            try:
                groups = pq.ParquetFile(path).metadata.num_row_groups
            except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
                raise _io_error(f"reading the Parquet footer of {path!r}", exc) from exc
            state.update(file=path, next=0, groups=groups)


class _State:
    __slots__ = ("offset", "split")

    def __init__(self, split: FileSplit) -> None:
        self.split = split
        self.offset = split.offset

    def to_split(self) -> FileSplit:
        return replace(self.split, offset=self.offset)


class _Emitter(RecordEmitter[Row, _State]):
    def emit_record(self, element: Row, output: ReaderOutput, split_state: _State) -> None:
        output.collect(element)
        split_state.offset += 1

    def emit_records(
        self, elements: Sequence[Row], output: ReaderOutput, split_state: _State
    ) -> None:
        output.collect_batch(elements)
        split_state.offset += len(elements)


def _rows(batch: pa.RecordBatch) -> list[Row]:
    return list(zip(*(column.to_pylist() for column in batch.columns), strict=True))


class _SplitReader(SplitReader[Row, FileSplit]):
    def __init__(self, file_format: str, schema: pa.Schema) -> None:
        self._format = file_format
        self._schema = schema
        self._splits: deque[FileSplit] = deque()
        self._batches: Iterator[pa.RecordBatch] | None = None
        self._woken = threading.Event()

    def fetch(self) -> RecordsBySplits[Row]:
        records: RecordsBySplits[Row] = RecordsBySplits()
        if self._woken.is_set():
            self._woken.clear()
            return records
        if not self._splits:
            return records
        split = self._splits[0]
        try:
            if self._batches is None:
                self._batches = self._open(split)
            batch = next(self._batches, None)
        except SparkLookupError:
            raise
        except (OSError, ValueError, TypeError) as exc:  # pyarrow errors are ValueErrors
            raise _io_error(f"reading {split.split_id!r}", exc) from exc
        if batch is None:
            self._batches = None
            self._splits.popleft()
            records.add_finished(split.split_id)
        elif batch.num_rows:
            records.add(split.split_id, _rows(batch))
        return records

    def _open(self, split: FileSplit) -> Iterator[pa.RecordBatch]:
        if self._format == "parquet":
            return self._parquet(split)
        return self._csv(split)

    def _conform(self, table: pa.Table | pa.RecordBatch, path: str) -> Any:
        names = self._schema.names
        missing = [n for n in names if n not in table.schema.names]
        if missing:
            raise SourceError(f"{path!r} has no column(s) {missing}; it has {table.schema.names}")
        try:
            return table.select(names).cast(self._schema)
        except (ValueError, TypeError) as exc:
            raise SourceError(f"{path!r} does not match the schema {self._schema}: {exc}") from exc

    def _parquet(self, split: FileSplit) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        assert split.row_group is not None
        table = pq.ParquetFile(split.path).read_row_group(
            split.row_group, columns=self._schema.names
        )
        table = self._conform(table, split.path).slice(split.offset)
        yield from table.to_batches(max_chunksize=_FETCH_ROWS)

    def _csv(self, split: FileSplit) -> Iterator[pa.RecordBatch]:
        from pyarrow import csv

        options = csv.ConvertOptions(column_types=self._schema, include_columns=self._schema.names)
        skip = split.offset
        with csv.open_csv(split.path, convert_options=options) as reader:
            for batch in reader:
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                batch = self._conform(batch.slice(skip), split.path)
                skip = 0
                for start in range(0, batch.num_rows, _FETCH_ROWS):
                    yield batch.slice(start, _FETCH_ROWS)

    def handle_splits_changes(self, change: SplitsChange[FileSplit]) -> None:
        self._splits.extend(change.splits)

    def wake_up(self) -> None:
        self._woken.set()

    def close(self) -> None:
        self._batches = None


class FileSource(Source[FileSplit, PullEnumeratorState[FileSplit]]):
    """Parquet or CSV files read with pyarrow: one split per Parquet row group, one per
    CSV file.

    Built on the driver and picklable (it holds paths only). The enumerator walks the
    paths lazily (listing a directory when it gets there, reading a Parquet footer per
    file); readers read their splits on their fetcher threads. Rows of a split are
    emitted in file order; a checkpoint records how many rows of each split were
    emitted, and a restore skips them (files must not change in between).

    Parameters
    ----------
    paths
        A path or a sequence of paths of local files or directories (a directory stands
        for the data files in it, sorted, without those whose names start with ``_``
        or ``.``).
    format
        ``"parquet"`` or ``"csv"`` (with a header row naming the columns).
    schema
        A Spark DDL string or ``StructType``; columns are picked by name and cast to
        its types. Inferred from the first file when not given.

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an unknown format, no paths, or an invalid schema.
    ConnectorError
        On use, for a file that cannot be read, naming it.

    Examples
    --------
    >>> import os, tempfile
    >>> import pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "dim.parquet")
    >>> pq.write_table(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), path,
    ...                row_group_size=2)
    >>> source = FileSource(path)
    >>> source.schema.simpleString()
    'struct<id:bigint,v:string>'
    >>> [split.split_id[-2:] for split in __import__("scan").plan_splits(source)]
    ['#0', '#1']
    """

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        format: str = "parquet",  # the name the issue and Spark use
        schema: SchemaLike | None = None,
    ) -> None:
        if format not in _FORMATS:
            raise ConfigError(f"format must be one of {list(_FORMATS)}, got {format!r}")
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        normalized = [os.fspath(p) for p in paths]
        if not normalized:
            raise ConfigError("paths must name at least one file or directory")
        for path in normalized:
            if not isinstance(path, str) or not path:
                raise ConfigError(f"invalid path {path!r}")
        self._paths = normalized
        self._format = format
        self._schema = parse_schema(schema, "FileSource schema") if schema is not None else None

    @property
    def paths(self) -> list[str]:
        """The paths as given (directories not yet listed)."""
        return list(self._paths)

    @property
    def format(self) -> str:
        """``"parquet"`` or ``"csv"``."""
        return self._format

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @property
    def schema(self) -> T.StructType:
        """The declared schema, or the first file's (which reads its footer or header)."""
        if self._schema is None:
            self._schema = self._infer_schema()
        return self._schema

    def _infer_schema(self) -> T.StructType:
        first = next((f for p in self._paths for f in _expand(p)), None)
        if first is None:
            raise ConfigError(f"no data files in {self._paths}; pass schema")
        try:
            if self._format == "parquet":
                import pyarrow.parquet as pq

                arrow_schema = pq.read_schema(first)
            else:
                from pyarrow import csv

                with csv.open_csv(first) as reader:
                    arrow_schema = reader.schema
        except (OSError, ValueError) as exc:
            raise _io_error(f"reading the schema of {first!r}", exc) from exc
        return T.StructType(
            [
                T.StructField(f.name, arrow_to_spark(f.type, f"column {f.name!r} of {first!r}"))
                for f in arrow_schema
            ]
        )

    def create_enumerator(
        self, context: SplitEnumeratorContext[FileSplit]
    ) -> SplitEnumerator[FileSplit, PullEnumeratorState[FileSplit]]:
        return PullSplitEnumerator(context, _FilePlanner(self._paths, self._format))

    def restore_enumerator(
        self,
        context: SplitEnumeratorContext[FileSplit],
        state: PullEnumeratorState[FileSplit],
    ) -> SplitEnumerator[FileSplit, PullEnumeratorState[FileSplit]]:
        planner = _FilePlanner(self._paths, self._format, state.progress)
        return PullSplitEnumerator(context, planner, state.pending)

    def create_reader(self, context: SourceReaderContext) -> SourceReader[FileSplit]:
        file_format, schema = self._format, to_arrow_schema(self.schema)
        return PullingSourceReader(
            context, lambda: _SplitReader(file_format, schema), _Emitter(), _State
        )

    @property
    def split_serializer(self) -> SimpleVersionedSerializer[FileSplit]:
        return _SplitSerializer()

    @property
    def enumerator_state_serializer(
        self,
    ) -> SimpleVersionedSerializer[PullEnumeratorState[FileSplit]]:
        return PullEnumeratorStateSerializer(
            _SplitSerializer(), 1, "the FileSource enumerator state"
        )

    def __repr__(self) -> str:
        return f"FileSource({self._paths!r}, format={self._format!r})"
