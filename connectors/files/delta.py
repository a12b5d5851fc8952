"""Delta Lake tables, read with delta-rs (the ``deltalake`` package): a split per active
data file of one table version, or with ``history=True`` one split of the table's
versions built from its change data feed (`connectors.files.delta_history`)."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

from pyspark.sql import types as T

from connectors.files.batches import (
    BatchReading,
    BatchReadingSource,
    BatchStreamReader,
    lake_error,
    skip_rows,
)
from connectors.files.delta_history import VALID_FROM, VALID_TO, ChangeHistory
from connectors.policy import BadValuePolicy
from connectors.predicates import (
    Predicate,
    check_predicates,
    predicates_mask,
    predicates_to_pruning,
    statistics_decide,
)
from lookup.validity import Validity
from scan.planners import SplitPlanner, VersionListPlanner
from scan.pull import SplitFieldsSerializer
from scan.serializers import SimpleVersionedSerializer
from scan.split import SourceSplit
from scan.types import table_columns
from spark_lookup.errors import (
    ConfigError,
    ConnectorError,
    SourceError,
    SparkLookupError,
    raise_from,
)
from spark_lookup.schema import SchemaLike
from spark_lookup.shown import shown

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DeltaHistorySplit", "DeltaSource", "DeltaSplit"]

log = logging.getLogger("scan")

# Rows decoded per fetch (as FileSource: large units keep pyarrow's threads busy).
_DECODE_ROWS = 1 << 19
# Reader features whose files this source reads correctly one at a time: deletion
# vectors are applied here; the others change nothing a data file's reader sees.
_READER_FEATURES = frozenset({
    "deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "typeWidening",
    "typeWidening-preview", "variantType", "variantType-preview"})
# The table property that turns the change data feed on.
_FEED_PROPERTY = "delta.enableChangeDataFeed"
# Values delta-rs encodes itself in file pruning filters.
_PRUNABLE = (str, int, float, bool, dt.date)


@dataclass(frozen=True)
class DeltaSplit(SourceSplit):
    """One data file of version ``version`` of the table at ``table``: its URI,
    its partition values (column, value), whether a deletion vector applies to it, and
    ``skip`` rows emitted before a checkpoint."""

    table: str
    version: int
    file: str
    partition: tuple[tuple[str, Any], ...] = ()
    deletes: bool = False
    skip: int = 0

    @property
    def split_id(self) -> str:
        return self.file


# A partition travels as a list of [column, value] pairs.
_SPLITS = SplitFieldsSerializer(
    DeltaSplit, "a DeltaSource split", str, int, str,
    lambda partition: tuple((str(name), v) for name, v in partition), bool, int,
    writers={"partition": lambda partition: [list(p) for p in partition]})


@dataclass(frozen=True)
class DeltaHistorySplit(SourceSplit):
    """The versions of the table at ``table`` up to its version ``version``, built from
    its change data feed (``DeltaSource(..., history=True)``), less ``skip`` rows
    emitted before a checkpoint (the versions are in a fixed order: by key, then
    start)."""

    table: str
    version: int
    skip: int = 0

    @property
    def split_id(self) -> str:
        return f"history of {self.table} to version {self.version}"


_HISTORY_SPLITS = SplitFieldsSerializer(
    DeltaHistorySplit, "a DeltaSource history split", str, int, int)


def _delta_error(table: str, exc: BaseException) -> SparkLookupError:
    """A delta-rs error as ours, naming the table: a missing table or an unreadable
    protocol are permanent; I/O that may pass (a timeout, throttling) is transient."""
    import deltalake.exceptions as dx

    if isinstance(exc, SparkLookupError):
        return exc
    text = f"Delta table {table!r}: {type(exc).__name__}: {exc}"
    if isinstance(exc, dx.TableNotFoundError):
        return ConnectorError(f"Delta table {table!r} not found: {exc}")
    if isinstance(exc, (dx.DeltaProtocolError, dx.SchemaMismatchError)):
        return ConnectorError(text)
    return lake_error(text, exc)


def _open_table(uri: str, version: int | None, storage_options: Mapping[str, str] | None
                ) -> Any:
    from deltalake import DeltaTable

    try:
        options = None if storage_options is None else dict(storage_options)
        return DeltaTable(uri, version=version, storage_options=options)
    except Exception as exc:
        raise_from(_delta_error(uri, exc), exc)


def _check_protocol(uri: str, table: Any) -> None:
    protocol = table.protocol()
    features = set(protocol.reader_features or ())
    unknown = sorted(features - _READER_FEATURES)
    if protocol.min_reader_version > 3 or unknown:
        raise ConnectorError(
            f"Delta table {uri!r} needs reader version {protocol.min_reader_version} with "
            f"features {unknown or sorted(features)}, which DeltaSource cannot read file by "
            "file (it reads deletion vectors, timestampNtz, v2 checkpoints, type widening and "
            "variants)"
        )


def _arrow_schema(table: Any) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(table.schema().to_arrow())


def _file_filters(predicates: Sequence[Predicate], floating: frozenset[str] = frozenset(),
                  partitions: frozenset[str] = frozenset()) -> list[tuple[str, str, Any]]:
    """The predicates delta-rs can prune files with (partition values and file
    statistics), as its tuple filters; the others are only applied to rows, as are those
    statistics of the ``floating`` columns cannot decide (``statistics_decide``).
    Floating partition columns are left to `_partition_mask`: delta-rs orders
    their values totally (-0.0 before 0.0), not by SQL's rules."""
    pushed: list[tuple[str, str, Any]] = []
    for p in predicates:
        if p.op in ("is null", "is not null") or (p.column in floating
                                                  and p.column in partitions):
            continue
        try:
            if not statistics_decide(p, p.column in floating):
                continue
        except (ValueError, TypeError):  # not a number for a floating column: rows decide
            continue
        values = p.value if p.op in ("in", "not in") else (p.value,)
        if all(isinstance(v, _PRUNABLE) for v in values):
            pushed.append((p.column, p.op, list(values) if p.op in ("in", "not in") else p.value))
    return pushed


