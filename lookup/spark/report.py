"""The metrics report of a lookup join's worker, both ends: written in the Python worker
(`metrics_report`), carried in a column (with a report row for an inner join) or a
note on a failing task's error, read on the driver (`parse_report`). The whole
channel: DESIGN.md, lookup/, "Metrics are opt-in"."""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa

from cache.metrics import FIELDS
from lookup.providers import LookupProvider
from lookup.runtime.registry import REGISTRY
from lookup.runtime.worker import WORKER_ID

__all__ = [
    "NOTE_PREFIX",
    "REPORT_COLUMN",
    "WorkerReport",
    "attach_report",
    "metrics_report",
    "parse_report",
    "placeholder",
    "report_notes",
    "with_report",
]

log = logging.getLogger("lookup")

REPORT_COLUMN = "__spark_lookup_metrics"
"""The column of the report rows between the map and the filter; a stream DataFrame
must not have a column of this name."""

NOTE_PREFIX = "spark-lookup metrics report: "
"""Starts the line of a failed task's error that carries the worker's report."""

_NOTES = re.compile(re.escape(NOTE_PREFIX) + r"(\{.*?\})\s*$", re.MULTILINE)

_sequence = itertools.count(1)


def metrics_report(provider: LookupProvider) -> str | None:
    """This process's cumulative metrics of ``provider`` as one JSON text, or None when
    no runtime of it is open here.

    The report holds the provider id (``p``), this worker's id (``w``), a sequence
    number (``s``, increasing within the worker, so the driver keeps each worker's
    latest report whatever order reports arrive in), the wall-clock time in epoch
    milliseconds (``t``, which orders the reports of different workers) and every
    metric of [`cache.CacheMetrics.as_dict`][] by name (``m``). Runs in executors'
    Python workers; `parse_report` reads it on the driver.
    """
    runtime = REGISTRY.runtime(provider.provider_id)
    if runtime is None:
        return None
    return json.dumps(
        {
            "p": provider.provider_id,
            "w": WORKER_ID,
            "s": next(_sequence),
            "t": int(time.time() * 1000),
            "m": runtime.metrics.as_dict(),
        },
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class WorkerReport:
    """One Python worker's cumulative metrics of one provider, as read on the driver.

    Attributes
    ----------
    provider_id : str
        The provider's ``provider_id``.
    worker : str
        The worker process (``host:pid:random``).
    sequence : int
        Increases with every report of the worker.
    at : int
        When the worker made the report (epoch milliseconds, the worker's clock).
    values : dict
        The metrics by name (the fields of [`cache.CacheMetrics.as_dict`][] that this
        version knows; others are ignored).
    """

    provider_id: str
    worker: str
    sequence: int
    at: int
    values: Mapping[str, int]


def parse_report(text: object) -> WorkerReport | None:
    """Read one report written by `metrics_report`; None (and a
    debug log) for anything else, so a damaged report never fails the reader."""
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
        values = data["m"]
        return WorkerReport(provider_id=str(data["p"]), worker=str(data["w"]),
                            sequence=int(data["s"]), at=int(data["t"]),
                            values={name: int(values[name]) for name in FIELDS if name in values})
    except (ValueError, TypeError, KeyError) as exc:
        log.debug("ignoring a malformed metrics report %.200r: %s", text, exc)
        return None


def report_notes(text: str) -> list[str]:
    """The reports carried in an error's text (`attach_report`'s notes), in order."""
    return _NOTES.findall(text)



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
