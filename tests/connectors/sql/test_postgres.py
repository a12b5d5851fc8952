"""SqlLookupFunction on PostgreSQL (psycopg 3), in a schema of the test's own."""

from __future__ import annotations

import math
import pickle
import threading
import time
import uuid
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from lookup import SqlLookupFunction
from spark_lookup.errors import ConfigError, ConnectorError
from tests.connectors.conftest import PgFactory, pg_exec
from tests.connectors.sql.fuzz import FUZZ_KEYS, FUZZ_ROWS, check_fuzzed_keys

pytestmark = pytest.mark.postgres

U1 = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")

TABLES = """
CREATE TABLE customers (
    id bigint PRIMARY KEY, name text NOT NULL, tier integer, small smallint,
    balance numeric(10, 2), ratio double precision, f real, vip boolean, born date,
    seen timestamp, seen_tz timestamptz, photo bytea, code char(4), nick varchar(10),
    ext uuid, big numeric
);
INSERT INTO customers VALUES
 (1, 'Ada', 1, 7, 10.50, 0.5, 1.5, true, '1990-01-02', '2024-01-01 10:00', '2024-01-01 10:00Z',
  '\\x0001', 'ab', 'a', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 123456789012345678901234567890.5),
 (2, 'Bob', 2, NULL, NULL, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
CREATE TABLE orders (shop text, sku bigint, line integer, qty integer,
                     PRIMARY KEY (shop, sku, line));
INSERT INTO orders VALUES ('s1', 7, 1, 5), ('s1', 7, 2, 6), ('s1', 8, 1, 1), ('s2', 7, 1, 9);
"""


@pytest.fixture
def tables(pg: PgFactory) -> PgFactory:
    pg_exec(pg.dsn, pg.schema, TABLES)
    return pg


def test_infers_the_schema_from_the_catalog(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "customers", "id")
    assert fn.struct.simpleString() == (
        "struct<id:bigint,name:string,tier:int,small:smallint,balance:decimal(10,2),"
        "ratio:double,f:float,vip:boolean,born:date,seen:timestamp_ntz,seen_tz:timestamp,"
        "photo:binary,code:string,nick:string,ext:string,big:decimal(38,18)>"
    )
    (row,) = fn.lookup((1,))
    assert row[:10] == (1, "Ada", 1, 7, Decimal("10.50"), 0.5, 1.5, True, date(1990, 1, 2),
                        datetime(2024, 1, 1, 10))
    assert row[10] == datetime(2024, 1, 1, 10, tzinfo=timezone.utc)
    assert row[11:15] == (b"\x00\x01", "ab  ", "a", str(U1))  # uuid read as text
    qualified = SqlLookupFunction(
        tables, f"{tables.schema}.customers", "id", columns=["name", "id"]
    )
    assert qualified.lookup((2,)) == [("Bob", 2)]


def test_types_without_a_spark_type_read_as_text_and_missing_tables_are_named(
    tables: PgFactory,
) -> None:
    pg_exec(tables.dsn, tables.schema, "CREATE TABLE odd (id int, spot point, tags text[]);"
            "INSERT INTO odd VALUES (1, '(1,2)', '{a,b}');")
    odd = SqlLookupFunction(tables, "odd", "id")
    assert odd.struct.simpleString() == "struct<id:int,spot:string,tags:array<string>>"
    assert odd.lookup((1,)) == [(1, "(1,2)", ["a", "b"])]  # as PostgreSQL prints a point
    assert SqlLookupFunction(tables, "odd", "id", columns=["id"]).lookup((2,)) == []
    with pytest.raises(ConnectorError, match="no table or view 'absent'"):
        SqlLookupFunction(tables, "absent", "id")
    with pytest.raises(ConfigError, match="invalid table name"):
        SqlLookupFunction(tables, "customers; DROP TABLE orders", "id")


def test_lookup_batch_is_one_statement_with_bound_values(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "customers", "id", columns=["id", "name"])
    fn.open()
    tables.statements.clear()
    keys = [(i,) for i in range(1, 1001)]
    result = fn.lookup_batch(keys)
    (statement,) = tables.lookups()
    (bound,) = statement[1]  # one array of every key, none in the text
    assert bound == list(range(1, 1001))
    assert result[(1,)] == [(1, "Ada")]
    assert result[(2,)] == [(2, "Bob")]
    assert sum(1 for rows in result.values() if rows) == 2


