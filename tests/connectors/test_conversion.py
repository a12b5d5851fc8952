"""No wrong value: text and numbers that Arrow's own casts would read as another value
(hexadecimal integers wrapped into the type, numbers beyond a type's range as infinity,
doubles rounded to a decimal's scale, times of day dropped) are bad values, counted and
handled by the policy, through each connector's public API against the real servers."""

from __future__ import annotations

import math
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lookup import RedisLookupFunction, SqlLookupFunction
from scan import FileSource, read_arrow
from spark_lookup.errors import BadValueError
from tests.connectors.conftest import PgFactory, pg_exec

INTEGERS = "id BIGINT, tiny TINYINT, big BIGINT, hex BIGINT, plus BIGINT, zeros INT, blank INT"
# Row 1: hexadecimal ('0xff' is -1 as TINYINT, '0xffffffffffffffff' -1 as BIGINT and
# '0x10' 16 to Arrow) and surrounding blanks, all bad; a leading '+' and leading zeros
# are decimal digits, as in Spark's CAST.
HEX_ROW = {"tiny": "0xff", "big": "0xffffffffffffffff", "hex": "0x10", "plus": "+12",
           "zeros": "007", "blank": " 12"}
HEX_EXPECTED = (1, None, None, None, 12, 7, None)


def _bad_count(fn: Any) -> int:
    return int(fn.bad_value_count)


# --- Redis ----------------------------------------------------------------------------


@pytest.mark.redis
def test_hex_text_is_no_integer_in_a_redis_hash(redis_url: str, redis_prefix: str,
                                                 redis_client: Any) -> None:
    redis_client.hset(f"{redis_prefix}n:1", mapping=HEX_ROW)
    redis_client.hset(f"{redis_prefix}n:2", mapping={
        "tiny": "-128", "big": "9223372036854775807", "hex": "-0", "plus": "+0",
        "zeros": "-0007", "blank": "12"})
    fn = RedisLookupFunction(redis_url, redis_prefix + "n:{id}", INTEGERS, ["id"])
    fn.open()
    try:
        assert fn.lookup((1,)) == [HEX_EXPECTED]
        assert _bad_count(fn) == 4
        assert fn.lookup((2,)) == [(2, -128, 2**63 - 1, 0, 0, -7, 12)]
        assert _bad_count(fn) == 4
    finally:
        fn.close()
    strict = RedisLookupFunction(redis_url, redis_prefix + "n:{id}", INTEGERS, ["id"],
                                 mode="FAILFAST")
    strict.open()
    try:
        with pytest.raises(BadValueError, match=r"column 'tiny'.*0xff.*as tinyint"):
            strict.lookup((1,))
    finally:
        strict.close()


@pytest.mark.redis
def test_out_of_range_floats_are_bad_values_in_redis(redis_url: str, redis_prefix: str,
                                                      redis_client: Any) -> None:
    schema = "id BIGINT, f FLOAT, d DOUBLE, n DOUBLE"
    redis_client.hset(f"{redis_prefix}x:1", mapping={"f": "1e39", "d": "1e400", "n": "-1e400"})
    # Infinities spelled out are infinities, in any case, with or without a sign.
    redis_client.hset(f"{redis_prefix}x:2", mapping={"f": "-inf", "d": "INFINITY", "n": "+Inf"})
    redis_client.hset(f"{redis_prefix}x:3", mapping={"f": "3.4e38", "d": "1e308", "n": "1e-400"})
    fn = RedisLookupFunction(redis_url, redis_prefix + "x:{id}", schema, ["id"])
    fn.open()
    try:
        found = fn.lookup_batch([(1,), (2,), (3,)])
        assert found[(1,)] == [(1, None, None, None)]
        assert found[(2,)] == [(2, -math.inf, math.inf, math.inf)]
        ((_, f, d, n),) = found[(3,)]
        assert math.isfinite(f)
        assert d == 1e308
        assert n == 0.0  # below the range: rounds to the nearest double, as Spark's cast
        assert _bad_count(fn) == 3
    finally:
        fn.close()
    # JSON numbers are exact text, read by the same rule, in nested values too.
    nested = "id BIGINT, d DOUBLE, a ARRAY<DOUBLE>, m MAP<STRING, FLOAT>, s STRUCT<v: DOUBLE>"
    redis_client.set(f"{redis_prefix}j:1",
                     '{"d": 1E+400, "a": [1, 1E+400], "m": {"k": 1e39}, "s": {"v": -1e400}}')
    redis_client.set(f"{redis_prefix}j:2",
                     '{"d": "Infinity", "a": [1.5], "m": {"k": 2.5}, "s": {"v": 0.5}}')
    json_fn = RedisLookupFunction(redis_url, redis_prefix + "j:{id}", nested, ["id"],
                                  value_type="json")
    json_fn.open()
    try:
        assert json_fn.lookup((1,)) == [(1, None, None, None, None)]
        assert json_fn.lookup((2,)) == [(2, math.inf, [1.5], {"k": 2.5}, {"v": 0.5})]
        assert _bad_count(json_fn) == 4
    finally:
        json_fn.close()


@pytest.mark.redis
def test_dates_and_timestamps_in_redis_text(redis_url: str, redis_prefix: str,
                                             redis_client: Any) -> None:
    schema = "id BIGINT, d DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ"
    # A date alone is a timestamp at midnight (UTC for TIMESTAMP), as Spark casts it.
    redis_client.hset(f"{redis_prefix}t:1", mapping={
        "d": "2024-02-29", "ts": "2024-01-01", "ntz": "2024-01-01"})
    # Year 0 parses in Arrow but is no Spark (or Python) date or timestamp.
    redis_client.hset(f"{redis_prefix}t:2", mapping={
        "d": "0000-01-01", "ts": "0000-12-31T23:00:00Z", "ntz": "0000-06-01 00:00:00"})
    fn = RedisLookupFunction(redis_url, redis_prefix + "t:{id}", schema, ["id"])
    fn.open()
    try:
        found = fn.lookup_batch([(1,), (2,)])
        assert found[(1,)] == [(1, date(2024, 2, 29), datetime(2024, 1, 1, tzinfo=timezone.utc),
                                datetime(2024, 1, 1))]
        assert found[(2,)] == [(2, None, None, None)]
        assert _bad_count(fn) == 3
    finally:
        fn.close()


