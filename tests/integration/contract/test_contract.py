"""The connector contract: every backend gives the same values and Spark types in every
mode (no cache, partial cache, full cache, refreshed view), and behaves the same under
each bad-value policy. One mixin (as cachetools' ``CacheTestMixin``), one class per
backend and driver, against the real SQLite, PostgreSQL and Redis."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cache import DefaultLookupCache
from connectors.keys import KeyKindError
from connectors.rows import python_rows
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingLookupProvider,
    ScheduledTableRefresh,
    open_lookup,
)
from spark_lookup.errors import BadValueError, LookupLoadError, SnapshotUnavailableError
from spark_lookup.schema import parse_schema, to_arrow_schema
from tests.conftest import own_mysql_db, own_pg_schema, own_redis_prefix
from tests.integration.contract.backends import (
    BAD_SCHEMA,
    Backend,
    mysql_backend,
    postgres_backend,
    redis_backend,
    sqlite_backend,
)
from tests.integration.contract.cases import (
    BAD_CASES,
    CASES,
    KEY_CASES,
    KEY_TYPE_CASES,
    NULL_KEY_CASES,
    BadCase,
    KeyCase,
    KeyTypeCase,
    NullKeyCase,
    expected_rows,
    same,
)
from triggers import PeriodicCacheReloadTrigger

KEYS = [(1,), (2,), (3,), (4,)]
LOOKUP_MODES = ["none", "partial", "full"]
POLICIES = ["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]
HOUR = PeriodicCacheReloadTrigger(timedelta(hours=1))


def provider_of(backend: Backend, mode: str, policy: str = "PERMISSIVE", bad: bool = False,
                table: str | None = None) -> Any:
    table = table or ("bad" if bad else "dim")
    if mode == "full":
        return FullCachingLookupProvider.of(
            backend.source(policy, table), HOUR, [backend.table(table)[1]],
            share_across_workers=False, parallelism=2,
            initial_load_timeout=timedelta(seconds=30), max_retries=0,
        )
    function = backend.function(policy, table)
    if mode == "partial":
        cache = DefaultLookupCache.new_builder().maximum_size(100).build()
        return PartialCachingLookupProvider.of(function, cache, max_retries=0)
    return LookupFunctionProvider.of(function, max_retries=0)


def by_key(rows: list[tuple[Any, ...]]) -> dict[int, list[tuple[Any, ...]]]:
    grouped: dict[int, list[tuple[Any, ...]]] = {key: [] for (key,) in KEYS}
    for row in rows:
        grouped[row[0]].append(row)
    return grouped


def assert_same_rows(got: dict[int, list[tuple[Any, ...]]], expected: dict[int, Any],
                     names: list[str], where: str) -> None:
    for key, rows in expected.items():
        assert len(got[key]) == len(rows), f"{where}: key {key}: {got[key]!r}"
        for row, want in zip(got[key], rows, strict=True):
            for name, value, expected_value in zip(names, row, want, strict=True):
                assert same(value, expected_value), (
                    f"{where}: key {key}, column {name!r}: {value!r} != {expected_value!r}"
                )


def view_rows(spark: Any, source: Any, schema: str) -> list[tuple[Any, ...]]:
    name = f"contract_{uuid.uuid4().hex[:8]}"
    with ScheduledTableRefresh(spark, source, HOUR, name, materialization="LOCAL",
                               initial_load_timeout=60) as refresh:
        frame = refresh.table()
        assert frame.schema.simpleString() == parse_schema(schema).simpleString()
        table = frame.toArrow()
    # Spark hands TIMESTAMP over in its session zone: the same instants, labelled UTC.
    return python_rows(table.cast(to_arrow_schema(schema)))


NULL_KEY_PARAMS = [pytest.param(case, id=case.name) for case in NULL_KEY_CASES]


def null_key_provider(backend: Backend, case: NullKeyCase, mode: str,
                      key: list[str], snapshots: Path) -> Any:
    """A provider of ``case``'s table keyed by ``key``, in ``mode`` (``full-shared``:
    the host's snapshot store, published and mapped back)."""
    if mode.startswith("full"):
        shared = mode == "full-shared"
        return FullCachingLookupProvider.of(
            backend.make_source(case.table, case.schema, "PERMISSIVE", key[0]), HOUR, key,
            share_across_workers=shared, snapshot_dir=snapshots if shared else None,
            parallelism=2, initial_load_timeout=timedelta(seconds=30), max_retries=0,
        )
    function = backend.make_function(case.table, case.schema, "PERMISSIVE", key)  # type: ignore[arg-type]
    if mode == "partial":
        cache = DefaultLookupCache.new_builder().maximum_size(100).build()
        return PartialCachingLookupProvider.of(function, cache, max_retries=0)
    return LookupFunctionProvider.of(function, max_retries=0)


