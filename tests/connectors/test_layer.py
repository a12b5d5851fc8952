"""The connector layer's own parts: conversion, error classification, predicates, keys,
drivers (ADBC and DB-API), filters pushed down, and failures reported at once."""

from __future__ import annotations

import functools
import math
import pickle
import sqlite3
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from connectors import BadValuePolicy, KeyCodec, Predicate
from connectors.convert import cast_column, castable
from connectors.errors import is_transient, should_retry
from connectors.keys import key_spark_type
from connectors.rows import python_values
from lookup import (
    FullCachingLookupProvider,
    SqlLookupFunction,
    open_lookup,
)
from scan import SqlTableSource, read_arrow
from spark_lookup.errors import (
    BadValueError,
    ConfigError,
    ConnectorError,
    SnapshotUnavailableError,
    TransientConnectorError,
)
from spark_lookup.schema import to_arrow_schema
from triggers import PeriodicCacheReloadTrigger

# --- conversion -------------------------------------------------------------------------


def test_casts_are_strict_where_arrow_is_lenient() -> None:
    text = pa.array(["1e30", "1.25", "1.255", "NaN", "abc", None])
    converted, bad = cast_column(text, pa.decimal128(38, 18))
    # Arrow alone wraps '1e30' around 128 bits into another number; never here.
    assert converted.to_pylist()[:2] == [None, Decimal("1.250000000000000000")]
    assert set(bad) == {0, 3, 4}
    _, bad = cast_column(text, pa.decimal128(10, 2))
    assert 2 in bad  # a digit beyond the scale never rounds
    converted, bad = cast_column(pa.array(["2024-01-02 03:04:05", "2024-01-02T03:04:05+02:00",
                                           "2024-01-02 03:04:05Z"]), pa.timestamp("us", "UTC"))
    assert bad == {}
    assert [v.hour for v in converted.to_pylist()] == [3, 1, 3]  # no offset: UTC
    _, bad = cast_column(pa.array(["2024-01-02 03:04:05+02:00"]), pa.timestamp("us"))
    assert list(bad) == [0]  # a wall-clock time with an offset is no TIMESTAMP_NTZ
    converted, bad = cast_column(pa.array([2**53 + 1, 1]), pa.float64())
    assert bad == {}
    assert converted.to_pylist()[0] == float(2**53)
    _, bad = cast_column(pa.array([2**40, 1]), pa.int32())
    assert list(bad) == [0]
    assert not castable(pa.list_(pa.int64()), pa.int32())
    assert castable(pa.string(), pa.list_(pa.int64())) is False


def test_a_batch_with_many_bad_values_is_probed_in_slices() -> None:
    values = pa.array([str(i) if i % 3 else "x" for i in range(5000)])
    start = time.perf_counter()
    converted, bad = cast_column(values, pa.int64())
    assert len(bad) == 1667
    assert converted.null_count == 1667
    assert time.perf_counter() - start < 5  # bounded, not one cast per value per value


def test_python_values_of_timestamps_are_the_same_instants_as_pyarrows() -> None:
    column = pa.array([0, -1, 1_700_000_000_123_456, None, 253402300799_000_000],
                      pa.timestamp("us", "UTC"))
    assert python_values(column) == column.to_pylist()
    naive = column.cast(pa.timestamp("us"))
    assert python_values(naive) == naive.to_pylist()


# --- errors ---------------------------------------------------------------------------


def test_driver_errors_are_classified_transient_or_permanent() -> None:
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 5  # type: ignore[attr-defined]
    missing = sqlite3.OperationalError("no such table: t")
    missing.sqlite_errorcode = 1  # type: ignore[attr-defined]
    assert is_transient(locked)
    assert not is_transient(missing)
    import psycopg

    refused = psycopg.OperationalError("connection failed: Connection refused")
    login = psycopg.OperationalError("FATAL:  password authentication failed for user x")
    assert is_transient(refused)
    assert not is_transient(login)
    import redis

    assert is_transient(redis.ConnectionError("Error 111 connecting"))
    assert not is_transient(redis.AuthenticationError("invalid password"))
    assert not is_transient(redis.ResponseError("WRONGTYPE"))
    assert should_retry(TransientConnectorError("x"))
    assert not should_retry(ConnectorError("x"))
    assert not should_retry(BadValueError("x"))
    assert not should_retry(ConfigError("x"))
    assert should_retry(RuntimeError("a user's function failed"))  # as Flink retries
    # Input nested too deep recurses as deep on every attempt (issue 26, item 10).
    assert not should_retry(RecursionError("maximum recursion depth exceeded"))


