"""A Flink table's whole ``WITH (...)``: JDBC URLs, driver choice, the option tables'
errors, and providers built in one call over SQLite files, Parquet and CSV files and
Delta tables (the server-backed connectors: test_table_options_services.py)."""

from __future__ import annotations

import logging
import os
import pickle
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.sql.flavor import MYSQL, POSTGRES
from connectors.sql.jdbc.drivers import JdbcConnect, choose_driver
from connectors.sql.jdbc.options import JdbcTableOptions
from connectors.sql.jdbc.url import parse_jdbc_url, redact_jdbc_url
from lookup import LookupOptions, SqlLookupFunction, open_lookup
from scan import CollectionSource, DeltaSource, FileSource, SqlTableSource
from spark_lookup.credentials import Secret
from spark_lookup.errors import ConfigError, ConnectorError
from tests.lookup.functions import DictLookup

SECRET = "Sup3r-S3cret_pw!"
HOUR = {"lookup.full-cache.periodic-reload.interval": "1 h"}  # loads at open, then not here
FULL = {"lookup.cache": "FULL", **HOUR}
PARTIAL = {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "100"}


def everything_shown(*objects: Any) -> str:
    """The repr and str of each object, and of each exception's whole chain."""
    import traceback

    texts = []
    for obj in objects:
        texts += [repr(obj), str(obj)]
        if isinstance(obj, BaseException):
            texts.append("".join(traceback.format_exception(obj)))
            chain: list[BaseException] = []
            cause: BaseException | None = obj
            while cause is not None and cause not in chain:  # a cause may be itself
                chain.append(cause)
                texts += [repr(cause), str(cause)]
                cause = cause.__cause__ or cause.__context__
    return "\n".join(texts)


# --- JDBC URLs -----------------------------------------------------------------------


def test_a_postgres_url_gives_host_database_credentials_and_libpq_parameters() -> None:
    url = parse_jdbc_url("jdbc:postgresql://db.example:5433/shop?user=app&password=p%40ss"
                         "&sslmode=require&connectTimeout=5&ApplicationName=enrich")
    assert (url.backend, url.host, url.port, url.database, url.user) == (
        POSTGRES, "db.example", 5433, "shop", "app")
    assert url.password is not None
    assert url.password.reveal() == "p@ss"
    assert dict(url.params) == {"sslmode": "require", "connect_timeout": "5",
                                "application_name": "enrich"}
    assert "p%40ss" not in url.shown
    assert "password=***" in url.shown


def test_default_ports_and_mariadb_is_mysql() -> None:
    assert parse_jdbc_url("jdbc:postgresql://h/db").port == 5432
    maria = parse_jdbc_url("jdbc:mariadb://h/db")
    assert (maria.backend, maria.port) == (MYSQL, 3306)


def test_a_mysql_url_with_credentials_in_the_authority_and_connector_j_parameters() -> None:
    url = parse_jdbc_url("jdbc:mysql://u:pw@h:3307/db?connectTimeout=2500&useSSL=false"
                         "&serverTimezone=UTC&characterEncoding=utf8")
    assert (url.user, url.port, url.database) == ("u", 3307, "db")
    assert url.password == Secret("pw")
    # Milliseconds in Connector/J, whole seconds for the Python drivers; the session
    # pins UTC and utf8mb4 itself.
    assert dict(url.params) == {"connect_timeout": "3", "ssl_disabled": "true"}
    assert redact_jdbc_url("jdbc:mysql://u:pw@h:3307/db") == "jdbc:mysql://***@h:3307/db"


def test_a_sqlite_url_is_an_absolute_file_path(tmp_path: Path, monkeypatch: Any) -> None:
    assert parse_jdbc_url(f"jdbc:sqlite:{tmp_path}/x.db").database == f"{tmp_path}/x.db"
    monkeypatch.chdir(tmp_path)
    assert parse_jdbc_url("jdbc:sqlite:rel.db").database == os.path.join(tmp_path, "rel.db")


