"""The contract table, stored in each backend, with the lookup function and the scan
source that read it (both through :mod:`connectors`)."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lookup import LookupFunction, RedisLookupFunction, SqlLookupFunction
from scan import RedisScanSource, Source, SqlTableSource
from tests.integration.contract.cases import (
    DAYS_SCHEMA,
    BadCase,
    Case,
    KeyTypeCase,
    NullKeyCase,
    bad_cases_for,
    cases_for,
    json_dumps,
    key_type_cases_for,
    null_key_cases_for,
    schema_of,
)

BAD_SCHEMA = "id BIGINT, n BIGINT, s STRING"
"""The bad-value table: row 1 good (n = 5), row 2's n is text where a number belongs."""


@dataclass
class Backend:
    """One backend holding the contract table ``dim``, the bad-value table ``bad``, per
    bad case a table ``odd_<case>`` (row 1 holds its value; a table of its own, so a
    value that fails a whole load fails only its own case), the table ``odd_all`` (row
    1 holds every bad case's value, a column each: one refreshed view reads them all),
    the table ``days`` keyed by a DATE, per key type case its table ``key_<case>``
    keyed by ``k``, and per null-key case its table ``nk_<case>``."""

    name: str
    cases: list[Case]
    make_function: Callable[[str, str, str, str], LookupFunction]
    """(table, schema, mode, key column) -> a lookup function keyed by the key column."""
    make_source: Callable[[str, str, str, str], Source[Any, Any]]
    """(table, schema, mode, key column) -> a scan source of the table."""
    bad_cases: list[BadCase] = field(default_factory=list)
    key_cases: list[KeyTypeCase] = field(default_factory=list)
    null_key_cases: list[NullKeyCase] = field(default_factory=list)

    @property
    def schema(self) -> str:
        return schema_of(self.cases)

    def table(self, name: str) -> tuple[str, str]:
        """The schema and key column of a table of the backend."""
        odd = {f"odd_{case.name}": (schema_of([case]), "id") for case in self.bad_cases}
        return {
            "dim": (self.schema, "id"),
            "bad": (BAD_SCHEMA, "id"),
            "days": (DAYS_SCHEMA, "d"),
            **odd,
            "odd_all": (schema_of(self.bad_cases), "id"),
            **{case.table: (case.schema, "k") for case in self.key_cases},
            **{case.table: (case.schema, "k") for case in self.null_key_cases},
        }[name]

    def function(self, mode: str = "PERMISSIVE", table: str = "dim") -> LookupFunction:
        schema, key = self.table(table)
        return self.make_function(table, schema, mode, key)

    def source(self, mode: str = "PERMISSIVE", table: str = "dim") -> Source[Any, Any]:
        schema, key = self.table(table)
        return self.make_source(table, schema, mode, key)

    def bad_function(self, mode: str) -> LookupFunction:
        return self.function(mode, "bad")

    def bad_source(self, mode: str) -> Source[Any, Any]:
        return self.source(mode, "bad")


# --- SQLite ---------------------------------------------------------------------------


