"""Iceberg tables, read with pyiceberg: a split per data file of the current snapshot."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from connectors.files.batches import (
    BatchReading,
    BatchReadingSource,
    BatchStreamReader,
    lake_error,
    skip_rows,
)
from connectors.policy import BadValuePolicy
from connectors.predicates import Predicate, check_predicates
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

__all__ = ["IcebergSource", "IcebergSplit"]

# A SQL catalog's SQLite, busy with another writer.
_LOCKED = re.compile("database is locked", re.I)


@dataclass(frozen=True)
class IcebergSplit(SourceSplit):
    """One data file of snapshot ``snapshot_id``; ``skip`` rows of it were emitted
    before a checkpoint."""

    snapshot_id: int
    file: str
    skip: int = 0

    @property
    def split_id(self) -> str:
        return self.file


_SPLITS = SplitFieldsSerializer(IcebergSplit, "an IcebergSource split", int, str, int)


def _iceberg_error(table: str, exc: BaseException) -> SparkLookupError:
    """A pyiceberg error as ours, naming the table: a missing table and what pyiceberg
    cannot read are permanent; I/O that may pass is transient."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    if isinstance(exc, SparkLookupError):
        return exc
    if isinstance(exc, (NoSuchTableError, NoSuchNamespaceError)):
        return ConnectorError(f"Iceberg table {table!r} not found: {exc}")
    text = f"Iceberg table {table!r}: {type(exc).__name__}: {exc}"
    if "equality deletes" in str(exc):
        return ConnectorError(f"Iceberg table {table!r} has equality delete files, which "
                              f"pyiceberg cannot apply yet (so IcebergSource refuses it): {exc}")
    return lake_error(text, exc, _LOCKED)


def to_iceberg_expression(predicates: Sequence[Predicate]) -> Any:
    """The pyiceberg expression true where every predicate holds (``AlwaysTrue`` for
    none), for its scan planning: partition and file statistics pruning, row groups
    and rows. Predicates whose values pyiceberg has no literal for are left out (they
    are applied to the rows read)."""
    from pyiceberg import expressions

    # pyiceberg's expression classes are pydantic models whose signatures mypy misreads.
    ex: Any = expressions
    ops: dict[str, Callable[[str, Any], Any]] = {
        "=": ex.EqualTo, "!=": ex.NotEqualTo, "<": ex.LessThan, "<=": ex.LessThanOrEqual,
        ">": ex.GreaterThan, ">=": ex.GreaterThanOrEqual,
    }
    terms: list[Any] = []
    for p in predicates:
        try:
            if p.op == "is null":
                terms.append(ex.IsNull(p.column))
            elif p.op == "is not null":
                terms.append(ex.NotNull(p.column))
            elif p.op == "in":
                terms.append(ex.In(p.column, set(p.value)))
            elif p.op == "not in":
                terms.append(ex.NotIn(p.column, set(p.value)))
            else:
                terms.append(ops[p.op](p.column, p.value))
        except (TypeError, ValueError):
            continue  # no Iceberg literal for this value
    expression: Any = ex.AlwaysTrue()
    for term in terms:
        expression = ex.And(expression, term)
    return expression


class _Tables:
    """Per process: the catalog, the table as last loaded, and the scan tasks planned
    per snapshot (the planner's, which readers of the same process reuse)."""

    def __init__(self, source: IcebergSource) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._catalog: Any = None
        self._table: Any = None
        self._tasks: dict[int, dict[str, Any]] = {}

    def load(self) -> Any:
        """The table, loaded again from the catalog (its current metadata)."""
        with self._lock:
            if self._catalog is None:
                self._catalog = self._source._load_catalog()
            try:
                self._table = self._catalog.load_table(self._source.table)
            except Exception as exc:
                raise_from(_iceberg_error(self._source.table, exc), exc)
            return self._table

    def table(self) -> Any:
        """The table as last loaded (loading it if never)."""
        return self._table if self._table is not None else self.load()

    def plan(self, snapshot_id: int | None) -> tuple[int | None, dict[str, Any]]:
        """The snapshot (default: the current one, loaded now) and its scan tasks by data
        file path, pruned by the source's filters."""
        table = self.load() if snapshot_id is None else self.table()
        if snapshot_id is not None and table.metadata.snapshot_by_id(snapshot_id) is None:
            table = self.load()  # a snapshot newer than the table loaded here
        if snapshot_id is None:
            snapshot_id = table.metadata.current_snapshot_id
            if snapshot_id is None:
                return None, {}  # a table with no snapshot: no rows
        with self._lock:
            found = self._tasks.get(snapshot_id)
        if found is not None:
            return snapshot_id, found
        source = self._source
        try:
            scan = table.scan(row_filter=source._expression, selected_fields=tuple(source.names),
                              snapshot_id=snapshot_id)
            tasks = {task.file.file_path: task for task in scan.plan_files()}
        except Exception as exc:
            raise_from(_iceberg_error(source.table, exc), exc)
        with self._lock:
            self._tasks = {snapshot_id: tasks}  # one snapshot at a time
        return snapshot_id, tasks


