"""The metrics channel without Spark: worker reports, how the driver merges them, the
report row's placeholder values, and the error note of a failed task."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from cache.metrics import FIELDS, GAUGES
from lookup.runtime import worker as _worker
from lookup.spark.join import plan_join
from lookup.spark.join_worker import JoinFunction
from lookup.spark.metrics import _Channel, _ProviderReports
from lookup.spark.report import (
    NOTE_PREFIX,
    REPORT_COLUMN,
    WorkerReport,
    metrics_report,
    parse_report,
    placeholder,
    report_notes,
)
from lookup.spark.view_versions import _parse_size
from tests.lookup.functions import DictLookup


def report(worker: str, sequence: int, at: int, **values: int) -> WorkerReport:
    return WorkerReport("p", worker, sequence, at, {name: values.get(name, 0) for name in FIELDS})


def test_a_worker_report_carries_every_metric_by_name() -> None:
    from lookup import LookupFunctionProvider

    provider = LookupFunctionProvider.of(DictLookup([(1, "a")]))
    assert metrics_report(provider) is None  # not opened in this process
    try:
        _worker.worker_runtime(provider).lookup_batch([(1,), (2,)])
        first = parse_report(metrics_report(provider))
        second = parse_report(metrics_report(provider))
    finally:
        _worker._reset_for_tests()
    assert first is not None
    assert second is not None
    assert (first.provider_id, first.worker) == (provider.provider_id, _worker.WORKER_ID)
    assert second.sequence > first.sequence
    # Every field of CacheMetrics travels, by name: a new counter needs no change here.
    assert set(first.values) == set(FIELDS)
    assert (first.values["miss_count"], first.values["load_count"]) == (2, 1)


@pytest.mark.parametrize("text", [None, 42, "", "not json", "{}", '{"p": "x"}',
                                  '{"p": "x", "w": "w", "s": "one", "t": 1, "m": {}}'])
def test_a_malformed_report_is_ignored(text: object) -> None:
    assert parse_report(text) is None


def test_unknown_metrics_in_a_report_are_ignored() -> None:
    text = json.dumps({"p": "x", "w": "w", "s": 1, "t": 5,
                       "m": {"hit_count": 3, "num_from_the_future": 7}})
    parsed = parse_report(text)
    assert parsed is not None
    assert dict(parsed.values) == {"hit_count": 3}


CHANNEL = _Channel("action", "spark_lookup_metrics_test")


def test_the_latest_report_of_each_worker_counts_once() -> None:
    reports = _ProviderReports()
    reports.add(report("a", 2, 100, hit_count=5, num_cached_records=10), CHANNEL)
    reports.add(report("a", 1, 90, hit_count=3), CHANNEL)  # older: arrived late, ignored
    reports.add(report("a", 2, 100, hit_count=5), CHANNEL)  # the same one again: counted once
    reports.add(report("b", 7, 80, hit_count=1, num_load_failures=1, num_cached_records=4),
                CHANNEL)
    total = reports.total(snapshot_gauges=False)
    assert (total.hit_count, total.num_load_failures) == (6, 1)
    assert total.num_cached_records == 14  # partial caches: each worker holds its own


def test_full_cache_gauges_are_those_of_the_newest_report() -> None:
    reports = _ProviderReports()
    for worker, at in (("a", 100), ("b", 300), ("c", 200)):
        reports.add(report(worker, 1, at, hit_count=1, num_cached_records=at,
                           num_cached_bytes=at * 10), CHANNEL)
    total = reports.total(snapshot_gauges=True)
    assert total.hit_count == 3
    assert (total.num_cached_records, total.num_cached_bytes) == (300, 3000)
    assert total.as_of is not None  # what delivered the newest report, and when it was made
    assert (total.as_of.kind, total.as_of.name) == ("action", "spark_lookup_metrics_test")
    assert total.as_of.at.timestamp() == 0.3
    assert set(GAUGES) == {"num_cached_records", "num_cached_bytes"}


@pytest.mark.parametrize(
    "arrow_type",
    [pa.int8(), pa.int64(), pa.float32(), pa.float64(), pa.bool_(), pa.string(), pa.binary(),
     pa.decimal128(20, 4), pa.date32(), pa.timestamp("us", tz="UTC"), pa.timestamp("us"),
     pa.list_(pa.string()), pa.map_(pa.string(), pa.int32()),
     pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.date32())])],
    ids=str,
)
def test_placeholders_are_one_non_null_value(arrow_type: pa.DataType) -> None:
    value = placeholder(arrow_type)
    assert value.type == arrow_type
    assert len(value) == 1
    assert value.null_count == 0
    if pa.types.is_struct(arrow_type):
        assert all(value.field(i).null_count == 0 for i in range(arrow_type.num_fields))


def test_an_inner_join_writes_a_report_row_before_each_batch() -> None:
    from pyspark.sql import types as T

    from lookup import FullCachingLookupProvider
    from scan import CollectionSource
    from triggers import PeriodicCacheReloadTrigger

    schema = "id BIGINT NOT NULL, day DATE NOT NULL, amount DECIMAL(8,2) NOT NULL"
    provider = FullCachingLookupProvider.of(
        CollectionSource([(1, dt.date(2024, 5, 1), Decimal("2.50"))], schema=schema),
        PeriodicCacheReloadTrigger(dt.timedelta(hours=1)), ["id"])
    stream = T.StructType([T.StructField("id", T.LongType(), False),
                           T.StructField("label", T.StringType(), False)])
    plan = plan_join(stream, provider, on="id", how="inner")
    function = JoinFunction(provider, plan.shape, (False, False))
    batches = [pa.record_batch({"id": pa.array([1, 2], pa.int64()),
                                "label": pa.array(["x", "y"])}),
               pa.record_batch({"id": pa.array([3], pa.int64()), "label": pa.array(["z"])})]
    try:
        out = list(function(iter(batches)))
    finally:
        _worker._reset_for_tests()
    # A report row, then the batch's joined rows; a batch that joined none has its
    # report row only: an action that stops early has read a report all the same.
    assert [b.num_rows for b in out] == [1, 1, 1]
    assert out[1].column(REPORT_COLUMN).null_count == 1
    first = parse_report(out[0].to_pylist()[0][REPORT_COLUMN])
    assert first is not None
    assert (first.values["hit_count"], first.values["miss_count"]) == (1, 1)
    row = out[-1].to_pylist()[0]
    # A stream row of the task and placeholder dimension values; only the plan sees it.
    assert (row["id"], row["label"], row["day"], row["amount"]) == (
        3, "z", dt.date(1970, 1, 1), Decimal("0.00"))
    parsed = parse_report(row[REPORT_COLUMN])
    assert parsed is not None
    assert (parsed.values["hit_count"], parsed.values["miss_count"]) == (1, 2)


def test_a_left_join_carries_its_report_on_the_first_row_of_each_batch() -> None:
    from pyspark.sql import types as T

    from lookup import FullCachingLookupProvider
    from scan import CollectionSource
    from triggers import PeriodicCacheReloadTrigger

    provider = FullCachingLookupProvider.of(
        CollectionSource([(1, "a"), (2, "b")], schema="id BIGINT, name STRING"),
        PeriodicCacheReloadTrigger(dt.timedelta(hours=1)), ["id"])
    stream = T.StructType([T.StructField("id", T.LongType())])
    plan = plan_join(stream, provider, on="id", how="left")
    function = JoinFunction(provider, plan.shape, (True,))
    batches = [pa.record_batch({"id": pa.array([1, 5], pa.int64())}),
               pa.record_batch({"id": pa.array([], pa.int64())}),
               pa.record_batch({"id": pa.array([2, None, 1], pa.int64())}),
               pa.record_batch({"id": pa.array([], pa.int64())})]
    try:
        out = list(function(iter(batches)))
    finally:
        _worker._reset_for_tests()
    # No extra row: every stream row once, in order, with its own values.
    assert [b.num_rows for b in out] == [2, 3]
    rows = [row for batch in out for row in batch.to_pylist()]
    assert [(r["id"], r["name"]) for r in rows] == [(1, "a"), (5, None), (2, "b"), (None, None),
                                                    (1, "a")]
    reports = [r[REPORT_COLUMN] for r in rows]
    assert [r is None for r in reports] == [False, True, False, True, True]
    parsed = [parse_report(reports[0]), parse_report(reports[2])]
    assert [(p.values["hit_count"], p.values["miss_count"]) for p in parsed if p] == [
        (1, 1), (3, 1)]  # cumulative, as of the end of each batch


def test_a_failing_task_notes_its_report_on_the_error() -> None:
    from lookup import LookupFunctionProvider

    function = DictLookup([(1, "a")])
    function.fail_next = 5
    provider = LookupFunctionProvider.of(function, max_retries=0)
    stream = pa.record_batch({"id": pa.array([1], pa.int64())})
    from pyspark.sql import types as T

    plan = plan_join(T.StructType([T.StructField("id", T.LongType())]), provider, on="id")
    try:
        with pytest.raises(Exception, match="database is down") as failure:
            list(JoinFunction(provider, plan.shape, (True,))(iter([stream])))
    finally:
        _worker._reset_for_tests()
    notes = getattr(failure.value, "__notes__", [])
    assert len(notes) == 1
    assert notes[0].startswith(NOTE_PREFIX)
    # What the driver finds in the error text of the query's termination event.
    found = [parse_report(text) for text in report_notes("Traceback...\n" + notes[0] + "\n")]
    assert found
    assert found[0] is not None
    assert found[0].values["num_load_failures"] == 1


@pytest.mark.parametrize(("text", "size"), [
    ("InMemoryRelation [id#0L], StorageLevel(disk), Statistics(sizeInBytes=15.5 KiB, "
     "rowCount=1.00E+3)", 15872),
    ("Project [a], Statistics(sizeInBytes=1.0 MiB)\n+- InMemoryRelation [a], "
     "Statistics(sizeInBytes=78.0 B)", 78),
    ("Range (0, 10), Statistics(sizeInBytes=80.0 B)", None),
])
def test_the_cached_size_is_read_from_explain_cost(text: str, size: int | None) -> None:
    assert _parse_size(text) == size