@pytest.mark.parametrize(("url", "message"), [
    ("jdbc:sqlite::memory:", "in-memory SQLite database"),
    ("jdbc:sqlite:", "in-memory SQLite database"),
    ("jdbc:sqlite:file:/x.db?mode=ro", "not a 'file:' URI"),
    ("jdbc:oracle:thin:@h:1521:x", "unsupported database 'jdbc:oracle:'"),
    ("jdbc:postgres://h/db", "did you mean 'jdbc:postgresql:'"),
    ("postgresql://h/db", "is not a JDBC URL"),
    ("mysql://root@h:3306/test", "is not a JDBC URL"),
    ("jdbc:postgresql://h:99999/db", "invalid port"),
    ("jdbc:postgresql://h1:5432,h2:5432/db", "several hosts"),
    ("jdbc:postgresql:db", "expected 'jdbc:postgresql://host"),
    ("jdbc:postgresql://h/db?sslmod=require", "did you mean 'sslmode'"),
    ("jdbc:postgresql://h/db?sslmode=always", "sslmode='always'"),
    ("jdbc:mysql://h/db?sslMode=VERIFY_CA", "not supported from a URL"),
    ("jdbc:mysql://h/db?connectTimeout=soon", "must be a whole number"),
])
def test_bad_urls_are_refused_naming_the_option_and_never_showing_the_password(
        url: str, message: str) -> None:
    with_password = url + ("&" if "?" in url else "?") + f"password={SECRET}"
    for text in (url, with_password):
        with pytest.raises(ConfigError, match="option 'url'") as caught:
            parse_jdbc_url(text)
        assert message in str(caught.value)
        assert SECRET not in everything_shown(caught.value)


# --- drivers -----------------------------------------------------------------------------


def test_the_default_driver_is_adbc_where_installed_else_the_first_db_api_driver() -> None:
    assert choose_driver(None, parse_jdbc_url("jdbc:postgresql://h/db")) == "adbc"
    assert choose_driver(None, parse_jdbc_url("jdbc:sqlite:/x.db")) == "adbc"
    assert choose_driver(None, parse_jdbc_url("jdbc:mysql://h/db")) == "pymysql"
    # Flink's option names a JDBC class: the Python driver is chosen as without one.
    assert choose_driver("org.postgresql.Driver", parse_jdbc_url("jdbc:postgresql://h/db")
                         ) == "adbc"
    assert choose_driver("adbc-sqlite", parse_jdbc_url("jdbc:sqlite:/x.db")) == "adbc"
    assert choose_driver("mysql-connector", parse_jdbc_url("jdbc:mariadb://h/db")
                         ) == "mysql-connector"


@pytest.mark.parametrize(("driver", "url", "message"), [
    ("psycopg2", "jdbc:postgresql://h/db", "driver 'psycopg2' is not installed: pip install "
                                           "psycopg2-binary"),
    ("mysqlclient", "jdbc:mysql://h/db", "pip install mysqlclient"),
    ("pscyopg", "jdbc:postgresql://h/db", "unknown driver 'pscyopg'; did you mean 'psycopg'?"),
    ("pymysql", "jdbc:postgresql://h/db", "'pymysql' is not a driver of PostgreSQL"),
    ("adbc-sqlite", "jdbc:postgresql://h/db", "'adbc-sqlite' is not a PostgreSQL driver"),
    ("com.mysql.cj.jdbc.Driver", "jdbc:postgresql://h/db", "is not a PostgreSQL JDBC driver"),
])
def test_a_driver_that_cannot_open_the_url_is_refused(driver: str, url: str,
                                                      message: str) -> None:
    with pytest.raises(ConfigError, match="option 'driver'") as caught:
        LookupOptions.from_dict({"connector": "jdbc", "url": url, "driver": driver})
    assert message in str(caught.value)


# --- option errors -------------------------------------------------------------------------


