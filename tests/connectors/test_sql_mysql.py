"""MySQL and MariaDB through pymysql and mysql-connector-python: discovery, quoting,
the collation rule in every mode, batched lookups, streamed and chunked full loads,
timeouts and error classification (the values of every type: tests/contract)."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from cache import DefaultLookupCache
from connectors.errors import is_transient
from connectors.sql.dialects.mysql import MysqlDialect, _connectorx_url
from connectors.sql.session import open_session
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingLookupProvider,
    SqlLookupFunction,
    open_lookup,
)
from scan import SqlTableSource, read_arrow
from spark_lookup.errors import ConfigError, ConnectorError, TransientConnectorError
from tests.conftest import mysql_params
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.mysql

DRIVERS = ["pymysql", "mysql-connector"]
MODES = ["none", "partial", "full"]


def factory(url: str, database: str, driver: str) -> Any:
    params = mysql_params(url, database)
    if driver == "mysql-connector":
        import mysql.connector

        return functools.partial(mysql.connector.connect, **params)
    import pymysql

    return functools.partial(pymysql.connect, **params)


def execute(url: str, database: str, *statements: str) -> list[Any]:
    import pymysql

    with pymysql.connect(**mysql_params(url, database), autocommit=True) as conn, \
            conn.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
        return list(cursor.fetchall())


@pytest.fixture(params=DRIVERS)
def connect(request: pytest.FixtureRequest, mysql_url: str, mysql_db: str) -> Any:
    return factory(mysql_url, mysql_db, request.param)


def provider(connect: Any, table: str, keys: list[str], mode: str) -> Any:
    if mode == "full":
        return FullCachingLookupProvider.of(
            SqlTableSource(connect, table), PeriodicCacheReloadTrigger(timedelta(hours=1)),
            keys, share_across_workers=False, initial_load_timeout=timedelta(seconds=30))
    function = SqlLookupFunction(connect, table, key_columns=keys)
    if mode == "partial":
        return PartialCachingLookupProvider.of(
            function, DefaultLookupCache.new_builder().maximum_size(100).build())
    return LookupFunctionProvider.of(function)


def test_schema_primary_key_and_unique_indexes_are_discovered(
        connect: Any, mysql_url: str, mysql_db: str) -> None:
    execute(mysql_url, mysql_db,
            "CREATE TABLE customers (id INT UNSIGNED NOT NULL, region CHAR(2) NOT NULL, "
            "email VARCHAR(64), tier TINYINT(1), PRIMARY KEY (region, id), UNIQUE (email))",
            "INSERT INTO customers VALUES (7, 'eu', 'a@x', 1), (8, 'us', NULL, 0)")
    function = SqlLookupFunction(connect, "customers", key_columns=["id"])
    assert function.schema == ("`id` bigint NOT NULL, `region` string NOT NULL, "
                               "`email` string, `tier` boolean")
    with open_lookup(LookupFunctionProvider.of(function)) as handle:
        assert tuple(handle.lookup((7,))) == ((7, "eu", "a@x", True),)
    source = SqlTableSource(connect, "customers")
    plan = source.read_plan()
    assert (plan.split_column, plan.keyset_index) == ("region", None)  # first PK column
    email = SqlTableSource(connect, "customers", split_column="email").read_plan()
    assert email.keyset_index == 2  # a unique index: resumes after the last key
    assert read_arrow(source, 2).sort_by("id").column("id").to_pylist() == [7, 8]


def test_identifiers_are_backquoted_and_validated(connect: Any, mysql_url: str,
                                                  mysql_db: str) -> None:
    # Reserved words: quoted with ANSI double quotes they would be string literals.
    execute(mysql_url, mysql_db,
            "CREATE TABLE `order` (`select` BIGINT PRIMARY KEY, `from` VARCHAR(8))",
            "INSERT INTO `order` VALUES (1, 'a'), (2, 'b')")
    function = SqlLookupFunction(connect, "order", key_columns=["select"])
    with open_lookup(LookupFunctionProvider.of(function)) as handle:
        assert handle.lookup_batch([(1,), (2,), (3,)]) == {(1,): ((1, "a"),), (2,): ((2, "b"),),
                                                           (3,): ()}
    qualified = SqlTableSource(connect, f"{mysql_db}.order")
    assert read_arrow(qualified, 1).num_rows == 2
    with pytest.raises(ConfigError, match="invalid table name"):
        SqlLookupFunction(connect, "order`; DROP TABLE x; --", key_columns=["select"])
    with pytest.raises(ConnectorError, match="no table or view 'missing'"):
        SqlLookupFunction(connect, "missing", key_columns=["id"])


@pytest.mark.parametrize("mode", MODES)
def test_string_keys_compare_exactly_in_every_mode(connect: Any, mysql_url: str, mysql_db: str,
                                                   mode: str) -> None:
    """Case-insensitive, PAD SPACE collations (MySQL's defaults) do not decide: 'BOB'
    never finds 'bob', 'a' never finds 'a ', whichever mode answers."""
    execute(mysql_url, mysql_db,
            "CREATE TABLE people (id INT PRIMARY KEY, "
            "name VARCHAR(16) COLLATE utf8mb4_general_ci NOT NULL, KEY (name))",
            "INSERT INTO people VALUES (1, 'bob'), (2, 'a '), (3, 'Eve'), (4, 'eve')")
    with open_lookup(provider(connect, "people", ["name"], mode)) as handle:
        for attempt in ("first", "again"):
            found = handle.lookup_batch([("bob",), ("BOB",), ("a",), ("a ",), ("eve",),
                                         ("EVE",)])
            assert found == {("bob",): ((1, "bob"),), ("BOB",): (), ("a",): (),
                             ("a ",): ((2, "a "),), ("eve",): ((4, "eve"),), ("EVE",): ()}, (
                mode, attempt)
        assert tuple(handle.lookup(("Bob",))) == ()


@pytest.mark.parametrize("mode", MODES)
def test_composite_keys_are_matched_back_exactly(connect: Any, mysql_url: str, mysql_db: str,
                                                 mode: str) -> None:
    execute(mysql_url, mysql_db,
            "CREATE TABLE stock (shop VARCHAR(8), sku BIGINT, qty INT, PRIMARY KEY (shop, sku))",
            "INSERT INTO stock VALUES ('ams', 1, 10), ('ams', 2, 20), ('BER', 1, 30)")
    with open_lookup(provider(connect, "stock", ["shop", "sku"], mode)) as handle:
        found = handle.lookup_batch([("ams", 1), ("ams", 2), ("ber", 1), ("BER", 1), ("ams", 3)])
        assert found == {("ams", 1): (("ams", 1, 10),), ("ams", 2): (("ams", 2, 20),),
                         ("ber", 1): (), ("BER", 1): (("BER", 1, 30),), ("ams", 3): ()}


def test_a_large_batch_is_one_statement_per_ten_thousand_keys(
        connect: Any, mysql_url: str, mysql_db: str) -> None:
    execute(mysql_url, mysql_db, "CREATE TABLE big (id BIGINT PRIMARY KEY, v VARCHAR(12))",
            *inserts("big", [f"({n}, 'v{n}')" for n in range(1, 25_001)]))
    function = SqlLookupFunction(connect, "big", key_columns=["id"])
    with open_lookup(LookupFunctionProvider.of(function)) as handle:
        keys = [(k,) for k in range(0, 30_000, 2)]
        found = handle.lookup_batch(keys)
        assert sum(len(rows) for rows in found.values()) == 12_500
        assert found[(24_000,)] == ((24_000, "v24000"),)


def inserts(table: str, rows: list[str], per_statement: int = 5000) -> list[str]:
    return [f"INSERT INTO {table} VALUES " + ", ".join(rows[i:i + per_statement])
            for i in range(0, len(rows), per_statement)]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("arrow_reader", [True, False])
def test_full_loads_stream_in_chunks_with_and_without_connectorx(
        mysql_url: str, mysql_db: str, driver: str, arrow_reader: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    execute(mysql_url, mysql_db,
            "CREATE TABLE facts (id BIGINT PRIMARY KEY, d DATETIME(6), amount DECIMAL(12,2))",
            *inserts("facts", [f"({n}, '2024-01-01 00:00:00.5', {n / 4})"
                               for n in range(1, 70_001)]))
    original = MysqlDialect.arrow_batches
    streamed: list[int] = []

    def counted(*args: Any) -> Any:
        batches = original(*args) if arrow_reader else None
        streamed.append(batches is not None)
        return batches

    monkeypatch.setattr(MysqlDialect, "arrow_batches", counted)
    connect = factory(mysql_url, mysql_db, driver)
    for source, parallelism in ((SqlTableSource(connect, "facts"), 1),
                                (SqlTableSource(connect, "facts", chunk_size=20_000), 2)):
        table = read_arrow(source, parallelism).sort_by("id")
        assert table.num_rows == 70_000
        assert table.column("id").to_pylist() == list(range(1, 70_001))
        assert str(table.column("amount")[2].as_py()) == "0.75"
        assert table.schema.field("d").type == pa.timestamp("us")
    assert streamed
    assert all(s == arrow_reader for s in streamed)


def test_a_scan_reads_through_an_unbuffered_cursor(connect: Any) -> None:
    session = open_session(connect, "table 't'")
    try:
        cursor = session._cursor(stream=True)
        name = type(cursor).__name__
        assert name in ("SSCursor", "MySQLCursor", "CMySQLCursor"), name
        assert not getattr(cursor, "_buffered", False)
        cursor.close()
    finally:
        session.close()


def test_connectorx_urls_come_from_plain_tcp_connections(mysql_url: str) -> None:
    import pymysql

    params = mysql_params(mysql_url)
    conn = pymysql.connect(**params)
    try:
        url = _connectorx_url(conn)
        assert url is not None
        assert url.startswith("mysql://")
        assert url.endswith(f":{params['port']}/{params['database']}")
    finally:
        conn.close()
    assert _connectorx_url(object()) is None


def test_statements_past_their_timeout_end_transiently(connect: Any) -> None:
    session = open_session(connect, "table 'slow'", timeout=0.3)
    try:
        with pytest.raises(TransientConnectorError, match="slow"):
            session.rows("SELECT SLEEP(3)")
    finally:
        session.close()


def test_mysql_errors_are_classified_by_number() -> None:
    import mysql.connector.errors as myc
    import pymysql.err as pe

    for code in (2006, 2013, 1213, 1205, 1969, 3024, 1040):
        assert is_transient(pe.OperationalError(code, "x")), code
        assert is_transient(myc.DatabaseError(msg="x", errno=code, sqlstate="HY000")), code
    for code in (1064, 1146, 1054, 1045, 1044, 1049):
        assert not is_transient(pe.ProgrammingError(code, "x")), code
        assert not is_transient(myc.ProgrammingError(msg="x", errno=code, sqlstate="42000")), code


def test_a_refused_login_is_permanent(mysql_url: str) -> None:
    import pymysql

    params = {**mysql_params(mysql_url), "user": "no_such_user_x", "password": "nope"}
    function = SqlLookupFunction(functools.partial(pymysql.connect, **params), "t",
                                 key_columns=["id"], schema="id BIGINT")
    with pytest.raises(ConnectorError) as raised:
        function.open()
    assert not isinstance(raised.value, TransientConnectorError)
    assert "nope" not in str(raised.value)
