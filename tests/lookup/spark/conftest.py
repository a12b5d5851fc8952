"""Fixtures of the SQL tests: the cache kind to run with, and the stream tables the
queries read (single-partition views, so per-batch metrics are exact)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(params=["partial", "full"])
def kind(request: pytest.FixtureRequest) -> str:
    """Run the test with a partial cache and with a full cache."""
    return str(request.param)


@pytest.fixture(scope="session")
def orders(spark: Any) -> Iterator[str]:
    """View ``orders(order_id BIGINT, id BIGINT, id_text STRING)``: ids with one
    match (1), two matches (2), none (4) and a null id. One partition."""
    df = spark.createDataFrame(
        [(10, 1, "1"), (11, 2, "2"), (12, 4, "4"), (13, None, None)],
        "order_id BIGINT, id BIGINT, id_text STRING",
    ).coalesce(1)
    df.createOrReplaceTempView("orders")
    yield "orders"
    spark.catalog.dropTempView("orders")


@pytest.fixture(scope="session")
def visits(spark: Any) -> Iterator[str]:
    """View ``visits(visit INT, region INT, code STRING)`` for composite keys."""
    df = spark.createDataFrame(
        [(1, 1, "a"), (2, 2, "a"), (3, 1, "z"), (4, None, "a"), (5, 1, None)],
        "visit INT, region INT, code STRING",
    ).coalesce(1)
    df.createOrReplaceTempView("visits")
    yield "visits"
    spark.catalog.dropTempView("visits")