def jdbc(path: Path, **more: str) -> dict[str, str]:
    return {"connector": "jdbc", "url": f"jdbc:sqlite:{path}", "table-name": "customers",
            **more}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "dim.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, tier TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                         [(i, f"n{i}", "gold" if i % 2 else "silver") for i in range(1, 101)])
        conn.execute("CREATE TABLE events (at TEXT, what TEXT)")
    return path


def test_missing_required_options_are_named_when_the_provider_is_built(db: Path) -> None:
    options = LookupOptions.from_dict({"connector": "jdbc", "url": f"jdbc:sqlite:{db}"})
    with pytest.raises(ConfigError, match="missing required option 'table-name' of connector "
                                          "'jdbc'"):
        options.provider()
    with pytest.raises(ConfigError, match="missing required option 'url'"):
        LookupOptions.from_dict({"connector": "jdbc", "table-name": "t"}).provider()
    with pytest.raises(ConfigError, match="missing required option 'format'"):
        LookupOptions.from_dict({"connector": "filesystem", "path": "/x", **FULL}).provider(
            key_columns=["id"])
    with pytest.raises(ConfigError, match="missing required option 'table-path'"):
        LookupOptions.from_dict({"connector": "delta", **FULL}).provider(key_columns=["id"])
    with pytest.raises(ConfigError, match="missing required option 'connector'"):
        LookupOptions.from_dict(PARTIAL).provider()


def test_unknown_keys_are_named_with_the_key_they_resemble(db: Path) -> None:
    with pytest.raises(ConfigError, match="unknown option 'tabel-name' of connector 'jdbc'; "
                                          "did you mean 'table-name'?"):
        LookupOptions.from_dict({"connector": "jdbc", "tabel-name": "customers"})
    with pytest.raises(ConfigError, match="unknown option 'scan.partition.nums' of connector "
                                          "'jdbc'; did you mean 'scan.partition.num'"):
        LookupOptions.from_dict(jdbc(db, **{"scan.partition.nums": "4"}))
    with pytest.raises(ConfigError, match="did you mean 'lookup.max-retries'"):
        LookupOptions.from_dict(jdbc(db, **{"lookup.max-retry": "4"}))
    with pytest.raises(ConfigError, match="unknown option 'paht' of connector 'filesystem'"):
        LookupOptions.from_dict({"connector": "filesystem", "paht": "/x", "format": "csv"})
    with pytest.raises(ConfigError, match="unknown option 'csv.field-delimiter'"):
        LookupOptions.from_dict({"connector": "filesystem", "csv.field-delimiter": ";"})
    with pytest.raises(ConfigError, match="did you mean 'key-template'"):
        LookupOptions.from_dict({"connector": "redis", "key_template": "u:{id}"})


def test_flink_keys_that_do_not_apply_are_accepted(db: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="lookup"):
        options = LookupOptions.from_dict(jdbc(db, **{
            "sink.buffer-flush.max-rows": "100", "connection.max-retry-timeout": "60 s",
            "scan.auto-commit": "true", "scan.fetch-size": "1000",
            "driver": "org.sqlite.JDBC", **PARTIAL}))
    assert "'sink.buffer-flush.max-rows' of connector 'jdbc' is accepted and not applied" in (
        caplog.text)
    assert isinstance(options.table, JdbcTableOptions)
    assert options.table.fetch_size == 1000
    with open_lookup(options.provider()) as handle:
        assert handle.lookup((3,)) == ((3, "n3", "gold"),)


