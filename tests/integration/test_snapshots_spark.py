"""On local Spark: the Python workers of a lookup join share one snapshot (one scan),
and sharing is on by default in Spark tasks."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lookup import FullCachingLookupProvider, lookup_join
from lookup.spark.metrics import worker_reports
from scan import CollectionSource
from tests.integration.processes import count_lines, make_db, provider
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.spark


def test_two_python_workers_share_one_snapshot(spark: Any, tmp_path: Path) -> None:
    db = make_db(tmp_path / "dim.db", rows=500)
    # The scan holds its load 0.5 s open: the two tasks start together, in two workers.
    p = provider(db, tmp_path / "scans", delay=0.5,
                 trigger=PeriodicCacheReloadTrigger(timedelta(hours=1)),
                 share_across_workers=None, snapshot_dir=tmp_path / "snapshots")
    stream = spark.range(0, 2000, numPartitions=2).selectExpr("id % 600 AS id")
    out = lookup_join(stream, p, on="id", columns=["tier"], metrics=True)
    rows = out.collect()
    assert len(rows) == 2000
    assert {r.tier for r in rows if r.id < 500} == {"v1"}
    assert {r.tier for r in rows if r.id >= 500} == {None}
    assert count_lines(tmp_path / "scans") == 1
    assert len(worker_reports(p)) == 2  # two worker processes took part


def test_sharing_is_on_by_default_in_spark_tasks(spark: Any) -> None:
    p = FullCachingLookupProvider.of(CollectionSource([(1, "a")], schema="id BIGINT, n STRING"),
                                     PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"])
    assert not p.shares_snapshots()  # the driver

    def in_a_task(batches: Any) -> Any:
        for batch in batches:
            yield pa.record_batch({"shares": pa.array([p.shares_snapshots()] * batch.num_rows)})

    rows = spark.range(1, numPartitions=1).mapInArrow(in_a_task, "shares BOOLEAN").collect()
    assert [row.shares for row in rows] == [True]
