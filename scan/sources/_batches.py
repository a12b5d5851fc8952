"""What the file-based sources share: a fetched batch made the declared schema's (the
connector layer's casts and bad-value policy, then the filters), and look-ahead over a
split's batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql import types as T

from connectors.convert import Conformer, castable
from connectors.policy import BadValuePolicy, BadValueStats
from connectors.predicates import Predicate, predicates_mask
from spark_lookup.errors import ConfigError, ConnectorError, SourceError
from spark_lookup.schema import to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BatchReading", "io_error", "with_last"]


def io_error(what: str, exc: BaseException) -> ConnectorError:
    """A permanent error: ``what`` failed, with the cause's type and text."""
    return ConnectorError(f"{what} failed: {type(exc).__name__}: {exc}")


T_ = TypeVar("T_")


def with_last(items: Iterator[T_]) -> Iterator[tuple[T_, bool]]:
    """Each item with whether it is the last (one item of look-ahead), so the fetch that
    carries a split's last batch also finishes it."""
    previous = next(items, _END)
    while previous is not _END:
        current = next(items, _END)
        yield previous, current is _END
        previous = current


_END: Any = object()


class BatchReading:
    """How a file's batches become the schema's: the shared conversion of the connector
    layer (the same casts and bad-value policy as every other source), then the
    filters. Per process (its counter); shared by the source's readers."""

    def __init__(self, schema: T.StructType, mode: BadValuePolicy,
                 filters: Sequence[Predicate], what: str = "FileSource") -> None:
        self.schema = to_arrow_schema(schema)
        self.stats = BadValueStats(what)
        self._conformer = Conformer(
            "file", self.schema, [f.dataType.simpleString() for f in schema.fields], mode,
            self.stats,
        )
        self._filters = tuple(filters)

    @property
    def filters(self) -> tuple[Predicate, ...]:
        """The predicates rows must meet."""
        return self._filters

    def conform(self, batch: pa.RecordBatch, path: str, start: int) -> pa.RecordBatch:
        import pyarrow as pa

        names = batch.schema.names
        missing = [f.name for f in self.schema if f.name not in names]
        if missing:
            raise ConfigError(f"{path!r} has no column(s) {missing}; it has {names}")
        wires = [batch.column(names.index(f.name)) for f in self.schema]
        for field, wire in zip(self.schema, wires, strict=True):
            if not castable(wire.type, field.type):
                raise ConfigError(
                    f"{path!r}: column {field.name!r} holds {wire.type} values, which cannot be "
                    f"read as {field.type}"
                )
        columns, keep = self._conformer.conform(wires, lambda row: f"row {start + row}", where=path)
        out = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        if keep is not None:
            out = out.filter(keep)
        for field, column in zip(self.schema, out.columns, strict=True):
            if not field.nullable and column.null_count:
                raise SourceError(f"{path!r}: column {field.name!r} is NOT NULL but holds nulls")
        if self._filters:
            out = out.filter(predicates_mask(out, self._filters))
        return out


