"""A no-cache point-in-time join over a SQL table binds its batch's range of ``as_of``
times into the lookup statement (issue 45 item 3): fewer versions read, the same answers.

Per source (SQLite, PostgreSQL, MariaDB), through `join_batch` as a worker runs it:

- The rows the database returns (counted where the function receives them) leave out
  the versions the batch cannot need: starting after its latest time and, with
  ``valid_to`` under PERMISSIVE, ended by its earliest (SQLite: the first only; its
  times are text, bounded a day wide).
- The answers equal the reference's and those of a cache holding every version, each
  event alone in its batch (the range is one time: exactly at a ``valid_from``, at a
  ``valid_to``) and all together, NULL ``as_of`` and events before a key's first
  version included; without ``valid_to`` too.
- Where no bound may be used, none is: DROPMALFORMED with ``valid_to`` still drops a
  version overlapping one that ended before the batch, FAILFAST still refuses a bad
  version after it.
"""

from __future__ import annotations

import datetime as dt
import functools
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from cache import DefaultLookupCache
from connectors.predicates import VersionBounds
from connectors.sql.lookup_function import SqlLookupFunction
from lookup import (
    LookupFunctionProvider,
    LookupProvider,
    PartialCachingLookupProvider,
    Validity,
    open_lookup,
)
from lookup.spark.assemble import join_batch
from lookup.spark.join_plan import plan_join
from spark_lookup.errors import BadValueError
from tests.conftest import mysql_params
from tests.integration.test_point_in_time_sources import (
    BAD_EVENTS,
    BAD_VERSIONS,
    DAY_EVENTS,
    DAY_VERSIONS,
    DAYS_SCHEMA,
    EVENTS,
    KEYS,
    SCHEMA,
    VALIDITY,
    VERSIONS,
    Event,
    Version,
    _naive,
    at,
    reference,
)

UTC = dt.timezone.utc


def _years(start: int, count: int, rate: float) -> list[Version]:
    """``count`` yearly versions of EUR/1 from January of ``start``, each ending at the
    next: far before or after every event."""
    return [("EUR", 1, rate + i, dt.datetime(start + i, 1, 1, tzinfo=UTC),
             dt.datetime(start + i + 1, 1, 1, tzinfo=UTC)) for i in range(count)]


PAST = _years(2000, 20, 100.0)  # ended by 2020
FUTURE = _years(2030, 20, 200.0)  # from 2030
# EUR/1's open version ends when the future ones begin.
HISTORY: list[Version] = [
    *PAST, *[(c, r, x, f, dt.datetime(2030, 1, 1, tzinfo=UTC) if (c, r, t) == ("EUR", 1, None)
              else t) for c, r, x, f, t in VERSIONS], *FUTURE]

# DROPMALFORMED with valid_to: EUR/1's long version overlaps one that ended before the
# event (both dropped); FAILFAST: USD/1's clean version at the event, an overlap after it.
HIDDEN_BAD: list[Version] = [
    ("EUR", 1, 1.0, at(1), at(20)),
    ("EUR", 1, 2.0, at(2), at(3)),
    ("USD", 1, 3.0, at(1), None),
    ("USD", 1, 4.0, dt.datetime(2030, 1, 1, tzinfo=UTC), dt.datetime(2031, 1, 1, tzinfo=UTC)),
    ("USD", 1, 5.0, dt.datetime(2030, 6, 1, tzinfo=UTC), None),
]
HIDDEN_EVENTS: list[Event] = [(1, "EUR", 1, at(15)), (2, "USD", 1, at(16))]

TABLES: dict[str, tuple[list[Version], bool]] = {
    "history": (HISTORY, False), "bad": (BAD_VERSIONS, False), "hidden": (HIDDEN_BAD, False),
    "days": (DAY_VERSIONS, True)}


class CountingLookup(SqlLookupFunction):
    """Counts the rows the database returns to the function."""

    rows_read = 0

    def _query(self, encoded: Any, bounds: VersionBounds | None = None) -> Any:
        index, batch = super()._query(encoded, bounds)
        self.rows_read += batch.num_rows
        return index, batch


