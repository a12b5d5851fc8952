"""Point-in-time lookup joins (issue 45, "Done when") on every source and mode, on Spark:
`lookup_join(..., as_of=...)` compared with a reference computed here in plain Python.

- Per source and mode: PostgreSQL and MySQL/MariaDB (no cache, partial cache, full cache
  in process and shared), Parquet files and a Delta SCD2 table (full caches: files have
  no keyed lookup), a Delta table's history (``DeltaSource(history=True)``, events
  between its commits). The data covers an event exactly at ``valid_from`` and at
  ``valid_to``, a NULL ``as_of``, events before a key's first version, open-ended
  versions, a gap, a composite key, overlapping, inverted and NULL-start versions under
  each bad-value policy, and DATE version columns against a DATE ``as_of``. (SQLite:
  tests/lookup/spark/test_join_point_in_time.py.)
- Determinism: one input joined twice, with new versions committed in between (later
  than every event), gives the same rows, batch and streaming.
- Late events: a stream whose events are hours behind the table's newest versions joins
  the versions valid at their event times while the table changes between micro-batches.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cache import DefaultLookupCache
from connectors.sql.lookup_function import SqlLookupFunction
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    LookupProvider,
    PartialCachingLookupProvider,
    lookup_join,
    open_lookup,
)
from lookup.spark.assemble import join_batch
from lookup.spark.join_plan import plan_join
from scan import DeltaSource, FileSource, SqlTableSource
from spark_lookup.errors import BadValueError
from tests.conftest import mysql_params
from tests.fixtures import rates
from tests.fixtures.rates import SCHEMA, UTC, VALIDITY, at
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.spark

HOUR = dt.timedelta(hours=1)
KEYS = ["cur", "region"]
DAYS_SCHEMA = ("id BIGINT, cur STRING, region INT, rate DOUBLE, valid_from DATE, "
               "valid_to DATE")
EVENTS_SCHEMA = "order BIGINT, cur STRING, region INT, order_time TIMESTAMP"
DAY_EVENTS_SCHEMA = "order BIGINT, cur STRING, region INT, day DATE"
POLICIES = ["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]

Time = dt.datetime | dt.date
# (cur, region, rate, valid_from, valid_to): a version of key (cur, region).
Version = tuple[str, int, float, Time | None, Time | None]
# (order, cur, region, as_of)
Event = tuple[int, str | None, int | None, Time | None]


def day(number: int) -> dt.date:
    return dt.date(2024, 1, number)


# The rates the runtime tests join (tests/fixtures/rates.py): EUR/1 changes twice, the
# last version open-ended; EUR/2 (a composite key) has a gap; USD/1 one open-ended version.
VERSIONS: list[Version] = list(rates.VERSIONS)
# Theirs (at valid_from, at valid_to, between, long after the last, before the first
# version, in a gap, NULL, an unknown key, a NULL key part), and one at the last start.
EVENTS: list[Event] = [*rates.EVENTS, (17, "EUR", 1, at(10))]

# Bad history. EUR/1: a version inside another; CHF/1: a closed version inside an
# open-ended one; USD/1: an inverted interval beside a good one; GBP/1: a NULL
# valid_from beside a good one; JPY/1: clean (no policy touches it).
BAD_VERSIONS: list[Version] = [
    ("EUR", 1, 1.0, at(1), at(10)),
    ("EUR", 1, 2.0, at(3), at(5)),
    ("CHF", 1, 5.0, at(1), None),
    ("CHF", 1, 5.5, at(4), at(6)),
    ("USD", 1, 3.0, at(5), at(3)),
    ("USD", 1, 3.5, at(1), at(2)),
    ("GBP", 1, 4.0, None, at(9)),
    ("GBP", 1, 4.5, at(2), None),
    ("JPY", 1, 6.0, at(2), None),
]
BAD_EVENTS: list[Event] = [
    (1, "EUR", 1, at(2)), (2, "EUR", 1, at(4)), (3, "EUR", 1, at(6)), (4, "EUR", 1, at(5)),
    (5, "CHF", 1, at(3)), (6, "CHF", 1, at(5)), (7, "CHF", 1, at(7)), (8, "CHF", 1, at(6)),
    (9, "USD", 1, at(1, 12)), (10, "USD", 1, at(4)), (11, "GBP", 1, at(1)),
    (12, "GBP", 1, at(3)), (13, "JPY", 1, at(3)), (14, "JPY", 1, None),
]

# DATE versions against a DATE as_of (a date is its midnight).
DAY_VERSIONS: list[Version] = [
    ("EUR", 1, 1.0, day(1), day(5)),
    ("EUR", 1, 2.0, day(5), None),
    ("USD", 1, 3.0, day(3), day(4)),
]
DAY_EVENTS: list[Event] = [
    (1, "EUR", 1, dt.date(2023, 12, 31)), (2, "EUR", 1, day(1)), (3, "EUR", 1, day(4)),
    (4, "EUR", 1, day(5)), (5, "EUR", 1, day(28)), (6, "USD", 1, day(3)),
    (7, "USD", 1, day(4)), (8, "USD", 1, None), (9, "GBP", 1, day(3)),
]


# --- the reference ---------------------------------------------------------------------


def _ends_after(end: Time | None, when: Time) -> bool:
    return end is None or when < end


def _overlap(a: Version, b: Version) -> bool:
    a_start, a_end, b_start, b_end = a[3], a[4], b[3], b[4]
    assert a_start is not None
    assert b_start is not None
    return _ends_after(b_end, a_start) and _ends_after(a_end, b_start)


def reference(versions: Sequence[Version], events: Sequence[Event],
              policy: str = "PERMISSIVE") -> list[tuple[int, float | None]]:
    """Each event's rate under the policy (docs/point-in-time.md), version by version:
    a NULL valid_from or an inverted interval never matches; overlapping versions are
    all dropped (DROPMALFORMED) or the one with the latest valid_from wins (PERMISSIVE).
    """
    usable = [v for v in versions if v[3] is not None
              and (v[4] is None or v[4] > v[3])]
    if policy == "DROPMALFORMED":
        usable = [v for v in usable if not any(
            w is not v and w[:2] == v[:2] and _overlap(v, w) for w in usable)]
    out: list[tuple[int, float | None]] = []
    for order, cur, region, when in events:
        valid = [v for v in usable if when is not None and v[:2] == (cur, region)
                 and v[3] <= when and _ends_after(v[4], when)]  # type: ignore[operator]
        valid.sort(key=lambda v: v[3])  # type: ignore[arg-type,return-value]
        out.append((order, valid[-1][2] if valid else None))
    return sorted(out)


def test_the_reference_follows_the_documented_semantics() -> None:
    assert dict(reference(VERSIONS, EVENTS)) == {
        1: 1.10, 2: 1.20, 3: 1.10, 4: 1.20, 5: 1.30, 6: None, 7: None, 8: None, 9: 2.20,
        10: 2.10, 11: None, 12: 0.90, 13: None, 14: None, 15: None, 16: 0.90, 17: 1.30}
    assert dict(reference(BAD_VERSIONS, BAD_EVENTS)) == {
        1: 1.0, 2: 2.0, 3: 1.0, 4: 1.0, 5: 5.0, 6: 5.5, 7: 5.0, 8: 5.0, 9: 3.5, 10: None,
        11: None, 12: 4.5, 13: 6.0, 14: None}
    dropped = dict(reference(BAD_VERSIONS, BAD_EVENTS, "DROPMALFORMED"))
    assert [dropped[order] for order in range(1, 9)] == [None] * 8
    assert dict(reference(DAY_VERSIONS, DAY_EVENTS)) == {
        1: None, 2: 1.0, 3: 1.0, 4: 2.0, 5: 2.0, 6: 3.0, 7: None, 8: None, 9: None}


# --- the tables, per source --------------------------------------------------------------


def _arrow(versions: Sequence[Version], dates: bool) -> pa.Table:
    kind = pa.date32() if dates else pa.timestamp("us", tz="UTC")
    columns = list(zip(*versions, strict=True))
    return pa.table({
        "id": pa.array(range(1, len(versions) + 1), pa.int64()),
        "cur": pa.array(columns[0], pa.string()),
        "region": pa.array(columns[1], pa.int32()),
        "rate": pa.array(columns[2], pa.float64()),
        "valid_from": pa.array(columns[3], kind),
        "valid_to": pa.array(columns[4], kind),
    })


TABLES: dict[str, tuple[list[Version], bool]] = {
    "rates": (VERSIONS, False), "bad": (BAD_VERSIONS, False), "days": (DAY_VERSIONS, True)}


@dataclass
class Tables:
    """The tables ``rates``, ``bad`` and ``days`` of one source, and providers over them."""

    name: str
    where: Path
    connect: Callable[[], Any] | None = None  # SQL sources

    def _source(self, table: str, policy: str) -> Any:
        schema = DAYS_SCHEMA if TABLES[table][1] else SCHEMA
        if self.connect is not None:
            return SqlTableSource(self.connect, table, schema=schema, mode=policy)
        if self.name == "parquet":
            return FileSource(str(self.where / table), schema=schema, mode=policy)
        return DeltaSource(str(self.where / table), schema=schema, mode=policy)

    def provider(self, mode: str, table: str = "rates",
                 policy: str = "PERMISSIVE") -> LookupProvider:
        if mode.startswith("full"):
            shared: dict[str, Any] = (
                {"snapshot_dir": str(self.where / f"store-{uuid.uuid4().hex[:8]}")}
                if mode == "full-shared" else {"share_across_workers": False})
            return FullCachingLookupProvider.of(
                self._source(table, policy), PeriodicCacheReloadTrigger(HOUR), KEYS,
                validity=VALIDITY, **shared)
        assert self.connect is not None
        schema = DAYS_SCHEMA if TABLES[table][1] else SCHEMA
        function = SqlLookupFunction(self.connect, table, KEYS, schema=schema, mode=policy)
        if mode == "none":
            return LookupFunctionProvider.of(function, validity=VALIDITY)
        cache = DefaultLookupCache.new_builder().maximum_size(100).build()
        return PartialCachingLookupProvider.of(function, cache, validity=VALIDITY)


def _pg_type(dates: bool) -> str:
    return "date" if dates else "timestamptz"


def _create_sql(execute: Callable[[str, Sequence[Any]], None], time_type: Callable[[bool], str],
                placeholder: str) -> None:
    for table, (versions, dates) in TABLES.items():
        execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, cur VARCHAR(8), region INT, "
                f"rate DOUBLE PRECISION, valid_from {time_type(dates)} NULL, "
                f"valid_to {time_type(dates)} NULL)", ())
        # Rows newest first: the runtimes order each key's versions themselves.
        for number, version in reversed(list(enumerate(versions, 1))):
            values = [number, *version[:3], *(_naive(value) for value in version[3:])]
            execute(f"INSERT INTO {table} VALUES ({', '.join([placeholder] * 6)})", values)


def _naive(value: Time | None) -> Time | None:
    """A UTC time as the naive wall-clock value of UTC (MySQL's DATETIME holds no zone)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _postgres(dsn: str, schema: str, where: Path) -> Tables:
    import psycopg

    connect = functools.partial(psycopg.connect, dsn, options=f"-c search_path={schema}")
    with connect(autocommit=True) as conn:
        def execute(statement: str, values: Sequence[Any]) -> None:
            conn.execute(statement, [  # timestamptz: the aware value
                value.replace(tzinfo=UTC) if isinstance(value, dt.datetime) else value
                for value in values])

        _create_sql(execute, _pg_type, "%s")
    return Tables("postgres", where, connect)


def _mysql(url: str, database: str, where: Path) -> Tables:
    import pymysql

    params = mysql_params(url, database)
    with pymysql.connect(**params, autocommit=True) as conn, conn.cursor() as cursor:
        def execute(statement: str, values: Sequence[Any]) -> None:
            cursor.execute(statement, list(values))

        _create_sql(execute, lambda dates: "DATE" if dates else "DATETIME(6)", "%s")
    return Tables("mysql", where, functools.partial(pymysql.connect, **params))


def _files(name: str, where: Path) -> Tables:
    from deltalake import write_deltalake

    for table, (versions, dates) in TABLES.items():
        data = _arrow(list(reversed(versions)), dates)
        if name == "parquet":
            (where / table).mkdir()
            # Two files: a key's versions in both.
            pq.write_table(data.slice(0, 3), where / table / "part-0.parquet")
            pq.write_table(data.slice(3), where / table / "part-1.parquet")
        else:
            write_deltalake(str(where / table), data.slice(0, 3))
            write_deltalake(str(where / table), data.slice(3), mode="append")
    return Tables(name, where, None)


@pytest.fixture
def tables(request: pytest.FixtureRequest, tmp_path: Path) -> Tables:
    name = request.param
    if name == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        return _postgres(dsn, request.getfixturevalue("pg_schema"), tmp_path)
    if name == "mysql":
        url = request.getfixturevalue("mysql_url")
        return _mysql(url, request.getfixturevalue("mysql_db"), tmp_path)
    return _files(name, tmp_path)


SQL_MODES = ["none", "partial", "full", "full-shared"]
CASES = [
    *(pytest.param("postgres", mode, marks=pytest.mark.postgres, id=f"postgres-{mode}")
      for mode in SQL_MODES),
    *(pytest.param("mysql", mode, marks=pytest.mark.mysql, id=f"mysql-{mode}")
      for mode in SQL_MODES),
    # Files have no keyed lookup: a full cache only.
    *(pytest.param(name, mode, id=f"{name}-{mode}")
      for name in ("parquet", "delta") for mode in ("full", "full-shared")),
]


def _joined(spark: Any, provider: LookupProvider, events: Sequence[Event], schema: str,
            how: str = "left") -> list[tuple[int, float | None]]:
    as_of = schema.rsplit(" ", 2)[-2]
    df = spark.createDataFrame(list(events), schema).repartition(2)
    out = lookup_join(df, provider, on=KEYS, how=how, columns=["rate"], as_of=as_of)
    return sorted((row["order"], row["rate"]) for row in out.collect())


@pytest.mark.classic_only
@pytest.mark.parametrize(("tables", "mode"), CASES, indirect=["tables"])
def test_each_event_joins_the_version_valid_at_its_time(spark: Any, tables: Tables,
                                                        mode: str) -> None:
    rates = tables.provider(mode)
    assert _joined(spark, rates, EVENTS, EVENTS_SCHEMA) == reference(VERSIONS, EVENTS)
    inner = [(order, rate) for order, rate in reference(VERSIONS, EVENTS) if rate is not None]
    assert _joined(spark, rates, EVENTS, EVENTS_SCHEMA, "inner") == inner
    days = tables.provider(mode, "days")
    assert _joined(spark, days, DAY_EVENTS, DAY_EVENTS_SCHEMA) == reference(
        DAY_VERSIONS, DAY_EVENTS)


@pytest.mark.classic_only
@pytest.mark.parametrize(("tables", "mode"), CASES, indirect=["tables"])
def test_bad_history_follows_each_policy(spark: Any, tables: Tables, mode: str) -> None:
    for policy in ("PERMISSIVE", "DROPMALFORMED"):
        bad = tables.provider(mode, "bad", policy)
        assert _joined(spark, bad, BAD_EVENTS, EVENTS_SCHEMA) == reference(
            BAD_VERSIONS, BAD_EVENTS, policy), policy





@pytest.mark.parametrize(("tables", "mode"), CASES, indirect=["tables"])
def test_failfast_names_the_table_the_key_and_its_versions(
        spark: Any, tables: Tables, mode: str) -> None:
    """FAILFAST as a worker joins a batch (`join_batch`), without Spark: a failed Spark
    job costs the next one new Python workers (seconds); the job fails once, below."""
    failing = tables.provider(mode, "bad", "FAILFAST")
    plan = plan_join(_struct(EVENTS_SCHEMA), failing, KEYS, "left", ["rate"],
                     as_of="order_time")
    with open_lookup(failing) as handle, pytest.raises(
            BadValueError, match=r"table '[^']*bad', key \('(EUR|CHF|USD|GBP)', 1\): .*"
                                 r"its versions \[.*\(mode FAILFAST\)"):
        join_batch(_events_batch(BAD_EVENTS), plan.shape, handle.runtime)


@pytest.mark.classic_only
def test_failfast_fails_the_spark_job(spark: Any, tmp_path: Path) -> None:
    failing = _files("delta", tmp_path).provider("full", "bad", "FAILFAST")
    with pytest.raises(Exception, match=r"BadValueError: table .*bad', key \('(EUR|CHF|USD|GB"
                                        r"P)', 1\): .*\(mode FAILFAST\)"):
        _joined(spark, failing, BAD_EVENTS, EVENTS_SCHEMA)


def _struct(ddl: str) -> Any:
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl)