def plan_files(uri: str, table: Any, predicates: Sequence[Predicate],
               columns: Sequence[str] | None = None) -> tuple[int, list[DeltaSplit]]:
    """The splits of ``table`` (a loaded ``DeltaTable``): its active files that may hold
    rows meeting ``predicates`` (delta-rs prunes by partition values and file
    statistics; floating partition values are compared here, by SQL's rules), in path
    order, with their partition values.

    Raises
    ------
    ConnectorError
        When the table no longer has one of ``columns`` (the columns read): its rows
        would read it as NULL."""
    import pyarrow as pa

    _check_protocol(uri, table)
    version = int(table.version())
    schema = _arrow_schema(table)
    if columns is not None:
        _check_columns(uri, version, schema, columns)
    floating = frozenset(f.name for f in schema if pa.types.is_floating(f.type))
    partition_columns = frozenset(table.metadata().partition_columns)
    pushed = _file_filters(predicates, floating, partition_columns)
    try:
        try:
            uris = table.file_uris(file_pruning_predicate=pushed or None)
        except Exception as exc:
            if not pushed:
                raise
            # A value delta-rs cannot encode for its column: no pruning (rows are still
            # filtered after the read).
            log.warning("Delta table %r: files not pruned by %s: %s", uri, pushed, exc)
            uris = table.file_uris()
        actions = pa.table(table.get_add_actions(flatten=True))
        deleted: set[str] = set()
        if "deletionVectors" in set(table.protocol().reader_features or ()):
            vectors = pa.table(table.deletion_vectors().read_all())
            deleted = set(vectors.column("filepath").to_pylist())
    except Exception as exc:
        raise_from(_delta_error(uri, exc), exc)
    partitions = [name for name in actions.column_names if name.startswith("partition.")]
    by_path: dict[str, dict[str, Any]] = {}
    for row in actions.select(["path", *partitions]).to_pylist():
        by_path[unquote(row.pop("path"))] = row
    splits = []
    for file in sorted(uris):
        values = _partition_of(file, by_path)
        partition = tuple((name[len("partition."):], value) for name, value in values.items())
        splits.append(DeltaSplit(uri, version, file, partition, _deleted(file, deleted)))
    by_value = [p for p in predicates if p.column in floating and p.column in partition_columns]
    if by_value and splits:
        keep = _partition_mask(splits, schema, by_value)
        splits = [split for split, kept in zip(splits, keep, strict=True) if kept]
    return version, splits