@pytest.mark.postgres
def test_postgres_sqlstates_decide(postgres_dsn: str) -> None:
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as missing:
            conn.execute("SELECT * FROM no_such_table_at_all")
        with pytest.raises(psycopg.Error) as cancelled:
            conn.execute("SET statement_timeout = 10; SELECT pg_sleep(1)")
    assert not is_transient(missing.value)  # 42P01
    assert is_transient(cancelled.value)  # 57014: a statement timeout passes


# --- predicates -------------------------------------------------------------------------


def test_predicates_are_checked_and_never_spliced() -> None:
    with pytest.raises(ConfigError, match="operator"):
        Predicate("a", "LIKE", "x")
    with pytest.raises(ConfigError, match="is null"):
        Predicate("a", "=", None)
    with pytest.raises(ConfigError, match="list of values"):
        Predicate("a", "in", "xy")
    with pytest.raises(ConfigError, match="invalid predicate column"):
        Predicate("a; DROP TABLE t", "=", 1)
    assert Predicate("a", "IN", [1, 2]).value == (1, 2)


@pytest.fixture
def wide_db(tmp_path: Path) -> Any:
    path = tmp_path / "wide.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, region TEXT, active BOOLEAN, "
                   "v TEXT)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                       [(i, "eu" if i % 2 else "us", i % 3 != 0, f"v{i}") for i in range(1, 31)])
    return functools.partial(sqlite3.connect, str(path))


def test_filters_reach_the_database_with_bound_values_in_every_mode(wide_db: Any) -> None:
    filters = [Predicate("region", "=", "eu"), Predicate("active", "=", True),
               Predicate("id", "not in", [5])]
    source = SqlTableSource(wide_db, "t", columns=["id", "v"], filters=filters, chunk_size=7)
    with pytest.raises(ConfigError, match="unknown column"):
        SqlTableSource(wide_db, "t", schema="id BIGINT", filters=[Predicate("x", "=", 1)])
    loaded = sorted(read_arrow(source, 2).to_pylist(), key=lambda r: r["id"])
    expected = [i for i in range(1, 31) if i % 2 and i % 3 != 0 and i != 5]
    assert [r["id"] for r in loaded] == expected
    assert set(loaded[0]) == {"id", "v"}  # only the declared columns
    fn = SqlLookupFunction(wide_db, "t", "id", columns=["id", "v"], filters=filters)
    found = fn.lookup_batch([(1,), (2,), (5,), (7,)])
    assert found == {(1,): [(1, "v1")], (2,): [], (5,): [], (7,): [(7, "v7")]}


# --- keys -------------------------------------------------------------------------------


def test_keys_are_values_of_their_columns_types() -> None:
    codec = KeyCodec(["k", "s"], [T.LongType(), T.StringType()], "t")
    encoded = codec.encode([(1, "a"), (1.0, "a"), (True and 2, "b"), (None, "c"), (2.5, "d")])
    assert encoded.positions == [0, 0, 1, -1, -1]
    assert [a.type for a in encoded.arrays] == [pa.int64(), pa.string()]
    with pytest.raises(ConfigError, match="a bool value"):
        codec.encode([(True, "a")])
    with pytest.raises(ConfigError, match="an int value"):
        codec.encode([(1, 1)])
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="out of the range of bigint"):
        codec.encode([(Decimal("1E+1000000"), "a")])
    assert time.perf_counter() - start < 1  # never materialized
    decimals = KeyCodec(["d"], [T.DecimalType(10, 2)], "t")
    assert decimals.encode([(Decimal("1.5"),), (1.5,), (Decimal("1.50"),)]).positions == [0, 0, 0]
    assert decimals.encode([(Decimal("1.505"),)]).positions == [-1]  # no DECIMAL(10,2) equals it
    with pytest.raises(ConfigError, match="out of the range"):
        decimals.encode([(10**400,)])
    floats = KeyCodec(["f"], [T.DoubleType()], "t")
    assert floats.encode([(math.nan,), (1,)]).positions == [-1, 0]
    # A FLOAT key is the FLOAT it rounds to, on both paths (a NaN takes the keys off the
    # plain one): 1.1 and the FLOAT nearest it are one key, asked once.
    singles = KeyCodec(["f"], [T.FloatType()], "t")
    nearest = float(np.float32(1.1))
    for keys in ([(1.1,), (nearest,)], [(1.1,), (nearest,), (math.nan,)]):
        encoded = singles.encode(keys)
        assert encoded.positions[:2] == [0, 0]
        assert encoded.arrays[0].to_pylist() == [nearest]
    # -0.0 is 0.0, as Spark compares them (Arrow's hashing tells them apart).
    for codec in (singles, floats):
        for keys in ([(-0.0,), (0.0,)], [(-0.0,), (0.0,), (math.nan,)]):
            encoded = codec.encode(keys)
            assert encoded.positions[:2] == [0, 0]
            assert str(encoded.arrays[0].to_pylist()) == "[0.0]"
        given = codec.encode_arrays([pa.array([-0.0, 1.0])])
        assert str(given.arrays[0].to_pylist()) == "[0.0, 1.0]"


