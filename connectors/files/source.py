"""Parquet and CSV files, read with pyarrow: a split per Parquet row group (those that
Parquet statistics rule out left out) or CSV file."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from connectors.files.batches import (
    BatchReading,
    BatchReadingSource,
    io_error,
    with_last,
)
from connectors.files.footers import Footer, read_footer
from connectors.files.row_groups import row_group_batches
from connectors.files.side_by_side import SideBySideReader
from connectors.policy import BadValuePolicy
from connectors.predicates import Predicate, check_predicates, predicates_to_pruning
from scan.connector.pulling import PullingSourceReader
from scan.planners import SplitPlanner
from scan.pull import SplitFieldsSerializer
from scan.reader import SourceReader, SourceReaderContext
from scan.serializers import SimpleVersionedSerializer
from scan.split import SourceSplit
from scan.types import arrow_to_spark
from spark_lookup.errors import ConfigError, SourceError, SparkLookupError
from spark_lookup.schema import SchemaLike, parse_schema, to_arrow_schema
from spark_lookup.shown import shown

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FileSource", "FileSplit"]

_FORMATS = ("parquet", "csv")
# A row group is decoded in units of about 8 MB (connectors/files/row_groups.py), of which
# readers emit slices. A column chunk is read through a buffer of this size, not whole
# (nor all the chunks of a row group at once, pyarrow's pre-buffering): a 128 MB row
# group costs 1 MB a column.
_READ_BUFFER = 1 << 20
# Row groups a bulk load decodes at once, over all its readers, per core: a row group's
# units are decoded a column per core, waiting for the slowest column, and other row
# groups fill the idle time (connectors/files/side_by_side.py). One reader on 2 cores
# reads 4 side by side: 0.80x of pq.read_table with 1, 0.89x with 2, 1.00x with 4
# (benchmarks/README.md, "Row groups side by side"). Each costs about one decode unit.
_ROW_GROUPS_PER_CORE = 2
_MAX_LANES = 8
# Units of the usual ~8 MB a bulk load's readers decode at once, over all of them and
# their lanes: with fewer, each decodes larger units (fewer waits for the slowest
# column, fewer hand-overs; a small row group in one unit): 4 readers of a 1M-row file
# 0.90x of pq.read_table with 8 MB units, 0.94x with 32 MB. A load that releases memory
# as it goes (a full cache's: the table is not what it keeps) also counts the units
# each reader holds queued and handed over, so its 4 readers keep ~8 MB units.
_UNITS_IN_FLIGHT = 16


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


_SPLITS = SplitFieldsSerializer(
    FileSplit, "a FileSource split", str, lambda group: None if group is None else int(group), int)


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


def _check_columns(path: str, names: Sequence[str], columns: Sequence[str]) -> None:
    missing = [name for name in columns if name not in names]
    if missing:
        raise ConfigError(
            f"{path!r} has no column(s) {missing} of the declared schema; it has {list(names)}"
        )


def _csv_header(path: str) -> list[str]:
    """The header of a CSV file as Python's csv module reads it: only to name columns
    in error messages (pyarrow names them by position)."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            return next(csv.reader(file), [])
    except (OSError, UnicodeError, csv.Error):
        return []


