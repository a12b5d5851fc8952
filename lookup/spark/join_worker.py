"""The function a lookup join runs in executors' Python workers: each Arrow batch of
the stream joined by the worker's runtime of the provider (and, with metrics, the
worker's report written into the output; see `lookup.spark.report`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pyarrow as pa

from lookup.providers import LookupProvider
from lookup.runtime.worker import worker_runtime
from lookup.spark.assemble import JoinShape, join_batch
from lookup.spark.report import attach_report, metrics_report, placeholder, with_report

__all__ = ["JoinFunction"]

class JoinFunction:
    """The function ``mapInArrow`` runs in executors' Python workers (picklable).

    With ``report_nullable`` (the nullability of each added dimension column), the
    output has one more column, `lookup.spark.metrics.REPORT_COLUMN`, holding the
    worker's cumulative metrics (see `lookup.spark.metrics`) as of each batch, on the
    batch's *first* row, null in every other: an action that reads only part of the
    output (``show``, ``limit``) still reads a report. A left join writes it on the
    first joined row of each batch. An inner join may have none, so it writes a *report
    row* before each batch's rows instead, which holds valid values in every column (a
    stream row and placeholder dimension values) because Spark reads it as a row of
    the declared schema before the plan's filter drops it.
    """

    def __init__(self, provider: LookupProvider, shape: JoinShape,
                 report_nullable: tuple[bool, ...] | None = None) -> None:
        self.provider = provider
        self.shape = shape
        self.report_nullable = report_nullable
        # What "now" is for a point-in-time join without as_of (tests set another).
        self.clock: Callable[[], float] = time.time

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        runtime = None
        describe = self.provider.describe()
        reporting = self.report_nullable is not None
        try:
            for batch in batches:
                if runtime is None:
                    runtime = worker_runtime(self.provider)
                out = join_batch(batch, self.shape, runtime, describe, self.clock)
                if not reporting:
                    yield out
                    continue
                if self.shape.how == "left":
                    # A left join has a row for every stream row: no row of its own.
                    if out.num_rows:
                        yield with_report(out, self._first_row_report(out.num_rows))
                    continue
                if batch.num_rows:
                    yield self._report_row(batch.slice(0, 1), self._report())
                if out.num_rows:
                    yield with_report(out, pa.nulls(out.num_rows, pa.string()))
        except Exception as exc:
            if runtime is not None:
                attach_report(exc, self.provider)
            raise
        # Only empty batches: the report waits for this worker's next task (reports are
        # cumulative).

    def _report(self) -> str | None:
        return metrics_report(self.provider)

    def _first_row_report(self, rows: int) -> pa.Array:
        first = pa.array([self._report()], pa.string())
        return first if rows == 1 else pa.concat_arrays([first, pa.nulls(rows - 1, pa.string())])

    def _report_row(self, sample: pa.RecordBatch, report: str | None) -> pa.RecordBatch:
        assert self.report_nullable is not None
        dims = [
            pa.nulls(1, arrow_type) if nullable else placeholder(arrow_type)
            for arrow_type, nullable in zip(
                self.shape.dim_types, self.report_nullable, strict=True)
        ]
        row = pa.RecordBatch.from_arrays([*sample.columns, *dims],
                                         names=[*sample.schema.names, *self.shape.out_names])
        return with_report(row, pa.array([report], pa.string()))
