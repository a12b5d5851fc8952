"""SqlTableSource at its default settings: one chunk per reader (planned from the
enumerator's parallelism), chunk statements without bound parameters (ADBC PostgreSQL's
COPY path), chunks streamed in batches by every driver, and checkpoints inside those
large chunks resuming with every row once; on SQLite (sqlite3, ADBC) and PostgreSQL
(psycopg, ADBC)."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.sql import chunks as _sql_chunks
from connectors.sql.chunks import MIN_CHUNK_ROWS, chunk_conditions
from scan import LocalSourceRunner, ReaderOptions, SqlTableSource, plan_splits, read_arrow
from scan.connector.split_reader import SplitsAddition
from scan.sources import SqlChunkSplit
from spark_lookup.errors import ConfigError
from tests.scan.helpers import bag, run_all

Row = tuple[Any, ...]


def _sqlite_table(path: Path, rows: int, *, step: int = 1, ddl: str | None = None,
                  select: str | None = None) -> str:
    """A table ``t`` of ``rows`` rows made by SQLite itself (fast for 100k rows)."""
    with sqlite3.connect(path) as db:
        db.execute(ddl or "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        db.execute(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?) "
            f"INSERT INTO t {select or 'SELECT n * ?, ' + repr('v') + ' || n FROM g'}",
            (rows, step) if select is None else (rows,),
        )
    return str(path)


def _chunk_rows(source: SqlTableSource, splits: list[SqlChunkSplit], keys: list[int]
                ) -> list[int]:
    return [sum(1 for k in keys if (s.lo is None or k >= s.lo) and (s.hi is None or k < s.hi))
            for s in splits]


def _batches(source: SqlTableSource, split: SqlChunkSplit) -> list[int]:
    """The row counts of the batches a reader's split reader fetches for ``split``, as
    the driver streams them (before any re-chunking by the outputs)."""
    reader = source.split_reader()()
    reader.handle_splits_changes(SplitsAddition([split]))
    sizes: list[int] = []
    try:
        while True:
            records = reader.fetch()
            while records.next_split() is not None:
                sizes.extend(b.num_rows for b in records.next_records_from_split(10**9))
            if split.split_id in records.finished_splits():
                return sizes
    finally:
        reader.close()


SMALL = 2000


@pytest.fixture
def min_rows(monkeypatch: pytest.MonkeyPatch) -> int:
    """MIN_CHUNK_ROWS made small, so that planning tests need small tables only (the
    rule is the same; test_default_keeps_small_tables_in_one_chunk uses the real one)."""
    monkeypatch.setattr(_sql_chunks, "MIN_CHUNK_ROWS", SMALL)
    return SMALL


# --- how many chunks


def test_default_plans_one_unbounded_chunk_for_one_reader_without_a_query(
    tmp_path: Path,
) -> None:
    path = _sqlite_table(tmp_path / "t.db", 50_000)
    source = SqlTableSource(functools.partial(sqlite3.connect, path), "t")
    assert source.chunk_size is None
    source.read_plan()
    statements: list[str] = []

    def traced() -> sqlite3.Connection:
        connection = sqlite3.connect(path)
        connection.set_trace_callback(statements.append)
        return connection

    planned = SqlTableSource(traced, "t", schema=source.schema)
    (split,) = plan_splits(planned)
    assert (split.lo, split.hi, split.null_chunk) == (None, None, False)
    assert not [s for s in statements if "COUNT" in s or "LIMIT 1" in s], statements


@pytest.mark.parametrize(("parallelism", "chunks"), [(1, 1), (2, 2), (4, 4), (7, 7), (64, 12)])
def test_default_plans_one_chunk_per_reader_of_even_size(
    min_rows: int, tmp_path: Path, parallelism: int, chunks: int
) -> None:
    rows = 12 * SMALL + 100  # 12 chunks at most: none under SMALL rows
    path = _sqlite_table(tmp_path / "t.db", rows, step=3)
    source = SqlTableSource(functools.partial(sqlite3.connect, path), "t")
    splits = plan_splits(source, parallelism)
    assert len(splits) == chunks
    sizes = _chunk_rows(source, splits, [3 * n for n in range(1, rows + 1)])
    assert sum(sizes) == rows
    assert max(sizes) - min(sizes) <= 1


def test_default_keeps_small_tables_in_one_chunk(tmp_path: Path) -> None:
    path = _sqlite_table(tmp_path / "t.db", MIN_CHUNK_ROWS + 10)
    source = SqlTableSource(functools.partial(sqlite3.connect, path), "t")
    assert len(plan_splits(source, 8)) == 1
    assert read_arrow(source, 8).num_rows == MIN_CHUNK_ROWS + 10


def test_default_chunks_uneven_keys_by_rows_per_reader(min_rows: int, tmp_path: Path) -> None:
    rows = 4 * SMALL
    # Keys n**2: (max - min + 1) / rows is far above 1000 at the end, so bounded LIMIT
    # queries find each chunk's end (rows / readers from its start).
    path = _sqlite_table(tmp_path / "t.db", rows, select="SELECT n * n, 'v' FROM g")
    source = SqlTableSource(functools.partial(sqlite3.connect, path), "t")
    splits = plan_splits(source, 3)
    assert len(splits) == 3
    sizes = _chunk_rows(source, splits, [n * n for n in range(1, rows + 1)])
    assert sum(sizes) == rows
    assert max(sizes) - min(sizes) <= 2


def test_explicit_chunk_size_keeps_chunks_of_that_many_rows(tmp_path: Path) -> None:
    path = _sqlite_table(tmp_path / "t.db", 1000)
    source = SqlTableSource(functools.partial(sqlite3.connect, path), "t", chunk_size=100)
    assert len(plan_splits(source, 1)) == len(plan_splits(source, 4)) == 10


def test_progress_keeps_the_chunk_size_chosen_before_a_restore(
    min_rows: int, tmp_path: Path
) -> None:
    rows = 6 * SMALL
    path = _sqlite_table(tmp_path / "t.db", rows, select="SELECT n * n, 'v' FROM g")
    source = SqlTableSource(functools.partial(sqlite3.connect, path), "t")
    with LocalSourceRunner(source, 3, options=ReaderOptions(records_per_poll=500)) as runner:
        before = runner.run(3)
        checkpoint = runner.checkpoint()
    # Restored with other readers: the chunks still planned keep the first sizes.
    with LocalSourceRunner(source, 1, restore_from=checkpoint) as runner:
        rest = runner.run()
    assert bag(before + rest) == bag((n * n, "v") for n in range(1, rows + 1))


# --- statements


def test_integer_bounds_are_literals_and_other_bounds_are_bound(tmp_path: Path) -> None:
    path = _sqlite_table(tmp_path / "t.db", 10)
    plan = SqlTableSource(functools.partial(sqlite3.connect, path), "t").read_plan()

    def mark(i: int) -> str:
        return f"${i + 1}"

    assert chunk_conditions(plan, SqlChunkSplit(1, lo=-5, hi=10**12), mark) == (
        ['"_lt"."id" >= -5', '"_lt"."id" < 1000000000000'], [])
    assert chunk_conditions(plan, SqlChunkSplit(1, lo="a'b", hi=True), mark) == (
        ['"_lt"."id" >= $1', '"_lt"."id" < $2'], ["a'b", True])
    resumed = SqlChunkSplit(1, lo=3, hi=9, resume_after=7, resumed=True)
    assert chunk_conditions(plan, resumed, mark) == (
        ['"_lt"."id" > 7', '"_lt"."id" < 9'], [])


@pytest.fixture
def adbc_statements(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Every statement ADBC cursors execute, with its parameters (the real driver runs)."""
    dbapi = pytest.importorskip("adbc_driver_manager.dbapi")
    executed: list[tuple[str, Any]] = []
    execute = dbapi.Cursor.execute

    def recording(self: Any, operation: Any, parameters: Any = None, **kwargs: Any) -> Any:
        executed.append((operation, parameters))
        return execute(self, operation, parameters, **kwargs)

    monkeypatch.setattr(dbapi.Cursor, "execute", recording)
    return executed