def test_composite_keys_and_many_rows_per_key(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "orders", ["shop", "sku"])
    result = fn.lookup_batch([("s1", 7), ("s1", 8), ("s2", 7), ("s2", 8), ("s1", 7.0)])
    assert sorted(result[("s1", 7)]) == [("s1", 7, 1, 5), ("s1", 7, 2, 6)]
    assert result[("s1", 8)] == [("s1", 8, 1, 1)]
    assert result[("s2", 7)] == [("s2", 7, 1, 9)]
    assert result[("s2", 8)] == []
    assert len(tables.lookups()) == 1


def test_keys_that_can_never_match_are_never_sent(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "orders", ["shop", "sku"])
    fn.open()
    tables.statements.clear()
    never = [("s1", None), (None, 7), ("s1", math.nan), ("s1", 7.5), ("s\x00", 7),
             ("\ud800", 7)]
    assert fn.lookup_batch(never) == {key: [] for key in never}
    assert tables.statements == []
    with pytest.raises(ConfigError, match="out of the range of bigint"):
        fn.lookup(("s1", 2**64))  # a key its column cannot hold is an error, at once
    assert tables.statements == []
    # NaN never matches, even though PostgreSQL says 'NaN'::float8 = 'NaN'::float8.
    pg_exec(tables.dsn, tables.schema, "CREATE TABLE m (x float8, v text);"
            "INSERT INTO m VALUES ('NaN', 'nan'), (1.5, 'one and a half');")
    by_x = SqlLookupFunction(tables, "m", "x")
    assert by_x.lookup((math.nan,)) == []
    assert by_x.lookup((1.5,)) == [(1.5, "one and a half")]


def test_a_str_for_an_integer_column_is_a_clear_error(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "customers", "id", columns=["id"])
    with pytest.raises(ConfigError, match=r"for table 'customers', column 'id': a str"):
        fn.lookup(("1",))


def test_uuid_char_and_varchar_keys_compare_as_postgresql_does(tables: PgFactory) -> None:
    by_ext = SqlLookupFunction(tables, "customers", "ext", columns=["ext", "id"])
    upper = str(U1).upper()
    result = by_ext.lookup_batch([(upper,), (str(U1),), ("{" + U1.hex + "}",), ("no-uuid",)])
    assert result[(upper,)] == result[(str(U1),)] == [(str(U1), 1)]
    assert result[("{" + U1.hex + "}",)] == [(str(U1), 1)]
    assert result[("no-uuid",)] == []  # would be a cast error for the whole statement
    by_code = SqlLookupFunction(tables, "customers", "code", columns=["code", "id"])
    assert by_code.lookup(("ab",)) == by_code.lookup(("ab  ",)) == [("ab  ", 1)]
    by_nick = SqlLookupFunction(tables, "customers", "nick", columns=["nick", "id"])
    assert by_nick.lookup(("a" * 50,)) == []  # no truncation to varchar(10)
    assert by_nick.lookup(("a",)) == [("a", 1)]


def test_typed_keys(tables: PgFactory) -> None:
    for column, key in [("born", date(1990, 1, 2)), ("seen", datetime(2024, 1, 1, 10)),
                        ("seen_tz", datetime(2024, 1, 1, 10, tzinfo=timezone.utc)),
                        ("balance", Decimal("10.5")), ("balance", 10.5), ("vip", True),
                        ("photo", b"\x00\x01"), ("small", 7), ("ratio", 0.5), ("f", 1.5)]:
        fn = SqlLookupFunction(tables, "customers", column, columns=[column, "id"])
        assert [row[1] for row in fn.lookup((key,))] == [1], column


def test_injection_attempts_in_values_are_harmless(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "orders", ["shop", "sku"])
    evil = ["s1' OR '1'='1", "s1'; DROP TABLE orders; --", "%s", "%(x)s", "$1", "s1\\"]
    assert all(rows == [] for rows in fn.lookup_batch([(e, 7) for e in evil]).values())
    assert fn.lookup(("s1", 8)) == [("s1", 8, 1, 1)]