def _partition_mask(splits: Sequence[DeltaSplit], schema: pa.Schema,
                    predicates: Sequence[Predicate]) -> list[bool]:
    """Which splits' partition values meet ``predicates`` (on partition columns), by
    the rows' own rules (``predicates_mask``: -0.0 = 0.0, a null compares to nothing)."""
    import pyarrow as pa

    names = sorted({p.column for p in predicates})
    values = pa.table({name: pa.array([dict(split.partition).get(name) for split in splits],
                                      schema.field(name).type) for name in names})
    return [bool(kept) for kept in predicates_mask(values, predicates).to_pylist()]


def _check_columns(uri: str, version: int, schema: pa.Schema, columns: Sequence[str]) -> None:
    gone = [name for name in columns if schema.get_field_index(name) < 0]
    if gone:
        raise ConnectorError(
            f"Delta table {uri!r} version {version} no longer has column(s) {gone} that "
            f"this source reads (the table's columns: {schema.names}); the source must be "
            "declared anew for the table's new schema")


def _partition_of(file: str, by_path: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    # delta-rs lists files by URI and describes them by their path relative to the table
    # (URI-encoded in the log): the relative path ends the URI.
    relative = file.removeprefix("file://")
    while relative:
        found = by_path.get(relative)
        if found is not None:
            return found
        _, _, relative = relative.partition("/")
    raise SourceError(f"delta-rs listed {file!r}, which is not among the table's add actions")


def _deleted(file: str, deleted: set[str]) -> bool:
    return file in deleted or f"file://{file}" in deleted or unquote(file) in deleted


class _DeletionVectors:
    """Per process: the keep-masks of the files of one table version that carry a
    deletion vector, read through delta-rs once per version, when a reader first needs
    one."""

    def __init__(self, storage_options: Mapping[str, str] | None) -> None:
        self._options = storage_options
        self._lock = threading.Lock()
        self._masks: dict[tuple[str, int], dict[str, Any]] = {}

    def keep(self, split: DeltaSplit) -> Any:
        key = (split.table, split.version)
        for fresh in (False, True):
            # A table replaced at its path has the same (path, version) with other
            # files: masks read before it are read again once, never taken for its own.
            with self._lock:
                masks = None if fresh else self._masks.get(key)
                if masks is None:
                    masks = self._read(split)
                    self._masks = {key: masks}  # one version at a time
            for name in (split.file, f"file://{split.file}", unquote(split.file)):
                if name in masks:
                    return masks[name]
        raise SourceError(f"Delta table {split.table!r} version {split.version}: no deletion "
                          f"vector found for {split.file!r}, which has one")

    def _read(self, split: DeltaSplit) -> dict[str, Any]:
        import numpy as np
        import pyarrow as pa

        table = _open_table(split.table, split.version, self._options)
        try:
            vectors = pa.table(table.deletion_vectors().read_all())
        except Exception as exc:
            raise_from(_delta_error(split.table, exc), exc)
        return {path: np.asarray(keep, dtype=bool) for path, keep in zip(
            vectors.column("filepath").to_pylist(),
            vectors.column("selection_vector").to_pylist(), strict=True)}


class _Reading(BatchReading):
    """The conversion of the source's batches, its deletion vectors and, with history,
    the versions built so far (per process)."""

    def __init__(self, schema: T.StructType, mode: BadValuePolicy, filters: Sequence[Predicate],
                 storage_options: Mapping[str, str] | None,
                 history: ChangeHistory | None = None) -> None:
        super().__init__(schema, mode, filters, "DeltaSource")
        self.deletion_vectors = _DeletionVectors(storage_options)
        self.history = history


def _check_feed(uri: str, table: Any, version: int | None = None) -> None:
    """Refuses a table whose change data feed is off (at ``version``, when given)."""
    try:
        configuration = table.metadata().configuration
    except Exception as exc:
        raise_from(_delta_error(uri, exc), exc)
    if str(configuration.get(_FEED_PROPERTY, "false")).lower() != "true":
        at = "" if version is None else f" at version {version}"
        raise ConnectorError(
            f"Delta table {uri!r}{at} does not have its change data feed enabled (table "
            f"property {_FEED_PROPERTY!r} = 'true'), which DeltaSource(history=True) reads")


class _HistoryReader(BatchStreamReader[DeltaHistorySplit]):
    """Reads the versions of a history split: built in this process's `ChangeHistory`
    (reading the feed since the versions it built last), then conformed to the
    declared schema in batches."""

    def __init__(self, reading: _Reading, storage_options: Mapping[str, str] | None) -> None:
        super().__init__()
        self._reading = reading
        self._options = storage_options

    def read_error(self, split: DeltaHistorySplit, exc: BaseException) -> SparkLookupError:
        return _delta_error(split.table, exc)

    def batches(self, split: DeltaHistorySplit) -> Iterator[pa.RecordBatch]:
        return skip_rows(self._conformed(split), split.skip)

    def _conformed(self, split: DeltaHistorySplit) -> Iterator[pa.RecordBatch]:
        history = self._reading.history
        if history is None:
            raise SourceError(f"a history split of {split.table!r} reached a DeltaSource "
                              "without history")
        table = _open_table(split.table, split.version, self._options)
        _check_feed(split.table, table, split.version)
        versions = history.versions(table, split.version)
        where = f"history of Delta table {split.table!r} at version {split.version}"
        for start in range(0, versions.num_rows, _DECODE_ROWS):
            rows = versions.slice(start, _DECODE_ROWS).combine_chunks()
            for batch in rows.to_batches():
                yield self._reading.conform(batch, where, start)


class _SplitReader(BatchStreamReader[DeltaSplit]):
    """Reads one data file at a time with pyarrow, only the declared columns, row groups
    skipped by their statistics when the filters rule them out; partition columns are
    filled from the split, deleted rows dropped by the file's deletion vector."""

    def __init__(self, reading: _Reading, file_schema: pa.Schema,
                 storage_options: Mapping[str, str] | None) -> None:
        super().__init__()
        self._reading = reading
        self._file_schema = file_schema  # the table's Arrow types of the declared columns
        self._options = storage_options
        self._format: Any = None
        self._filesystems: dict[str, Any] = {}

    def read_error(self, split: DeltaSplit, exc: BaseException) -> SparkLookupError:
        return _delta_error(split.table, exc)  # pyarrow's and delta-rs's errors

    def _fragment(self, split: DeltaSplit) -> Any:
        import pyarrow.dataset as ds

        if self._format is None:
            self._format = ds.ParquetFileFormat(
                default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True))
        import pyarrow.fs as pa_fs

        if "://" not in split.file or split.file.startswith("file://"):
            path = split.file.removeprefix("file://")
            return self._format.make_fragment(path, filesystem=pa_fs.LocalFileSystem())
        from deltalake.fs import DeltaStorageHandler

        filesystem = self._filesystems.get(split.table)
        if filesystem is None:
            options = None if self._options is None else dict(self._options)
            filesystem = pa_fs.PyFileSystem(DeltaStorageHandler(split.table, options))
            self._filesystems = {split.table: filesystem}
        relative = split.file[len(split.table.rstrip("/")) + 1:]
        return self._format.make_fragment(relative, filesystem=filesystem)

    def batches(self, split: DeltaSplit) -> Iterator[pa.RecordBatch]:
        return skip_rows(self._conformed(split), split.skip)

    def _conformed(self, split: DeltaSplit) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        fragment = self._fragment(split)
        partition = dict(split.partition)
        in_file = set(fragment.physical_schema.names)
        columns = [f.name for f in self._file_schema
                   if f.name not in partition and f.name in in_file]
        keep = self._reading.deletion_vectors.keep(split) if split.deletes else None
        options: dict[str, Any] = {"columns": columns, "batch_size": _DECODE_ROWS}
        if keep is None:
            # Row groups whose statistics rule the filters out are not read (only where
            # statistics can decide: NaN is in no float statistics); every row read is
            # filtered after conversion (SQL's null rules, partition columns).
            filters = [p for p in self._reading.filters if p.column in columns]  # not partitions
            expression = (predicates_to_pruning(filters, fragment.physical_schema,
                                                self._file_schema) if filters else None)
            if expression is not None:
                with contextlib.suppress(ValueError, TypeError, NotImplementedError):
                    fragment = fragment.subset(filter=expression)
        # (A deletion vector counts rows by their position in the file: read them all.)
        start = 0
        for batch in fragment.to_batches(**options):
            rows = batch.num_rows
            if keep is not None:
                mask = keep[start:start + rows]
                if len(mask) < rows:  # rows past the vector's end are kept
                    mask = np.concatenate([mask, np.ones(rows - len(mask), dtype=bool)])
                if not mask.all():
                    batch = batch.filter(pa.array(mask))
            arrays = []
            for field in self._file_schema:
                if field.name in partition:
                    arrays.append(pa.repeat(pa.scalar(partition[field.name], field.type),
                                            batch.num_rows))
                elif field.name in in_file:
                    arrays.append(_as_table_type(
                        batch.column(batch.schema.get_field_index(field.name)), field.type))
                else:  # a column added after this file was written
                    arrays.append(pa.nulls(batch.num_rows, field.type))
            full = pa.RecordBatch.from_arrays(arrays, names=self._file_schema.names)
            yield self._reading.conform(full, split.file, start)
            start += rows

    def close(self) -> None:
        super().close()
        self._filesystems = {}


