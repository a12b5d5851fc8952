"""SqlTableSource specifics: argument checks before any SQL, catalog discovery, Flink
CDC chunking (even steps, bounded LIMIT chunks, null chunk), resume inside a chunk,
type mapping, and driver errors; on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import functools
import pickle
import sqlite3
import threading
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from scan import LocalSourceRunner, ReaderOptions, SqlTableSource, plan_splits, read_split
from scan.checkpoint import decode_checkpoint
from scan.serializers import unpack_versioned
from scan.sources import SqlChunkSplit
from spark_lookup.errors import ConfigError, ConnectorError, TransientConnectorError
from tests.scan.helpers import bag, checkpoints_along_the_way, run_all

Row = tuple[Any, ...]


def forbidden() -> Any:
    """A connection factory that must not be called."""
    raise AssertionError("no SQL may run")


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Callable[..., Callable[[], sqlite3.Connection]]:
    """Create a table from DDL and rows; returns its connection factory."""
    path = str(tmp_path / "t.db")

    def make(ddl: str, rows: list[Row] = (), table: str = "t") -> Any:  # type: ignore[assignment]
        with sqlite3.connect(path) as db:
            db.execute(ddl)
            if rows:
                marks = ", ".join("?" * len(rows[0]))
                db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        return functools.partial(sqlite3.connect, path)

    return make


def _checkpoint_splits(source: SqlTableSource, checkpoint: bytes) -> list[SqlChunkSplit]:
    data = decode_checkpoint(checkpoint)
    return [
        unpack_versioned(source.split_serializer, packed, "split")
        for splits in data.readers
        for packed in splits
    ]


def _planner_progress(source: SqlTableSource, checkpoint: bytes) -> dict[str, Any]:
    state = unpack_versioned(
        source.enumerator_state_serializer, decode_checkpoint(checkpoint).enumerator, "state"
    )
    return dict(state.progress)


# --- arguments, before any SQL


@pytest.mark.parametrize(
    "table", ["", "t; DROP TABLE x", 'a"b', "1t", "a.b.c.d", "x y", None, "t--"]
)
def test_invalid_table_is_a_value_error_before_any_sql(table: Any) -> None:
    with pytest.raises(ValueError, match="table name"):
        SqlTableSource(forbidden, table)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"columns": ["ok", "bad name"]}, "column name"),
        ({"columns": []}, "distinct and not empty"),
        ({"columns": ["a", "a"]}, "distinct"),
        ({"split_column": "x;"}, "split column"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"chunk_size": 2.5}, "chunk_size"),
        ({"schema": "a INT, `b c` STRING"}, "invalid column .b c."),
        ({"schema": "a INT", "columns": ["b"]}, "must be the schema.s field names"),
        ({"schema": "a INTEGRAL"}, "unknown type"),
        ({"chunk_count": 0}, "chunk_count"),
        ({"chunk_count": 2, "chunk_size": 10}, "chunk_size or chunk_count, not both"),
        ({"split_bounds": (1, 9)}, "split_bounds need chunk_count"),
        ({"split_bounds": (9, 1), "chunk_count": 2}, "lower bound is above the upper"),
        ({"split_bounds": (1, 9.5), "chunk_count": 2}, "two ints"),
        ({"split_bounds": (1, 2, 3), "chunk_count": 2}, "two ints"),
    ],
)
def test_invalid_arguments_fail_before_any_sql(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SqlTableSource(forbidden, "t", **kwargs)


def test_connection_factory_must_be_callable_and_picklable() -> None:
    with pytest.raises(ConfigError, match="callable"):
        SqlTableSource("sqlite:///x", "t")  # type: ignore[arg-type]
    SqlTableSource(lambda: sqlite3.connect(":memory:"), "t")  # cloudpickle takes lambdas
    lock = threading.Lock()
    with pytest.raises(ConfigError, match="picklable"):
        SqlTableSource(lambda: (lock, sqlite3.connect(":memory:"))[1], "t")


# --- catalog discovery (SQLite)


def test_sqlite_primary_key_and_schema_are_discovered(sqlite_db: Any) -> None:
    factory = sqlite_db(
        "CREATE TABLE t (code TEXT PRIMARY KEY, n INTEGER NOT NULL, price DECIMAL(10, 2), "
        "born DATE, seen TIMESTAMP, ok BOOLEAN, raw BLOB, ratio REAL)",
        [
            ("b", 2, 1.5, "2020-01-02", "2020-01-02 03:04:05", 1, b"\x00", 0.25),
            ("a", 1, None, None, None, 0, None, None),
        ],
    )
    source = SqlTableSource(factory, "t")
    assert source.schema.simpleString() == (
        "struct<code:string,n:bigint,price:decimal(10,2),born:date,seen:timestamp_ntz,"
        "ok:boolean,raw:binary,ratio:double>"
    )
    assert source.read_plan().split_column == "code"
    rows = run_all(source, 1)
    assert rows == [
        ("a", 1, None, None, None, False, None, None),
        (
            "b",
            2,
            Decimal("1.50"),
            dt.date(2020, 1, 2),
            dt.datetime(2020, 1, 2, 3, 4, 5),
            True,
            b"\x00",
            0.25,
        ),
    ]


def test_sqlite_composite_key_chunks_by_its_first_column(sqlite_db: Any) -> None:
    rows = [(i // 10, i % 10, f"v{i}") for i in range(100)]
    factory = sqlite_db("CREATE TABLE t (a INTEGER, b INTEGER, v TEXT, PRIMARY KEY (a, b))", rows)
    source = SqlTableSource(factory, "t", chunk_size=15)
    plan = source.read_plan()
    assert plan.split_column == "a"
    assert plan.keyset_index is None, "a is not unique: resume by skipping"
    assert plan.order_sql == '"_lt"."a", "_lt"."b"'
    assert bag(run_all(source, 3)) == bag(rows)


def test_table_without_primary_key_needs_a_split_column(sqlite_db: Any) -> None:
    factory = sqlite_db("CREATE TABLE t (a INTEGER, v TEXT)", [(1, "x")])
    with pytest.raises(ConfigError, match="no primary key; pass split_column"):
        SqlTableSource(factory, "t").schema  # noqa: B018
    assert run_all(SqlTableSource(factory, "t", split_column="a"), 1) == [(1, "x")]


def test_unique_index_makes_a_split_column_resume_by_key(sqlite_db: Any) -> None:
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, code TEXT UNIQUE)", [(1, "a")])
    plan = SqlTableSource(factory, "t", split_column="code").read_plan()
    assert plan.keyset_index == 1
    assert plan.order_sql == '"_lt"."code"'


def test_unknown_columns_are_named(sqlite_db: Any) -> None:
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    with pytest.raises(ConfigError, match=r"no column\(s\) \['w'\]"):
        SqlTableSource(factory, "t", columns=["id", "w"]).schema  # noqa: B018
    with pytest.raises(ConfigError, match="no split column 'w'"):
        SqlTableSource(factory, "t", split_column="w").schema  # noqa: B018


def test_missing_table_is_a_connector_error_naming_it(sqlite_db: Any) -> None:
    factory = sqlite_db("CREATE TABLE other (id INTEGER PRIMARY KEY)")
    with pytest.raises(ConnectorError, match="'missing'"):
        SqlTableSource(factory, "missing").schema  # noqa: B018


def test_connection_failure_is_a_connector_error_naming_the_table(tmp_path: Path) -> None:
    factory = functools.partial(sqlite3.connect, str(tmp_path / "no" / "such" / "dir.db"))
    with pytest.raises(ConnectorError, match="'dim'") as raised:
        SqlTableSource(factory, "dim").schema  # noqa: B018
    assert isinstance(raised.value.__cause__, sqlite3.Error)


def test_columns_and_schema_select_a_subset(sqlite_db: Any) -> None:
    factory = sqlite_db(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT, b REAL)", [(1, "x", 1.0), (2, "y", 2.0)]
    )
    only_b = SqlTableSource(factory, "t", columns=["b"])
    assert only_b.read_plan().keyset_index is None, "the key is not read: resume by skipping"
    assert run_all(only_b, 1) == [(1.0,), (2.0,)]
    typed = SqlTableSource(factory, "t", schema="a STRING, id INT")
    assert typed.schema.simpleString() == "struct<a:string,id:int>"
    assert run_all(typed, 1) == [("x", 1), ("y", 2)]


# --- chunking


def test_even_keys_are_chunked_by_steps_without_limit_queries(sqlite_db: Any) -> None:
    rows = [(i, f"v{i}") for i in range(1, 1001)]
    source = SqlTableSource(
        sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)", rows), "t", chunk_size=100
    )
    splits = plan_splits(source)
    assert [(s.lo, s.hi) for s in splits] == [
        (None, 101),
        *((lo, lo + 100) for lo in range(101, 901, 100)),
        (901, None),
    ]
    assert bag(run_all(source, 4)) == bag(rows)


def test_sparse_keys_are_chunked_by_bounded_limit_queries(sqlite_db: Any) -> None:
    rows = [(i**3, f"v{i}") for i in range(1, 400)]  # factor far above 1000 at the end
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)", rows)
    source = SqlTableSource(factory, "t", chunk_size=37)
    splits = plan_splits(source)
    sizes = [
        sum(1 for r in rows if (s.lo is None or r[0] >= s.lo) and (s.hi is None or r[0] < s.hi))
        for s in splits
    ]
    assert sum(sizes) == len(rows)
    assert max(sizes) <= 37
    assert len(splits) == -(-len(rows) // 36) or len(splits) >= len(rows) // 37
    assert bag(run_all(source, 3)) == bag(rows)


def test_string_keys_are_chunked_by_limit_queries(sqlite_db: Any) -> None:
    rows = [(uuid.UUID(int=i * 7919).hex, i) for i in range(300)]
    factory = sqlite_db("CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER)", rows)
    source = SqlTableSource(factory, "t", chunk_size=50)
    splits = plan_splits(source)
    # Each chunk ends before the 50th key from its start; SQLite lets a TEXT primary
    # key hold NULL, so a null chunk follows.
    assert [s.null_chunk for s in splits] == [False] * 7 + [True]
    assert bag(run_all(source, 2)) == bag(rows)


def test_long_runs_of_equal_keys_become_one_chunk(sqlite_db: Any) -> None:
    rows = [(i, "hot" if i < 120 else f"k{i:03d}") for i in range(200)]
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, cat TEXT)", rows)
    source = SqlTableSource(factory, "t", split_column="cat", chunk_size=25)
    splits = plan_splits(source)
    hot = [
        s
        for s in splits
        if not s.null_chunk and (s.lo is None or s.lo <= "hot") and (s.hi is None or s.hi > "hot")
    ]
    assert len(hot) == 1
    assert bag(run_all(source, 3)) == bag(rows)


def test_null_split_values_are_read_as_their_own_chunk(sqlite_db: Any) -> None:
    rows = [(i, None if i % 4 == 0 else i * 10) for i in range(100)]
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, g INTEGER)", rows)
    source = SqlTableSource(factory, "t", split_column="g", chunk_size=20)
    splits = plan_splits(source)
    assert splits[-1].null_chunk
    assert sum(s.null_chunk for s in splits) == 1
    assert bag(run_all(source, 2)) == bag(rows)
    # Restore inside the null chunk: skipping is exact there too.
    taken, _ = checkpoints_along_the_way(source, 1, [80, 85, 90], ReaderOptions(records_per_poll=2))
    for emitted, checkpoint in taken:
        with LocalSourceRunner(source, 2, restore_from=checkpoint) as runner:
            assert bag(emitted + runner.run()) == bag(rows)


def test_not_null_split_column_has_no_null_chunk(sqlite_db: Any) -> None:
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY)", [(1,), (2,)])
    assert not any(s.null_chunk for s in plan_splits(SqlTableSource(factory, "t")))


def test_empty_table_reads_nothing(sqlite_db: Any) -> None:
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    source = SqlTableSource(factory, "t")
    assert [(s.lo, s.hi) for s in plan_splits(source)] == [(None, None)]
    assert run_all(source, 2) == []


def test_chunks_are_made_lazily_and_the_progress_is_checkpointed(sqlite_db: Any) -> None:
    rows = [(i**3, i) for i in range(1, 301)]  # (max - min + 1) / rows > 1000: uneven
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)", rows)
    source = SqlTableSource(factory, "t", chunk_size=20)
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=5)) as runner:
        before = runner.run(10)
        checkpoint = runner.checkpoint()
    progress = _planner_progress(source, checkpoint)
    assert progress["phase"] == "uneven"
    assert progress["index"] == 1, "one chunk made so far"
    assert progress["cursor"] == 20**3, "the first chunk ends before the 20th key"
    with LocalSourceRunner(source, 3, restore_from=checkpoint) as runner:
        assert bag(before + runner.run()) == bag(rows)


def test_rows_beyond_the_planned_min_and_max_are_still_read(sqlite_db: Any) -> None:
    rows = [(i, i) for i in range(100, 200)]
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)", rows)
    source = SqlTableSource(factory, "t", chunk_size=30)
    splits = plan_splits(source)  # on the driver
    with factory() as db:
        db.executemany("INSERT INTO t VALUES (?, ?)", [(5, 5), (500, 500)])
    read = [row for split in splits for row in read_split(source, split)]  # on executors
    assert bag(read) == bag([(5, 5), *rows, (500, 500)])


def test_a_chunk_count_over_bounds_divides_them_without_planning_queries(
        sqlite_db: Any) -> None:
    rows = [(i, i) for i in range(-3, 104)]
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)", rows)
    queries: list[str] = []

    def counting() -> sqlite3.Connection:
        connection = factory()
        connection.set_trace_callback(queries.append)
        return connection

    source = SqlTableSource(counting, "t", chunk_count=4, split_bounds=(1, 100))
    source.read_plan()  # the catalog
    queries.clear()
    splits = plan_splits(source, 1)
    assert [(s.lo, s.hi) for s in splits] == [(None, 26), (26, 51), (51, 76), (76, None)]
    assert queries == []
    # Rows below and above the bounds are read too (Flink's JDBC source drops them).
    read = [row for split in splits for row in read_split(source, split)]
    assert bag(read) == bag(rows)


def test_a_chunk_count_alone_is_that_many_chunks_whatever_the_readers(sqlite_db: Any) -> None:
    rows = [(i, i) for i in range(1, 31)]
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)", rows)
    source = SqlTableSource(factory, "t", chunk_count=3)
    assert len(plan_splits(source, 1)) == 3
    assert bag(run_all(source, 2)) == bag(rows)
    assert len(plan_splits(SqlTableSource(factory, "t", chunk_count=1), 8)) == 1


def test_checkpoint_inside_a_chunk_resumes_after_the_last_key(sqlite_db: Any) -> None:
    rows = [(i, f"v{i}") for i in range(1, 201)]
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)", rows)
    source = SqlTableSource(factory, "t", chunk_size=50)
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=7)) as runner:
        before = runner.run(30)
        checkpoint = runner.checkpoint()
    (split,) = _checkpoint_splits(source, checkpoint)
    assert split.resumed
    assert split.resume_after == before[-1][0] == 35
    assert split.skip == 0
    with LocalSourceRunner(source, 2, restore_from=checkpoint) as runner:
        assert bag(before + runner.run()) == bag(rows)


def test_checkpoint_inside_a_chunk_of_a_non_unique_column_skips_rows(sqlite_db: Any) -> None:
    rows = [(i, i % 7, f"v{i}") for i in range(140)]
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, g INTEGER NOT NULL, v TEXT)", rows)
    source = SqlTableSource(factory, "t", split_column="g", chunk_size=40)
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=3)) as runner:
        before = runner.run(10)
        checkpoint = runner.checkpoint()
    (split,) = _checkpoint_splits(source, checkpoint)
    assert not split.resumed
    assert split.skip == len(before) == 12
    with LocalSourceRunner(source, 3, restore_from=checkpoint) as runner:
        assert bag(before + runner.run()) == bag(rows)


def test_source_pickles_with_its_resolved_plan(sqlite_db: Any) -> None:
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)", [(1, "a")])
    source = SqlTableSource(factory, "t")
    plan = source.read_plan()
    copy = pickle.loads(pickle.dumps(source))
    assert copy.read_plan() == plan
    assert run_all(copy, 1) == [(1, "a")]


def test_dropped_table_fails_the_read_naming_it(sqlite_db: Any) -> None:
    factory = sqlite_db("CREATE TABLE t (id INTEGER PRIMARY KEY)", [(i,) for i in range(100)])
    source = SqlTableSource(factory, "t", chunk_size=10)
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=1)) as runner:
        runner.run(1)
        with factory() as db:
            db.execute("DROP TABLE t")
        with pytest.raises(ConnectorError, match=r"table 't': reading failed: OperationalError"):
            runner.run()


# --- PostgreSQL


@pytest.fixture
def pg(pg_factory: Callable[[], Any]) -> Callable[..., Callable[[], Any]]:
    def make(ddl: str, insert: str | None = None) -> Callable[[], Any]:
        with pg_factory() as conn:
            conn.execute(ddl)
            if insert:
                conn.execute(insert)
        return pg_factory

    return make


def test_postgres_catalog_types_and_casts(pg: Any) -> None:
    factory = pg(
        "CREATE TYPE mood AS ENUM ('sad', 'ok'); "
        "CREATE TABLE dim (id uuid PRIMARY KEY, n integer NOT NULL, small smallint, "
        "big bigint, r real, d double precision, price numeric(12, 3), anyn numeric, "
        "name varchar(20), c char(2), ok boolean, born date, at timestamp, "
        "utc timestamptz, doc jsonb, feeling mood, tags text[], nums integer[], "
        "blob bytea, ids uuid[])",
        "INSERT INTO dim VALUES ('00000000-0000-0000-0000-000000000001', 1, 2, 3, 1.5, "
        "2.5, 12.345, 1.1, 'x', 'ab', true, '2024-02-29', '2024-02-29 12:00', "
        "'2024-02-29 12:00+02', '{\"a\": 1}', 'ok', '{a,b}', '{1,2}', '\\x00ff', "
        "'{00000000-0000-0000-0000-000000000002}')",
    )
    source = SqlTableSource(factory, "dim")
    assert source.schema.simpleString() == (
        "struct<id:string,n:int,small:smallint,big:bigint,r:float,d:double,"
        "price:decimal(12,3),anyn:decimal(38,18),name:string,c:string,ok:boolean,born:date,"
        "at:timestamp_ntz,utc:timestamp,doc:string,feeling:string,tags:array<string>,"
        "nums:array<int>,blob:binary,ids:array<string>>"
    )
    plan = source.read_plan()
    assert plan.keyset_index is None, "the uuid key is read through a cast"
    (row,) = run_all(source, 1)
    assert row[0] == "00000000-0000-0000-0000-000000000001"
    assert row[6] == Decimal("12.345")
    assert row[13] == dt.datetime(2024, 2, 29, 10, 0, tzinfo=dt.timezone.utc)
    assert row[14] == '{"a": 1}'
    assert row[15] == "ok"
    assert row[16:19] == (["a", "b"], [1, 2], b"\x00\xff")
    assert row[19] == ["00000000-0000-0000-0000-000000000002"]
    from scan import read_arrow

    assert read_arrow(source).num_rows == 1


def test_postgres_composite_primary_key_and_schema_qualified_name(pg: Any, pg_schema: str) -> None:
    factory = pg(
        "CREATE TABLE pairs (b int, a int, v text, PRIMARY KEY (a, b))",
        "INSERT INTO pairs SELECT g % 10, g / 10, 'v' || g FROM generate_series(0, 199) g",
    )
    source = SqlTableSource(factory, f"{pg_schema}.pairs", chunk_size=30)
    plan = source.read_plan()
    assert plan.split_column == "a"
    assert plan.order_sql == '"_lt"."a", "_lt"."b"'
    rows = run_all(source, 3)
    assert len(rows) == len(set(rows)) == 200


def test_postgres_checkpoint_inside_a_chunk_resumes_after_the_last_key(pg: Any) -> None:
    factory = pg(
        "CREATE TABLE dim (id bigint PRIMARY KEY, v text)",
        "INSERT INTO dim SELECT g, 'v' || g FROM generate_series(1, 300) g",
    )
    source = SqlTableSource(factory, "dim", chunk_size=100)
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=9)) as runner:
        before = runner.run(40)
        checkpoint = runner.checkpoint()
    (split,) = _checkpoint_splits(source, checkpoint)
    assert split.resumed
    assert split.resume_after == before[-1][0]
    with LocalSourceRunner(source, 4, restore_from=checkpoint) as runner:
        rest = runner.run()
    assert sorted(before + rest) == [(i, f"v{i}") for i in range(1, 301)]


def test_postgres_uses_the_row_estimate_when_analyzed(pg: Any) -> None:
    factory = pg(
        "CREATE TABLE dim (id bigint PRIMARY KEY)",
        "INSERT INTO dim SELECT g FROM generate_series(1, 1000) g; ANALYZE dim",
    )
    splits = plan_splits(SqlTableSource(factory, "dim", chunk_size=250))
    assert [(s.lo, s.hi) for s in splits] == [(None, 251), (251, 501), (501, 751), (751, None)]


def test_postgres_missing_table_is_named(pg_factory: Callable[[], Any]) -> None:
    with pytest.raises(ConnectorError, match="'nope'") as raised:
        SqlTableSource(pg_factory, "nope").schema  # noqa: B018
    assert "has no table or view" in str(raised.value)
    assert not isinstance(raised.value, TransientConnectorError)  # reported at once


def test_postgres_bad_connection_is_named() -> None:
    import psycopg

    factory = functools.partial(
        psycopg.connect, "postgresql://nobody@127.0.0.1:1/x", connect_timeout=1
    )
    with pytest.raises(TransientConnectorError, match="connect to the database of table 'dim'"):
        SqlTableSource(factory, "dim").schema  # noqa: B018


def test_postgres_text_keys_in_a_collation_python_does_not_share(pg: Any) -> None:
    # Python orders "B" < "a" < "b"; a linguistic collation orders "a" < "B" < "b", and
    # ignores punctuation at first. Chunks are compared by the database only, so every
    # row is read once whatever the two orders say.
    probe = pg("SELECT 1")
    with probe() as conn:
        icu = conn.execute("SELECT 1 FROM pg_collation WHERE collname = 'en-US-x-icu'").fetchone()
    if icu is None:
        pytest.skip("this PostgreSQL has no ICU collation en-US-x-icu")
    factory = pg(
        'CREATE TABLE dim (k text COLLATE "en-US-x-icu" PRIMARY KEY, n int)',
        "INSERT INTO dim SELECT chr(65 + g % 26) || '-' || chr(97 + (g * 7) % 26) || g, g "
        "FROM generate_series(1, 400) g "
        "UNION ALL SELECT lower(chr(65 + g % 26)) || '_' || g, 1000 + g "
        "FROM generate_series(1, 400) g",
    )
    source = SqlTableSource(factory, "dim", chunk_size=45)
    expected = bag(run_all(SqlTableSource(factory, "dim", chunk_size=10_000), 1))
    assert len(expected) == 800
    taken, whole = checkpoints_along_the_way(
        source, 2, [0, 33, 200, 401, 799], ReaderOptions(records_per_poll=11)
    )
    assert bag(whole) == expected
    for emitted, checkpoint in taken:
        with LocalSourceRunner(source, 3, restore_from=checkpoint) as runner:
            assert bag(emitted + runner.run()) == expected