class Source:
    """The tables of one database and lookups over them."""

    def __init__(self, name: str, connect: Callable[[], Any]) -> None:
        self.name = name
        self.connect = connect

    def function(self, table: str, policy: str) -> CountingLookup:
        schema = DAYS_SCHEMA if TABLES[table][1] else SCHEMA
        return CountingLookup(self.connect, table, KEYS, schema=schema, mode=policy)

    def provider(self, table: str, policy: str = "PERMISSIVE", cached: bool = False,
                 validity: Validity = VALIDITY) -> tuple[LookupProvider, CountingLookup]:
        function = self.function(table, policy)
        if cached:
            cache = DefaultLookupCache.new_builder().maximum_size(1000).build()
            return PartialCachingLookupProvider.of(function, cache, validity=validity), function
        return LookupFunctionProvider.of(function, validity=validity), function


def _create(execute: Callable[[str, Sequence[Any]], None], time_type: Callable[[bool], str],
            placeholder: str, aware: bool) -> None:
    for table, (versions, dates) in TABLES.items():
        execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, cur VARCHAR(8), region INT, "
                f"rate DOUBLE PRECISION, valid_from {time_type(dates)} NULL, "
                f"valid_to {time_type(dates)} NULL)", ())
        for number, version in enumerate(versions, 1):
            times = [value if aware else _naive(value) for value in version[3:]]
            execute(f"INSERT INTO {table} VALUES ({', '.join([placeholder] * 6)})",
                    [number, *version[:3], *times])


def _sqlite(where: Path) -> Source:
    path = str(where / "versions.sqlite")
    with sqlite3.connect(path) as db:
        def execute(statement: str, values: Sequence[Any]) -> None:
            # Times as ISO text, every other row's with a 'T' (both read alike; as text
            # a 'T' sorts after any time of the day with a space).
            sep = "T" if values and values[0] % 2 else " "
            db.execute(statement, [
                value.isoformat(sep) if isinstance(value, dt.datetime)
                else value.isoformat() if isinstance(value, dt.date) else value
                for value in values])

        _create(execute, lambda dates: "DATE" if dates else "TIMESTAMP", "?", aware=False)
    return Source("sqlite", functools.partial(sqlite3.connect, path))


def _postgres(dsn: str, schema: str) -> Source:
    import psycopg

    connect = functools.partial(psycopg.connect, dsn, options=f"-c search_path={schema}")
    with connect(autocommit=True) as conn:
        def execute(statement: str, values: Sequence[Any]) -> None:
            conn.execute(statement, list(values))

        _create(execute, lambda dates: "date" if dates else "timestamptz", "%s", aware=True)
    return Source("postgres", connect)


def _mysql(url: str, database: str) -> Source:
    import pymysql

    params = mysql_params(url, database)
    with pymysql.connect(**params, autocommit=True) as conn, conn.cursor() as cursor:
        def execute(statement: str, values: Sequence[Any]) -> None:
            cursor.execute(statement, list(values))

        _create(execute, lambda dates: "DATE" if dates else "DATETIME(6)", "%s", aware=False)
    return Source("mysql", functools.partial(pymysql.connect, **params))


@pytest.fixture(params=[
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Source:
    if request.param == "postgres":
        return _postgres(request.getfixturevalue("postgres_dsn"),
                         request.getfixturevalue("pg_schema"))
    if request.param == "mysql":
        return _mysql(request.getfixturevalue("mysql_url"), request.getfixturevalue("mysql_db"))
    return _sqlite(tmp_path)


def _batch(events: Sequence[Event], dates: bool = False) -> pa.RecordBatch:
    columns = list(zip(*events, strict=True))
    kind = pa.date32() if dates else pa.timestamp("us", tz="UTC")
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[0], pa.int64()), pa.array(columns[1], pa.string()),
         pa.array(columns[2], pa.int32()), pa.array(columns[3], kind)],
        names=["order", "cur", "region", "day" if dates else "order_time"])