def _as_table_type(column: Any, table_type: Any) -> Any:
    """A file's column as the table's type where only the Arrow layout differs (writers
    store strings and binaries as views or large types); other differences are left to
    the conversion (which casts to the declared type, or names the column)."""
    import pyarrow as pa

    if column.type == table_type:
        return column
    layouts = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view,
               pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    if any(test(column.type) for test in layouts) and any(test(table_type) for test in layouts):
        try:
            return column.cast(table_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return column
    return column


class DeltaSource(BatchReadingSource[DeltaSplit | DeltaHistorySplit, _Reading]):
    """A Delta Lake table read with delta-rs: one split per active data file of one
    table version.

    Built on the driver and picklable (it holds the table's URI and options only). The
    enumerator loads the table's log at the version asked for (the latest when not
    pinned) and lists its active files (never the removed ones), less those that the
    ``filters`` rule out by their partition values or file statistics; readers read their
    files on their fetcher threads with pyarrow as Arrow record batches of the declared
    schema: only the declared columns, row groups skipped by their statistics,
    partition columns filled from the log, rows deleted by a deletion vector dropped
    (read through delta-rs), the ``filters`` applied to the rows.

    [`current_version`][] is the table's latest version (or the pinned one) with the
    table's id: a full cache over this source skips a reload while both are unchanged
    (a table deleted and written anew at the same path starts again at version 0).

    Parameters
    ----------
    path_or_uri
        The table's directory or URI (``s3://...``, ``abfss://...``, anything delta-rs
        opens).
    columns
        The columns to read (default: all), in this order; their types are the table's.
    filters
        [`Predicate`][]s every row read must meet (all of
        them); they prune files and row groups before reading.
    version
        A table version to pin (default: the latest at each load).
    storage_options
        delta-rs's storage options (credentials, endpoints), strings to strings.
    schema
        A Spark DDL string or ``StructType`` of the columns to read, cast to its types
        (instead of ``columns``): default, the table's own types by PySpark's mapping.
    mode
        The bad-value policy for values that do not convert to a declared type.
    history
        Read the table's history instead of one version: the rows are versions, built
        from the change data feed (table property ``delta.enableChangeDataFeed``), with
        two more columns, ``_valid_from`` and ``_valid_to`` (TIMESTAMP, UTC, in
        microseconds; ``_valid_to`` NULL while valid), which [`history_validity`][]
        declares to a provider. Each insert or update post-image opens a version of its
        key from its commit's timestamp; the key's next change closes it at that
        commit's timestamp; a delete opens none. Update pre-images are ignored. A key
        has one row at a time: an insert of a key that has a version also closes it (a
        table that appends a second row of a key holds both; its history, the later
        one), so versions of a key never overlap. Within one commit a key's deletes go
        before its inserts and post-images, then the feed's own order; the last wins (a
        file rewritten by an overwrite lists its rows deleted and inserted again: they
        stay). Commit timestamps are made non-decreasing in commit order (a writer's
        clock going back would end a version before it starts), and a version valid for
        no time (two commits in one millisecond) is left out. Rows with a NULL key are
        left out.
        A reload reads only the commits since the previous one in this process (see
        `connectors.files.delta_history.ChangeHistory`); the first read in a process
        reads the feed from version 0.
    key_columns
        With ``history``, the key whose changes chain into versions (required); among
        the columns read.

    Raises
    ------
    ConfigError
        (a ``ValueError``) for a table that cannot be opened (naming it), a column of
        ``columns``, ``schema`` or ``filters`` that the table does not have, or an
        invalid argument; with ``history``: a table whose change data feed is off or that
        has a column named ``_valid_from`` or ``_valid_to`` (declare them with
        ``Validity`` over a plain ``DeltaSource`` instead), no ``key_columns``, or
        ``filters`` on other columns than the key (they would drop the changes that end
        versions).
    ConnectorError
        On use, for a table that has gone, or needs a reader feature this source does
        not read (naming the table); ``TransientConnectorError`` for storage errors
        that may pass. With ``history``: a feed turned off since, or no longer
        readable from the version needed (cleaned up by ``VACUUM`` or log retention, or
        not written before the feed was turned on), names the table and the versions:
        there is no fallback, since building again from version 0 needs all of it.

    Examples
    --------
    >>> import os, tempfile
    >>> import pyarrow as pa
    >>> from deltalake import write_deltalake
    >>> from scan import read_arrow
    >>> path = os.path.join(tempfile.mkdtemp(), "countries")
    >>> write_deltalake(path, pa.table({"code": ["nl", "fr"], "name": ["NL", "FR"]}))
    >>> source = DeltaSource(path, columns=["code"])
    >>> source.schema.simpleString(), source.current_version()[0]
    ('struct<code:string>', 0)
    >>> sorted(read_arrow(source).column("code").to_pylist())
    ['fr', 'nl']
    """

    ROWS_FIELD = "skip"
    _PER_PROCESS = ("_reading", "_latest", "_latest_lock", "_latest_mark")
    _latest: Any
    _latest_lock: threading.Lock | None
    _latest_mark: Any

    def __init__(
        self,
        path_or_uri: str | os.PathLike[str],
        columns: Sequence[str] | None = None,
        filters: Sequence[Predicate] | None = None,
        version: int | None = None,
        storage_options: Mapping[str, str] | None = None,
        *,
        schema: SchemaLike | None = None,
        mode: BadValuePolicy | str = BadValuePolicy.PERMISSIVE,
        history: bool = False,
        key_columns: Sequence[str] | None = None,
    ) -> None:
        uri = os.fspath(path_or_uri) if isinstance(path_or_uri, os.PathLike) else path_or_uri
        if not isinstance(uri, str) or not uri:
            raise ConfigError(f"path_or_uri must name a Delta table, got {shown(path_or_uri)}")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)
                                    or version < 0):
            raise ConfigError(f"version must be a table version (an int >= 0), got {version!r}")
        if storage_options is not None and not (
            isinstance(storage_options, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in storage_options.items())
        ):
            raise ConfigError("storage_options must map strings to strings")
        if columns is not None and schema is not None:
            raise ConfigError("pass columns or schema, not both (schema names the columns)")
        if columns is not None and (isinstance(columns, str) or not all(
                isinstance(c, str) for c in columns) or not columns):
            raise ConfigError(f"columns must be a non-empty list of names, got {shown(columns)}")
        self._uri = uri
        self._version = version
        self._options = None if storage_options is None else dict(storage_options)
        self._mode = BadValuePolicy.parse(mode)
        self._init_per_process()
        try:
            table = _open_table(uri, version, self._options)
        except ConnectorError as exc:
            raise ConfigError(f"cannot open the Delta table {uri!r}: {exc}") from exc
        arrow_schema = _arrow_schema(table)
        names = arrow_schema.names
        struct, wanted = table_columns(arrow_schema, schema, columns, f"Delta table {uri!r}")
        self._schema = struct
        import pyarrow as pa

        self._file_schema = pa.schema([arrow_schema.field(name) for name in wanted])
        self._filters = check_predicates(filters, names, f"DeltaSource({uri!r})")
        unread = sorted({p.column for p in self._filters} - set(wanted))
        if unread:
            # Rows are filtered after the read (null rules, deletion vectors), on the
            # columns read.
            raise ConfigError(f"filters of DeltaSource({uri!r}) name column(s) {unread} that "
                              "are not read; add them to columns")
        if not isinstance(history, bool):
            raise ConfigError(f"history must be True or False, got {history!r}")
        self._history = history
        self._keys: tuple[str, ...] | None = None
        if history:
            self._keys = self._history_keys(table, wanted, key_columns)
        elif key_columns is not None:
            raise ConfigError(f"DeltaSource({uri!r}): key_columns chain the changes of "
                              "history=True; a plain DeltaSource takes none (the provider "
                              "has the key)")

    def _history_keys(self, table: Any, wanted: Sequence[str],
                      key_columns: Sequence[str] | None) -> tuple[str, ...]:
        """The key of a history source, its table checked; appends the validity columns
        to the schema."""
        what = f"DeltaSource({self._uri!r}, history=True)"
        if key_columns is None or isinstance(key_columns, str) or not key_columns or not all(
                isinstance(c, str) for c in key_columns):
            raise ConfigError(f"{what} needs key_columns, a non-empty list of the key's "
                              f"column names, got {shown(key_columns)}")
        keys = tuple(key_columns)
        unread = [c for c in keys if c not in wanted]
        if unread:
            raise ConfigError(f"{what}: key column(s) {unread} are not among the columns "
                              f"read {list(wanted)}")
        try:
            _check_feed(self._uri, table)
        except ConnectorError as exc:
            raise ConfigError(str(exc)) from exc
        names = _arrow_schema(table).names
        clash = [c for c in (VALID_FROM, VALID_TO) if c in names]
        if clash:
            raise ConfigError(
                f"{what}: the table already has column(s) {clash}, which history adds; "
                "if they are its versions, declare them with Validity over "
                f"DeltaSource({self._uri!r})")
        not_keys = sorted({p.column for p in self._filters} - set(keys))
        if not_keys:
            raise ConfigError(
                f"{what}: filters on column(s) {not_keys} would drop the changes that end "
                "versions; with history, filters may name key columns only")
        stamp = T.TimestampType()
        self._schema = T.StructType([*self._schema.fields, T.StructField(VALID_FROM, stamp),
                                     T.StructField(VALID_TO, stamp)])
        return keys

    @property
    def bad_value_mode(self) -> BadValuePolicy:
        """The ``mode`` given (also what bad version history of a point-in-time lookup
        follows)."""
        return self._mode

    @property
    def uri(self) -> str:
        """The table's path or URI as given."""
        return self._uri

    @property
    def schema(self) -> T.StructType:
        """The declared schema, or the table's types of the columns read (with
        ``history``, then ``_valid_from`` and ``_valid_to``)."""
        return self._schema

    @property
    def history_validity(self) -> Validity:
        """The validity columns of a history source, for its provider
        (``validity=source.history_validity``).

        Raises
        ------
        ConfigError
            For a source without ``history``: its rows have no validity columns.
        """
        if not self._history:
            raise ConfigError(f"{self!r} reads one version of the table, not its history "
                              "(history=True): it has no validity columns")
        return Validity(VALID_FROM, VALID_TO)

    @property
    def history_reads(self) -> tuple[tuple[int, int], ...]:
        """The ranges of commit versions (first, last) this process read from the
        change data feed, the latest 64, oldest first: a reload after one new commit
        ``v`` reads ``(v, v)``, an unchanged table nothing (empty without history)."""
        reading = self._reading
        if reading is None or reading.history is None:
            return ()
        return reading.history.reads

    def current_version(self) -> tuple[int, str]:
        """The pinned version, else the table's latest (its log read incrementally), and
        the table's id (its metadata's): a table written anew at the path is another
        table, whatever its version number.

        Raises
        ------
        ConnectorError
            When the table has gone (``TransientConnectorError``: storage errors that
            may pass).
        """
        table = self._latest_table()
        try:
            return int(table.version()), str(table.metadata().id)
        except Exception as exc:
            raise_from(_delta_error(self._uri, exc), exc)

    def _latest_table(self) -> Any:
        """This process's ``DeltaTable`` (at the pinned version, else moved on to the
        latest). Read afresh when the commit it holds is no longer the one in the log:
        moved on incrementally, a table replaced at its path would mix the new table's
        later commits into the old one's state."""
        if self._latest_lock is None:
            self._latest_lock = threading.Lock()
        with self._latest_lock:
            held = self._latest
            if held is not None and self._commit_mark(int(held.version())) != self._latest_mark:
                log.info("Delta table %r: the log's commit %s changed; reading the table "
                         "afresh", self._uri, held.version())
                held = None
            if held is None:
                held = _open_table(self._uri, self._version, self._options)
            elif self._version is None:
                try:
                    held.update_incremental()
                except Exception as exc:
                    raise_from(_delta_error(self._uri, exc), exc)
            self._latest = held
            self._latest_mark = self._commit_mark(int(held.version()))
            return held

    def _commit_mark(self, version: int) -> Any:
        """What identifies the log's commit file of ``version`` (size and modification
        time; None when it is gone): a rewrite of the log changes it."""
        import pyarrow.fs as pa_fs

        name = f"_delta_log/{version:020d}.json"
        try:
            if "://" not in self._uri or self._uri.startswith("file://"):
                root = self._uri.removeprefix("file://").rstrip("/")
                info = pa_fs.LocalFileSystem().get_file_info(f"{root}/{name}")
            else:
                from deltalake.fs import DeltaStorageHandler

                handler = DeltaStorageHandler(self._uri, self._options)
                info = pa_fs.PyFileSystem(handler).get_file_info(name)
        except Exception as exc:
            raise_from(_delta_error(self._uri, exc), exc)
        if info.type == pa_fs.FileType.NotFound:
            return None
        return info.size, info.mtime_ns

    def planner(self, progress: Any | None) -> SplitPlanner[DeltaSplit | DeltaHistorySplit]:
        """Lists the files of one version (with history: its one split) when first
        asked, then hands them out in order."""
        return VersionListPlanner(self.plan, "version", progress, "DeltaSource")

    def plan(self, version: int | None = None
             ) -> tuple[int, Sequence[DeltaSplit | DeltaHistorySplit]]:
        """The version planned and its splits (``version``, default: the pinned one, else
        the latest); on the coordinator."""
        if version is None:
            version = self._version
        table = (self._latest_table() if version is None
                 else _open_table(self._uri, version, self._options))
        if self._history:
            try:
                planned = int(table.version())
            except Exception as exc:
                raise_from(_delta_error(self._uri, exc), exc)
            _check_feed(self._uri, table, planned)
            return planned, [DeltaHistorySplit(self._uri, planned)]
        return plan_files(self._uri, table, self._filters, self._file_schema.names)

    def split_reader(self) -> Callable[[], BatchStreamReader[Any]]:
        """Makes split readers, which open the files on their fetcher threads."""
        reading = self._reading_state()
        file_schema, options = self._file_schema, self._options
        if self._history:
            return lambda: _HistoryReader(reading, options)
        return lambda: _SplitReader(reading, file_schema, options)

    def new_reading(self) -> _Reading:
        history = None if self._keys is None else ChangeHistory(
            self._uri, self._options, self._file_schema, self._keys)
        return _Reading(self._schema, self._mode, self._filters, self._options, history)

    def serializer(self) -> SimpleVersionedSerializer[DeltaSplit | DeltaHistorySplit]:
        serializer: Any = _HISTORY_SPLITS if self._history else _SPLITS
        return cast("SimpleVersionedSerializer[DeltaSplit | DeltaHistorySplit]", serializer)

    def __repr__(self) -> str:
        pinned = "" if self._version is None else f", version={self._version}"
        history = "" if self._keys is None else f", history=True, key_columns={list(self._keys)}"
        return f"DeltaSource({self._uri!r}{pinned}{history})"
