"""A Flink table's whole ``WITH (...)`` over real servers: a JDBC DDL's options with
PostgreSQL and MySQL/MariaDB URLs and a Redis table's each give a working provider in one
call, with every driver; a password is never shown, a refused login included."""

from __future__ import annotations

import logging
import pickle
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from lookup import LookupOptions, open_lookup
from spark_lookup.errors import ConnectorError
from tests.conftest import mysql_params
from tests.lookup.test_table_options import FULL, PARTIAL, SECRET, everything_shown

ROWS = "(1, 'Ada', 'gold'), (2, 'Grace', 'silver'), (3, 'Alan', 'gold')"


def credentials(dsn_url: str) -> tuple[str, str, str]:
    """The host part of a JDBC URL, the user, and a password: the server's own when
    the URL has one, else a distinctive one (a trust login does not ask for it)."""
    parts = urlsplit(dsn_url)
    where = f"{parts.hostname}:{parts.port}"
    return where, unquote(parts.username or "root"), unquote(parts.password or SECRET)


# --- PostgreSQL --------------------------------------------------------------------------


@pytest.fixture
def pg_table(postgres_dsn: str, pg_schema: str) -> dict[str, str]:
    """The Flink DDL options of a customers table in this test's schema."""
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{pg_schema}".customers '
                     "(id bigint PRIMARY KEY, name text, tier text)")
        conn.execute(f'INSERT INTO "{pg_schema}".customers VALUES {ROWS}')
    where, user, password = credentials(postgres_dsn)
    database = urlsplit(postgres_dsn).path.lstrip("/")
    return {"connector": "jdbc", "url": f"jdbc:postgresql://{where}/{database}",
            "table-name": f"{pg_schema}.customers", "username": user, "password": password}


@pytest.mark.postgres
@pytest.mark.parametrize("driver", ["adbc", "psycopg"])
def test_a_postgres_ddl_gives_a_partial_provider(pg_table: dict[str, str], driver: str) -> None:
    options = LookupOptions.from_dict({**pg_table, "driver": driver, **PARTIAL})
    provider = options.provider()
    assert provider.key_columns == ("id",)  # the table's primary key
    with open_lookup(pickle.loads(pickle.dumps(provider))) as handle:
        assert handle.lookup((2,)) == ((2, "Grace", "silver"),)
        assert handle.lookup_batch([(1,), (9,)]) == {(1,): ((1, "Ada", "gold"),), (9,): ()}
    assert pg_table["password"] not in everything_shown(options, provider)


@pytest.mark.postgres
def test_a_postgres_ddl_gives_a_full_provider_in_partitions(pg_table: dict[str, str]) -> None:
    options = LookupOptions.from_dict({
        **pg_table, **FULL, "scan.partition.column": "id", "scan.partition.num": "2",
        "scan.partition.lower-bound": "1", "scan.partition.upper-bound": "3",
        "scan.fetch-size": "500", "lookup.max-retries": "0"})
    assert options.table.driver == "adbc"  # type: ignore[union-attr]  # ADBC by default
    provider = options.provider(schema="id BIGINT, name STRING")
    with open_lookup(provider) as handle:
        assert handle.lookup_batch([(1,), (3,), (4,)]) == {
            (1,): ((1, "Ada"),), (3,): ((3, "Alan"),), (4,): ()}