def _events_batch(events: Sequence[Event]) -> pa.RecordBatch:
    columns = list(zip(*events, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[0], pa.int64()), pa.array(columns[1], pa.string()),
         pa.array(columns[2], pa.int32()), pa.array(columns[3], pa.timestamp("us", tz="UTC"))],
        names=["order", "cur", "region", "order_time"])


def test_on_spark_connect(spark: Any, spark_kind: str, tmp_path: Path) -> None:
    if spark_kind != "connect":
        pytest.skip("the classic session runs every source and mode above")
    tables = _files("delta", tmp_path)
    rates = tables.provider("full-shared")
    assert _joined(spark, rates, EVENTS, EVENTS_SCHEMA) == reference(VERSIONS, EVENTS)


# --- a Delta table's history ------------------------------------------------------------


@dataclass
class History:
    """A Delta table with its change data feed, its versions as the commits made them
    (the reference's), and events at and between the commits."""

    path: str
    versions: list[Version]
    events: list[Event]

    def provider(self, mode: str) -> LookupProvider:
        source = DeltaSource(self.path, history=True, key_columns=KEYS)
        shared: dict[str, Any] = (
            {"snapshot_dir": f"{self.path}-store-{uuid.uuid4().hex[:8]}"}
            if mode == "full-shared" else {"share_across_workers": False})
        return FullCachingLookupProvider.of(
            source, PeriodicCacheReloadTrigger(HOUR), KEYS,
            validity=source.history_validity, **shared)


