"""A full cache's load of a SQL table under a connection budget smaller than its readers:
the readers and the planner take turns on the host's slots (never more connections than
the budget), and the load completes. PostgreSQL, as a role with CONNECTION LIMIT 1."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import timedelta

import pytest

from lookup import FullCachingLookupProvider, open_lookup
from scan import SqlTableSource
from tests.pg_roles import role_reading_dim
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.postgres


@pytest.fixture(params=[1, 1000], ids=["dense", "sparse"])
def spacing(request: pytest.FixtureRequest) -> int:
    """The step between ids: dense ids are chunked by even key ranges, sparse ones are
    planned chunk by chunk on request (the planner's connection between requests)."""
    return int(request.param)


@pytest.fixture
def one_connection_role(postgres_dsn: str, pg_schema: str, spacing: int) -> Iterator[str]:
    """A role of the test's own with CONNECTION LIMIT 1 reading ``dim`` (200,000 rows,
    ids ``spacing`` apart)."""
    with role_reading_dim(postgres_dsn, pg_schema, connection_limit=1,
                          ids=f"g * {spacing}", count=200_000, analyze=True) as role:
        yield role


@pytest.mark.parametrize("chunking", [{}, {"chunk_size": 20_000}])
def test_a_load_with_more_readers_than_connections_completes(
        postgres_dsn: str, pg_schema: str, one_connection_role: str, spacing: int,
        chunking: dict[str, int]) -> None:
    import psycopg

    connect = functools.partial(psycopg.connect, postgres_dsn, user=one_connection_role,
                                options=f"-c search_path={pg_schema}")
    # Planned on the driver as the role would be (the catalog read holds the slot once).
    source = SqlTableSource(connect, "dim", schema="id BIGINT, name STRING",
                            split_column="id", **chunking)
    provider = FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"], parallelism=4,
        share_across_workers=False, initial_load_timeout=timedelta(seconds=60),
        max_source_connections=1, max_retries=0)
    with open_lookup(provider) as handle:
        keys = [(spacing,), (123_456 * spacing,), (200_001 * spacing,)]
        assert handle.lookup_batch(keys) == {
            keys[0]: ((spacing, "n1"),), keys[1]: ((123_456 * spacing, "n123456"),),
            keys[2]: ()}
        metrics = handle.metrics
        assert metrics.load_count == 1
        assert metrics.num_load_failures == 0
