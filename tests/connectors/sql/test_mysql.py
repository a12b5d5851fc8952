"""MySQL and MariaDB through pymysql and mysql-connector-python: discovery, quoting,
the collation rule in every mode, batched lookups, streamed and chunked full loads,
timeouts and error classification (the values of every type: tests/contract)."""

from __future__ import annotations

import functools
import math
from datetime import timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cache import DefaultLookupCache
from connectors.errors import is_transient
from connectors.sql.connection import open_connection
from connectors.sql.dialects.mysql import MysqlDialect, _connectorx_url
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingLookupProvider,
    SqlLookupFunction,
    open_lookup,
)
from scan import SqlTableSource, read_arrow
from spark_lookup.errors import (
    ConfigError,
    ConnectorError,
    SparkLookupError,
    TransientConnectorError,
)
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


@pytest.mark.parametrize("mode", MODES)
def test_boolean_key_columns_are_asked_their_truth_in_composite_keys(
        connect: Any, mysql_url: str, mysql_db: str, mode: str) -> None:
    """TINYINT(1) reads as BOOLEAN, non-zero true: ('ber', True) finds the rows holding
    1 and -1, asked beside the other key columns, whichever mode answers."""
    execute(mysql_url, mysql_db,
            "CREATE TABLE flags (shop VARCHAR(8), active TINYINT(1), vip BOOL, n INT, "
            "PRIMARY KEY (shop, n), KEY (shop, active))",
            "INSERT INTO flags VALUES ('ams', 2, 0, 1), ('ams', 0, 0, 2), ('ber', 1, 5, 3), "
            "('ber', -1, 0, 4), ('ber', 0, 1, 5)")
    with open_lookup(provider(connect, "flags", ["shop", "active", "vip"], mode)) as handle:
        keys = [("ams", True, False), ("ams", False, False), ("ber", True, True),
                ("ber", True, False), ("ber", False, True), ("ber", False, False),
                ("ams", True, True)]
        expected = {
            ("ams", True, False): (("ams", True, False, 1),),
            ("ams", False, False): (("ams", False, False, 2),),
            ("ber", True, True): (("ber", True, True, 3),),
            ("ber", True, False): (("ber", True, False, 4),),
            ("ber", False, True): (("ber", False, True, 5),),
            ("ber", False, False): (),
            ("ams", True, True): (),
        }
        for attempt in ("first", "again"):
            assert dict(handle.lookup_batch(keys)) == expected, (mode, attempt)
        for key in keys:
            assert tuple(handle.lookup(key)) == expected[key], (mode, key)


def test_a_boolean_key_asks_the_index_for_its_truth() -> None:
    """True is ``<> 0`` (two ranges of the index), false ``= 0``: both served by an
    index on the column, never a scan for the keys the other truth value holds."""
    from connectors.sql.dialects.base import KeyBinding
    from connectors.sql.flavor import MYSQL, Flavor

    class Plan:
        table_sql = "`t`"
        key_columns = ("b", "n")
        key_bindings = (KeyBinding(exact=True, truth=True), KeyBinding(exact=True))

        def select_sql(self) -> str:
            return "*"

        def column_sql(self, name: str) -> str:
            return f"`{name}`"

        def filter_sql(self, placeholder: Any, first: int = 0) -> tuple[list[str], list[Any]]:
            return [], []

    dialect = MysqlDialect()
    flavor = Flavor(MYSQL, False, "format")
    chunk = [pa.array([True, False, True]), pa.array([1, 2, 3])]
    statement = dialect.lookup_statement(Plan(), flavor, chunk)  # type: ignore[arg-type]
    assert statement.sql.endswith(
        "WHERE ((`b` <> 0 AND `n` IN (1, 3)) OR (`b` = 0 AND `n` IN (2)))")
    Plan.key_columns, Plan.key_bindings = ("b",), (KeyBinding(exact=True, truth=True),)
    alone = dialect.lookup_statement(Plan(), flavor, [pa.array([False])])  # type: ignore[arg-type]
    assert alone.sql.endswith("WHERE ((`b` = 0))")
    # Floats are the double literals of their exact values, in a composite key too.
    Plan.key_columns, Plan.key_bindings = ("f", "s"), (KeyBinding(exact=True),) * 2
    floats = dialect.lookup_statement(Plan(), flavor, [  # type: ignore[arg-type]
        pa.array([1.1, -0.0], pa.float32()), pa.array(["a", "b"])])
    assert floats.sql.endswith("WHERE (`f`, `s`) IN ((1.100000023841858e0, %s), (-0e0, %s))")
    assert floats.params == ("a", "b")