# --- PostgreSQL -----------------------------------------------------------------------


@pytest.mark.postgres
def test_hex_text_is_no_integer_in_postgres(pg: PgFactory) -> None:
    pg_exec(pg.dsn, pg.schema, """
        CREATE TABLE n (id bigint PRIMARY KEY, tiny text, big text, hex text, plus text,
                        zeros text, blank text);
        INSERT INTO n VALUES (1, '0xff', '0xffffffffffffffff', '0x10', '+12', '007', ' 12'),
                             (2, '127', '9223372036854775808', '-9223372036854775808', NULL,
                              NULL, NULL);
    """)
    fn = SqlLookupFunction(pg, "n", "id", schema=INTEGERS)
    fn.open()
    try:
        found = fn.lookup_batch([(1,), (2,)])
        assert found[(1,)] == [HEX_EXPECTED]
        # Beyond the range: a bad value, never wrapped.
        assert found[(2,)] == [(2, 127, None, -(2**63), None, None, None)]
        assert _bad_count(fn) == 5
    finally:
        fn.close()


@pytest.mark.postgres
def test_out_of_range_floats_are_bad_values_in_postgres(pg: PgFactory) -> None:
    pg_exec(pg.dsn, pg.schema, """
        CREATE TABLE x (id bigint PRIMARY KEY, f double precision, t text, n numeric,
                        a double precision[]);
        INSERT INTO x VALUES (1, 1e39, '1e400', 1e39, ARRAY[1, 1e39]),
                             (2, '-Infinity', 'inf', 'Infinity', ARRAY['Infinity'::float8]),
                             (3, 1.5, '-Infinity', 2.5, ARRAY[0.5]);
    """)
    fn = SqlLookupFunction(pg, "x", "id", schema="id BIGINT, f FLOAT, t DOUBLE, n FLOAT, "
                                                 "a ARRAY<FLOAT>")
    fn.open()
    try:
        found = fn.lookup_batch([(1,), (2,), (3,)])
        assert found[(1,)] == [(1, None, None, None, None)]
        assert found[(2,)] == [(2, -math.inf, math.inf, math.inf, [math.inf])]
        assert found[(3,)] == [(3, 1.5, -math.inf, 2.5, [0.5])]
        assert _bad_count(fn) == 4
    finally:
        fn.close()


@pytest.mark.postgres
def test_dates_beyond_year_9999_are_bad_values_through_adbc(postgres_dsn: str,
                                                             pg_schema: str) -> None:
    import adbc_driver_postgresql.dbapi

    pg_exec(postgres_dsn, pg_schema, """
        CREATE TABLE t (id bigint PRIMARY KEY, d date, ts timestamp, stamp timestamp);
        INSERT INTO t VALUES (1, '200000-01-01', '200000-01-01', '2024-01-01 23:59'),
                             (2, '2024-02-29', '2024-02-29 12:00', '2024-01-02 00:00');
    """)

    def connect() -> Any:
        return adbc_driver_postgresql.dbapi.connect(postgres_dsn)

    fn = SqlLookupFunction(connect, f"{pg_schema}.t", "id",
                           schema="id BIGINT, d DATE, ts TIMESTAMP_NTZ, stamp DATE")
    fn.open()
    try:
        found = fn.lookup_batch([(1,), (2,)])
        # A timestamp read as DATE loses no time of day: only midnight is a date.
        assert found[(1,)] == [(1, None, None, None)]
        assert found[(2,)] == [(2, date(2024, 2, 29), datetime(2024, 2, 29, 12),
                                date(2024, 1, 2))]
        assert _bad_count(fn) == 3
    finally:
        fn.close()


# --- files (Arrow columns of other types than declared) -------------------------------


def test_numbers_and_times_of_a_file_never_round_or_truncate(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({
        "id": pa.array([1, 2], pa.int64()),
        "dbl": pa.array([0.125, 0.1], pa.float64()),  # 0.125 as DECIMAL(10,2) rounds
        "i": pa.array([10**9, 5], pa.int64()),  # 10**9 has too many digits
        "f": pa.array([1e39, 1.5], pa.float64()),  # 1e39 is beyond FLOAT
        "ts": pa.array([datetime(2024, 1, 1, 23, 59), datetime(2024, 1, 2)], pa.timestamp("us")),
        "day": pa.array([-719163, 0], pa.int32()).cast(pa.date32()),  # 0000-12-31, 1970-01-01
    }), path)
    source = FileSource(path, "parquet", schema="id BIGINT, dbl DECIMAL(10,2), "
                        "i DECIMAL(10,2), f FLOAT, ts DATE, day TIMESTAMP_NTZ")
    rows = sorted(read_arrow(source).to_pylist(), key=lambda row: row["id"])
    assert [tuple(row.values()) for row in rows] == [
        (1, None, None, None, None, None),
        (2, Decimal("0.10"), Decimal("5.00"), 1.5, date(2024, 1, 2), datetime(1970, 1, 1)),
    ]
    assert source.bad_value_count == 5
    with pytest.raises(Exception, match="column 'dbl'"):
        read_arrow(FileSource(path, "parquet", schema="id BIGINT, dbl DECIMAL(10,2)",
                              mode="FAILFAST"))