BAD_CASE_PARAMS = [pytest.param(case, id=case.name) for case in BAD_CASES]
KEY_TYPE_PARAMS = [pytest.param(case, id=case.name) for case in KEY_TYPE_CASES]


def odd_table(backend: Backend, case: BadCase) -> str:
    """The table holding a bad case's value (skips the backends that store none)."""
    if case not in backend.bad_cases:
        pytest.skip(f"{backend.name} stores no {case.name} value")
    return f"odd_{case.name}"


class ContractMixin:
    """The contract, run by each backend's class (which provides ``backend``)."""

    @pytest.mark.parametrize("mode", LOOKUP_MODES)
    def test_values_and_types(self, backend: Backend, mode: str) -> None:
        names = ["id", *(c.name for c in backend.cases)]
        provider = provider_of(backend, mode)
        assert provider.schema.simpleString() == parse_schema(backend.schema).simpleString()
        with open_lookup(provider) as handle:
            for attempt in ("first", "again"):  # a partial cache: loaded, then cached
                found = handle.lookup_batch(KEYS)
                got = {key: list(found[(key,)]) for (key,) in KEYS}
                assert_same_rows(got, expected_rows(backend.cases), names,
                                 f"{backend.name}, {mode} ({attempt})")
            assert handle.metrics.num_bad_values == 0

    @pytest.mark.every_line
    @pytest.mark.spark
    @pytest.mark.needs("PYTHON_DATA_SOURCE", "SESSION_TAGS")  # refreshed views
    def test_values_and_types_of_a_refreshed_view(self, backend: Backend, spark: Any) -> None:
        names = ["id", *(c.name for c in backend.cases)]
        rows = view_rows(spark, backend.source(), backend.schema)
        assert_same_rows(by_key(rows), expected_rows(backend.cases), names,
                         f"{backend.name}, refreshed view")

    @pytest.mark.parametrize("policy", POLICIES)
    @pytest.mark.parametrize("mode", LOOKUP_MODES)
    def test_bad_values_follow_the_policy(self, backend: Backend, mode: str, policy: str
                                          ) -> None:
        provider = provider_of(backend, mode, policy, bad=True)
        with open_lookup(provider) as handle:
            if policy == "FAILFAST":
                expected_error = SnapshotUnavailableError if mode == "full" else LookupLoadError
                with pytest.raises(expected_error) as raised:
                    handle.lookup_batch([(1,), (2,)])
                error = raised.value
                while not isinstance(error, BadValueError) and error.__cause__ is not None:
                    error = error.__cause__  # type: ignore[assignment]
                assert isinstance(error, BadValueError), raised.value
                message = str(error)
                assert re.search(r"key .*2.*column 'n'.*'?abc'?.* as bigint", message), message
                return
            found = handle.lookup_batch([(1,), (2,)])
            assert found[(1,)] == ((1, 5, "x1"),)
            if policy == "PERMISSIVE":
                assert found[(2,)] == ((2, None, "x2"),)
            else:
                assert found[(2,)] == ()
            assert handle.metrics.num_bad_values == 1

    @pytest.mark.spark
    @pytest.mark.needs("PYTHON_DATA_SOURCE", "SESSION_TAGS")  # refreshed views
    @pytest.mark.parametrize("policy", POLICIES)
    def test_bad_values_in_a_refreshed_view(self, backend: Backend, spark: Any, policy: str
                                            ) -> None:
        source = backend.bad_source(policy)
        if policy == "FAILFAST":
            with pytest.raises(Exception, match=r"column 'n'.*as bigint"):
                view_rows(spark, source, BAD_SCHEMA)
            return
        rows = sorted(view_rows(spark, source, BAD_SCHEMA))
        if policy == "PERMISSIVE":
            assert rows == [(1, 5, "x1"), (2, None, "x2")]
        else:
            assert rows == [(1, 5, "x1")]


    @pytest.mark.parametrize("case", BAD_CASE_PARAMS)
    @pytest.mark.parametrize("mode", LOOKUP_MODES)
    def test_values_no_type_reads_are_bad_values(self, backend: Backend, mode: str,
                                                 case: BadCase) -> None:
        table = odd_table(backend, case)
        with open_lookup(provider_of(backend, mode, table=table)) as handle:
            found = handle.lookup_batch([(1,)])
            assert found[(1,)] == ((1, None),), (
                f"{backend.name}, {mode}: {case.name} read as {case.spark}: {found[(1,)]!r}")
            assert handle.metrics.num_bad_values == 1

    @pytest.mark.spark
    @pytest.mark.needs("PYTHON_DATA_SOURCE", "SESSION_TAGS")  # refreshed views
    def test_values_no_type_reads_are_bad_values_in_a_refreshed_view(
            self, backend: Backend, spark: Any) -> None:
        """Every bad case of the backend in one view (a column each: a view's load is a
        Spark job, so one for all of them), each value read as null."""
        if not backend.bad_cases:
            pytest.skip(f"{backend.name} stores no bad value")
        rows = view_rows(spark, backend.source(table="odd_all"), backend.table("odd_all")[0])
        assert [row[0] for row in rows] == [1], rows
        read = dict(zip((case.name for case in backend.bad_cases), rows[0][1:], strict=True))
        assert read == dict.fromkeys(read), (
            f"{backend.name}: read as values, not bad values: "
            + ", ".join(f"{name} ({case.spark}) as {read[name]!r}"
                        for case in backend.bad_cases if read[(name := case.name)] is not None))

    @pytest.mark.parametrize("case", KEY_CASES, ids=[case.name for case in KEY_CASES])
    @pytest.mark.parametrize("mode", LOOKUP_MODES)
    def test_a_key_no_stored_key_equals_finds_nothing(self, backend: Backend, mode: str,
                                                      case: KeyCase) -> None:
        """The key it resembles is asked first, so a cache holds that row; asked again,
        alone and beside it. (A refreshed view has no keyed lookup: Spark's own join
        compares its keys.)"""
        found, probe = (case.found,), (case.probe,)
        with open_lookup(provider_of(backend, mode, table=case.table)) as handle:
            assert len(handle.lookup_batch([found])[found]) == 1
            for attempt in ("alone", "again", "beside", "per key"):
                try:
                    if attempt == "per key":
                        rows = tuple(handle.lookup(probe))
                    else:
                        batch = [found, probe] if attempt == "beside" else [probe]
                        rows = tuple(handle.lookup_batch(batch)[probe])
                except KeyKindError:
                    # A kind its column never holds (a datetime for a DATE) may be refused,
                    # as a str for a BIGINT is: never answered with a row.
                    assert case.refusable, f"{backend.name}, {mode}: {case.name} refused"
                    continue
                assert rows == (), f"{backend.name}, {mode}: {probe!r} {attempt} found {rows!r}"


    @pytest.mark.parametrize("case", KEY_TYPE_PARAMS)
    @pytest.mark.parametrize("mode", LOOKUP_MODES)
    def test_keys_of_each_type_find_the_same_rows_in_every_mode(
            self, backend: Backend, mode: str, case: KeyTypeCase) -> None:
        """Every key asked at once, again (a partial cache answers), without the NaN
        (the keys' plain path, Arrow's), then each alone: the rows each finds are the
        case's, whichever mode answers."""
        if case not in backend.key_cases:
            pytest.skip(f"{backend.name} stores no {case.name} key")
        keys = [(key,) for key, _ in case.asked]
        plain = [key for key in keys if key[0] == key[0]]
        with open_lookup(provider_of(backend, mode, table=case.table)) as handle:
            for attempt in ("together", "again", "plain", "alone"):
                asked = plain if attempt == "plain" else keys
                for key, (_, ids) in zip(keys, case.asked, strict=True):
                    if key not in asked:
                        continue
                    rows = (handle.lookup(key) if attempt == "alone"
                            else handle.lookup_batch(asked)[key])
                    got = sorted(rows, key=lambda row: row[1])
                    want = case.expected(ids)
                    where = f"{backend.name}, {mode}, {case.name} key {key!r} ({attempt})"
                    assert len(got) == len(want), f"{where}: found {got!r}, not {want!r}"
                    for row, expected in zip(got, want, strict=True):
                        assert all(same(a, b) for a, b in zip(row, expected, strict=True)), (
                            f"{where}: found {got!r}, not {want!r}")
            assert handle.metrics.num_bad_values == 0

    @pytest.mark.parametrize("case", NULL_KEY_PARAMS)
    @pytest.mark.parametrize("mode", [*LOOKUP_MODES, "full-shared"])
    def test_repeated_keys_beside_null_keys_find_their_own_rows(
            self, backend: Backend, mode: str, case: NullKeyCase, tmp_path: Path) -> None:
        """Keys with several rows, beside rows whose key is NULL (alone or in a composite
        key): each key finds its own rows, in every mode, and no key finds a NULL-key row
        (a sort put them beside the largest key of a floating column)."""
        if case not in backend.null_key_cases:
            pytest.skip(f"{backend.name} stores no {case.name} null-key table")
        rows = case.layout(*case.values)
        a, b, c = case.values
        for key, asked in ((["k"], [(a,), (b,), (c,)]),
                           (["k", "s"], [(a, "x"), (b, "x"), (c, "y"), (c, "x")])):
            where = f"{backend.name}, {mode}, {case.name} keyed by {key}"
            with open_lookup(null_key_provider(backend, case, mode, key, tmp_path)) as handle:
                for attempt in ("together", "again", "alone"):
                    for probe in asked:
                        found = (handle.lookup(probe) if attempt == "alone"
                                 else handle.lookup_batch(asked)[probe])
                        want = [row for row in rows
                                if all(row[0 if name == "k" else 1] == part
                                       and row[0 if name == "k" else 1] is not None
                                       for name, part in zip(key, probe, strict=True))]
                        got = sorted(found, key=lambda row: row[2])
                        assert len(got) == len(want), f"{where}: {probe!r} found {got!r}"
                        for row, expected in zip(got, want, strict=True):
                            assert all(same(x, y) for x, y in zip(row, expected, strict=True)), (
                                f"{where} ({attempt}): {probe!r} found {got!r}, not {want!r}")