def _join(provider: LookupProvider, events: Sequence[Event], dates: bool = False,
          alone: bool = False) -> list[tuple[int, float | None]]:
    """Each event's rate, joined by `join_batch` (each event in a batch of its own with
    ``alone``: the batch's range is its one time)."""
    as_of = "day" if dates else "order_time"
    schema = T.StructType([
        T.StructField("order", T.LongType()), T.StructField("cur", T.StringType()),
        T.StructField("region", T.IntegerType()),
        T.StructField(as_of, T.DateType() if dates else T.TimestampType())])
    plan = plan_join(schema, provider, KEYS, "left", ["rate"], as_of=as_of)
    batches = [[event] for event in events] if alone else [list(events)]
    out: list[tuple[int, float | None]] = []
    with open_lookup(provider) as handle:
        for batch in batches:
            joined = join_batch(_batch(batch, dates), plan.shape, handle.runtime)
            out.extend(zip(joined.column("order").to_pylist(),
                           joined.column("rate").to_pylist(), strict=True))
    return sorted(out)


def _read(provider: LookupProvider, function: CountingLookup, events: Sequence[Event]) -> int:
    before = function.rows_read
    _join(provider, events)
    return function.rows_read - before


def test_the_statement_reads_only_the_versions_the_batch_may_need(source: Source) -> None:
    provider, function = source.provider("history")
    eur = [event for event in EVENTS if event[1:3] == ("EUR", 1)]
    eur_versions = sum(1 for v in HISTORY if v[:2] == ("EUR", 1))
    # EUR/1's events lie in [2023-12-31, 2024-01-30]: its 3 versions of 2024, and the
    # 20 past ones on SQLite (its text times are bounded on valid_from only).
    expected = 3 + (len(PAST) if source.name == "sqlite" else 0)
    assert _read(provider, function, eur) == expected < eur_versions
    # An event exactly at a valid_to and at the next valid_from: the version starting
    # there only, not the one ending there (SQLite: both, and the past).
    assert _read(provider, function, [(1, "EUR", 1, at(5))]) == (
        1 if source.name != "sqlite" else 2 + len(PAST))
    # No known time: every version.
    assert _read(provider, function, [(1, "EUR", 1, None)]) == eur_versions
    # Without valid_to, from the earliest version up to the batch's latest time.
    starts, function = source.provider("history", validity=Validity("valid_from"))
    assert _read(starts, function, [(1, "EUR", 1, at(5))]) == len(PAST) + 2
    # A cache keeps every version of a key for later times: no bound.
    cached, function = source.provider("history", cached=True)
    assert _read(cached, function, eur) == eur_versions


@pytest.mark.parametrize("validity", [VALIDITY, Validity("valid_from")],
                         ids=["valid_to", "no-valid_to"])
@pytest.mark.parametrize("policy", ["PERMISSIVE", "DROPMALFORMED"])
def test_the_answers_are_those_of_every_version_read(source: Source, validity: Validity,
                                                     policy: str) -> None:
    for table, events, dates in (("history", EVENTS, False), ("bad", BAD_EVENTS, False),
                                 ("days", DAY_EVENTS, True)):
        bounded, _ = source.provider(table, policy, validity=validity)
        cached, _ = source.provider(table, policy, cached=True, validity=validity)
        whole = _join(cached, events, dates)
        assert _join(bounded, events, dates) == whole, table
        assert _join(bounded, events, dates, alone=True) == whole, table
        if validity.valid_to is not None:
            assert whole == reference(TABLES[table][0], events, policy), table


def test_the_bound_is_used_where_it_cannot_change_an_answer(source: Source) -> None:
    permissive, function = source.provider("hidden")
    assert _join(permissive, HIDDEN_EVENTS) == [(1, 1.0), (2, 3.0)]
    assert function.rows_read == (3 if source.name == "sqlite" else 2)
    # DROPMALFORMED with valid_to: EUR/1's version at the event overlaps one ended
    # before it: both dropped, so that one is read.
    dropping, function = source.provider("hidden", "DROPMALFORMED")
    assert _join(dropping, HIDDEN_EVENTS) == [(1, None), (2, None)]
    assert function.rows_read == len(HIDDEN_BAD)
    failing, _ = source.provider("hidden", "FAILFAST")
    with pytest.raises(BadValueError, match=r"key \('USD', 1\): versions overlapping"):
        _join(failing, HIDDEN_EVENTS[1:])
