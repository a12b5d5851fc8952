"""The function a lookup join runs in executors' Python workers: each Arrow batch of
the stream joined by the worker's runtime of the provider (and, with metrics, the
worker's report written into the output; see :mod:`lookup._join_report`)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from lookup._assemble import JoinShape, join_batch
from lookup._join_report import attach_report, placeholder, with_report
from lookup._worker import metrics_report, worker_runtime
from lookup.providers import LookupProvider

__all__ = ["JoinFunction"]

class JoinFunction:
    """The function ``mapInArrow`` runs in executors' Python workers (picklable).

    With ``report_nullable`` (the nullability of each added dimension column), the
    output has one more column, :data:`lookup.metrics.REPORT_COLUMN`, holding the
    worker's cumulative metrics (see :mod:`lookup.metrics`) in one row of the task and
    null in every other. A left join puts them on its last joined row. An inner join may
    have none, so it adds a *report row* after its last batch instead, which holds
    valid values in every column (a stream row and placeholder dimension values)
    because Spark reads it as a row of the declared schema before the plan's filter
    drops it.
    """

    def __init__(self, provider: LookupProvider, shape: JoinShape,
                 report_nullable: tuple[bool, ...] | None = None) -> None:
        self.provider = provider
        self.shape = shape
        self.report_nullable = report_nullable

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        runtime = None
        sample: pa.RecordBatch | None = None  # one stream row, for the report row
        describe = self.provider.describe()
        reporting = self.report_nullable is not None
        # A left join has a row for every stream row: the report rides on the task's
        # last one, so the plan needs no filter. The last batch is known only when the
        # input ends, so each one is held until the next arrives.
        riding = reporting and self.shape.how == "left"
        held: pa.RecordBatch | None = None
        try:
            for batch in batches:
                if runtime is None:
                    runtime = worker_runtime(self.provider)
                out = join_batch(batch, self.shape, runtime, describe)
                if not reporting:
                    yield out
                    continue
                if batch.num_rows:
                    sample = batch.slice(batch.num_rows - 1, 1)
                if riding:
                    if out.num_rows:
                        if held is not None:
                            yield with_report(held, pa.nulls(held.num_rows, pa.string()))
                        held = out
                    continue
                yield with_report(out, pa.nulls(out.num_rows, pa.string()))
        except Exception as exc:
            if runtime is not None:
                attach_report(exc, self.provider)
            raise
        report = metrics_report(self.provider) if reporting and runtime is not None else None
        if held is not None:
            last = pa.array([report], pa.string())
            yield with_report(held, pa.concat_arrays(
                [pa.nulls(held.num_rows - 1, pa.string()), last]))
        elif report is not None and sample is not None and not riding:
            yield self._report_row(sample, report)
        # Otherwise (only empty batches) the report waits for this worker's next task:
        # reports are cumulative.

    def _report_row(self, sample: pa.RecordBatch, report: str) -> pa.RecordBatch:
        assert self.report_nullable is not None
        dims = [
            pa.nulls(1, arrow_type) if nullable else placeholder(arrow_type)
            for arrow_type, nullable in zip(
                self.shape.dim_types, self.report_nullable, strict=True)
        ]
        row = pa.RecordBatch.from_arrays([*sample.columns, *dims],
                                         names=[*sample.schema.names, *self.shape.out_names])
        return with_report(row, pa.array([report], pa.string()))
