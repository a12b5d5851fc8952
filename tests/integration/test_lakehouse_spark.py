"""Delta Lake and Iceberg tables on a real local Spark: full caches joined through
``lookup_join`` (classic and Connect), and a refreshed view that skips the reload of an
unchanged table."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyiceberg.catalog import load_catalog

from connectors.predicates import Predicate
from lookup import FullCachingLookupProvider, ScheduledTableRefresh, lookup_join
from scan import DeltaSource, IcebergSource
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.spark

HOUR = timedelta(hours=1)


def test_full_caches_over_delta_and_iceberg_tables_join(spark: Any, tmp_path: Path) -> None:
    customers = str(tmp_path / "customers")
    write_deltalake(customers, pa.table({
        "id": pa.array([1, 2, 3], pa.int64()), "name": ["Ada", "Grace", "Alan"],
        "country": ["nl", "us", "uk"], "active": [True, True, False]}),
        partition_by=["country"])
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
               "warehouse": f"file://{tmp_path}/warehouse"}
    lake = load_catalog("default", **catalog)
    lake.create_namespace("ref")
    countries = pa.table({"code": ["nl", "us", "uk"],
                          "label": ["Netherlands", "United States", "United Kingdom"]})
    lake.create_table("ref.countries", schema=countries.schema).append(countries)

    by_id = FullCachingLookupProvider.of(
        DeltaSource(customers, columns=["id", "name", "country", "active"],
                    filters=[Predicate("active", "=", True)]),
        PeriodicCacheReloadTrigger(HOUR), ["id"])
    by_code = FullCachingLookupProvider.of(
        IcebergSource("ref.countries", catalog=catalog), PeriodicCacheReloadTrigger(HOUR),
        ["code"])
    orders = spark.createDataFrame([(10, 1), (11, 2), (12, 3), (13, 9)],
                                   "order_id INT, customer_id BIGINT")
    joined = lookup_join(orders, by_id, on={"customer_id": "id"}, columns=["name", "country"])
    joined = lookup_join(joined, by_code, on={"country": "code"}, columns=["label"])
    assert sorted((tuple(r) for r in joined.collect()), key=repr) == sorted([
        (10, 1, "Ada", "nl", "Netherlands"), (11, 2, "Grace", "us", "United States"),
        (12, 3, None, None, None), (13, 9, None, None, None)], key=repr)


@pytest.mark.classic_only
@pytest.mark.needs("PYTHON_DATA_SOURCE", "SESSION_TAGS")
def test_a_refreshed_view_skips_the_reload_of_an_unchanged_table(spark: Any,
                                                                 tmp_path: Path) -> None:
    path = str(tmp_path / "countries")
    write_deltalake(path, pa.table({"code": ["nl", "fr"], "name": ["NL", "FR"]}))
    refresh = ScheduledTableRefresh(spark, DeltaSource(path), PeriodicCacheReloadTrigger(HOUR),
                                    "lake_countries", materialization="LOCAL")
    with refresh:
        status = refresh.trigger_reload().result(timeout=120)
        assert (status.num_loads, status.reloads_skipped, status.version) == (1, 1, 1)
        write_deltalake(path, pa.table({"code": ["be"], "name": ["BE"]}), mode="append")
        status = refresh.trigger_reload().result(timeout=120)
        assert (status.num_loads, status.reloads_skipped, status.version) == (2, 1, 2)
        names = sorted(r["name"] for r in spark.table("lake_countries").collect())
        assert names == ["BE", "FR", "NL"]
