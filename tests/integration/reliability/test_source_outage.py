"""Source outages during a streaming lookup join (issue 8): PostgreSQL sessions
terminated and logins refused, a private redis-server killed and restarted.

With retries the query recovers and its output is exactly the expected left join;
with the retries exhausted it fails with our LookupLoadError, and restarted from its
checkpoint after the outage it completes the output exactly once.

The outages are real: the lookup reads PostgreSQL as a role of the test's own, which
the test refuses at login and whose sessions it terminates; the Redis source is a
redis-server process of the test's own (``SAVE``d, so a restart brings its data
back). An outage ends as soon as a retry of the lookup has been recorded (the retry
policy's sleep writes to a file), so every test proves that a lookup failed and was
retried, without depending on how fast the machine is.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cache import DefaultLookupCache
from lookup import (
    PartialCachingLookupProvider,
    RedisLookupFunction,
    RetryPolicy,
    SqlLookupFunction,
    lookup_join,
    lookup_metrics,
    open_lookup,
)
from tests.integration.reliability.conftest import PgRole, RedisServer
from tests.integration.reliability.helpers import (
    FileRecordingSleep,
    Inbox,
    after_retry,
    expected_left_join,
    multiset,
    orders,
)
from tests.polling import wait_until

# Retries, backoff and restarts are the library's own: the test matrix's other lines skip them.
pytestmark = pytest.mark.whole_suite_only

STREAM_SCHEMA = "order_id BIGINT, customer_id BIGINT"
DIM_SCHEMA = "id BIGINT, name STRING"


def dimension(n: int = 400) -> list[tuple[int, str]]:
    """Customers 0..n-1: none for multiples of 11, two rows for multiples of 7."""
    rows = []
    for i in range(n):
        if i % 11 == 0:
            continue
        rows.append((i, f"c{i}"))
        if i % 7 == 0:
            rows.append((i, f"c{i}-second"))
    return rows


def batch_keys(new: range, repeats: range | tuple[()], missing: int) -> list[int | None]:
    """Keys of one input file: repeated keys (cache hits), new keys (misses: the source
    is asked), a key with no customer, and a null key."""
    return [*repeats, *new, missing, None]


def patient_policy(sleep: FileRecordingSleep) -> RetryPolicy:
    # 0.25 + 0.5 + 1 + 2 + 2 + 2 s: far more than an outage that ends at the first retry.
    return RetryPolicy(max_retries=6, initial_backoff=0.25, max_backoff=2, sleep=sleep)


def cache() -> DefaultLookupCache:
    return DefaultLookupCache.new_builder().maximum_size(10_000).build()


def start_memory_query(spark: Any, stream: Any, tmp_path: Path, queries: list[Any]
                       ) -> tuple[Any, str]:
    name = f"reliability_{uuid.uuid4().hex[:10]}"
    query = (stream.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / f"chk-{name}"))
             .trigger(processingTime="200 milliseconds").start())
    queries.append(query)
    return query, name


def sink_after(spark: Any, query: Any, table: str, rows: int) -> Counter[tuple[Any, ...]]:
    """The sink's rows once it holds at least ``rows`` (the query processes every file
    in the inbox meanwhile; a failed query raises here)."""
    for _ in range(50):
        query.processAllAvailable()
        got = spark.sql(f"SELECT order_id, customer_id, name FROM {table}").collect()
        if len(got) >= rows:
            return multiset(got)
    raise AssertionError(f"the sink holds {len(got)} rows, expected {rows}")


def stream_of(spark: Any, inbox: Inbox) -> Any:
    return spark.readStream.schema(STREAM_SCHEMA).json(str(inbox.path))


# --- PostgreSQL ---------------------------------------------------------------------


@pytest.fixture
def customers(pg_role: PgRole) -> list[tuple[int, str]]:
    rows = dimension()
    pg_role.admin("CREATE TABLE customers (id bigint NOT NULL, name text NOT NULL)")
    pg_role.admin("CREATE INDEX ON customers (id)")
    pg_role.admin("INSERT INTO customers SELECT * FROM unnest(%s::bigint[], %s::text[])",
                  [r[0] for r in rows], [r[1] for r in rows])
    pg_role.grant_read()
    return rows


def pg_provider(role: PgRole, sleep: FileRecordingSleep) -> PartialCachingLookupProvider:
    fn = SqlLookupFunction(role.factory(), "customers", "id", schema=DIM_SCHEMA)
    # Unbudgeted: the worker keeps its connection between batches, which step 1
    # terminates (under a budget an idle connection closes by itself within seconds).
    return PartialCachingLookupProvider.of(fn, cache(), retry_policy=patient_policy(sleep),
                                           max_source_connections=None)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_outages_during_a_streaming_join(
    spark: Any, pg_role: PgRole, customers: list[tuple[int, str]], inbox: Inbox,
    recording_sleep: FileRecordingSleep, tmp_path: Path, queries: list[Any],
) -> None:
    provider = pg_provider(pg_role, recording_sleep)

    # 0. Down from the start: the Python worker opens the lookup function (connects)
    #    during the outage; the open is retried like a load, not failed at once.
    assert pg_role.outage() == 0
    ending = after_retry(recording_sleep, pg_role.allow_logins)
    joined = lookup_join(stream_of(spark, inbox), provider, on={"customer_id": "id"},
                         metrics=True)
    query, table = start_memory_query(spark, joined, tmp_path, queries)
    inbox.add(orders(batch_keys(range(40), (), 1000), 0))
    expected = expected_left_join(inbox.rows, customers)
    assert sink_after(spark, query, table, sum(expected.values())) == expected
    ending.join(timeout=30)
    retried = len(recording_sleep.waits())
    assert retried >= 1, "the outage should have failed the open"
    assert pg_role.sessions() >= 1  # the worker keeps its connection between batches

    # 1. Sessions terminated while idle: the connector reconnects at once.
    assert pg_role.terminate() >= 1
    inbox.add(orders(batch_keys(range(40, 80), range(10), 1001), 1000))
    expected = expected_left_join(inbox.rows, customers)
    assert sink_after(spark, query, table, sum(expected.values())) == expected
    assert len(recording_sleep.waits()) == retried  # no retry was needed

    # 2. Terminated and refused at login between batches: the next lookup fails and
    #    is retried until the database is back.
    assert pg_role.outage() >= 1
    ending = after_retry(recording_sleep, pg_role.allow_logins, seen=retried)
    inbox.add(orders(batch_keys(range(80, 120), range(30, 50), 1002), 2000))
    expected = expected_left_join(inbox.rows, customers)
    assert sink_after(spark, query, table, sum(expected.values())) == expected
    ending.join(timeout=30)
    assert len(recording_sleep.waits()) > retried, "the outage should have failed a lookup"

    # 3. After the outage.
    inbox.add(orders(batch_keys(range(120, 160), range(100, 120), 1003), 3000))
    expected = expected_left_join(inbox.rows, customers)
    got = sink_after(spark, query, table, sum(expected.values()))
    assert sum(got.values()) == sum(expected.values())
    assert got == expected  # nothing lost, nothing duplicated
    query.stop()
    metrics = reported_retries(provider, len(recording_sleep.waits()))
    assert metrics.num_retries == len(recording_sleep.waits())
    assert metrics.num_load_failures == 0


@pytest.mark.postgres
def test_open_lookup_during_the_outage_retries_the_open(
    pg_role: PgRole, customers: list[tuple[int, str]], recording_sleep: FileRecordingSleep,
) -> None:
    """The same without Spark: open_lookup waits for the database with the provider's
    retry policy, then answers."""
    provider = pg_provider(pg_role, recording_sleep)
    pg_role.outage()
    ending = after_retry(recording_sleep, pg_role.allow_logins)
    with open_lookup(provider) as handle:
        assert handle.lookup_batch([(1,), (7,), (11,)]) == {
            (1,): ((1, "c1"),), (7,): ((7, "c7"), (7, "c7-second")), (11,): ()}
        assert handle.metrics.num_retries == len(recording_sleep.waits()) >= 1
    ending.join(timeout=30)


@pytest.mark.postgres
def test_open_gives_up_after_the_retries_with_the_connector_error(
    pg_role: PgRole, customers: list[tuple[int, str]], tmp_path: Path,
) -> None:
    from spark_lookup.errors import ConnectorError

    sleep = FileRecordingSleep(tmp_path / "waits")
    fn = SqlLookupFunction(pg_role.factory(), "customers", "id", schema=DIM_SCHEMA)
    provider = PartialCachingLookupProvider.of(
        fn, cache(), retry_policy=RetryPolicy(max_retries=2, initial_backoff=0.01, sleep=sleep))
    pg_role.outage()
    with pytest.raises(ConnectorError, match=r"cannot connect to the database of table "
                                             r"'customers'.*not permitted to log in"):
        open_lookup(provider)
    assert sleep.waits() == [0.01, 0.02]


# --- Redis as the source ----------------------------------------------------------------


def seed_redis(server: RedisServer, rows: list[tuple[int, str]]) -> None:
    """One JSON document per customer (an array for several rows), saved to disk so that
    a restarted server has them again."""
    by_id: dict[int, list[dict[str, str]]] = {}
    for key, name in rows:
        by_id.setdefault(key, []).append({"name": name})
    client = server.client()
    try:
        client.mset({f"customer:{k}": json.dumps(v if len(v) > 1 else v[0])
                     for k, v in by_id.items()})
        client.save()
    finally:
        client.close()


def redis_provider(server: RedisServer, policy: RetryPolicy) -> PartialCachingLookupProvider:
    fn = RedisLookupFunction(server.url, "customer:{id}", DIM_SCHEMA, ["id"], value_type="json",
                             socket_timeout=2, connect_timeout=2)
    return PartialCachingLookupProvider.of(fn, cache(), retry_policy=policy)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.redis
def test_redis_source_killed_and_restarted_during_a_streaming_join(
    spark: Any, redis_server: RedisServer, inbox: Inbox, recording_sleep: FileRecordingSleep,
    tmp_path: Path, queries: list[Any],
) -> None:
    rows = dimension()
    seed_redis(redis_server, rows)
    provider = redis_provider(redis_server, patient_policy(recording_sleep))
    joined = lookup_join(stream_of(spark, inbox), provider, on={"customer_id": "id"},
                         metrics=True)
    query, table = start_memory_query(spark, joined, tmp_path, queries)

    inbox.add(orders(batch_keys(range(50), (), 1000), 0))
    expected = expected_left_join(inbox.rows, rows)
    assert sink_after(spark, query, table, sum(expected.values())) == expected

    # Files without rows make a micro-batch without rows: nothing to join, no error.
    inbox.add_text("")
    inbox.add_text("\n  \n\n")
    query.processAllAvailable()
    # (The rows of the source: on Connect, PySpark 4.3 leaves the progress's own
    # numInputRows None.)
    assert any(p["sources"][0]["numInputRows"] == 0
               and p["sources"][0]["startOffset"] is not None
               and p["sources"][0]["startOffset"] != p["sources"][0]["endOffset"]
               for p in query.recentProgress), "no micro-batch of the empty files"

    redis_server.kill()
    ending = after_retry(recording_sleep, redis_server.start)
    inbox.add(orders(batch_keys(range(50, 100), range(20), 1001), 1000))
    expected = expected_left_join(inbox.rows, rows)
    assert sink_after(spark, query, table, sum(expected.values())) == expected
    ending.join(timeout=30)
    assert recording_sleep.waits(), "the outage should have failed a lookup"

    inbox.add(orders(batch_keys(range(100, 150), range(40, 60), 1002), 2000))
    expected = expected_left_join(inbox.rows, rows)
    got = sink_after(spark, query, table, sum(expected.values()))
    assert got == expected
    assert sum(got.values()) == sum(expected.values())
    query.stop()
    metrics = reported_retries(provider, len(recording_sleep.waits()))
    assert metrics.num_retries == len(recording_sleep.waits()) >= 1
    assert metrics.num_load_failures == 0


def reported_retries(provider: Any, retries: int) -> Any:
    """The provider's metrics once the driver has the reports of ``retries`` retries:
    the listener reads each micro-batch's progress asynchronously, so the reports of the
    last batches may arrive after the sink has their rows (seen on a loaded machine:
    0 retries reported right after ``stop`` for 1 made)."""
    return wait_until(lambda: (m := lookup_metrics(provider)).num_retries >= retries and m,
                      f"the reports of {retries} retries",
                      timeout=30)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.redis
def test_exhausted_retries_fail_the_query_and_a_restart_completes_it_exactly_once(
    spark: Any, redis_server: RedisServer, inbox: Inbox, tmp_path: Path, queries: list[Any],
    arrow_batch_rows: Any,
) -> None:
    """A file sink with a checkpoint: the failed micro-batch commits nothing; the query
    restarted after the outage replays it, and the sink holds every row exactly once."""
    from pyspark.errors import StreamingQueryException

    rows = dimension()
    seed_redis(redis_server, rows)
    sleep = FileRecordingSleep(tmp_path / "waits")
    provider = redis_provider(
        redis_server, RetryPolicy(max_retries=1, initial_backoff=0.05, sleep=sleep))
    arrow_batch_rows(10)  # the failing batch writes some output before it fails
    out, checkpoint = tmp_path / "out", tmp_path / "chk"

    def start() -> Any:
        joined = lookup_join(stream_of(spark, inbox), provider, on={"customer_id": "id"},
                         metrics=True)
        query = (joined.writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="200 milliseconds").start())
        queries.append(query)
        return query

    def sink() -> Counter[tuple[Any, ...]]:
        return multiset(spark.read.schema(f"{STREAM_SCHEMA}, name STRING").parquet(str(out))
                        .collect())

    query = start()
    inbox.add(orders(batch_keys(range(40), (), 1000), 0))
    query.processAllAvailable()
    assert sink() == expected_left_join(inbox.rows, rows)
    committed = dict(sink())

    redis_server.kill()
    # Cached keys first (their output is written), then keys the dead source must load.
    inbox.add(orders(batch_keys(range(40, 80), range(40), 1001), 1000))
    with pytest.raises(StreamingQueryException) as failure:
        query.processAllAvailable()
    message = str(failure.value)
    assert "LookupLoadError: PartialCachingLookupProvider(key_columns=['id']): lookup of " in (
        message)
    assert re.search(r"lookup of \d+ key\(s\) \[\(\d+,\), \(\d+,\), \(\d+,\) and \d+ more\]",
                     message)  # the keys it could not load, by value
    assert "failed after 2 attempt(s): TransientConnectorError: Redis lookup of" in message
    assert "Redis lookup of" in message
    assert f"127.0.0.1:{redis_server.port}" in message
    assert "Connection refused" in message or "Error 111" in message
    assert sleep.waits() == [0.05]
    assert sink() == committed  # nothing of the failed batch is visible

    redis_server.start()  # the outage ends; the query is restarted from its checkpoint
    query = start()
    inbox.add(orders(batch_keys(range(80, 120), range(60, 70), 1002), 2000))
    query.processAllAvailable()
    expected = expected_left_join(inbox.rows, rows)
    got = sink()
    for _ in range(20):  # the restart may need a second trigger for the last file
        if sum(got.values()) >= sum(expected.values()):
            break
        query.processAllAvailable()
        got = sink()
    assert sum(got.values()) == sum(expected.values())
    assert got == expected  # nothing lost, nothing duplicated across the failure
