"""An in-memory collection of rows or an Arrow table, in contiguous splits, read as
Arrow record batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from scan.arrow import conform_to_schema, record_batch_to_rows, rows_to_record_batch
from scan.pull import SplitFieldsSerializer, SplitListSource
from scan.serializers import SimpleVersionedSerializer
from scan.split import SourceSplit
from scan.types import arrow_to_spark, infer_python_type
from spark_lookup.errors import ConfigError
from spark_lookup.options import check_int
from spark_lookup.schema import SchemaLike, parse_schema, to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CollectionSource", "CollectionSplit"]

Row = tuple[Any, ...]

# Rows one fetch converts to Arrow: small enough that a queue of two stays cheap.
_FETCH_ROWS = 4096
# Rows of a table one fetch slices (zero-copy, so only the hand-overs count).
_FETCH_TABLE_ROWS = 65_536


@dataclass(frozen=True)
class CollectionSplit(SourceSplit):
    """Rows ``start`` (inclusive) to ``end`` (exclusive) of split number ``index``;
    a restored split starts where the checkpoint left it."""

    index: int
    start: int
    end: int

    @property
    def split_id(self) -> str:
        return f"split-{self.index}"


_SPLITS = SplitFieldsSerializer(CollectionSplit, "a CollectionSource split", int, int, int)


def _is_arrow(data: Any) -> bool:
    import pyarrow as pa

    return isinstance(data, (pa.Table, pa.RecordBatch))


class CollectionSource(SplitListSource[CollectionSplit]):
    """Rows held in memory, or an Arrow table, cut into ``num_splits`` contiguous splits
    of near-equal size.

    Built anywhere; the data is copied at construction (rows into tuples; a table is
    projected and cast) and travels with the source when it is pickled (so keep it
    small). Splits are read in order; the rows of one split are emitted in the order
    given. Readers fetch Arrow record batches of the declared schema on their fetcher
    threads: rows are converted column by column, a few thousand at a time (a value that
    does not convert is a ``SourceError`` naming the column, at read time); a table is
    sliced without copying. A checkpoint records the position in the split as a row
    index. Meant for tests, examples and small reference tables.

    Parameters
    ----------
    rows
        Sequences of values, one per row, in schema order; or a ``pyarrow.Table`` or
        ``RecordBatch``, whose columns are picked by name.
    num_splits
        How many splits (some are empty when there are fewer rows than splits).
    schema
        A Spark DDL string or ``StructType``. Without it, the types are inferred: from
        the table's Arrow types, or from the first non-null value of each column of the
        rows, named ``_1``, ``_2``, ... (as Spark names tuple fields). With a table, only
        the columns it names are kept (the others are dropped at construction), each
        cast to its declared type by Arrow.

    Raises
    ------
    ConfigError
        (a ``ValueError``) for a row of the wrong width, an invalid ``num_splits`` or
        ``schema``, a column whose type cannot be inferred, or a table that lacks a
        declared column or holds one that does not cast to its declared type.

    Examples
    --------
    >>> from scan import CollectionSource, LocalSourceRunner
    >>> source = CollectionSource([(1, "a"), (2, "b"), (3, "c")], num_splits=2)
    >>> source.schema.simpleString()
    'struct<_1:bigint,_2:string>'
    >>> with LocalSourceRunner(source, parallelism=1) as runner:
    ...     runner.run()
    [(1, 'a'), (2, 'b'), (3, 'c')]

    A table keeps only the declared columns:

    >>> import pyarrow as pa
    >>> wide = pa.table({"id": [1, 2], "v": ["a", "b"], "blob": [b"x", b"y"]})
    >>> CollectionSource(wide, schema="v STRING, id INT").rows
    (('a', 1), ('b', 2))
    """

    ROWS_FIELD = "start"  # a restored split reads on from its first row not emitted

    def __init__(
        self,
        rows: Iterable[Sequence[Any]] | pa.Table | pa.RecordBatch,
        num_splits: int = 1,
        schema: SchemaLike | None = None,
    ) -> None:
        self._num_splits = check_int(num_splits, "num_splits")
        self._rows: tuple[Row, ...] | None = None
        self._table: pa.Table | None = None
        if _is_arrow(rows):
            self._schema, self._table = self._from_arrow(rows, schema)
            self._count = self._table.num_rows
            return
        frozen: list[Row] = []
        for number, row in enumerate(rows):
            if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
                raise ConfigError(
                    f"row {number} must be a sequence of values, got {type(row).__name__}"
                )
            frozen.append(tuple(row))
        self._rows = tuple(frozen)
        self._count = len(self._rows)
        self._schema = (
            parse_schema(schema, "CollectionSource schema")
            if schema is not None
            else self._infer_schema(self._rows)
        )
        width = len(self._schema.fields)
        for number, row in enumerate(self._rows):
            if len(row) != width:
                raise ConfigError(
                    f"row {number} has {len(row)} values, but the schema has {width} fields"
                )

    @staticmethod
    def _from_arrow(data: Any, schema: SchemaLike | None) -> tuple[T.StructType, pa.Table]:
        import pyarrow as pa

        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if schema is None:
            struct = T.StructType(
                [
                    T.StructField(f.name, arrow_to_spark(f.type, f"column {f.name!r}"))
                    for f in table.schema
                ]
            )
        else:
            struct = parse_schema(schema, "CollectionSource schema")
        conformed = conform_to_schema(
            table, to_arrow_schema(struct), "the CollectionSource table", ConfigError
        )
        return struct, conformed

    @staticmethod
    def _infer_schema(rows: tuple[Row, ...]) -> T.StructType:
        if not rows:
            raise ConfigError(
                "cannot infer the schema of a CollectionSource without rows; pass schema"
            )
        width = len(rows[0])
        fields = []
        for column in range(width):
            value = next(
                (r[column] for r in rows if len(r) > column and r[column] is not None), None
            )
            if value is None:
                raise ConfigError(f"column _{column + 1} holds only nulls; pass schema")
            data_type = infer_python_type(value, f"column _{column + 1}")
            fields.append(T.StructField(f"_{column + 1}", data_type, True))
        return T.StructType(fields)

    @property
    def rows(self) -> tuple[Row, ...]:
        """The rows, as tuples (converted from the table on each access, if built from
        one)."""
        if self._rows is not None:
            return self._rows
        assert self._table is not None
        return tuple(
            row for batch in self._table.to_batches() for row in record_batch_to_rows(batch)
        )

    @property
    def num_splits(self) -> int:
        """The number of splits."""
        return self._num_splits

    @property
    def schema(self) -> T.StructType:
        return self._schema

    def splits(self) -> list[CollectionSplit]:
        """The splits, in order (contiguous ranges, sizes differ by at most one)."""
        count, parts = self._count, self._num_splits
        bounds = [count * i // parts for i in range(parts + 1)]
        return [CollectionSplit(i, bounds[i], bounds[i + 1]) for i in range(parts)]

    def read(self, split: CollectionSplit) -> Iterator[pa.RecordBatch | pa.Table]:
        """Rows ``split.start`` to ``split.end`` as Arrow: slices of the table, or the
        rows converted a few thousand at a time."""
        table, rows = self._table, self._rows
        if table is not None:
            for start in range(split.start, split.end, _FETCH_TABLE_ROWS):
                yield table.slice(start, min(_FETCH_TABLE_ROWS, split.end - start))
            return
        assert rows is not None
        schema = to_arrow_schema(self._schema)
        for start in range(split.start, split.end, _FETCH_ROWS):
            yield rows_to_record_batch(rows[start:min(split.end, start + _FETCH_ROWS)], schema,
                                       "CollectionSource")

    def serializer(self) -> SimpleVersionedSerializer[CollectionSplit]:
        """Its splits' serializer, which checks each field is an int."""
        return _SPLITS