def _history(where: Path) -> History:
    from deltalake import DeltaTable, write_deltalake

    path = str(where / "history")
    rows = pa.table({"cur": ["EUR", "EUR", "USD"], "region": pa.array([1, 2, 1], pa.int32()),
                     "rate": [1.10, 2.10, 0.90]})
    write_deltalake(path, rows, configuration={"delta.enableChangeDataFeed": "true"})
    commits: list[Callable[[], Any]] = [
        lambda: DeltaTable(path).update(updates={"rate": "1.2"},
                                        predicate="cur = 'EUR' AND region = 1"),
        lambda: DeltaTable(path).delete("cur = 'USD'"),
        lambda: write_deltalake(path, pa.table({"cur": ["GBP"], "region": pa.array(
            [1], pa.int32()), "rate": [0.50]}), mode="append"),
        lambda: DeltaTable(path).update(updates={"rate": "1.3"},
                                        predicate="cur = 'EUR' AND region = 1"),
    ]
    for commit in commits:
        time.sleep(0.02)  # commits in distinct milliseconds
        commit()
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    t = [epoch + dt.timedelta(milliseconds=entry["timestamp"]) for entry in sorted(
        DeltaTable(path).history(), key=lambda entry: int(entry["version"]))]
    assert t == sorted(t)
    assert len(set(t)) == 5
    ms = dt.timedelta(milliseconds=1)
    versions: list[Version] = [
        ("EUR", 1, 1.10, t[0], t[1]), ("EUR", 1, 1.20, t[1], t[4]), ("EUR", 1, 1.30, t[4], None),
        ("EUR", 2, 2.10, t[0], None), ("USD", 1, 0.90, t[0], t[2]), ("GBP", 1, 0.50, t[3], None),
    ]
    events: list[Event] = [
        (1, "EUR", 1, t[0] - HOUR), (2, "EUR", 1, t[0]), (3, "EUR", 1, t[1] - ms),
        (4, "EUR", 1, t[1]), (5, "EUR", 1, t[1] + (t[2] - t[1]) / 2), (6, "EUR", 1, t[4]),
        (7, "USD", 1, t[2] - ms), (8, "USD", 1, t[2]), (9, "GBP", 1, t[3] - ms),
        (10, "GBP", 1, t[3]), (11, "EUR", 2, t[4]), (12, "EUR", 1, None), (13, "CHF", 1, t[1]),
        (14, "EUR", 2, t[0] - ms),
    ]
    return History(path, versions, events)