@pytest.mark.parametrize(("given", "message"), [
    ({"scan.partition.column": "id", "scan.partition.num": "4"},
     "need ['scan.partition.lower-bound', 'scan.partition.upper-bound'] too"),
    ({"scan.partition.lower-bound": "1"}, "all four or none"),
    ({"scan.partition.column": "id", "scan.partition.num": "4",
      "scan.partition.lower-bound": "9", "scan.partition.upper-bound": "1"},
     "'scan.partition.lower-bound' (9) is above 'scan.partition.upper-bound' (1)"),
    ({"scan.partition.column": "id", "scan.partition.num": "0",
      "scan.partition.lower-bound": "1", "scan.partition.upper-bound": "9"},
     "option 'scan.partition.num': must be >= 1"),
    ({"scan.partition.column": "1d", "scan.partition.num": "2",
      "scan.partition.lower-bound": "1", "scan.partition.upper-bound": "9"},
     "option 'scan.partition.column'"),
    ({"scan.fetch-size": "-1"}, "option 'scan.fetch-size': must be >= 0"),
])
def test_scan_partition_keys_go_together_and_are_checked(db: Path, given: dict[str, str],
                                                         message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LookupOptions.from_dict(jdbc(db, **given))
    assert message in str(caught.value)


def test_files_and_delta_are_looked_up_through_a_full_cache_only(tmp_path: Path) -> None:
    for options in ({"connector": "filesystem", "path": str(tmp_path), "format": "parquet"},
                    {"connector": "delta", "table-path": str(tmp_path)}):
        for mode in ({"lookup.cache": "NONE"}, PARTIAL):
            with pytest.raises(ConfigError, match="looked up through a full cache only: set "
                                                  "'lookup.cache' = 'FULL'"):
                LookupOptions.from_dict({**options, **mode}).provider(key_columns=["id"])
        # As in Flink, a table read only whole is a full cache by default, reloaded hourly.
        default = LookupOptions.from_dict(options)
        assert default.cache_type == "FULL"
        assert default.build_trigger().interval == timedelta(hours=1)
        with pytest.raises(ConfigError, match="declares no primary key: pass key_columns"):
            LookupOptions.from_dict({**options, **FULL}).provider()


def test_filesystem_values_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="option 'format': expected one of parquet, csv, "
                                          "got 'json'"):
        LookupOptions.from_dict({"connector": "filesystem", "format": "json"})
    with pytest.raises(ConfigError, match="only local paths"):
        LookupOptions.from_dict({"connector": "filesystem", "path": "s3://b/k"})


def test_a_connector_built_elsewhere_still_takes_its_function(tmp_path: Path) -> None:
    options = LookupOptions.from_dict({"connector": "kafka", "topic": "t", **PARTIAL})
    rows = [(1, "Ada")]
    assert options.provider(DictLookup(rows)).kind == "PARTIAL"
    with pytest.raises(ConfigError, match="connector 'kafka' cannot build a provider here "
                                          r"\(supported: jdbc, filesystem, delta, redis\)"):
        options.provider()
    with pytest.raises(ConfigError, match="schema= describes a table built from the connector"):
        options.provider(DictLookup(rows), schema="id BIGINT, name STRING")


# --- SQLite files, one call --------------------------------------------------------------


@pytest.mark.parametrize("driver", ["adbc", "sqlite3"])
def test_a_sqlite_table_gives_a_partial_provider_keyed_by_its_primary_key(
        db: Path, driver: str) -> None:
    options = LookupOptions.from_dict(jdbc(db, driver=driver, **PARTIAL,
                                           **{"lookup.max-retries": "1"}))
    assert options.table is not None
    assert options.table.driver == driver  # type: ignore[attr-defined]
    provider = options.provider()
    assert (provider.kind, provider.key_columns) == ("PARTIAL", ("id",))
    assert provider.retry_policy.max_retries == 1
    assert provider.schema.simpleString() == "struct<id:bigint,name:string,tier:string>"
    # It travels to workers as its configuration.
    with open_lookup(pickle.loads(pickle.dumps(provider))) as handle:
        assert handle.lookup((7,)) == ((7, "n7", "gold"),)
        assert handle.lookup_batch([(8,), (1000,)]) == {(8,): ((8, "n8", "silver"),),
                                                        (1000,): ()}


def test_a_sqlite_table_without_a_cache_and_with_a_declared_schema(db: Path) -> None:
    provider = LookupOptions.from_dict(jdbc(db)).provider(
        key_columns="name", schema="name STRING, tier STRING")
    assert (provider.kind, provider.key_columns) == ("NONE", ("name",))
    with open_lookup(provider) as handle:
        assert handle.lookup(("n2",)) == (("n2", "silver"),)