def sqlite_backend(path: Path, driver: str) -> Backend:
    cases, odd = cases_for("sqlite"), bad_cases_for("sqlite")
    null_keys = null_key_cases_for("sqlite")
    with sqlite3.connect(path) as db:
        columns = ", ".join(f'"{c.name}" {c.sqlite[0]}' for c in cases)  # type: ignore[index]
        db.execute(f"CREATE TABLE dim (id INTEGER PRIMARY KEY, {columns})")
        marks = ", ".join("?" for _ in range(len(cases) + 1))
        for row in (1, 2):
            db.execute(f"INSERT INTO dim VALUES ({marks})",
                       [row, *(c.sqlite[row] for c in cases)])  # type: ignore[index]
        db.execute("INSERT INTO dim (id) VALUES (3)")
        db.execute("CREATE TABLE bad (id INTEGER PRIMARY KEY, n BIGINT, s TEXT)")
        db.execute("INSERT INTO bad VALUES (1, 5, 'x1'), (2, 'abc', 'x2')")
        for case in odd:
            column_type, value = case.sqlite  # type: ignore[misc]
            db.execute(f'CREATE TABLE odd_{case.name} (id INTEGER PRIMARY KEY, '
                       f'"{case.name}" {column_type})')
            db.execute(f"INSERT INTO odd_{case.name} VALUES (1, ?)", [value])
        db.execute("CREATE TABLE odd_all (id INTEGER PRIMARY KEY"
                   + "".join(f', "{c.name}" {c.sqlite[0]}' for c in odd) + ")")  # type: ignore[index]
        db.execute(f"INSERT INTO odd_all VALUES (1{', ?' * len(odd)})",
                   [c.sqlite[1] for c in odd])  # type: ignore[index]
        db.execute("CREATE TABLE days (d DATE PRIMARY KEY, n INTEGER)")
        db.execute("INSERT INTO days VALUES ('2024-01-01', 1)")
        for case in null_keys:
            column_type, stored = case.sqlite  # type: ignore[misc]
            db.execute(f"CREATE TABLE {case.table} (k {column_type}, s TEXT, "
                       "id INTEGER PRIMARY KEY)")
            db.executemany(f"INSERT INTO {case.table} VALUES (?, ?, ?)", case.layout(*stored))
    if driver == "adbc":
        import adbc_driver_sqlite.dbapi

        text = str(path)

        def factory() -> Any:
            return adbc_driver_sqlite.dbapi.connect(text)
    else:
        factory = functools.partial(sqlite3.connect, str(path))
    return _sql_backend(f"sqlite/{driver}", cases, odd, factory, "", null_keys=null_keys)


# --- PostgreSQL -------------------------------------------------------------------------


def postgres_backend(dsn: str, schema: str, driver: str) -> Backend:
    import psycopg

    cases, odd = cases_for("postgres"), bad_cases_for("postgres")
    null_keys = null_key_cases_for("postgres")
    with psycopg.connect(dsn, autocommit=True) as conn:
        columns = ", ".join(f'"{c.name}" {c.postgres[0]}' for c in cases)  # type: ignore[index]
        conn.execute(f'CREATE TABLE "{schema}".dim (id bigint PRIMARY KEY, {columns})')
        for row in (1, 2):
            values = ", ".join(c.postgres[row] for c in cases)  # type: ignore[index]
            conn.execute(f'INSERT INTO "{schema}".dim VALUES ({row}, {values})')
        conn.execute(f'INSERT INTO "{schema}".dim (id) VALUES (3)')
        conn.execute(f'CREATE TABLE "{schema}".bad (id bigint PRIMARY KEY, n text, s text)')
        conn.execute(f"INSERT INTO \"{schema}\".bad VALUES (1, '5', 'x1'), (2, 'abc', 'x2')")
        for case in odd:
            column_type, literal = case.postgres  # type: ignore[misc]
            conn.execute(f'CREATE TABLE "{schema}".odd_{case.name} (id bigint PRIMARY KEY, '
                         f'"{case.name}" {column_type})')
            conn.execute(f'INSERT INTO "{schema}".odd_{case.name} VALUES (1, {literal})')
        conn.execute(f'CREATE TABLE "{schema}".odd_all (id bigint PRIMARY KEY'
                     + "".join(f', "{c.name}" {c.postgres[0]}' for c in odd) + ")")  # type: ignore[index]
        conn.execute(f'INSERT INTO "{schema}".odd_all VALUES (1'
                     + "".join(f", {c.postgres[1]}" for c in odd) + ")")  # type: ignore[index]
        conn.execute(f'CREATE TABLE "{schema}".days (d date PRIMARY KEY, n bigint)')
        conn.execute(f"INSERT INTO \"{schema}\".days VALUES ('2024-01-01', 1)")
        for case in null_keys:
            column_type, literals = case.postgres  # type: ignore[misc]
            conn.execute(f'CREATE TABLE "{schema}".{case.table} (k {column_type}, s text, '
                         "id bigint PRIMARY KEY)")
            conn.execute(f'INSERT INTO "{schema}".{case.table} VALUES ' + _values(
                case.layout(*literals)))
    if driver == "adbc":
        import adbc_driver_postgresql.dbapi

        def factory() -> Any:
            return adbc_driver_postgresql.dbapi.connect(dsn)
    else:
        factory = functools.partial(psycopg.connect, dsn)
    return _sql_backend(f"postgres/{driver}", cases, odd, factory, f"{schema}.",
                        null_keys=null_keys)