@pytest.fixture
def pg_dim(min_rows: int, postgres_dsn: str, pg_schema: str) -> tuple[str, str]:
    """A PostgreSQL table of 5 * SMALL rows, analyzed; (dsn, qualified name)."""
    import psycopg

    table = f"{pg_schema}.dim"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, g int NOT NULL, v text)")
        conn.execute(f"INSERT INTO {table} SELECT n, n % 97, 'v' || n "
                     f"FROM generate_series(1, {5 * SMALL}) n")
        conn.execute(f"ANALYZE {table}")
    return postgres_dsn, table


def test_adbc_postgres_chunks_run_without_bound_parameters(
    pg_dim: tuple[str, str], adbc_statements: list[tuple[str, Any]]
) -> None:
    adbc = pytest.importorskip("adbc_driver_postgresql.dbapi")
    dsn, table = pg_dim
    source = SqlTableSource(functools.partial(adbc.connect, dsn), table)
    source.read_plan()
    adbc_statements.clear()
    assert read_arrow(source, 4).num_rows == 5 * SMALL
    reads = [(sql, params) for sql, params in adbc_statements if '"_c0"' in sql]
    assert len(reads) == 4
    assert all(params is None for _, params in reads), reads
    # read_arrow takes no checkpoint: no chunk needs its rows in key order.
    assert not [sql for sql, _ in reads if "ORDER BY" in sql]