# Each backend's tables are written once per class (the tests only read them): written
# per test, they took a third of the contract's time.


class TestSqlite3(ContractMixin):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tmp_path_factory: pytest.TempPathFactory) -> Backend:
        return sqlite_backend(tmp_path_factory.mktemp("contract") / "contract.db", "sqlite3")


class TestSqliteAdbc(ContractMixin):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tmp_path_factory: pytest.TempPathFactory) -> Backend:
        return sqlite_backend(tmp_path_factory.mktemp("contract") / "contract.db", "adbc")


@pytest.mark.postgres
class TestPostgresPsycopg(ContractMixin):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, postgres_dsn: str) -> Iterator[Backend]:
        yield from _postgres_backend(postgres_dsn, "psycopg")


@pytest.mark.postgres
class TestPostgresAdbc(ContractMixin):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, postgres_dsn: str) -> Iterator[Backend]:
        yield from _postgres_backend(postgres_dsn, "adbc")


@pytest.mark.mysql
class TestMysqlPymysql(ContractMixin):
    """pymysql; full loads through connectorx (installed with the dev extra)."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, mysql_url: str) -> Iterator[Backend]:
        yield from _mysql_backend(mysql_url, "pymysql")


class _DriverReadsFullLoads:
    """Full loads read by the DB-API driver itself, as without connectorx.

    The switch holds in this process only: a refreshed view loads in Spark's Python
    workers, which read through connectorx as TestMysqlPymysql's views do, so these
    classes have no refreshed-view tests (they would repeat those).
    """

    @pytest.fixture(autouse=True)
    def _without_connectorx(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from connectors.sql.dialects.mysql import MysqlDialect

        monkeypatch.setattr(MysqlDialect, "arrow_batches", lambda *args: None)

    test_values_and_types_of_a_refreshed_view = None
    test_bad_values_in_a_refreshed_view = None
    test_values_no_type_reads_are_bad_values_in_a_refreshed_view = None


@pytest.mark.mysql
class TestMysqlPymysqlDriverOnly(_DriverReadsFullLoads, ContractMixin):
    """pymysql reading full loads itself (SSCursor), as without connectorx."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, mysql_url: str) -> Iterator[Backend]:
        yield from _mysql_backend(mysql_url, "pymysql")