def _backend_states(pg: PgFactory) -> list[str]:
    rows = pg_exec(
        pg.dsn, pg.schema,
        "SELECT state FROM pg_stat_activity WHERE application_name = %s",
        pg.application_name,
    )
    return [row[0] for row in rows]


def _states_after_close(pg: PgFactory) -> list[str]:
    """The backends left once closed connections' backends have exited (PostgreSQL ends
    a backend asynchronously after its client hangs up, so give it a moment)."""
    deadline = time.monotonic() + 5
    while (states := _backend_states(pg)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return states


def test_reads_leave_no_session_idle_in_transaction(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "customers", "id")
    fn.lookup_batch([(1,), (2,)])
    assert _backend_states(tables) == ["idle"]
    fn.close()
    assert _states_after_close(tables) == []


def _terminate(pg: PgFactory) -> int:
    rows = pg_exec(
        pg.dsn, pg.schema,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        pg.application_name,
    )
    _states_after_close(pg)
    return len(rows)


def test_reconnects_after_the_backend_is_terminated(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "customers", "id", columns=["id", "name"])
    assert fn.lookup((1,)) == [(1, "Ada")]
    opened = tables.connections
    assert _terminate(tables) == 1
    assert fn.lookup_batch([(1,), (2,)]) == {(1,): [(1, "Ada")], (2,): [(2, "Bob")]}
    assert tables.connections == opened + 1
    assert _terminate(tables) == 1
    assert fn.lookup((2,)) == [(2, "Bob")]
    assert tables.connections == opened + 2


def test_a_failed_statement_raises_and_the_next_call_works(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "customers", "id", columns=["id", "name"])
    assert fn.lookup((1,)) == [(1, "Ada")]
    pg_exec(tables.dsn, tables.schema, "ALTER TABLE customers RENAME TO customers_old")
    with pytest.raises(ConnectorError, match=r"table 'customers'.*first key \(1,\)") as info:
        fn.lookup((1,))
    import psycopg

    assert isinstance(info.value.__cause__, psycopg.Error)
    pg_exec(tables.dsn, tables.schema, "ALTER TABLE customers_old RENAME TO customers")
    assert fn.lookup((1,)) == [(1, "Ada")]


def test_unreachable_database_is_a_connector_error(postgres_dsn: str) -> None:
    fn = SqlLookupFunction(
        PgFactory("postgresql://postgres@127.0.0.1:1/test", "public"), "t", "id",
        schema="id BIGINT",
    )
    with pytest.raises(ConnectorError, match="cannot connect.*table 't'"):
        fn.open()


def test_max_batch_size_and_threads(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "orders", ["shop", "sku"], max_batch_size=2)
    fn.open()
    tables.statements.clear()
    result = fn.lookup_batch([("s1", 7), ("s1", 8), ("s2", 7), ("x", 1), ("y", 2)])
    assert len(tables.lookups()) == 3
    assert len(result[("s1", 7)]) == 2
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(10):
                assert fn.lookup(("s2", 7)) == [("s2", 7, 1, 9)]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    fn.close()
    assert _states_after_close(tables) == []


def test_pickles_as_configuration(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "customers", "id", columns=["id", "name"])
    copy: Any = pickle.loads(pickle.dumps(fn))
    assert copy.lookup((2,)) == [(2, "Bob")]
    assert copy.struct == fn.struct
    copy.close()


@pytest.fixture
def fuzz_table(pg: PgFactory) -> PgFactory:
    pg_exec(pg.dsn, pg.schema, "CREATE TABLE f (n integer, s text, v text, PRIMARY KEY (n, s))")
    import psycopg

    with psycopg.connect(pg.dsn, options=f"-c search_path={pg.schema}") as conn:
        conn.cursor().executemany("INSERT INTO f VALUES (%s, %s, %s)", FUZZ_ROWS)
    return pg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])
@given(keys=FUZZ_KEYS)
def test_fuzzed_keys_give_correct_rows_or_a_clear_error(
    fuzz_table: PgFactory, keys: list[tuple[Any, Any]]
) -> None:
    fn = SqlLookupFunction(fuzz_table, "f", ["n", "s"], schema="n INT, s STRING, v STRING")
    try:
        check_fuzzed_keys(fn, keys)
    finally:
        fn.close()
