"""The metrics report of a lookup join's worker function: the column it rides in, the
report row of an inner join, and the note on a failing task's error (the whole
channel: DESIGN.md, lookup/, "Metrics are opt-in")."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa

from lookup.metrics import NOTE_PREFIX, REPORT_COLUMN
from lookup.providers import LookupProvider
from lookup.runtime.worker import metrics_report

__all__ = ["attach_report", "placeholder", "with_report"]

def with_report(batch: pa.RecordBatch, column: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [*batch.columns, column], names=[*batch.schema.names, REPORT_COLUMN]
    )


def attach_report(exc: BaseException, provider: LookupProvider) -> None:
    """Put the worker's report on the error of a failing task: Spark drops the task's
    rows (and its report row), and the worker exits; the error's text is what reaches
    the driver (a streaming query's termination event carries it)."""
    add_note = getattr(exc, "add_note", None)  # Python 3.11+
    report = metrics_report(provider)
    if add_note is not None and report is not None:
        add_note(NOTE_PREFIX + report)


def placeholder(arrow_type: pa.DataType) -> pa.Array:
    """One non-null value of ``arrow_type`` (zero, empty, false, the epoch): what a
    report row holds in a non-nullable dimension column. Never seen by users."""
    if pa.types.is_struct(arrow_type):
        return pa.StructArray.from_arrays(
            [placeholder(f.type) for f in arrow_type], fields=list(arrow_type)
        )
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or (
        pa.types.is_map(arrow_type)
    ):
        return pa.array([[]], type=arrow_type)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.array([""], type=arrow_type)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pa.array([b""], type=arrow_type)
    if pa.types.is_boolean(arrow_type):
        return pa.array([False], type=arrow_type)
    if pa.types.is_decimal(arrow_type):
        return pa.array([Decimal(0)], type=arrow_type)
    if pa.types.is_date32(arrow_type):
        return pa.array([0], type=pa.int32()).cast(arrow_type)
    return pa.array([0], type=pa.int64()).cast(arrow_type)