def _values(rows: list[tuple[Any, Any, int]]) -> str:
    """SQL ``VALUES`` rows of (key literal or None, text or None, id)."""
    return ", ".join(
        f"({'NULL' if k is None else k}, {'NULL' if s is None else repr(s)}, {i})"
        for k, s, i in rows)


def _sql_backend(name: str, cases: list[Case], odd: list[BadCase], factory: Any,
                 qualifier: str, key_cases: list[KeyTypeCase] | None = None,
                 null_keys: list[NullKeyCase] | None = None) -> Backend:
    def make_function(table: str, schema: str, mode: str, key: str) -> LookupFunction:
        return SqlLookupFunction(factory, qualifier + table, key, schema=schema, mode=mode)

    def make_source(table: str, schema: str, mode: str, key: str) -> Source[Any, Any]:
        return SqlTableSource(factory, qualifier + table, schema=schema, chunk_size=2,
                              mode=mode)

    return Backend(name, cases, make_function, make_source, odd, key_cases or [],
                   null_keys or [])


# --- Redis ------------------------------------------------------------------------------


def redis_backend(url: str, prefix: str, client: Any, value_type: str) -> Backend:
    cases = cases_for("redis-hash" if value_type == "hash" else "redis-json")
    odd = bad_cases_for("redis-hash" if value_type == "hash" else "redis-json")
    for row in (1, 2):
        if value_type == "hash":
            client.hset(f"{prefix}dim:{row}", mapping={
                "id": str(row), **{c.name: c.redis_text[row - 1] for c in cases},  # type: ignore[index]
            })
        else:
            document = {"id": row, **{c.name: c.redis_json[row - 1] for c in cases}}  # type: ignore[index]
            client.set(f"{prefix}dim:{row}", json_dumps(document))
    # Row 3 holds only its key (hash) or nothing but null members (JSON).
    if value_type == "hash":
        client.hset(f"{prefix}dim:3", mapping={"id": "3"})
        client.hset(f"{prefix}bad:1", mapping={"n": "5", "s": "x1"})
        client.hset(f"{prefix}bad:2", mapping={"n": "abc", "s": "x2"})
    else:
        client.set(f"{prefix}dim:3", json_dumps({c.name: None for c in cases}))
        client.set(f"{prefix}bad:1", '{"n": 5, "s": "x1"}')
        client.set(f"{prefix}bad:2", '{"n": "abc", "s": "x2"}')
    for case in odd:
        if value_type == "hash":
            client.hset(f"{prefix}odd_{case.name}:1",
                        mapping={"id": "1", case.name: case.redis_text})  # type: ignore[dict-item]
        else:
            client.set(f"{prefix}odd_{case.name}:1",
                       f'{{"id": 1, "{case.name}": {case.redis_json}}}')
    if value_type == "hash":
        client.hset(f"{prefix}odd_all:1", mapping={
            "id": "1", **{c.name: c.redis_text for c in odd}})  # type: ignore[dict-item]
    else:
        members = "".join(f', "{c.name}": {c.redis_json}' for c in odd)
        client.set(f"{prefix}odd_all:1", f'{{"id": 1{members}}}')
    if value_type == "hash":
        client.hset(f"{prefix}days:2024-01-01", mapping={"d": "2024-01-01", "n": "1"})
    else:
        client.set(f"{prefix}days:2024-01-01", '{"d": "2024-01-01", "n": 1}')

    def make_function(table: str, schema: str, mode: str, key: str) -> LookupFunction:
        return RedisLookupFunction(url, f"{prefix}{table}:{{{key}}}", schema, [key],
                                   value_type=value_type, mode=mode)

    def make_source(table: str, schema: str, mode: str, key: str) -> Source[Any, Any]:
        return RedisScanSource(url, value_type=value_type, schema=schema,
                               key_template=f"{prefix}{table}:{{{key}}}", key_columns=[key],
                               keys_per_split=2, mode=mode)

    return Backend(f"redis/{value_type}", cases, make_function, make_source, odd)