class _FilePlanner(SplitPlanner[FileSplit]):
    """Walks the paths (directories listed when reached) and, for Parquet, the row
    groups of one file at a time: the file's footer gives its columns (the declared
    ones are checked, so a file that lacks one fails at planning, on the driver) and,
    with filters, the file is a ``pyarrow.dataset`` fragment whose row groups'
    statistics leave out those the filters rule out (`predicates_to_pruning`)."""

    def __init__(self, paths: Sequence[str], file_format: str, schema: pa.Schema,
                 filters: Sequence[Predicate], progress: Any = None) -> None:
        self._format = file_format
        self._schema = schema
        self._filters = tuple(filters)
        self._parquet: Any = None  # the dataset's file format, made on first use
        if progress is None:
            progress = {"paths": list(paths), "file": None, "row_groups": []}
        if not isinstance(progress, dict) or not isinstance(progress.get("paths"), list):
            raise SourceError(f"malformed FileSource planner progress: {shown(progress, 120)}")
        state = dict(progress)
        if "row_groups" not in state:  # written before row groups were pruned
            state["row_groups"] = list(range(int(state.pop("next", 0)),
                                             int(state.pop("groups", 0))))
        if not isinstance(state["row_groups"], list):
            raise SourceError(f"malformed FileSource planner progress: {shown(progress, 120)}")
        self._state: dict[str, Any] = state

    def progress(self) -> Any:
        state = self._state
        return {"paths": list(state["paths"]), "file": state["file"],
                "row_groups": list(state["row_groups"])}

    def next_split(self) -> FileSplit | None:
        state = self._state
        while True:
            if state["file"] is not None and state["row_groups"]:
                return FileSplit(state["file"], int(state["row_groups"].pop(0)))
            state["file"] = None
            if not state["paths"]:
                return None
            path = state["paths"].pop(0)
            if os.path.isdir(path):
                state["paths"][:0] = _expand(path)
                continue
            if self._format == "csv":
                return FileSplit(path)
            state.update(file=path, row_groups=self._row_groups(path))

    def _row_groups(self, path: str) -> list[int]:
        """The ids of the row groups of ``path`` whose statistics do not rule the
        filters out (all of them without filters)."""
        try:
            footer = read_footer(path)
        except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
            raise io_error(f"reading the Parquet footer of {path!r}", exc) from exc
        _check_columns(path, footer.schema.names, self._schema.names)
        groups = footer.metadata.num_row_groups
        expression = predicates_to_pruning(self._filters, footer.schema, self._schema)
        if expression is None:
            return list(range(groups))
        import pyarrow.dataset as ds
        from pyarrow import fs

        if self._parquet is None:
            self._parquet = ds.ParquetFileFormat()
        try:
            # pyarrow's fragment reads the footer itself (it cannot be handed one):
            # a second read, with filters only.
            fragment = self._parquet.make_fragment(path, filesystem=fs.LocalFileSystem())
            return [group.id for group in fragment.subset(filter=expression).row_groups]
        except OSError as exc:
            raise io_error(f"reading the Parquet footer of {path!r}", exc) from exc
        except (ValueError, TypeError, NotImplementedError):  # pyarrow's errors
            # Statistics only save reads; every row group is read and filtered exactly.
            return list(range(groups))


