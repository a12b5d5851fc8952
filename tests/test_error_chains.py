"""Every error the library raises has a finite cause chain (issue 40, defect 10): an
error that was its own ``__cause__`` sent a loop walking the chain, as the docs invite,
round forever. Provoked here through the public API on real servers: a refused login
(Flink options, MySQL and PostgreSQL), a missing table (every SQL backend, every mode),
a bad value under FAILFAST, a Delta table that has gone."""

from __future__ import annotations

import functools
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cache import DefaultLookupCache
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    LookupOptions,
    PartialCachingLookupProvider,
    SqlLookupFunction,
    open_lookup,
)
from scan import SqlTableSource
from spark_lookup.errors import SparkLookupError, raise_from
from triggers import PeriodicCacheReloadTrigger

MODES = ["none", "partial", "full"]


def assert_finite(error: BaseException) -> None:
    """Walk ``__cause__`` as a user would (no cycle detection): it ends, and no error
    is its own cause or context."""
    current: BaseException | None = error
    for _ in range(20):
        if current is None:
            return
        assert current.__cause__ is not current, f"{current!r} is its own cause"
        assert current.__context__ is not current, f"{current!r} is its own context"
        current = current.__cause__
    pytest.fail(f"the cause chain of {error!r} has more than 20 links")


def provoke(provider: Any) -> SparkLookupError:
    with pytest.raises(SparkLookupError) as raised, open_lookup(provider) as handle:
        handle.lookup((1,))
    return raised.value


def provider_of(mode: str, function: Any, source: Any) -> Any:
    if mode == "full":
        return FullCachingLookupProvider.of(
            source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
            share_across_workers=False, initial_load_timeout=timedelta(seconds=20),
            max_retries=0)
    if mode == "partial":
        return PartialCachingLookupProvider.of(
            function, DefaultLookupCache.new_builder().maximum_size(10).build(), max_retries=0)
    return LookupFunctionProvider.of(function, max_retries=0)


def test_raise_from_never_makes_an_error_its_own_cause() -> None:
    ours = SparkLookupError("ours")

    def translate_ours(translated: SparkLookupError) -> None:
        try:
            raise ours
        except SparkLookupError as exc:
            raise_from(translated, exc)

    for translated in (ours, SparkLookupError("new")):
        with pytest.raises(SparkLookupError) as raised:
            translate_ours(translated)
        assert_finite(raised.value)


@pytest.mark.mysql
@pytest.mark.parametrize("mode", MODES)
def test_a_refused_mysql_login_from_flink_options(mysql_url: str, mode: str) -> None:
    """The issue's case: a jdbc provider whose login fails (error 1045)."""
    from urllib.parse import urlsplit

    parts = urlsplit(mysql_url)
    url = (f"jdbc:mysql://{parts.hostname}:{parts.port or 3306}/test"
           "?user=root&password=surely-not-the-password")
    given = {"connector": "jdbc", "url": url, "table-name": "dim", "lookup.max-retries": "0",
             "lookup.cache": mode.upper()}
    if mode == "partial":
        given["lookup.partial-cache.max-rows"] = "10"
    if mode == "full":
        given["lookup.full-cache.periodic-reload.interval"] = "1 h"
    provider = LookupOptions.from_dict(given).provider(key_columns=["id"],
                                                       schema="id BIGINT, name STRING")
    error = provoke(provider)
    assert_finite(error)
    assert "surely-not-the-password" not in str(error)


@pytest.mark.postgres
@pytest.mark.parametrize("mode", MODES)
def test_a_missing_postgres_table(postgres_dsn: str, mode: str) -> None:
    import psycopg

    connect = functools.partial(psycopg.connect, postgres_dsn)
    schema = "id BIGINT, name STRING"
    function = SqlLookupFunction(connect, "sltest_no_such_table", "id", schema=schema)
    source = SqlTableSource(connect, "sltest_no_such_table", schema=schema)
    assert_finite(provoke(provider_of(mode, function, source)))


@pytest.mark.parametrize("mode", MODES)
def test_a_missing_sqlite_table_and_a_failfast_value(tmp_path: Path, mode: str) -> None:
    database = tmp_path / "dim.db"
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE bad (id INTEGER PRIMARY KEY, n BIGINT)")
        db.execute("INSERT INTO bad VALUES (1, 'abc')")
    db.close()
    connect = functools.partial(sqlite3.connect, str(database))
    for table, kw in (("gone", {}), ("bad", {"mode": "FAILFAST"})):
        schema = "id BIGINT, n BIGINT"
        function = SqlLookupFunction(connect, table, "id", schema=schema, **kw)
        source = SqlTableSource(connect, table, schema=schema, **kw)
        assert_finite(provoke(provider_of(mode, function, source)))


def test_a_delta_table_that_has_gone(tmp_path: Path) -> None:
    import shutil

    import pyarrow as pa
    from deltalake import write_deltalake

    from scan import DeltaSource, read_arrow

    path = str(tmp_path / "dim")
    write_deltalake(path, pa.table({"id": [1]}))
    source = DeltaSource(path)
    shutil.rmtree(path)
    with pytest.raises(SparkLookupError) as raised:
        read_arrow(source)
    assert_finite(raised.value)