@pytest.mark.parametrize("mode", MODES)
def test_every_float_finds_its_row_in_every_mode(connect: Any, mysql_url: str, mysql_db: str,
                                                 mode: str) -> None:
    """Random FLOAT and DOUBLE values (every exponent, subnormals, both signs) are read
    as their exact values and found by them, through the database and in the caches;
    an infinity or NaN (MySQL stores neither) finds nothing and is never sent."""
    rng = np.random.default_rng(7)
    singles = rng.integers(0, 2**32, 400, dtype=np.uint64).astype(np.uint32).view(np.float32)
    doubles = rng.integers(0, 2**63, 400, dtype=np.uint64).view(np.float64) * rng.choice(
        [-1.0, 1.0], 400)
    singles, doubles = singles[np.isfinite(singles)], doubles[np.isfinite(doubles)]
    for table, column_type, values in (("f32", "FLOAT", singles), ("f64", "DOUBLE", doubles)):
        distinct = sorted({float(v) + 0.0 for v in values})  # -0.0 and 0.0 are one key
        execute(mysql_url, mysql_db,
                f"CREATE TABLE {table} (k {column_type} NOT NULL, id INT PRIMARY KEY, KEY (k))",
                *inserts(table, [f"({v!r}e0, {i})" if "e" not in repr(v) else f"({v!r}, {i})"
                                 for i, v in enumerate(distinct)]))
        with open_lookup(provider(connect, table, ["k"], mode)) as handle:
            keys = [(v,) for v in distinct] + [(math.inf,), (-math.inf,), (math.nan,)]
            found = handle.lookup_batch(keys)
            assert [found[(v,)] for v in distinct] == [((v, i),) for i, v in
                                                       enumerate(distinct)], (table, mode)
            assert all(found[key] == () for key in keys[-3:])