class _SplitReader(SideBySideReader[FileSplit]):
    """Reads its splits, ``lanes`` at a time side by side, one decoded batch per fetch,
    only the declared columns; runs on its fetcher thread (and its lanes' threads).
    Each split opens its file with the footer this process parsed for that version
    of it (``_footers.read_footer``), or, for the next row group of the file opened
    last, with that file's footer.

    A row group is decoded by ``ParquetFile.iter_batches``, not by the dataset's
    scanner: pyarrow 26's scanner decodes a whole row group before slicing it into
    batches (105 MB of pyarrow memory per reader for 1M-row groups of four columns,
    against 18 MB), and its filter would leave nothing to the exact filter after
    conversion, which runs anyway (statistics already kept the row groups to read).
    """

    READ_ERRORS = (OSError, ValueError, TypeError, KeyError)  # pyarrow's errors

    def __init__(self, file_format: str, schema: pa.Schema, reading: BatchReading,
                 lanes: int = 1, release_memory: bool = False, unit_scale: int = 1) -> None:
        super().__init__(lanes, release_memory)
        self._format = file_format
        self._schema = schema
        self._reading = reading
        self._unit_scale = unit_scale
        # The footer of the file opened last: the next row group of the same file opens
        # without reading the file's tail again (a footer of megabytes, read and
        # hashed per split of a file of thousands of row groups, would cost more than
        # the row groups). A file rewritten during one load is not read consistently
        # in any case.
        self._last: tuple[str, Footer] | None = None

    def read_error(self, split: FileSplit, exc: BaseException) -> SparkLookupError:
        return io_error(f"reading {split.split_id!r}", exc)

    def batches(self, split: FileSplit) -> Iterator[pa.RecordBatch]:
        return (batch for batch, _ in self.flagged_batches(split))

    def flagged_batches(self, split: FileSplit) -> Iterator[tuple[pa.RecordBatch, bool]]:
        # A row group's last unit is known by counting its rows: no decoding one ahead.
        return self._parquet(split) if self._format == "parquet" else self._csv(split)

    def _open_parquet(self, path: str) -> Any:
        import pyarrow.parquet as pq

        last = self._last  # lanes open files side by side: one read of the attribute
        if last is not None and last[0] == path:
            footer = last[1]
        else:
            footer = read_footer(path)
            # Checked here too: a split may be read where it was not planned (a
            # restore, a Spark executor), and the file may have changed since.
            _check_columns(path, footer.schema.names, self._schema.names)
            self._last = (path, footer)
        return pq.ParquetFile(path, metadata=footer.metadata, pre_buffer=False,
                              buffer_size=_READ_BUFFER)

    def _parquet(self, split: FileSplit) -> Iterator[tuple[pa.RecordBatch, bool]]:
        assert split.row_group is not None
        parquet = self._open_parquet(split.path)
        try:
            yield from self._after_offset(
                split, row_group_batches(parquet, split.row_group, self._schema,
                                         self._unit_scale))
        finally:
            parquet.close()

    def _after_offset(self, split: FileSplit, batches: Iterable[tuple[pa.RecordBatch, bool]]
                      ) -> Iterator[tuple[pa.RecordBatch, bool]]:
        """The decoded batches conformed, less the rows emitted before the checkpoint
        (converted and filtered first, since the offset counts rows emitted), each with
        whether it is the split's last; batches left empty are passed over, except the
        last, which finishes the split."""
        skip = split.offset
        start = 0
        for batch, last in batches:
            kept = self._reading.conform(batch, split.path, start)
            start += batch.num_rows
            dropped = min(skip, kept.num_rows)
            skip -= dropped
            if dropped == kept.num_rows and not last:
                continue
            yield kept.slice(dropped), last

    def _csv(self, split: FileSplit) -> Iterator[tuple[pa.RecordBatch, bool]]:
        from pyarrow import csv

        # The parser converts to the declared types itself (vectorized, and with CSV's
        # own null and timestamp rules); only the declared columns are parsed.
        options = csv.ConvertOptions(column_types=self._schema, include_columns=self._schema.names)
        try:
            with csv.open_csv(split.path, convert_options=options) as reader:
                # A CSV file's end is known only by reading past it: one batch ahead.
                yield from self._after_offset(split, with_last(iter(reader)))
        except KeyError as exc:  # a declared column is not in the header
            header = _csv_header(split.path)
            _check_columns(split.path, header, self._schema.names)
            raise ConfigError(f"{split.path!r}: {exc}") from exc
        except ValueError as exc:
            raise _csv_value_error(split.path, exc) from exc

_CSV_CONVERSION = re.compile(r"CSV column #(\d+): CSV conversion error to ([^:]+):")


def _csv_value_error(path: str, exc: ValueError) -> SparkLookupError:
    """A value the CSV parser could not convert: a SourceError naming the file and the
    column; any other parse failure: a ConnectorError (the file cannot be read)."""
    match = _CSV_CONVERSION.search(str(exc))
    if match is None:
        return io_error(f"reading {path!r}", exc)
    header = _csv_header(path)
    index = int(match.group(1))
    column = header[index] if index < len(header) else f"#{index}"
    return SourceError(f"{path!r}: column {column!r} does not convert to {match.group(2)}: {exc}")


