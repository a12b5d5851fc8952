"""SqlLookupFunction on sqlite3 (real database files)."""

from __future__ import annotations

import functools
import math
import pickle
import sqlite3
import threading
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from lookup import SqlLookupFunction
from spark_lookup.errors import ConfigError, ConnectorError
from tests.connectors.conftest import SqliteFactory, sqlite_exec
from tests.connectors.sql.fuzz import FUZZ_KEYS, FUZZ_ROWS, check_fuzzed_keys

CUSTOMERS = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, tier INT, balance DECIMAL(10, 2),
                        born DATE, seen DATETIME, vip BOOLEAN, score REAL, photo BLOB);
CREATE TABLE orders (shop TEXT, sku INTEGER, line INTEGER, qty INTEGER,
                     PRIMARY KEY (shop, sku, line));
"""
CUSTOMER_ROWS = [
    (1, "Ada", 1, 10.5, "1990-01-02", "2024-01-01 10:00:00", 1, 0.5, b"\x00\x01"),
    (2, "Bob", 2, 3, None, None, 0, 2, None),
    (3, "Cy", None, None, None, None, None, None, None),
]
ORDER_ROWS = [("s1", 7, 1, 5), ("s1", 7, 2, 6), ("s1", 8, 1, 1), ("s2", 7, 1, 9)]


@pytest.fixture
def db(sqlite_path: Path) -> SqliteFactory:
    sqlite_exec(sqlite_path, CUSTOMERS, {"customers": CUSTOMER_ROWS, "orders": ORDER_ROWS})
    return SqliteFactory(sqlite_path)


def customers(db: SqliteFactory, **kw: Any) -> SqlLookupFunction:
    fn = SqlLookupFunction(db, "customers", key_columns="id", **kw)
    fn.open()
    db.statements.clear()
    return fn


def test_infers_the_schema_and_reads_values_as_its_types(db: SqliteFactory) -> None:
    fn = customers(db)
    assert fn.struct.simpleString() == (
        "struct<id:bigint,name:string,tier:bigint,balance:decimal(10,2),born:date,"
        "seen:timestamp_ntz,vip:boolean,score:double,photo:binary>"
    )
    assert fn.lookup((1,)) == [
        (1, "Ada", 1, Decimal("10.50"), date(1990, 1, 2), datetime(2024, 1, 1, 10), True,
         0.5, b"\x00\x01")
    ]
    row = fn.lookup((2,))[0]
    assert row[3] == Decimal("3.00")
    assert type(row[7]) is float
    assert row[6] is False
    assert fn.lookup((3,)) == [(3, "Cy", None, None, None, None, None, None, None)]


def test_single_key_batch_is_one_statement(db: SqliteFactory) -> None:
    fn = customers(db)
    keys = [(i,) for i in range(1, 500)]
    result = fn.lookup_batch(keys)
    assert len(db.lookups()) == 1
    assert set(result) == set(keys)
    assert [r[0][1] for k, r in result.items() if r] == ["Ada", "Bob", "Cy"]
    assert all(result[(i,)] == [] for i in range(4, 500))


def test_composite_keys_and_many_rows_per_key(db: SqliteFactory) -> None:
    fn = SqlLookupFunction(db, "orders", ["shop", "sku"])
    result = fn.lookup_batch([("s1", 7), ("s1", 8), ("s2", 7), ("s2", 8), ("s1", 9)])
    assert sorted(result[("s1", 7)]) == [("s1", 7, 1, 5), ("s1", 7, 2, 6)]
    assert result[("s1", 8)] == [("s1", 8, 1, 1)]
    assert result[("s2", 7)] == [("s2", 7, 1, 9)]
    assert result[("s2", 8)] == result[("s1", 9)] == []
    assert len(db.lookups()) == 1


def test_keys_with_none_or_nan_are_never_sent(db: SqliteFactory) -> None:
    fn = customers(db)
    assert fn.lookup_batch([(None,), (math.nan,)]) == {(None,): [], (math.nan,): []}
    assert db.statements == []
    fn2 = SqlLookupFunction(db, "orders", ["shop", "sku"])
    db.statements.clear()
    result = fn2.lookup_batch([("s1", None), (None, 7), ("s1", 7)])
    assert result[("s1", None)] == result[(None, 7)] == []
    (statement,) = db.lookups()
    assert "json_each('[[\"s1\", 7]]')" in statement  # only the key without a null


def test_numbers_are_normalized_to_the_column_type(db: SqliteFactory) -> None:
    fn = customers(db)
    result = fn.lookup_batch([(1,), (1.0,), (Decimal("2"),), (2.5,), (1,)])
    assert result[(1,)] == result[(1.0,)]
    assert result[(1,)][0][1] == "Ada"
    assert result[(Decimal("2"),)][0][1] == "Bob"
    assert result[(2.5,)] == []
    (statement,) = db.lookups()
    assert "json_each('[1, 2]')" in statement  # 1 and 1.0 sent once, 2.5 not at all


def test_a_key_its_column_cannot_hold_is_a_clear_error_at_once(db: SqliteFactory) -> None:
    fn = customers(db)
    for key in [(2**70,), (-math.inf,), (Decimal("1E+1000000"),), (10**400,)]:
        with pytest.raises(ConfigError, match=r"column 'id'.*out of the range of bigint"):
            fn.lookup_batch([(1,), key])
    assert db.statements == []


def test_a_key_of_the_wrong_type_is_a_clear_error_before_any_sql(db: SqliteFactory) -> None:
    fn = customers(db)
    with pytest.raises(ConfigError, match=r"column 'id'.*str value \('1'\).*bigint"):
        fn.lookup_batch([(1,), ("1",)])
    with pytest.raises(ConfigError, match="bool"):
        fn.lookup((True,))
    with pytest.raises(ConfigError, match="2 value"):
        fn.lookup((1, 2))
    with pytest.raises(TypeError, match="tuple"):
        fn.lookup(1)  # type: ignore[arg-type]
    assert db.statements == []


def test_injection_attempts_in_values_are_harmless(db: SqliteFactory) -> None:
    fn = SqlLookupFunction(db, "orders", ["shop", "sku"])
    evil = ["s1' OR '1'='1", "s1; DROP TABLE orders; --", '") OR 1=1 --', "s1\x00"]
    result = fn.lookup_batch([(text, 7) for text in evil])
    assert all(rows == [] for rows in result.values())
    assert fn.lookup(("s1", 8)) == [("s1", 8, 1, 1)]
    assert fn.lookup(("s1\x00", 8)) == []  # not 's1': text with NUL is bound, not JSON


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"table": "customers; DROP TABLE x"}, "invalid table name"),
        ({"table": 'cus"tomers'}, "invalid table name"),
        ({"table": "a.b.c.d"}, "at most"),
        ({"key_columns": ["id) OR (1=1"]}, "invalid key column"),
        ({"columns": ["id", "name --"]}, "invalid column"),
        ({"schema": "id BIGINT, `na me` STRING"}, "invalid column"),
        ({"key_columns": []}, "key_columns is empty"),
        ({"key_columns": ["nope"], "schema": "id BIGINT"}, "not a column"),
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"schema": "id BIGINT, tags ARRAY<STRING>", "key_columns": ["tags"]}, "cannot be a"),
    ],
)
def test_invalid_configuration_is_refused_before_any_sql(
    arguments: dict[str, Any], message: str
) -> None:
    calls: list[int] = []

    def factory() -> sqlite3.Connection:
        calls.append(1)
        raise AssertionError("no connection may be opened")

    kwargs: dict[str, Any] = {"table": "customers", "key_columns": ["id"],
                              "schema": "id BIGINT, name STRING"}
    kwargs.update(arguments)
    with pytest.raises(ConfigError, match=message):
        SqlLookupFunction(factory, **kwargs)
    assert calls == []


def test_schema_inference_errors_name_the_problem(sqlite_path: Path) -> None:
    sqlite_exec(sqlite_path, "CREATE TABLE t (id INTEGER, shape GEOMETRY, anything);")
    connect = functools.partial(sqlite3.connect, str(sqlite_path))
    with pytest.raises(ConfigError, match=r"shape \(GEOMETRY\), anything \(no declared type\)"):
        SqlLookupFunction(connect, "t", "id")
    fn = SqlLookupFunction(connect, "t", "id", columns=["id"])
    assert fn.struct.fieldNames() == ["id"]
    with pytest.raises(ConnectorError, match="no table or view 'missing'"):
        SqlLookupFunction(connect, "missing", "id")
    with pytest.raises(ConfigError, match="no column"):
        SqlLookupFunction(connect, "t", "id", columns=["id", "nope"])


def test_columns_choose_and_order_the_output(db: SqliteFactory) -> None:
    fn = SqlLookupFunction(db, "customers", "id", columns=["name", "id"])
    assert fn.lookup((2,)) == [("Bob", 2)]
    given_schema = SqlLookupFunction(db, "customers", "id", schema="id BIGINT, tier BIGINT")
    assert given_schema.lookup((2,)) == [(2, 2)]
    with pytest.raises(ConfigError, match="field names"):
        SqlLookupFunction(db, "customers", "id", columns=["id"], schema="id BIGINT, x STRING")


def test_batches_split_at_the_parameter_limit(sqlite_path: Path) -> None:
    sqlite_exec(sqlite_path, CUSTOMERS, {"orders": ORDER_ROWS})
    limited = SqliteFactory(sqlite_path, variable_limit=7)
    fn = SqlLookupFunction(limited, "orders", ["shop", "sku"])  # 3 keys per statement
    keys = [("s1", 7), ("s1", 8), ("s2", 7)] + [("x", i) for i in range(5)]
    result = fn.lookup_batch(keys)
    assert len(limited.lookups()) == 3
    assert len(result[("s1", 7)]) == 2
    assert result[("s2", 7)] == [("s2", 7, 1, 9)]


def test_max_batch_size_splits_batches(db: SqliteFactory) -> None:
    fn = customers(db, max_batch_size=10)
    result = fn.lookup_batch([(i,) for i in range(25)])
    assert len(db.lookups()) == 3
    assert result[(1,)][0][1] == "Ada"


def test_dates_decimals_and_booleans_as_keys(sqlite_path: Path) -> None:
    sqlite_exec(
        sqlite_path,
        "CREATE TABLE d (day DATE, at TIMESTAMP, amount NUMERIC(8, 2), flag BOOLEAN, v TEXT);",
        {"d": [("2024-02-29", "2024-02-29 12:30:00", 1.5, 1, "x")]},
    )
    connect = functools.partial(sqlite3.connect, str(sqlite_path))
    by_day = SqlLookupFunction(connect, "d", "day", columns=["day", "v"])
    assert by_day.lookup((date(2024, 2, 29),)) == [(date(2024, 2, 29), "x")]
    with pytest.raises(ConfigError, match="date"):
        by_day.lookup((datetime(2024, 2, 29),))
    by_at = SqlLookupFunction(connect, "d", "at", columns=["at", "v"])
    assert by_at.lookup((datetime(2024, 2, 29, 12, 30),))[0][1] == "x"
    by_amount = SqlLookupFunction(connect, "d", "amount", columns=["amount", "v"])
    assert by_amount.lookup((Decimal("1.50"),)) == [(Decimal("1.50"), "x")]
    assert by_amount.lookup((1.5,)) == [(Decimal("1.50"), "x")]
    by_flag = SqlLookupFunction(connect, "d", "flag", columns=["flag", "v"])
    assert by_flag.lookup((True,)) == [(True, "x")]
    assert by_flag.lookup((False,)) == []


def test_pickles_as_configuration_without_connecting(db: SqliteFactory) -> None:
    fn = customers(db)
    copy = pickle.loads(pickle.dumps(fn))
    assert copy.struct == fn.struct
    assert copy.key_columns == ["id"]
    factory = copy._sql.factory  # type: ignore[attr-defined]
    assert factory.connections == 0  # no inference again: the plan travels
    assert copy.lookup((1,))[0][1] == "Ada"
    assert factory.connections == 1
    fn.close()


def test_threads_each_use_their_own_connection(db: SqliteFactory) -> None:
    fn = customers(db)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                assert fn.lookup((2,))[0][1] == "Bob"
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    fn.close()  # closes connections of other threads without raising
    assert fn.lookup((1,))[0][1] == "Ada"  # and reopens


def test_a_failed_statement_discards_the_connection(db: SqliteFactory, sqlite_path: Path) -> None:
    fn = customers(db)
    sqlite_exec(sqlite_path, "ALTER TABLE customers RENAME TO old_customers;")
    with pytest.raises(ConnectorError, match=r"table 'customers'.*first key \(1,\)") as info:
        fn.lookup((1,))
    assert isinstance(info.value.__cause__, sqlite3.Error)
    sqlite_exec(sqlite_path, "ALTER TABLE old_customers RENAME TO customers;")
    before = db.connections
    assert fn.lookup((1,))[0][1] == "Ada"
    assert db.connections == before + 1


def test_reads_end_any_transaction_so_changes_are_seen(sqlite_path: Path) -> None:
    sqlite_exec(sqlite_path, "PRAGMA journal_mode=WAL;" + CUSTOMERS, {"customers": CUSTOMER_ROWS})
    factory = SqliteFactory(sqlite_path, begin=True)
    fn = SqlLookupFunction(factory, "customers", "id", columns=["id", "name"])
    assert fn.lookup((1,)) == [(1, "Ada")]
    assert not factory.opened[-1].in_transaction  # the lookup connection
    sqlite_exec(sqlite_path, "UPDATE customers SET name = 'Ada L.' WHERE id = 1;")
    assert fn.lookup((1,)) == [(1, "Ada L.")]  # not an old snapshot


def test_connection_failures_are_connector_errors(tmp_path: Path) -> None:
    def refuse() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    fn = SqlLookupFunction(refuse, "t", "id", schema="id BIGINT")
    with pytest.raises(ConnectorError, match="cannot connect.*table 't'"):
        fn.lookup((1,))
    assert fn.lookup((None,)) == []  # nothing to send: no connection needed


# --- fuzzing: wrong types, NaN, huge and unicode text ---------------------------------


@pytest.fixture
def fuzz_db(sqlite_path: Path) -> SqliteFactory:
    sqlite_exec(sqlite_path, "CREATE TABLE f (n INTEGER, s TEXT, v TEXT, PRIMARY KEY (n, s));",
                {"f": FUZZ_ROWS})
    return SqliteFactory(sqlite_path)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])
@given(keys=FUZZ_KEYS)
def test_fuzzed_keys_give_correct_rows_or_a_clear_error(
    fuzz_db: SqliteFactory, keys: list[tuple[Any, Any]]
) -> None:
    check_fuzzed_keys(SqlLookupFunction(fuzz_db, "f", ["n", "s"]), keys)


@pytest.mark.parametrize("arrow_type", ["int8", "int16", "int32", "int64", "uint64"])
def test_integer_keys_are_written_as_json_in_arrow_as_json_dumps_writes_them(
    arrow_type: str,
) -> None:
    """The Arrow-built JSON of integer keys (no Python object per key) is the same text
    json.dumps gives, for single and composite keys, at each type's extremes."""
    import numpy as np
    import pyarrow as pa

    from connectors.sql.dialects.sqlite import json_integers as _json_integers
    from connectors.sql.dialects.sqlite import json_keys as _json_keys

    info = np.iinfo(np.dtype(arrow_type))
    values = [int(info.min), int(info.min) + 1, int(info.max) - 1, int(info.max)]
    first = pa.array(values, type=arrow_type)
    second = pa.array(list(reversed(values)), type=arrow_type)
    assert _json_integers([first]) == _json_keys([values])
    assert _json_integers([first, second]) == _json_keys([values, list(reversed(values))])
    assert _json_integers([pa.array(["1"])]) is None
    assert _json_integers([first, pa.array([True] * 4)]) is None