@pytest.mark.postgres
def test_a_driver_error_that_quotes_the_password_is_scrubbed(
        pg_table: dict[str, str], postgres_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    # The server names the database it lacks: here, the password's very text.
    caplog.set_level(logging.DEBUG)
    password = pg_table["password"]
    where, _, _ = credentials(postgres_dsn)
    for driver in ("adbc", "psycopg"):
        options = LookupOptions.from_dict({
            **pg_table, "driver": driver, "url": f"jdbc:postgresql://{where}/{password}"})
        with pytest.raises(ConnectorError, match="cannot connect to JdbcConnect") as caught:
            options.provider()
        assert "does not exist" in str(caught.value)
        assert password not in everything_shown(caught.value)
    assert password not in caplog.text


# --- MySQL / MariaDB -----------------------------------------------------------------------


@pytest.fixture
def mysql_table(mysql_url: str, mysql_db: str) -> dict[str, str]:
    import pymysql

    with pymysql.connect(**mysql_params(mysql_url, mysql_db), autocommit=True) as conn, \
            conn.cursor() as cursor:
        cursor.execute("CREATE TABLE customers (id BIGINT PRIMARY KEY, name TEXT, tier TEXT)")
        cursor.execute(f"INSERT INTO customers VALUES {ROWS}")
    params = mysql_params(mysql_url, mysql_db)
    options = {"connector": "jdbc", "table-name": "customers", "username": params["user"],
               "url": f"jdbc:mysql://{params['host']}:{params['port']}/{mysql_db}"
                      "?serverTimezone=UTC&useSSL=false"}
    if params["password"]:
        options["password"] = params["password"]
    return options


@pytest.mark.mysql
@pytest.mark.parametrize("driver", ["pymysql", "mysql-connector"])
def test_a_mysql_ddl_gives_a_partial_provider(mysql_table: dict[str, str], driver: str) -> None:
    provider = LookupOptions.from_dict({**mysql_table, "driver": driver, **PARTIAL}).provider()
    assert provider.key_columns == ("id",)
    with open_lookup(pickle.loads(pickle.dumps(provider))) as handle:
        assert handle.lookup((3,)) == ((3, "Alan", "gold"),)
        assert handle.lookup_batch([(2,), (7,)]) == {(2,): ((2, "Grace", "silver"),), (7,): ()}


@pytest.mark.mysql
def test_a_mariadb_ddl_gives_a_full_provider(mysql_table: dict[str, str]) -> None:
    options = {**mysql_table, "url": mysql_table["url"].replace("jdbc:mysql:", "jdbc:mariadb:"),
               "driver": "org.mariadb.jdbc.Driver", **FULL,
               "scan.partition.column": "id", "scan.partition.num": "3",
               "scan.partition.lower-bound": "1", "scan.partition.upper-bound": "3"}
    provider = LookupOptions.from_dict(options).provider()
    with open_lookup(provider) as handle:
        assert handle.lookup((1,)) == ((1, "Ada", "gold"),)
        assert handle.lookup((3,)) == ((3, "Alan", "gold"),)


@pytest.mark.mysql
@pytest.mark.parametrize("driver", ["pymysql", "mysql-connector"])
def test_a_refused_login_never_shows_the_password(
        mysql_table: dict[str, str], driver: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = SECRET + "-wrong"
    options = LookupOptions.from_dict({**mysql_table, "driver": driver, "password": wrong,
                                       **PARTIAL})
    with pytest.raises(ConnectorError, match="Access denied") as caught:
        options.provider()
    assert type(caught.value) is ConnectorError  # permanent: a retry cannot help
    assert wrong not in everything_shown(caught.value, options)
    assert wrong not in caplog.text


# --- Redis -------------------------------------------------------------------------------


@pytest.fixture
def redis_table(redis_url: str, redis_prefix: str, redis_client: Any) -> dict[str, str]:
    for key, name, tier in ((1, "Ada", "1"), (2, "Grace", "2")):
        redis_client.hset(f"{redis_prefix}user:{key}", mapping={"name": name, "tier": tier})
    return {"connector": "redis", "url": redis_url, "key-template": f"{redis_prefix}user:{{id}}",
            "value-type": "hash", "socket-timeout": "2 s", "retries": "0"}


@pytest.mark.redis
def test_a_redis_table_gives_a_partial_provider_keyed_by_its_template(
        redis_table: dict[str, str]) -> None:
    provider = LookupOptions.from_dict({**redis_table, **PARTIAL}).provider(
        schema="id BIGINT, name STRING, tier INT")
    assert provider.key_columns == ("id",)
    with open_lookup(pickle.loads(pickle.dumps(provider))) as handle:
        assert handle.lookup_batch([(1,), (2,), (3,)]) == {
            (1,): ((1, "Ada", 1),), (2,): ((2, "Grace", 2),), (3,): ()}


@pytest.mark.redis
def test_a_redis_table_gives_a_full_provider(redis_table: dict[str, str]) -> None:
    provider = LookupOptions.from_dict({**redis_table, **FULL}).provider(
        schema="id BIGINT, name STRING, tier INT")
    with open_lookup(provider) as handle:
        assert handle.lookup((2,)) == ((2, "Grace", 2),)


@pytest.mark.redis
def test_a_redis_table_needs_its_schema_and_hides_a_url_password(
        redis_table: dict[str, str]) -> None:
    from spark_lookup.errors import ConfigError

    with pytest.raises(ConfigError, match="connector 'redis' needs schema="):
        LookupOptions.from_dict(redis_table).provider()
    url = f"redis://:{SECRET}@127.0.0.1:6379/0"
    options = LookupOptions.from_dict({**redis_table, "url": url})
    provider = options.provider(schema="id BIGINT, name STRING")
    assert SECRET not in everything_shown(options, options.table, provider)
    with pytest.raises(ConfigError, match="give the password in the URL's authority") as caught:
        LookupOptions.from_dict({**redis_table, "url": f"redis://127.0.0.1/0?password={SECRET}"})
    assert SECRET not in everything_shown(caught.value)