def test_key_types_the_database_cannot_be_asked_for_are_refused(
        connect: Any, mysql_url: str, mysql_db: str) -> None:
    """A key type that rounds the column's values (several stored values would read as
    one key, of which the database finds one), text asked as a truth, a number asked of
    an ENUM: refused when the lookup plans, naming the column, before any answer
    differs by mode. A full cache of the same table compares what it read: allowed."""
    execute(mysql_url, mysql_db,
            "CREATE TABLE odd (id INT PRIMARY KEY, d DOUBLE, b BIGINT, i INT, s SMALLINT, "
            "f FLOAT, t VARCHAR(16), e ENUM('10', '20'), dec2 DECIMAL(10,2), "
            "dec7 DECIMAL(7,0), u BIGINT UNSIGNED, flag TINYINT(1))",
            "INSERT INTO odd VALUES (1, 1.1, 16777217, 16777217, 7, 1.1, 'true', '20', "
            "1.10, 5, 18446744073709551615, 2)")
    refused = {
        ("d", "FLOAT"): "double, which the database cannot look up as a FLOAT key: FLOAT "
                        "rounds its values",
        ("b", "DOUBLE"): "DOUBLE rounds its values",
        ("i", "FLOAT"): "declare the column's own type \\(INT\\)",
        ("dec2", "DOUBLE"): "DOUBLE rounds",
        ("t", "DOUBLE"): "DOUBLE rounds",
        ("t", "BOOLEAN"): "only a number's truth",
        ("e", "BIGINT"): "ENUM or SET with a number by its position",
        ("f", "STRING"): "prints a FLOAT to six digits",
        ("t", "DECIMAL(10,2)"): "declare it STRING",
        ("t", "TIMESTAMP"): "declare it STRING",
    }
    for (column, spark), message in refused.items():
        function = SqlLookupFunction(connect, "odd", key_columns=[column],
                                     schema=f"id INT, {column} {spark}")
        with pytest.raises(ConfigError, match=f"key column '{column}' of table 'odd' is .*"
                                              f"{message}"):
            function.open()
        source = SqlTableSource(connect, "odd", schema=f"id INT, {column} {spark}")
        assert read_arrow(source, 1).num_rows == 1
    allowed = {  # the key asked, and the value it finds row 1 by (None: no row)
        ("f", "DOUBLE"): (1.100000023841858, 1.100000023841858),
        ("i", "DOUBLE"): (16777217.0, 16777217.0), ("s", "FLOAT"): (7.0, 7.0),
        ("dec7", "FLOAT"): (5.0, 5.0), ("i", "BOOLEAN"): (True, True),
        ("dec2", "BOOLEAN"): (True, None),  # '1.10' is no BOOLEAN: a bad value
        ("t", "STRING"): ("true", "true"), ("e", "STRING"): ("20", "20"),
        ("u", "DECIMAL(20,0)"): (Decimal(2**64 - 1), Decimal(2**64 - 1)),
        ("flag", "TINYINT"): (2, 2), ("d", "STRING"): ("1.1", "1.1"),
        ("b", "STRING"): ("16777217", "16777217"),
    }
    for (column, spark), (key, value) in allowed.items():
        function = SqlLookupFunction(connect, "odd", key_columns=[column],
                                     schema=f"id INT, {column} {spark}")
        with open_lookup(LookupFunctionProvider.of(function)) as handle:
            assert tuple(handle.lookup((key,))) == (() if value is None else ((1, value),)), (
                column, spark)


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
    connection = open_connection(connect, "table 't'")
    try:
        cursor = connection._cursor(stream=True)
        name = type(cursor).__name__
        assert name in ("SSCursor", "MySQLCursor", "CMySQLCursor"), name
        assert not getattr(cursor, "_buffered", False)
        cursor.close()
    finally:
        connection.close()


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
    connection = open_connection(connect, "table 'slow'", timeout=0.3)
    try:
        with pytest.raises(TransientConnectorError, match="slow"):
            connection.rows("SELECT SLEEP(3)")
    finally:
        connection.close()


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


# --- connectorx's failures (issue 40, defect 9) -------------------------------------------


def test_a_connection_killed_mid_result_under_connectorx_is_retried(
        mysql_url: str, mysql_db: str) -> None:
    """connectorx panics (a BaseException) when its connection is killed mid-result: the
    load is retried as for a driver's lost connection, and every row comes back."""
    import threading

    rows = 400_000
    execute(mysql_url, mysql_db, "CREATE TABLE big (id BIGINT PRIMARY KEY, s VARCHAR(100))",
            *inserts("big", [f"({n}, REPEAT('x', 90))" for n in range(1, rows + 1)], 20_000))
    connect = factory(mysql_url, mysql_db, "pymysql")
    # The read is in the server's process list for a few tens of milliseconds, and a kill
    # can land after it has answered (no retry then) or a loaded machine can poll past it:
    # up to six loads, until one is killed mid-result. Each load must be whole either way.
    attempts: list[tuple[bool, int]] = []
    for _ in range(6):
        killed: list[int] = []
        done = threading.Event()

        def kill_the_read(killed: list[int] = killed, done: threading.Event = done) -> None:
            import pymysql

            with pymysql.connect(**mysql_params(mysql_url, mysql_db),
                                 autocommit=True) as conn, conn.cursor() as cursor:
                while not done.is_set() and not killed:
                    cursor.execute("SELECT id FROM information_schema.processlist "
                                   "WHERE db = %s AND info LIKE 'SELECT%%FROM `big` AS%%' "
                                   "AND info NOT LIKE '%%processlist%%'", (mysql_db,))
                    for (pid,) in cursor.fetchall():
                        try:
                            cursor.execute(f"KILL CONNECTION {int(pid)}")
                        except pymysql.err.OperationalError:  # it has just ended
                            continue
                        killed.append(pid)
                    done.wait(0.001)

        killer = threading.Thread(target=kill_the_read, daemon=True)
        killer.start()
        try:
            with open_lookup(FullCachingLookupProvider.of(
                    SqlTableSource(connect, "big", schema="id BIGINT, s STRING"),
                    PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
                    share_across_workers=False, parallelism=1,
                    initial_load_timeout=timedelta(seconds=60))) as handle:
                assert handle.lookup_batch([(1,), (rows,)]) == {
                    (1,): ((1, "x" * 90),), (rows,): ((rows, "x" * 90),)}
                assert handle.metrics.num_cached_records == rows
                attempts.append((bool(killed), handle.metrics.num_retries))
        finally:
            done.set()
            killer.join(10)
        if attempts[-1][1] >= 1:
            break
    assert attempts[-1][1] >= 1, f"no load was killed mid-result: (killed, retries) {attempts}"


