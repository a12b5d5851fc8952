"""Flink's own DDL examples over real servers: the JDBC connector page's table on MariaDB,
the lookup-join page's and this project's docs' on PostgreSQL, a Redis connector README's
dimension table on Redis (hosts and credentials made the local servers'). Each
``from_ddl`` provider answers as ``from_dict``'s with the same options and the schema
written out in Spark's types does."""

from __future__ import annotations

import warnings
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest

from lookup import LookupOptions, open_lookup
from spark_lookup.errors import ConfigError, ConfigWarning
from tests.conftest import mysql_params
from tests.lookup.test_flink_ddl import same_lookups
from tests.lookup.test_table_options_services import credentials

# --- PostgreSQL -------------------------------------------------------------------------


def pg_url(postgres_dsn: str) -> tuple[str, str, str]:
    where, user, password = credentials(postgres_dsn)
    return f"jdbc:postgresql://{where}/{urlsplit(postgres_dsn).path.lstrip('/')}", user, password


def pg_execute(postgres_dsn: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.mark.postgres
def test_flinks_lookup_join_customers_table_on_postgres(postgres_dsn: str,
                                                        pg_schema: str) -> None:
    # Flink's "Lookup Join" example: no PRIMARY KEY in the DDL (Flink takes the lookup
    # key from the join's ON); here the key defaults to the table's own primary key.
    pg_execute(postgres_dsn,
               f'CREATE TABLE "{pg_schema}".customers (id integer PRIMARY KEY, name text, '
               "country text, zip text)",
               f"INSERT INTO \"{pg_schema}\".customers VALUES (1, 'Ada', 'UK', 'N1'), "
               "(2, 'Grace', 'US', '10001')")
    url, user, password = pg_url(postgres_dsn)
    text = f"""
        -- Customers is backed by the JDBC connector and can be used for lookup joins
        CREATE TEMPORARY TABLE Customers (
          id INT,
          name STRING,
          country STRING,
          zip STRING
        ) WITH (
          'connector' = 'jdbc',
          'url' = '{url}',
          'table-name' = '{pg_schema}.customers',
          'username' = '{user}',
          'password' = '{password.replace("'", "''")}'
        );"""
    provider = LookupOptions.from_ddl(text).provider()
    equivalent = LookupOptions.from_dict({
        "connector": "jdbc", "url": url, "table-name": f"{pg_schema}.customers",
        "username": user, "password": password}).provider(
        schema="id INT, name STRING, country STRING, zip STRING")
    assert provider.key_columns == ("id",)
    assert same_lookups(provider, equivalent, [(2,), (3,)]) == {
        (2,): ((2, "Grace", "US", "10001"),), (3,): ()}


@pytest.mark.postgres
@pytest.mark.parametrize("cache", ["PARTIAL", "FULL"])
def test_the_docs_customers_ddl_on_postgres(postgres_dsn: str, pg_schema: str,
                                            cache: str) -> None:
    # docs/flink-table-options.md's table, with every type the DDL maps.
    pg_execute(
        postgres_dsn,
        f'CREATE TABLE "{pg_schema}".customers (id bigint PRIMARY KEY, name text, '
        "tier varchar(10), credit numeric(10, 2), since date, seen timestamp(3), "
        "changed timestamptz, avatar bytea, tags bigint[], opens time(0), flag boolean, "
        "score real, ratio double precision, rank smallint)",
        f"INSERT INTO \"{pg_schema}\".customers VALUES (1, 'Ada', 'gold', 12.50, "
        "'2020-01-31', '2024-05-20 10:00:00.123', '2024-05-20 10:00:00+02', '\\x0102', "
        "'{7,8}', '09:30', true, 0.5, 0.25, 3), (2, 'Grace', NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    url, user, password = pg_url(postgres_dsn)
    more = ("'lookup.partial-cache.max-rows' = '100000',\n"
            "  'lookup.partial-cache.expire-after-write' = '10 min',"
            if cache == "PARTIAL" else "'lookup.full-cache.periodic-reload.interval' = '1 h',")
    text = f"""CREATE TABLE customers (
  id BIGINT,
  name STRING,
  tier VARCHAR(10),
  credit DECIMAL(10, 2),
  since DATE,
  seen TIMESTAMP(3),
  changed TIMESTAMP_LTZ(3),
  avatar BYTES,
  tags ARRAY<BIGINT>,
  opens TIME(0),
  flag BOOLEAN,
  score FLOAT,
  ratio DOUBLE,
  `rank` SMALLINT,
  PRIMARY KEY (id) NOT ENFORCED
) WITH (
  'connector' = 'jdbc',
  'url' = '{url}',
  'table-name' = '{pg_schema}.customers',
  'username' = '{user}',
  'password' = '{password.replace("'", "''")}',
  'lookup.cache' = '{cache}',
  {more}
  'lookup.max-retries' = '3'
);"""
    provider = LookupOptions.from_ddl(text).provider()
    given = {"connector": "jdbc", "url": url, "table-name": f"{pg_schema}.customers",
             "username": user, "password": password, "lookup.cache": cache,
             "lookup.max-retries": "3",
             **({"lookup.partial-cache.max-rows": "100000",
                 "lookup.partial-cache.expire-after-write": "10 min"} if cache == "PARTIAL"
                else {"lookup.full-cache.periodic-reload.interval": "1 h"})}
    equivalent = LookupOptions.from_dict(given).provider(
        key_columns="id",
        schema="id BIGINT NOT NULL, name STRING, tier STRING, credit DECIMAL(10,2), "
               "since DATE, seen TIMESTAMP_NTZ, changed TIMESTAMP, avatar BINARY, "
               "tags ARRAY<BIGINT>, opens STRING, flag BOOLEAN, score FLOAT, ratio DOUBLE, "
               "rank SMALLINT")
    answers = same_lookups(provider, equivalent, [(1,), (2,), (3,)])
    assert answers[(1,)] == ((
        1, "Ada", "gold", Decimal("12.50"), date(2020, 1, 31),
        datetime(2024, 5, 20, 10, 0, 0, 123000),
        datetime(2024, 5, 20, 8, 0, tzinfo=timezone.utc), b"\x01\x02", [7, 8], "09:30:00",
        True, 0.5, 0.25, 3),)
    assert answers[(2,)] == ((2, "Grace", *[None] * 12),)
    assert answers[(3,)] == ()


# --- MariaDB -------------------------------------------------------------------------------


@pytest.mark.mysql
def test_flinks_jdbc_page_table_on_mariadb(mysql_url: str, mysql_db: str) -> None:
    import pymysql

    params = mysql_params(mysql_url, mysql_db)
    with pymysql.connect(**params, autocommit=True) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(40), age INT, "
                       "status BOOLEAN)")
        cursor.execute("INSERT INTO users VALUES (1, 'Ada', 36, true), (2, 'Alan', 41, false)")
    url = f"jdbc:mysql://{params['host']}:{params['port']}/{mysql_db}"
    credentials_ddl = f"'username' = '{params['user']}'," + (
        f"\n   'password' = '{params['password']}'," if params["password"] else "")
    # Flink's JDBC connector page, "How to create a JDBC table", with a partial cache.
    text = f"""
-- register a MySQL table 'users' in Flink SQL
CREATE TABLE MyUserTable (
  id BIGINT,
  name STRING,
  age INT,
  status BOOLEAN,
  PRIMARY KEY (id) NOT ENFORCED
) WITH (
   'connector' = 'jdbc',
   'url' = '{url}',
   'table-name' = 'users',
   {credentials_ddl}
   'lookup.cache' = 'PARTIAL',
   'lookup.partial-cache.max-rows' = '500',
   'lookup.partial-cache.expire-after-write' = '10 s'
);"""
    given = {"connector": "jdbc", "url": url, "table-name": "users",
             "username": params["user"], "lookup.cache": "PARTIAL",
             "lookup.partial-cache.max-rows": "500",
             "lookup.partial-cache.expire-after-write": "10 s",
             **({"password": params["password"]} if params["password"] else {})}
    for driver in ("pymysql", "mysql-connector"):
        with_driver = text.replace("'table-name'", f"'driver' = '{driver}',\n   'table-name'")
        provider = LookupOptions.from_ddl(with_driver).provider()
        equivalent = LookupOptions.from_dict({**given, "driver": driver}).provider(
            key_columns=["id"], schema="id BIGINT NOT NULL, name STRING, age INT, "
                                       "status BOOLEAN")
        assert same_lookups(provider, equivalent, [(1,), (2,), (5,)]) == {
            (1,): ((1, "Ada", 36, True),), (2,): ((2, "Alan", 41, False),), (5,): ()}
    # The same DDL on the jdbc:mariadb: URL, loaded whole.
    full = text.replace("jdbc:mysql:", "jdbc:mariadb:").replace(
        "'lookup.cache' = 'PARTIAL',\n   'lookup.partial-cache.max-rows' = '500',\n"
        "   'lookup.partial-cache.expire-after-write' = '10 s'",
        "'lookup.cache' = 'FULL', 'lookup.full-cache.periodic-reload.interval' = '1 h'")
    with open_lookup(LookupOptions.from_ddl(full).provider()) as handle:
        assert handle.lookup((2,)) == ((2, "Alan", 41, False),)


# --- Redis ---------------------------------------------------------------------------------

# A Redis connector README's dimension table (jeff-zou/flink-connector-redis), its
# connection keys written as this library's.
REDIS_README_DDL = """create table dim_table (name varchar, level varchar, age varchar) with (
  'connector'='redis', {connection}, 'maxIdle'='2', 'minIdle'='1',
  'lookup.cache.max-rows'='10', 'lookup.cache.ttl'='10', 'lookup.max-retries'='3')"""


@pytest.mark.redis
# Its legacy keys and bare-number TTL warn at each read (asserted once below).
@pytest.mark.filterwarnings("ignore::FutureWarning",
                            "ignore::spark_lookup.errors.ConfigWarning")
def test_a_redis_readme_dimension_table(redis_url: str, redis_prefix: str,
                                        redis_client: Any) -> None:
    original = REDIS_README_DDL.format(connection="'host'='10.11.80.147','port'='7001', "
                                                  "'redis-mode'='single', 'password'='*****',"
                                                  "'command'='hget'")
    with pytest.raises(ConfigError, match=r"unknown option 'host' of connector 'redis': this "
                                          r"connector reads the server from 'url' .* \(line 2, "
                                          r"column 24 of the DDL\)"):
        LookupOptions.from_ddl(original)
    for name, level, age in (("3", "3", "100"), ("4", "1", "7")):
        redis_client.hset(f"{redis_prefix}dim:{name}", mapping={"level": level, "age": age})
    connection = (f"'url'='{redis_url}', 'key-template'='{redis_prefix}dim:{{name}}', "
                  "'value-type'='hash'")
    text = REDIS_README_DDL.format(connection=connection)
    with pytest.raises(ConfigError, match="unknown option 'maxIdle' of connector 'redis'"):
        LookupOptions.from_ddl(text)
    text = text.replace("'maxIdle'='2', 'minIdle'='1',", "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options = LookupOptions.from_ddl(text)
    # That README's TTL is in seconds; Flink (and this library) read a bare 10 as 10 ms.
    assert any(w.category is ConfigWarning and "'10' is a bare number" in str(w.message)
               for w in caught)
    provider = options.provider()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        equivalent = LookupOptions.from_dict({
            "connector": "redis", "url": redis_url, "key-template": f"{redis_prefix}dim:{{name}}",
            "value-type": "hash", "lookup.cache.max-rows": "10", "lookup.cache.ttl": "10",
            "lookup.max-retries": "3"}).provider(schema="name STRING, level STRING, age STRING")
    assert provider.kind == "PARTIAL"
    assert same_lookups(provider, equivalent, [("3",), ("4",), ("5",)]) == {
        ("3",): (("3", "3", "100"),), ("4",): (("4", "1", "7"),), ("5",): ()}