def test_a_full_sqlite_provider_is_loaded_in_the_partitions_of_its_options(db: Path) -> None:
    options = LookupOptions.from_dict(jdbc(db, **FULL, **{
        "scan.partition.column": "id", "scan.partition.num": "3",
        "scan.partition.lower-bound": "1", "scan.partition.upper-bound": "60"}))
    provider = options.provider()
    source = provider.source  # type: ignore[attr-defined]
    assert isinstance(source, SqlTableSource)
    from scan import plan_splits

    # Three equal key steps over [1, 60]; rows beyond the bounds are read too.
    assert [(s.lo, s.hi) for s in plan_splits(source)] == [(None, 21), (21, 41), (41, None)]
    with open_lookup(provider) as handle:
        assert handle.lookup((100,)) == ((100, "n100", "silver"),)
        assert handle.lookup((1,)) == ((1, "n1", "gold"),)


def test_a_table_without_a_primary_key_needs_key_columns(db: Path) -> None:
    options = LookupOptions.from_dict({**jdbc(db), "table-name": "events", **PARTIAL})
    with pytest.raises(ConfigError, match="table 'events' has no primary key: pass key_columns"):
        options.provider()
    assert options.provider(key_columns=["at"]).key_columns == ("at",)


def test_a_missing_database_file_fails_on_the_driver_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    for driver in ("adbc", "sqlite3"):
        options = LookupOptions.from_dict(jdbc(missing, driver=driver))
        with pytest.raises(ConnectorError, match="cannot connect"):
            options.provider()
    assert not missing.exists()


def test_a_partition_column_must_be_an_integer(db: Path) -> None:
    options = LookupOptions.from_dict(jdbc(db, **FULL, **{
        "scan.partition.column": "name", "scan.partition.num": "2",
        "scan.partition.lower-bound": "1", "scan.partition.upper-bound": "9"}))
    with pytest.raises(ConfigError, match="need an integer split column; 'name' of table "
                                          "'customers' is string"):
        options.provider()


# --- files and Delta, one call -------------------------------------------------------------


def test_a_parquet_directory_gives_a_full_provider(tmp_path: Path) -> None:
    directory = tmp_path / "dim"
    directory.mkdir()
    pq.write_table(pa.table({"code": ["nl", "fr"], "name": ["NL", "FR"]}), directory / "a.parquet")
    pq.write_table(pa.table({"code": ["de"], "name": ["DE"]}), directory / "b.parquet")
    provider = LookupOptions.from_dict({
        "connector": "filesystem", "path": f"file://{directory}", "format": "parquet", **FULL,
    }).provider(key_columns=["code"])
    assert isinstance(provider.source, FileSource)  # type: ignore[attr-defined]
    with open_lookup(provider) as handle:
        assert handle.lookup_batch([("fr",), ("de",), ("xx",)]) == {
            ("fr",): (("fr", "FR"),), ("de",): (("de", "DE"),), ("xx",): ()}


def test_a_csv_file_with_a_declared_schema_gives_a_full_provider(tmp_path: Path) -> None:
    path = tmp_path / "dim.csv"
    path.write_text("id,name\n1,Ada\n2,Bob\n")
    provider = LookupOptions.from_dict({
        "connector": "filesystem", "path": str(path), "format": "CSV", **FULL,
    }).provider(key_columns="id", schema="id BIGINT, name STRING")
    with open_lookup(provider) as handle:
        assert handle.lookup((2,)) == ((2, "Bob"),)