def test_no_key_is_rounded_or_cut_into_another() -> None:
    """Issue 26: a FLOAT key beyond its range became infinity on the plain path, a
    pandas.Timestamp lost its nanoseconds, and a null double key was kept."""
    floats = KeyCodec(["f"], [T.FloatType()], "t")
    with pytest.raises(ConfigError, match="out of the range of float"):
        floats.encode([(1e300,)])
    assert floats.encode([(math.inf,), (0.5,)]).positions == [0, 1]
    arrays = floats.encode_arrays([pa.array([0.5, 1e300, math.inf, None])])
    assert arrays.arrays[0].to_pylist() == [0.5, math.inf]
    assert arrays.kept is not None
    assert arrays.kept.to_pylist() == [0, 2]
    doubles = KeyCodec(["d"], [T.DoubleType()], "t").encode_arrays([pa.array([1.0, None])])
    assert doubles.kept is not None
    assert doubles.kept.to_pylist() == [0]
    nanos = pd.Timestamp("2024-01-01 00:00:00.000000001")
    wall = KeyCodec(["t"], [T.TimestampNTZType()], "t")
    assert wall.encode([(nanos,), (pd.Timestamp("2024-01-01"),)]).positions == [-1, 0]
    instants = KeyCodec(["t"], [T.TimestampType()], "t")
    assert instants.normalize((nanos.tz_localize("UTC"),)) is None
    flags = KeyCodec(["b"], [T.BooleanType()], "t")
    assert flags.normalize((np.True_,)) == (True,)  # numpy 2 names its type "bool"
    with pytest.raises(ConfigError, match="can never equal"):
        KeyCodec(["i"], [T.LongType()], "t").normalize((np.True_,))


def test_a_codec_for_arrow_types_encodes_exactly_into_them() -> None:
    codec = KeyCodec.for_arrow(["u", "s"], [pa.uint8(), pa.timestamp("s")], "t")
    whole = datetime(2024, 1, 1, 0, 0, 1)
    encoded = codec.encode([(1, whole), (1.0, whole), (-1, whole),
                            (2, whole.replace(microsecond=5))])
    assert encoded.positions == [0, 0, -1, -1]
    assert [a.type for a in encoded.arrays] == [pa.uint8(), pa.timestamp("s")]
    assert codec.normalize((255, whole)) == (255, whole)
    assert codec.normalize((256, whole)) is None
    assert pickle.loads(pickle.dumps(codec)).arrow_types == codec.arrow_types
    assert key_spark_type(pa.large_string()) == T.StringType()
    with pytest.raises(ConfigError, match="cannot be a lookup key column"):
        KeyCodec.for_arrow(["l"], [pa.list_(pa.int64())], "t")


# --- drivers ----------------------------------------------------------------------------


def test_any_picklable_callable_is_a_factory_lambdas_included(wide_db: Any) -> None:

    from pyspark import cloudpickle

    path = wide_db.args[0]
    fn = SqlLookupFunction(lambda: sqlite3.connect(path), "t", "id", columns=["id", "v"])
    source = SqlTableSource(lambda: sqlite3.connect(path), "t", columns=["id", "v"])
    copy = pickle.loads(cloudpickle.dumps(fn))
    assert copy.lookup((3,)) == [(3, "v3")]
    assert read_arrow(pickle.loads(cloudpickle.dumps(source))).num_rows == 30