# --- MySQL / MariaDB ------------------------------------------------------------------------


def mysql_backend(url: str, database: str, driver: str) -> Backend:
    import pymysql

    from tests.conftest import mysql_params

    cases, odd = cases_for("mysql"), bad_cases_for("mysql")
    key_cases = key_type_cases_for("mysql")
    null_keys = null_key_cases_for("mysql")
    params = mysql_params(url, database)
    with pymysql.connect(**params, autocommit=True) as conn, conn.cursor() as cursor:
        # Zero dates are kept (MySQL 8's default sql_mode refuses them); values of
        # TIMESTAMP columns are written at +02:00 (they read back as the same instants).
        cursor.execute("SET SESSION sql_mode = ''")
        cursor.execute("SET time_zone = '+02:00'")
        columns = ", ".join(f"`{c.name}` {c.mysql[0]}" for c in cases)  # type: ignore[index]
        cursor.execute(f"CREATE TABLE dim (id BIGINT PRIMARY KEY, {columns})")
        for row in (1, 2):
            values = ", ".join(c.mysql[row] for c in cases)  # type: ignore[index]
            cursor.execute(f"INSERT INTO dim VALUES ({row}, {values})")
        cursor.execute("INSERT INTO dim (id) VALUES (3)")
        cursor.execute("CREATE TABLE bad (id BIGINT PRIMARY KEY, n TEXT, s TEXT)")
        cursor.execute("INSERT INTO bad VALUES (1, '5', 'x1'), (2, 'abc', 'x2')")
        for case in odd:
            column_type, literal = case.mysql  # type: ignore[misc]
            cursor.execute(f"CREATE TABLE odd_{case.name} (id BIGINT PRIMARY KEY, "
                           f"`{case.name}` {column_type})")
            cursor.execute(f"INSERT INTO odd_{case.name} VALUES (1, {literal})")
        cursor.execute("CREATE TABLE odd_all (id BIGINT PRIMARY KEY"
                       + "".join(f", `{c.name}` {c.mysql[0]}" for c in odd) + ")")  # type: ignore[index]
        cursor.execute("INSERT INTO odd_all VALUES (1"
                       + "".join(f", {c.mysql[1]}" for c in odd) + ")")  # type: ignore[index]
        cursor.execute("CREATE TABLE days (d DATE PRIMARY KEY, n BIGINT)")
        cursor.execute("INSERT INTO days VALUES ('2024-01-01', 1)")
        for key_case in key_cases:
            column_type, literals = key_case.mysql  # type: ignore[misc]
            # An index on the key, as a lookup table has: the database answers from it.
            cursor.execute(f"CREATE TABLE {key_case.table} (k {column_type}, "
                           "id BIGINT PRIMARY KEY, KEY (k))")
            cursor.execute(f"INSERT INTO {key_case.table} VALUES " + ", ".join(
                f"({literal}, {i})" for i, literal in enumerate(literals, 1)))
        for null_key in null_keys:
            column_type, literals = null_key.mysql  # type: ignore[misc]
            cursor.execute(f"CREATE TABLE {null_key.table} (k {column_type}, s VARCHAR(4), "
                           "id BIGINT PRIMARY KEY, KEY (k))")
            cursor.execute(f"INSERT INTO {null_key.table} VALUES "
                           + _values(null_key.layout(*literals)))
    if driver == "mysql-connector":
        import mysql.connector

        factory: Any = functools.partial(mysql.connector.connect, **params)
    else:
        factory = functools.partial(pymysql.connect, **params)
    return _sql_backend(f"mysql/{driver}", cases, odd, factory, "", key_cases, null_keys)