@pytest.mark.mysql
class TestMysqlConnector(_DriverReadsFullLoads, ContractMixin):
    """mysql-connector-python, reading full loads itself (an unbuffered cursor)."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, mysql_url: str) -> Iterator[Backend]:
        yield from _mysql_backend(mysql_url, "mysql-connector")


@pytest.mark.redis
class TestRedisHash(ContractMixin):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, redis_url: str) -> Iterator[Backend]:
        yield from _redis_backend(redis_url, "hash")


@pytest.mark.redis
class TestRedisJson(ContractMixin):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, redis_url: str) -> Iterator[Backend]:
        yield from _redis_backend(redis_url, "json")


def _postgres_backend(postgres_dsn: str, driver: str) -> Iterator[Backend]:
    with own_pg_schema(postgres_dsn) as schema:
        yield postgres_backend(postgres_dsn, schema, driver)


def _mysql_backend(mysql_url: str, driver: str) -> Iterator[Backend]:
    with own_mysql_db(mysql_url) as database:
        yield mysql_backend(mysql_url, database, driver)


def _redis_backend(redis_url: str, value_type: str) -> Iterator[Backend]:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        with own_redis_prefix(redis_url) as prefix:
            yield redis_backend(redis_url, prefix, client, value_type)
    finally:
        client.close()


def test_every_case_is_a_row_of_the_readme_type_table() -> None:
    # The Types section moved from the README to the docs site: docs/types.md.
    table = (Path(__file__).resolve().parents[3] / "docs" / "types.md").read_text()
    for case in CASES:
        if case.postgres is not None:
            assert f"`{case.postgres[0].split('(')[0].split('[')[0]}" in table, case.postgres
        if case.sqlite is not None:
            assert case.sqlite[0].split("(")[0].split(" ")[0] in table.upper(), case.sqlite
        if case.mysql is not None:
            assert f"`{case.mysql[0].split('(')[0]}" in table, case.mysql
        assert case.spark.split("(")[0].split("<")[0] in table, case.spark
    for bad in BAD_CASES:
        assert bad.readme in table, (bad.name, bad.readme)
        assert bad.spark in table, (bad.name, bad.spark)


def test_the_same_table_is_the_same_in_every_backend() -> None:
    """Every value a backend stores for a case reads as the one value of the case: the
    expected rows above are shared, so backends agree wherever they hold a case."""
    assert len({c.name for c in CASES}) == len(CASES)
    assert all(len(c.values) == 2 for c in CASES)
    assert pa.schema([]) is not None