@pytest.mark.postgres
def test_adbc_connections_are_discovered_chunked_and_resumed(
    postgres_dsn: str, pg_schema: str
) -> None:
    import adbc_driver_postgresql.dbapi
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_schema}".dim (id bigint PRIMARY KEY, name text, '
                     "at timestamptz)")
        conn.execute(f'INSERT INTO "{pg_schema}".dim SELECT g, \'n\' || g, '
                     "'2024-01-01'::timestamptz + g * interval '1 minute' "
                     "FROM generate_series(1, 500) g")

    def connect() -> Any:
        return adbc_driver_postgresql.dbapi.connect(postgres_dsn)

    source = SqlTableSource(connect, f"{pg_schema}.dim", chunk_size=64)
    assert source.schema.simpleString() == "struct<id:bigint,name:string,at:timestamp>"
    table = read_arrow(source, 3)
    assert sorted(table.column("id").to_pylist()) == list(range(1, 501))
    from scan import LocalSourceRunner, ReaderOptions

    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=17)) as runner:
        first = runner.run(100)
        saved = runner.checkpoint()
    with LocalSourceRunner(source, 2, restore_from=saved) as runner:
        rest = runner.run()
    assert sorted(r[0] for r in first + rest) == list(range(1, 501))
    fn = SqlLookupFunction(connect, f"{pg_schema}.dim", "id")
    assert fn.lookup_batch([(3,), (999,)])[(3,)][0][:2] == (3, "n3")


# --- failures ---------------------------------------------------------------------------


def test_a_full_load_failing_for_good_fails_the_first_lookup_at_once(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    source = SqlTableSource(functools.partial(sqlite3.connect, str(path)), "customers",
                            schema="id BIGINT, name STRING")
    provider = FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
        share_across_workers=False, initial_load_timeout=timedelta(minutes=5),
    )
    start = time.perf_counter()
    with open_lookup(provider) as handle:
        with pytest.raises(SnapshotUnavailableError, match="first load failed.*customers") as e:
            handle.lookup((1,))
        assert isinstance(e.value.__cause__, ConnectorError)
        assert handle.metrics.num_retries == 0
        assert handle.metrics.num_load_failures == 1
    assert time.perf_counter() - start < 30  # not initial_load_timeout (5 minutes)


def test_bad_values_of_a_full_load_are_counted_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "bad.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n BIGINT)")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(1, 5), (2, "five"), (3, 7.5)])
    factory = functools.partial(sqlite3.connect, str(path))
    provider = FullCachingLookupProvider.of(
        SqlTableSource(factory, "t"), PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
        share_across_workers=False,
    )
    with open_lookup(provider) as handle:
        assert handle.lookup_batch([(1,), (2,), (3,)]) == {
            (1,): ((1, 5),), (2,): ((2, None),), (3,): ((3, None),)}
        assert handle.metrics.num_bad_values == 2
    strict = SqlTableSource(factory, "t", mode=BadValuePolicy.FAILFAST)
    with pytest.raises(BadValueError, match=r"table 't', key 2, column 'n': cannot read "
                                            r"'five' \(a text value\) as bigint"):
        read_arrow(strict)


@pytest.mark.postgres
def test_lookup_arrow_answers_in_arrow_as_lookup_batch_does_in_python(
    postgres_dsn: str, pg_schema: str, redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    import adbc_driver_postgresql.dbapi
    import psycopg

    from lookup import LookupFunction, RedisLookupFunction

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_schema}".d (id int PRIMARY KEY, v text)')
        conn.execute(f"INSERT INTO \"{pg_schema}\".d VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    redis_client.hset(f"{redis_prefix}d:2", mapping={"v": "b"})

    class Plain(LookupFunction):
        schema, key_columns = "id INT, v STRING", ["id"]

        def lookup(self, key: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            return [(key[0], "b")] if key == (2,) else []

    functions = [
        SqlLookupFunction(lambda: adbc_driver_postgresql.dbapi.connect(postgres_dsn),
                          f"{pg_schema}.d", "id"),
        SqlLookupFunction(functools.partial(psycopg.connect, postgres_dsn), f"{pg_schema}.d",
                          "id"),
        RedisLookupFunction(redis_url, redis_prefix + "d:{id}", "id INT, v STRING", ["id"]),
        Plain(),
    ]
    keys = pa.array([2, 7, None, 1], pa.int64())  # cast to INT; the null never matches
    for fn in functions:
        index, batch = fn.lookup_arrow([keys])
        got = sorted(zip(index.to_pylist(), batch.to_pylist(), strict=True), key=lambda x: x[0])
        assert [position for position, _ in got if _["id"] == 2] == [0], fn
        assert batch.schema.types == to_arrow_schema("id INT, v STRING").types, fn
        fn.close()
    with pytest.raises(ConfigError, match="can never equal"):
        functions[0].lookup_arrow([pa.array(["2"])])