@pytest.mark.classic_only
@pytest.mark.parametrize("mode", ["full", "full-shared"])
def test_a_delta_tables_history_as_of_each_event(spark: Any, tmp_path: Path,
                                                 mode: str) -> None:
    history = _history(tmp_path)
    rates = history.provider(mode)
    assert _joined(spark, rates, history.events, EVENTS_SCHEMA) == reference(
        history.versions, history.events)
    # An open-ended version: valid long after its commit.
    later = [(1, "EUR", 1, dt.datetime.now(UTC) + dt.timedelta(days=1))]
    assert _joined(spark, rates, later, EVENTS_SCHEMA) == [(1, 1.30)]


# --- determinism ------------------------------------------------------------------------


def _stream_joined(spark: Any, provider: LookupProvider, events: Sequence[Event],
                   where: Path) -> list[tuple[int, float | None]]:
    """The join of ``events`` as a stream: two Parquet files, one micro-batch each."""
    inbox = where / f"inbox-{uuid.uuid4().hex[:8]}"
    inbox.mkdir()
    batch = _events_batch(events)
    half = len(events) // 2
    pq.write_table(pa.Table.from_batches([batch.slice(0, half)]), inbox / "part-0.parquet")
    pq.write_table(pa.Table.from_batches([batch.slice(half)]), inbox / "part-1.parquet")
    stream = (spark.readStream.schema(EVENTS_SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(str(inbox)))
    name = f"pit_{uuid.uuid4().hex[:8]}"
    query = (lookup_join(stream, provider, on=KEYS, columns=["rate"], as_of="order_time")
             .writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(inbox) + "-checkpoint")
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert sum(1 for progress in query.recentProgress if progress["numInputRows"]) == 2
    return sorted((row["order"], row["rate"]) for row in spark.table(name).collect())


def _pg_commit_later_versions(tables: Tables) -> None:
    """New versions of every key from 2025 on (after every event): the open versions
    closed, new open ones."""
    assert tables.connect is not None
    with tables.connect(autocommit=True) as conn:  # type: ignore[call-arg]
        conn.execute("INSERT INTO rates SELECT id + 100, cur, region, rate * 10, "
                     "'2025-01-01T00:00:00Z', NULL FROM rates WHERE valid_to IS NULL")
        conn.execute("UPDATE rates SET valid_to = '2025-01-01T00:00:00Z' "
                     "WHERE valid_to IS NULL AND id < 100")


@pytest.mark.classic_only
@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
@pytest.mark.parametrize("source", [
    pytest.param("postgres", marks=pytest.mark.postgres), "delta-history"])
def test_a_rerun_after_new_versions_gives_the_same_output(
        spark: Any, request: pytest.FixtureRequest, tmp_path: Path, source: str,
        streaming: bool) -> None:
    def run(provider: LookupProvider) -> list[tuple[int, float | None]]:
        if streaming:
            return _stream_joined(spark, provider, events, tmp_path)
        return _joined(spark, provider, events, EVENTS_SCHEMA)

    if source == "postgres":
        tables = _postgres(request.getfixturevalue("postgres_dsn"),
                           request.getfixturevalue("pg_schema"), tmp_path)
        events, versions = EVENTS, VERSIONS
        first = run(tables.provider("none"))
        _pg_commit_later_versions(tables)
        second = run(tables.provider("none"))  # no cache: reads the new versions
        now = [(1, "EUR", 1, dt.datetime(2025, 2, 1, tzinfo=UTC))]
        assert _joined(spark, tables.provider("none"), now, EVENTS_SCHEMA) == [(1, 13.0)]
    else:
        from deltalake import DeltaTable, write_deltalake

        history = _history(tmp_path)
        events, versions = history.events, history.versions
        first = run(history.provider("full"))
        time.sleep(0.02)
        DeltaTable(history.path).update(updates={"rate": "9.9"})
        write_deltalake(history.path, pa.table({"cur": ["CHF"], "region": pa.array(
            [1], pa.int32()), "rate": [7.0]}), mode="append")
        rerun = history.provider("full")  # a new cache: loads the new commits
        second = run(rerun)
        now = [(1, "EUR", 1, dt.datetime.now(UTC)), (2, "CHF", 1, dt.datetime.now(UTC))]
        assert _joined(spark, rerun, now, EVENTS_SCHEMA) == [(1, 9.9), (2, 7.0)]
    assert first == reference(versions, events)
    assert repr(second) == repr(first)


# --- late events ------------------------------------------------------------------------


LATE_KEYS = [("EUR", 1), ("EUR", 2)]
LATENESS = [dt.timedelta(hours=hours) for hours in (1, 3, 5, 14)]


def _late_table(path: Path) -> Callable[[], sqlite3.Connection]:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE rates (id INTEGER PRIMARY KEY, cur TEXT, region INTEGER, "
                   "rate REAL, valid_from TIMESTAMP, valid_to TIMESTAMP)")
    return functools.partial(sqlite3.connect, str(path))


def _late_provider(mode: str, connect: Callable[[], Any]) -> LookupProvider:
    if mode == "full":
        return FullCachingLookupProvider.of(
            SqlTableSource(connect, "rates", schema=SCHEMA),
            PeriodicCacheReloadTrigger(dt.timedelta(milliseconds=200)), KEYS,
            validity=VALIDITY, share_across_workers=False)
    function = SqlLookupFunction(connect, "rates", KEYS, schema=SCHEMA)
    if mode == "none":
        return LookupFunctionProvider.of(function, validity=VALIDITY)
    cache = (DefaultLookupCache.new_builder().maximum_size(100)
             .expire_after_write(dt.timedelta(milliseconds=300)).build())
    return PartialCachingLookupProvider.of(function, cache, validity=VALIDITY)


@pytest.mark.classic_only
@pytest.mark.parametrize("mode", ["none", "partial", "full"])
def test_late_events_join_the_versions_of_their_time_while_the_table_changes(
        spark: Any, tmp_path: Path, mode: str) -> None:
    """Every 6 hours of table time a new version of each key opens (closing the one
    before); each micro-batch's events are 1 to 14 hours behind the newest version.
    Between micro-batches the table changes: the versions a batch's events need were
    written after the batch before ran (a cache's TTL or reload lets it see them)."""
    connect = _late_table(tmp_path / "late.sqlite")
    provider = _late_provider(mode, connect)
    inbox = tmp_path / "late-in"
    inbox.mkdir()
    stream = (spark.readStream.schema(EVENTS_SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(str(inbox)))
    name = f"late_{mode}_{uuid.uuid4().hex[:6]}"
    query = (lookup_join(stream, provider, on=KEYS, columns=["rate"], as_of="order_time")
             .writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "late-checkpoint")).start())
    versions: list[Version] = []
    events: list[Event] = []
    order = itertools.count(1)
    try:
        for step in range(4):
            opened = at(1) + step * 6 * HOUR
            with connect() as db:
                db.execute("UPDATE rates SET valid_to = ? WHERE valid_to IS NULL",
                           (opened.strftime("%Y-%m-%d %H:%M:%S"),))
                for cur, region in LATE_KEYS:
                    rate = region * 10 + step
                    db.execute("INSERT INTO rates (cur, region, rate, valid_from, valid_to) "
                               "VALUES (?, ?, ?, ?, NULL)",
                               (cur, region, rate, opened.strftime("%Y-%m-%d %H:%M:%S")))
            versions = [(*v[:4], opened if v[4] is None else v[4]) for v in versions]
            versions += [(cur, region, float(region * 10 + step), opened, None)
                         for cur, region in LATE_KEYS]
            # The caches see the change: a partial cache's entries expire, a full cache
            # reloads (every 200 ms).
            time.sleep({"none": 0.0, "partial": 0.5, "full": 1.0}[mode])
            batch = [(next(order), cur, region, opened - late)
                     for cur, region in LATE_KEYS for late in LATENESS]
            events += batch
            pq.write_table(pa.Table.from_batches([_events_batch(batch)]),
                           inbox / f"part-{step}.parquet")
            query.processAllAvailable()
        got = sorted((row["order"], row["rate"]) for row in spark.table(name).collect())
    finally:
        query.stop()
    want = reference(versions, events)
    assert got == want
    # The events joined versions before each batch's newest (rates of steps 0 to 2 of
    # both keys), or none before the first version; never the newest one (13, 23).
    assert [rate for _, rate in want[:8]] == [None] * 8  # the first batch's
    assert {rate for _, rate in want} == {None, 10.0, 11.0, 12.0, 20.0, 21.0, 22.0}