def test_reads_that_may_be_checkpointed_keep_chunks_in_key_order(
    pg_dim: tuple[str, str], adbc_statements: list[tuple[str, Any]]
) -> None:
    adbc = pytest.importorskip("adbc_driver_postgresql.dbapi")
    dsn, table = pg_dim
    source = SqlTableSource(functools.partial(adbc.connect, dsn), table)
    source.read_plan()
    adbc_statements.clear()
    with LocalSourceRunner(source, 2) as runner:
        assert len(runner.run()) == 5 * SMALL
    reads = [sql for sql, params in adbc_statements if '"_c0"' in sql and params is None]
    assert len(reads) == 2
    assert all(sql.endswith('ORDER BY "_lt"."id"') for sql in reads), reads
    unordered = ReaderOptions(checkpoints=False)
    with LocalSourceRunner(source, 2, options=unordered) as runner:
        runner.run(10)
        with pytest.raises(ConfigError, match="takes no checkpoints"):
            runner.checkpoint()
    with pytest.raises(ConfigError, match="checkpoints must be a bool"):
        ReaderOptions(checkpoints="no")  # type: ignore[arg-type]


def test_adbc_postgres_resume_inside_a_chunk_has_no_bound_parameters(
    pg_dim: tuple[str, str], adbc_statements: list[tuple[str, Any]]
) -> None:
    adbc = pytest.importorskip("adbc_driver_postgresql.dbapi")
    dsn, table = pg_dim
    # g repeats: the chunk resumes by skipping rows (a literal OFFSET).
    source = SqlTableSource(functools.partial(adbc.connect, dsn), table, split_column="g")
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=1000)) as runner:
        before = runner.run(7000)
        checkpoint = runner.checkpoint()
    adbc_statements.clear()
    with LocalSourceRunner(source, 2, restore_from=checkpoint) as runner:
        rest = runner.run()
    assert len(before) == 7000
    assert bag(before + rest) == bag((n, n % 97, f"v{n}") for n in range(1, 5 * SMALL + 1))
    (resumed,) = [sql for sql, params in adbc_statements if '"_c0"' in sql and params is None]
    assert "OFFSET 7000" in resumed


# --- streaming and resuming one large chunk, per driver


def _sqlite3(path: str) -> Callable[[], Any]:
    return functools.partial(sqlite3.connect, path)


def _adbc_sqlite(path: str) -> Callable[[], Any]:
    adbc = pytest.importorskip("adbc_driver_sqlite.dbapi")
    return functools.partial(adbc.connect, path)