def test_a_delta_table_gives_a_full_provider_pinned_or_latest(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    path = str(tmp_path / "countries")
    write_deltalake(path, pa.table({"code": ["nl"], "name": ["Holland"]}))
    write_deltalake(path, pa.table({"code": ["nl", "fr"], "name": ["Netherlands", "France"]}),
                    mode="overwrite")
    latest = LookupOptions.from_dict({"connector": "delta", "table-path": path, **FULL}
                                     ).provider(key_columns=["code"])
    assert isinstance(latest.source, DeltaSource)  # type: ignore[attr-defined]
    with open_lookup(latest) as handle:
        assert handle.lookup(("nl",)) == (("nl", "Netherlands"),)
    pinned = LookupOptions.from_dict({"connector": "delta", "table-path": path,
                                      "versionAsOf": "0", **FULL}).provider(
        key_columns=["code"], schema="code STRING, name STRING")
    with open_lookup(pinned) as handle:
        assert handle.lookup_batch([("nl",), ("fr",)]) == {("nl",): (("nl", "Holland"),),
                                                           ("fr",): ()}


# --- the password ----------------------------------------------------------------------------


def test_the_password_is_never_shown_by_anything_built(db: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    given = jdbc(db, username="app", password=SECRET, **PARTIAL)
    options = LookupOptions.from_dict(given)
    provider = options.provider()
    table = options.table
    assert isinstance(table, JdbcTableOptions)
    connect = table.connect
    assert isinstance(connect, JdbcConnect)
    assert connect.password == Secret(SECRET)  # inside the factory, and only there
    with open_lookup(provider) as handle:
        handle.lookup((1,))
    fn = provider.function  # type: ignore[attr-defined]
    assert isinstance(fn, SqlLookupFunction)
    shown = everything_shown(options, options.options, table, connect, provider, fn,
                             Secret(SECRET), f"{Secret(SECRET)}")
    assert SECRET not in shown
    assert "***" in repr(options.options)
    assert SECRET not in caplog.text
    # The factory travels (it must, to reach executors) and still works.
    assert pickle.loads(pickle.dumps(connect)) == connect


def test_the_factory_hands_each_driver_its_credentials() -> None:
    url = parse_jdbc_url("jdbc:postgresql://h/db?sslmode=require")
    connect = JdbcConnect("adbc", url, None, Secret("p@ss:w/rd"))
    assert connect.postgres_uri() == "postgresql://:p%40ss%3Aw%2Frd@h:5432/db?sslmode=require"
    connect = JdbcConnect("psycopg", url, "app", Secret("x"))
    assert connect.libpq_keywords() == {"host": "h", "port": 5432, "dbname": "db",
                                        "user": "app", "password": "x", "sslmode": "require"}
    mysql = JdbcConnect("pymysql", parse_jdbc_url(
        "jdbc:mysql://h/db?connectTimeout=1500&sslMode=DISABLED"), "app", None)
    assert mysql.mysql_keywords("connect_timeout") == {
        "host": "h", "port": 3306, "user": "app", "database": "db", "connect_timeout": 2,
        "ssl_disabled": True}


def test_a_password_in_the_url_is_hidden_in_the_options_and_errors(tmp_path: Path) -> None:
    options = LookupOptions.from_dict({
        "connector": "jdbc", "url": f"jdbc:postgresql://h/db?user=u&password={SECRET}",
        "table-name": "t"})
    assert SECRET not in everything_shown(options, options.table)
    with pytest.raises(ConfigError) as caught:
        LookupOptions.from_dict({"connector": "jdbc", "url": f"jdbc:postgresql://h/db?"
                                 f"password={SECRET}&sslmode=nope", "table-name": "t"})
    assert SECRET not in everything_shown(caught.value)
    with pytest.raises(ConfigError, match="option 'password' must be a string, got int") as bad:
        LookupOptions.from_dict({"connector": "jdbc", "password": 12345678})
    assert "12345678" not in repr(bad.value)


def test_the_options_of_a_target_given_are_unchanged() -> None:
    rows = [(1, "Ada")]
    provider = LookupOptions.from_dict(FULL).provider(
        CollectionSource(rows, schema="id BIGINT, name STRING"), key_columns=["id"])
    with open_lookup(provider) as handle:
        assert handle.lookup((1,)) == ((1, "Ada"),)


def test_the_readme_lists_every_key_of_every_connector() -> None:
    from lookup.table_options import CONNECTOR_MODULES, connector_options

    # The section moved from the README to the docs site.
    section = (Path(__file__).resolve().parents[2] / "docs" / "flink-table-options.md").read_text()
    for name in CONNECTOR_MODULES:
        kind = connector_options(name)
        assert f"| `{name}` |" in section
        for option in kind.OPTIONS:
            assert f"`{option.key}`" in section, (name, option.key)
        for key in kind.IGNORED:
            assert f"`{key}*`" in section or f"`{key}`" in section, (name, key)


def test_flink_filesystem_cache_ttl_is_the_reload_interval(tmp_path: Path) -> None:
    options = {"connector": "filesystem", "path": str(tmp_path), "format": "parquet",
               "lookup.join.cache.ttl": "10 min"}
    assert LookupOptions.from_dict(options).build_trigger().interval == timedelta(minutes=10)
    with pytest.raises(ConfigError, match="not both"):
        LookupOptions.from_dict({**options,
                                 "lookup.full-cache.periodic-reload.interval": "1 h"})
    timed = LookupOptions.from_dict({
        "connector": "delta", "table-path": str(tmp_path), "lookup.cache": "FULL",
        "lookup.full-cache.reload-strategy": "TIMED",
        "lookup.full-cache.timed-reload.iso-time": "03:00Z"})
    assert type(timed.build_trigger()).__name__ == "TimedCacheReloadTrigger"


def test_a_delta_tables_history_gives_a_point_in_time_provider(tmp_path: Path) -> None:
    import datetime as dt
    import time

    from deltalake import DeltaTable, write_deltalake

    from lookup import Validity

    path = str(tmp_path / "prices")
    write_deltalake(path, pa.table({"id": pa.array([1, 2], pa.int64()), "price": [1.0, 2.0]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    time.sleep(0.003)  # commit timestamps are in milliseconds
    DeltaTable(path).update(updates={"price": "1.5"}, predicate="id = 1")
    stamps = {int(h["version"]): dt.datetime.fromtimestamp(h["timestamp"] / 1000, dt.timezone.utc)
              for h in DeltaTable(path).history()}
    # The key is the DDL's PRIMARY KEY; the version columns history adds may be declared.
    options = LookupOptions.from_ddl(f"""
        CREATE TABLE prices (
          id BIGINT, price DOUBLE, _valid_from TIMESTAMP(6), _valid_to TIMESTAMP(6),
          PRIMARY KEY (id) NOT ENFORCED
        ) WITH ('connector' = 'delta', 'table-path' = '{path}', 'history' = 'true',
                'lookup.cache' = 'FULL', 'lookup.full-cache.reload-strategy' = 'PERIODIC',
                'lookup.full-cache.periodic-reload.interval' = '1 h')""")
    provider = options.provider()
    assert provider.validity == Validity("_valid_from", "_valid_to")
    source = provider.source  # type: ignore[attr-defined]
    assert isinstance(source, DeltaSource)
    assert repr(source) == f"DeltaSource({path!r}, history=True, key_columns=['id'])"
    with open_lookup(provider) as handle:
        assert handle.lookup((1,), as_of=stamps[0])[0][:2] == (1, 1.0)
        assert handle.lookup((1,), as_of=stamps[1])[0][:2] == (1, 1.5)
        assert handle.lookup((1,))[0][:2] == (1, 1.5)  # now
        assert handle.lookup((2,), as_of=stamps[0] - dt.timedelta(seconds=1)) == ()
    # Without 'history', the same table is its latest rows, with no validity.
    plain = LookupOptions.from_dict({"connector": "delta", "table-path": path,
                                     "history": "false", **FULL}).provider(key_columns=["id"])
    assert plain.validity is None
    with pytest.raises(ConfigError, match="option 'history': expected 'true' or 'false'"):
        LookupOptions.from_dict({"connector": "delta", "table-path": path, "history": "yes",
                                 **FULL})
