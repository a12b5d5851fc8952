"""Validity(..., retention=) on Spark (issue 45): a row whose as_of is older than now
minus the retention gets no version (never a wrong one, though the loads dropped the
versions that ended before it) and is counted in num_out_of_retention; rows within
the retention get their versions, with no cache, a partial cache and a full cache."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from lookup import Validity, lookup_join, lookup_metrics
from tests.fixtures.rates import provider, rates_table

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("kind", ["none", "partial", "full"])
def test_rows_older_than_the_retention_get_no_version_and_are_counted(
        spark: Any, tmp_path: Path, kind: str) -> None:
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)

    def ago(days: int) -> dt.datetime:
        return now - dt.timedelta(days=days)

    # The first version ended before now minus 30 days: dropped at load; the second
    # ended within the retention: kept; the third is still valid.
    versions = [(1.0, ago(400), ago(100)), (2.0, ago(100), ago(10)), (3.0, ago(10), None)]
    connect = rates_table(tmp_path / "rates.sqlite",
                          [("EUR", 1, rate, start, end) for rate, start, end in versions])
    rates = provider(kind, connect, tmp_path,
                     validity=Validity("valid_from", "valid_to",
                                       retention=dt.timedelta(days=30)))
    events = [(1, ago(200)), (2, ago(50)), (3, ago(20)), (4, ago(1)), (5, None)]
    orders = spark.createDataFrame([(n, "EUR", 1, t) for n, t in events],
                                   "order INT, cur STRING, region INT, at TIMESTAMP").coalesce(1)
    out = lookup_join(orders, rates, on=["cur", "region"], columns=["rate"], as_of="at",
                      metrics=True)
    got = sorted((row["order"], row["rate"]) for row in out.collect())
    # 1 would be 1.0 and 2 would be 2.0 without a retention: older than it, none.
    assert got == [(1, None), (2, None), (3, 2.0), (4, 3.0), (5, None)]
    assert lookup_metrics(rates).num_out_of_retention == 2