def test_connectorx_failures_are_classified_by_what_they_say() -> None:
    from connectors.sql.dialects.mysql import connectorx_error

    class PanicException(BaseException):  # pyo3's, as connectorx raises it
        pass

    transient = [
        PanicException("cx writer failed: Source(MySQLError(CodecError { IO error: "
                       "`bytes remaining on stream' }))"),
        RuntimeError("timed out waiting for connection: DriverError { Could not connect to "
                     "address `127.0.0.1:1': Connection refused (os error 111) }"),
        RuntimeError("MySqlError { ERROR 2013 (HY000): Lost connection to server }"),
        RuntimeError("MySqlError { ERROR 1040 (08004): Too many connections }"),
    ]
    permanent = [
        RuntimeError("timed out waiting for connection: MySqlError { ERROR 1045 (28000): "
                     "Access denied for user 'root'@'127.0.0.1' (using password: YES) }"),
        RuntimeError("MySqlError { ERROR 1146 (42S02): Table 'test.x' doesn't exist }"),
    ]
    for exc in transient:
        assert isinstance(connectorx_error(exc, "reading"), TransientConnectorError), exc
    for exc in permanent:
        error = connectorx_error(exc, "reading")
        assert not isinstance(error, TransientConnectorError), exc
        assert isinstance(error, ConnectorError)


@pytest.mark.parametrize("wrong", ["password", "port"])
def test_a_full_load_with_a_wrong_password_or_port_fails_within_the_timeout(
        mysql_url: str, mysql_db: str, wrong: str) -> None:
    """The driver connects first (connectorx's pool waits 30 s for a connection it is
    refused): a refused login fails at once and permanently, a closed port as soon as
    the retries are spent. Measured here as attempts, not seconds: one attempt for the
    login, the configured retries for the port."""
    import pymysql

    params = mysql_params(mysql_url, mysql_db)
    if wrong == "password":
        params = {**params, "user": "root", "password": "surely-wrong"}
    else:
        params = {**params, "port": 1}
    connect = functools.partial(pymysql.connect, connect_timeout=2, **params)
    provider = FullCachingLookupProvider.of(
        SqlTableSource(connect, "dim", schema="id BIGINT"),
        PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"], share_across_workers=False,
        max_retries=1, initial_load_timeout=timedelta(seconds=60))
    with pytest.raises(SparkLookupError) as raised, open_lookup(provider) as handle:
        handle.lookup((1,))
    assert "surely-wrong" not in str(raised.value)
    cause = raised.value.__cause__
    assert isinstance(cause, ConnectorError), raised.value
    # A refused login is permanent (one attempt); a refused connection transient.
    assert isinstance(cause, TransientConnectorError) == (wrong == "port"), cause