class _SplitReader(BatchStreamReader[IcebergSplit]):
    """Reads one data file at a time through pyiceberg's own reader (``ArrowScan``:
    columns by field id, row groups pruned and rows filtered by the filters, position
    deletes applied)."""

    def __init__(self, source: IcebergSource, tables: _Tables, reading: BatchReading) -> None:
        super().__init__()
        self._source = source
        self._tables = tables
        self._reading = reading

    def read_error(self, split: IcebergSplit, exc: BaseException) -> SparkLookupError:
        return _iceberg_error(self._source.table, exc)  # pyiceberg's and pyarrow's errors

    def batches(self, split: IcebergSplit) -> Iterator[pa.RecordBatch]:
        from pyiceberg.io.pyarrow import ArrowScan

        _, tasks = self._tables.plan(split.snapshot_id)
        task = tasks.get(split.file)
        if task is None:
            raise SourceError(f"Iceberg table {self._source.table!r} snapshot "
                              f"{split.snapshot_id} has no data file {split.file!r}")
        table = self._tables.table()
        scan = ArrowScan(table.metadata, table.io, table.schema().select(*self._source.names),
                         self._source._expression)
        yield from skip_rows(
            self._reading.conform_all(scan.to_record_batches([task]), split.file), split.skip)


class IcebergSource(BatchReadingSource[IcebergSplit, BatchReading]):
    """An Iceberg table read with pyiceberg: one split per data file of the current
    snapshot.

    Built on the driver and picklable (it holds the table's name and the catalog's
    properties only). The enumerator loads the table from the catalog and plans the
    current snapshot's scan with pyiceberg (its data files, less those that the
    ``filters`` rule out by partition values and column statistics); readers read their
    files through pyiceberg's own Arrow reader on their fetcher threads: columns
    matched by field id (renames and added columns read right), position delete files
    applied, row groups pruned and rows filtered. A table with equality delete files
    (which pyiceberg cannot apply) is refused with an error naming it.

    [`current_version`][] is the current snapshot id (with the schema id): a full
    cache over this source skips a reload while it is unchanged.

    Parameters
    ----------
    table
        The table's identifier, ``"namespace.table"``.
    catalog
        pyiceberg catalog properties as a dict (``{"type": "sql", "uri": ...,
        "warehouse": ...}``; ``"name"`` names it, default ``"default"``), or the name of
        a catalog of the user's pyiceberg configuration (``.pyiceberg.yaml``,
        ``PYICEBERG_CATALOG__...``).
    columns
        The columns to read (default: all), in this order.
    filters
        [`Predicate`][]s every row read must meet; they
        prune files and row groups through pyiceberg's scan planning.
    schema
        A Spark DDL string or ``StructType`` of the columns to read, cast to its types
        (instead of ``columns``); default, the table's types by PySpark's mapping.
    mode
        The bad-value policy for values that do not convert to a declared type.

    Raises
    ------
    ConfigError
        (a ``ValueError``) for a catalog or table that cannot be loaded (naming it), a
        column of ``columns``, ``schema`` or ``filters`` that the table does not have,
        or an invalid argument.
    ConnectorError
        On use, for a table that has gone or has equality deletes (naming the table);
        ``TransientConnectorError`` for catalog or storage errors that may pass.

    Examples
    --------
    >>> import os, tempfile
    >>> import pyarrow as pa
    >>> from pyiceberg.catalog import load_catalog
    >>> from scan import read_arrow
    >>> where = tempfile.mkdtemp()
    >>> catalog = {"type": "sql", "uri": f"sqlite:///{where}/catalog.db",
    ...            "warehouse": f"file://{where}"}
    >>> lake = load_catalog("default", **catalog)
    >>> lake.create_namespace("dim")
    >>> data = pa.table({"code": ["nl", "fr"], "name": ["NL", "FR"]})
    >>> lake.create_table("dim.countries", schema=data.schema).append(data)
    >>> source = IcebergSource("dim.countries", catalog=catalog, columns=["code"])
    >>> source.schema.simpleString()
    'struct<code:string>'
    >>> sorted(read_arrow(source).column("code").to_pylist())
    ['fr', 'nl']
    """

    ROWS_FIELD = "skip"
    _PER_PROCESS = ("_reading", "_tables")
    _tables: _Tables | None

    def __init__(
        self,
        table: str,
        catalog: Mapping[str, str] | str | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[Predicate] | None = None,
        *,
        schema: SchemaLike | None = None,
        mode: BadValuePolicy | str = BadValuePolicy.PERMISSIVE,
    ) -> None:
        if not isinstance(table, str) or not table.strip():
            raise ConfigError(f"table must name an Iceberg table, got {shown(table)}")
        if catalog is None:
            catalog = "default"
        if isinstance(catalog, Mapping):
            if not all(isinstance(k, str) for k in catalog):
                raise ConfigError("catalog properties must have string keys")
            catalog = {k: str(v) for k, v in catalog.items()}
        elif not isinstance(catalog, str) or not catalog:
            raise ConfigError(
                f"catalog must be a dict of pyiceberg catalog properties or a catalog name, "
                f"got {shown(catalog)}")
        if columns is not None and schema is not None:
            raise ConfigError("pass columns or schema, not both (schema names the columns)")
        if columns is not None and (isinstance(columns, str) or not columns or not all(
                isinstance(c, str) for c in columns)):
            raise ConfigError(f"columns must be a non-empty list of names, got {shown(columns)}")
        self.table = table
        self._catalog = catalog
        self._mode = BadValuePolicy.parse(mode)
        self._init_per_process()
        try:
            loaded = self._runtime_tables().load()
        except ConnectorError as exc:
            raise ConfigError(f"cannot load the Iceberg table {table!r}: {exc}") from exc
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        arrow_schema = schema_to_pyarrow(loaded.schema(), include_field_ids=False)
        names = arrow_schema.names
        struct, wanted = table_columns(arrow_schema, schema, columns,
                                       f"Iceberg table {table!r}")
        self._schema = struct
        self.names = list(wanted)
        self._filters = check_predicates(filters, names, f"IcebergSource({table!r})")
        unread = sorted({p.column for p in self._filters} - set(wanted))
        if unread:
            raise ConfigError(f"filters of IcebergSource({table!r}) name column(s) {unread} "
                              "that are not read; add them to columns")
        self._expression = to_iceberg_expression(self._filters)

    def _load_catalog(self) -> Any:
        from pyiceberg.catalog import load_catalog

        try:
            if isinstance(self._catalog, str):
                return load_catalog(self._catalog)
            properties = dict(self._catalog)
            return load_catalog(properties.pop("name", "default"), **properties)
        except Exception as exc:
            raise_from(_iceberg_error(self.table, exc), exc)

    def _runtime_tables(self) -> _Tables:
        if self._tables is None:
            self._tables = _Tables(self)
        return self._tables

    @property
    def schema(self) -> T.StructType:
        """The declared schema, or the table's types of the columns read."""
        return self._schema

    @property
    def bad_value_mode(self) -> BadValuePolicy:
        """The ``mode`` given (also what bad version history of a point-in-time lookup
        follows)."""
        return self._mode

    def current_version(self) -> tuple[int | None, int, str]:
        """The current snapshot id and schema id, and the table's UUID (a table dropped
        and created anew under the name is another table), from the catalog (one
        metadata read).

        Raises
        ------
        ConnectorError
            When the table has gone (``TransientConnectorError``: catalog or storage
            errors that may pass).
        """
        metadata = self._runtime_tables().load().metadata
        return metadata.current_snapshot_id, metadata.current_schema_id, str(metadata.table_uuid)

    def planner(self, progress: Any | None) -> SplitPlanner[IcebergSplit]:
        """Plans the current snapshot when first asked, then hands the files out in
        path order."""
        tables = self._runtime_tables()

        def plan(snapshot: int | None) -> tuple[int | None, list[IcebergSplit]]:
            snapshot, tasks = tables.plan(snapshot)
            if snapshot is None:
                return None, []
            return snapshot, [IcebergSplit(snapshot, file) for file in sorted(tasks)]

        return VersionListPlanner(plan, "snapshot", progress, "IcebergSource")

    def split_reader(self) -> Callable[[], _SplitReader]:
        """Makes split readers, which read the files on their fetcher threads."""
        tables, reading = self._runtime_tables(), self._reading_state()
        return lambda: _SplitReader(self, tables, reading)

    def new_reading(self) -> BatchReading:
        return BatchReading(self._schema, self._mode, self._filters, "IcebergSource")

    def serializer(self) -> SimpleVersionedSerializer[IcebergSplit]:
        return _SPLITS

    def __repr__(self) -> str:
        name = self._catalog if isinstance(self._catalog, str) else self._catalog.get(
            "name", self._catalog.get("type", "default"))
        return f"IcebergSource({self.table!r}, catalog={name!r})"