@pytest.fixture(params=["sqlite3", "adbc-sqlite", "psycopg", "adbc-postgres"])
def driver_table(request: pytest.FixtureRequest, tmp_path: Path
                 ) -> tuple[Callable[[], Any], str, int]:
    """(connection factory, table, rows): 70,000 rows, more than one batch of any driver
    but ADBC PostgreSQL's (batches by bytes)."""
    rows = 70_000
    if request.param in ("sqlite3", "adbc-sqlite"):
        path = _sqlite_table(tmp_path / "t.db", rows)
        factory = _sqlite3(path) if request.param == "sqlite3" else _adbc_sqlite(path)
        return factory, "t", rows
    import psycopg

    dsn = request.getfixturevalue("postgres_dsn")
    table = f"{request.getfixturevalue('pg_schema')}.t"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {table} SELECT n, 'v' || n FROM generate_series(1, {rows}) n")
    if request.param == "psycopg":
        return functools.partial(psycopg.connect, dsn), table, rows
    adbc = pytest.importorskip("adbc_driver_postgresql.dbapi")
    return functools.partial(adbc.connect, dsn), table, rows


def test_one_large_chunk_streams_in_batches(
    driver_table: tuple[Callable[[], Any], str, int], request: pytest.FixtureRequest
) -> None:
    factory, table, rows = driver_table
    source = SqlTableSource(factory, table)
    (split,) = plan_splits(source)
    sizes = _batches(source, split)
    assert sum(sizes) == rows
    if "adbc-postgres" not in request.node.name:
        assert len(sizes) > 1, sizes
        assert max(sizes) <= 65_536, sizes


def test_checkpoint_inside_one_large_chunk_resumes_with_every_row_once(
    driver_table: tuple[Callable[[], Any], str, int],
) -> None:
    factory, table, rows = driver_table
    expected = bag((n, f"v{n}") for n in range(1, rows + 1))
    bulk = read_arrow(SqlTableSource(factory, table), 3)  # no checkpoints: any order
    assert bag((r["id"], r["v"]) for r in bulk.to_pylist()) == expected
    for split_column in (None, "v"):  # resumed after the last key; by skipping rows
        source = SqlTableSource(factory, table, split_column=split_column)
        options = ReaderOptions(records_per_poll=4000)
        with LocalSourceRunner(source, 1, options=options) as runner:
            before = runner.run(12_000)
            checkpoint = runner.checkpoint()
        with LocalSourceRunner(source, 3, restore_from=checkpoint) as runner:
            rest = runner.run()
        assert 12_000 <= len(before) < rows
        assert bag(before + rest) == expected


def test_adbc_sqlite_column_null_through_the_first_batch_is_read_whole(tmp_path: Path) -> None:
    # ADBC SQLite infers a column all NULL in its first batch as INT64 and fails on a
    # later text value: the rest of the chunk is read again as one batch.
    rows = 100_000
    path = _sqlite_table(
        tmp_path / "t.db", rows, ddl="CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, r REAL)",
        select="SELECT n, CASE WHEN n > 80000 THEN 'x' || n END, "
               "CASE WHEN n > 80000 THEN n * 0.5 END FROM g",
    )
    source = SqlTableSource(_adbc_sqlite(path), "t")
    table = read_arrow(source, 1).sort_by("id")
    assert table.num_rows == rows
    assert table.column("v").null_count == table.column("r").null_count == 80_000
    assert table.slice(80_000, 1).to_pylist() == [{"id": 80_001, "v": "x80001", "r": 40000.5}]
    assert bag(run_all(source, 2)) == bag(tuple(r.values()) for r in table.to_pylist())


def test_psycopg_streams_a_chunk_rather_than_receiving_it_whole(
    postgres_dsn: str, pg_schema: str
) -> None:
    # A plain execute() receives the whole result into libpq before the first row is
    # fetched (the connection is idle again by then); a streamed read is still running
    # on the server when its first batch arrives.
    import psycopg

    from connectors.sql import SqlTable

    table = f"{pg_schema}.t"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {table} SELECT n, 'v' || n FROM generate_series(1, 50000) n")
    sql = SqlTable(functools.partial(psycopg.connect, postgres_dsn), table)
    session = sql.acquire()
    try:
        batches = sql.scan(session, [], [], '"_lt"."id"')
        first = next(batches)
        assert first.num_rows == 8192
        assert session.raw.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE
        assert first.num_rows + sum(b.num_rows for b in batches) == 50_000
        assert session.raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    finally:
        sql.release(session)