class FileSource(BatchReadingSource[FileSplit, BatchReading]):
    """Parquet or CSV files read with pyarrow: one split per Parquet row group, one per
    CSV file; row groups that the filters rule out by their statistics are not read.

    Built on the driver and picklable (it holds paths only). The enumerator walks the
    paths lazily (listing a directory when it gets there, opening each Parquet file as
    a ``pyarrow.dataset`` fragment, which reads its footer): a row group whose
    statistics (min, max, null count) show that no row meets the ``filters`` gets no
    split. Readers read their splits on their fetcher threads, as Arrow record batches
    of the declared schema, with no Python object per row: Parquet with
    ``ParquetFile.iter_batches`` of the split's row group, CSV with pyarrow's streaming
    reader. Only the declared columns are read (a Parquet file of 50 columns and a
    schema naming 3 decodes 3); each is cast to its declared type by Arrow, then the
    rows are filtered with SQL's null rules.

    Rows of a split are emitted in file order; a checkpoint records how many rows of
    each split were emitted (after filtering), and a restore skips them (files must not
    change in between).

    Parameters
    ----------
    paths
        A path or a sequence of paths of local files or directories (a directory stands
        for the data files in it, sorted, without those whose names start with ``_``
        or ``.``).
    format
        ``"parquet"`` or ``"csv"`` (with a header row naming the columns).
    schema
        A Spark DDL string or ``StructType``; columns are picked by name (the others
        are not read) and cast to its types. Inferred from the first file when not
        given (then every column of that file is read).
    filters
        [`Predicate`][]s on columns of the schema, all of which a row
        must meet, compared as the declared types (a null meets none but ``is null``).
        Parquet statistics rule row groups out for the predicates on columns a file
        holds as their declared type (see `connectors.predicates.predicates_to_pruning`);
        every row read is filtered exactly.
    mode
        The bad-value policy (``PERMISSIVE``, ``DROPMALFORMED``, ``FAILFAST``) for
        values that do not convert to their declared type. Values of the row groups
        left unread are not looked at.

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an unknown format, no paths, an invalid schema, or
        filters on columns the schema does not have (an inferred schema: when it is
        read); on use, for a file that lacks a declared column, naming the file and
        the column (Parquet: at planning, from the footer; CSV: when its split is
        first read).
    SourceError
        On use, for a value that does not convert to its declared type (or a null in
        a NOT NULL column), naming the file and the column.
    ConnectorError
        On use, for a file that cannot be read, naming it.

    Notes
    -----
    A fetch is one decoded unit of a row group, of about 8 MB by the footer's column
    sizes (4,096 to 262,144 rows; a CSV parser block for CSV), its column chunks read
    through a 1 MiB buffer; a reader holds at most ``element_queue_capacity + 1`` of
    them, so memory stays bounded for large row groups and wide rows. A bulk read
    (no checkpoints) of fewer than 16 readers and lanes decodes larger units, up to
    about 128 MB over them all ([`create_reader`][]). Readers emit
    zero-copy slices of them, ``records_per_poll`` rows at a time. CSV files are read by
    ``pyarrow.csv.open_csv``: they have no statistics to skip by, and a dataset of one
    CSV file read 1M rows in 0.20 s against 0.11 s.

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

    ROWS_FIELD = "offset"

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        format: str = "parquet",  # the name the issue and Spark use
        schema: SchemaLike | None = None,
        *,
        filters: Sequence[Predicate] | None = None,
        mode: BadValuePolicy | str = BadValuePolicy.PERMISSIVE,
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
        self._mode = BadValuePolicy.parse(mode)
        self._filters = check_predicates(
            filters, self._schema.fieldNames() if self._schema is not None else
            [f.column for f in filters or []], "FileSource",
        )
        self._init_per_process()

    @property
    def paths(self) -> list[str]:
        """The paths as given (directories not yet listed)."""
        return list(self._paths)

    @property
    def bad_value_mode(self) -> BadValuePolicy:
        """The ``mode`` given (also what bad version history of a point-in-time lookup
        follows)."""
        return self._mode

    @property
    def format(self) -> str:
        """``"parquet"`` or ``"csv"``."""
        return self._format

    @property
    def schema(self) -> T.StructType:
        """The declared schema, or the first file's (which reads its footer or header)."""
        if self._schema is None:
            inferred = self._infer_schema()
            check_predicates(self._filters, inferred.fieldNames(), f"FileSource({self._paths})")
            self._schema = inferred
        return self._schema

    def _infer_schema(self) -> T.StructType:
        first = next((f for p in self._paths for f in _expand(p)), None)
        if first is None:
            raise ConfigError(f"no data files in {self._paths}; pass schema")
        try:
            if self._format == "parquet":
                arrow_schema = read_footer(first).schema
            else:
                from pyarrow import csv

                with csv.open_csv(first) as reader:
                    arrow_schema = reader.schema
        except (OSError, ValueError) as exc:
            raise io_error(f"reading the schema of {first!r}", exc) from exc
        return T.StructType(
            [T.StructField(f.name, arrow_to_spark(f.type, f"column {f.name!r} of {first!r}"))
             for f in arrow_schema]
        )

    def current_version(self) -> str:
        """A digest of the data files' paths, sizes, modification and change times and
        inodes (a ``stat`` per file, no data read): equal while no file was added,
        removed, rewritten or replaced.

        Raises
        ------
        ConnectorError
            When a path cannot be listed or a file cannot be stat'ed.
        """
        digest = hashlib.sha256()
        count = 0
        for path in self._paths:
            try:
                files = [(file, os.stat(file)) for file in _expand(path)]
            except OSError as exc:
                raise io_error(f"reading the version of {path!r}", exc) from exc
            for file, stat in files:
                digest.update(f"{file}\0{stat.st_size}\0{stat.st_mtime_ns}\0"
                              f"{stat.st_ctime_ns}\0{stat.st_ino}\n".encode())
                count += 1
        return f"{count} files, sha256 {digest.hexdigest()}"

    def planner(self, progress: Any | None) -> SplitPlanner[FileSplit]:
        return _FilePlanner(self._paths, self._format, to_arrow_schema(self.schema),
                            self._filters, progress)

    def split_reader(self, lanes: int = 1, release_memory: bool = False, unit_scale: int = 1
                     ) -> Callable[[], _SplitReader]:
        """Makes split readers, which open the files on their fetcher threads and read
        ``lanes`` splits side by side (see `SideBySideReader`), in decode units
        ``unit_scale`` times the usual size."""
        file_format, schema = self._format, to_arrow_schema(self.schema)
        reading = self._reading_state()
        return lambda: _SplitReader(file_format, schema, reading, lanes, release_memory,
                                    unit_scale)

    def create_reader(self, context: SourceReaderContext) -> SourceReader[FileSplit]:
        """A reader of this source's splits, where its subtask runs: in a read that
        takes no checkpoints (a bulk load) with fewer readers than twice the cores, it
        reads several splits side by side, so that the readers together decode about
        two row groups per core, in decode units larger than the usual ~8 MB when the
        readers and lanes are fewer than 16 (``_UNITS_IN_FLIGHT``); otherwise one after
        the other, in order, in the usual units."""
        options = context.options
        lanes = scale = 1
        if not options.checkpoints:
            wanted = _ROW_GROUPS_PER_CORE * (os.cpu_count() or 1)
            parallelism = max(1, context.current_parallelism)
            lanes = max(1, min(_MAX_LANES, -(-wanted // parallelism)))
            held = lanes + (options.element_queue_capacity + 1 if options.release_memory else 0)
            scale = max(1, _UNITS_IN_FLIGHT // (parallelism * held))
        return PullingSourceReader(
            context, self.split_reader(lanes, options.release_memory, scale),
            self.emitter(), self.split_state, splits_in_flight=lanes)

    def new_reading(self) -> BatchReading:
        return BatchReading(self.schema, self._mode, self._filters)

    def serializer(self) -> SimpleVersionedSerializer[FileSplit]:
        return _SPLITS

    def __repr__(self) -> str:
        return f"FileSource({self._paths!r}, format={self._format!r})"
