"""Cache metrics of Spark lookup joins, summed over executors, readable on the driver.

Mechanism: one Spark accumulator per provider. At the end of each task, the Python
worker adds its *cumulative* metrics for the provider, stamped with its worker id and
a sequence number; merging keeps the latest report per worker. The driver sums the
workers' latest reports. Because reports are cumulative and keyed by worker, a task
retried or an accumulator update applied twice cannot double-count.

Counters are exact for every task that finished. Gauges (cached records and bytes) are
each worker's values at its latest report; a worker that Spark has since stopped still
contributes its last values.
"""

from __future__ import annotations

import threading
from typing import Any

from pyspark.accumulators import AccumulatorParam

from cache.metrics import CacheMetrics
from lookup.providers import LookupProvider

__all__ = ["WorkerReportsParam", "lookup_metrics", "metrics_accumulator"]

Reports = dict[str, tuple[int, dict[str, int]]]


class WorkerReportsParam(AccumulatorParam[Reports]):
    """Merges worker reports, keeping the highest sequence number per worker."""

    def zero(self, value: Reports) -> Reports:
        return {}

    def addInPlace(self, value1: Reports, value2: Reports) -> Reports:
        for worker, (sequence, snapshot) in value2.items():
            current = value1.get(worker)
            if current is None or current[0] < sequence:
                value1[worker] = (sequence, snapshot)
        return value1


_lock = threading.Lock()
_accumulators: dict[tuple[int, str], Any] = {}


def metrics_accumulator(spark: Any, provider: LookupProvider) -> Any:
    """The accumulator collecting ``provider``'s worker reports in this SparkContext."""
    context = spark.sparkContext
    key = (id(context), provider.provider_id)
    with _lock:
        accumulator = _accumulators.get(key)
        if accumulator is None:
            accumulator = context.accumulator({}, WorkerReportsParam())
            _accumulators[key] = accumulator
        return accumulator


def lookup_metrics(provider: LookupProvider, spark: Any = None) -> CacheMetrics:
    """The cache metrics of ``provider`` summed over every executor Python worker that
    ran a task of a lookup join or SQL lookup with it, as of the last finished task.

    Runs on the driver, after an action (or during a streaming query).

    Examples
    --------
    ``lookup_metrics(customers).hit_count`` after ``enriched.count()``.
    """
    from pyspark.sql import SparkSession

    session = spark or SparkSession.getActiveSession()
    if session is None:
        return CacheMetrics()
    key = (id(session.sparkContext), provider.provider_id)
    with _lock:
        accumulator = _accumulators.get(key)
    if accumulator is None:
        return CacheMetrics()
    reports: Reports = accumulator.value
    return CacheMetrics.sum(snapshot for _, snapshot in reports.values())
