"""Fixtures of the scan tests: one "case" per built-in source over the same logical
rows, so the connector suite runs unchanged against each (Flink's
``SourceTestSuiteBase`` with one external context per connector).

A case makes a source with about ``n`` splits (exactly one for ``n == 1``), says which
rows each split holds (in split order) from the data it wrote, not from reading, and can
break its source mid-read. Service cases (PostgreSQL, Redis) use the shared fixtures:
an unreachable server skips them locally and fails them under CI=true.
"""

from __future__ import annotations

import functools
import math
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from scan import CollectionSource, FileSource, RedisScanSource, Source, SqlTableSource
from scan.sources import CollectionSplit, FileSplit, RedisKeysSplit, SqlChunkSplit
from spark_lookup.errors import ConnectorError, SourceError

Row = tuple[Any, ...]

NUM_ROWS = 150
ROWS: list[Row] = [(i, f"name-{i:03d}", i * 0.5) for i in range(1, NUM_ROWS + 1)]
SCHEMA = "id BIGINT, name STRING, score DOUBLE"
CASES = [
    "collection", "sqlite", "postgres", "parquet", "csv", "delta", "iceberg", "redis",
]


@dataclass
class Case:
    """One source over known rows."""

    name: str
    rows: list[Row]
    make: Callable[[int], Source[Any, Any]]
    rows_of_split: Callable[[Any], list[Row]]
    break_source: Callable[[], type[Exception]]
    """Make every further read fail; returns the error type a reader then raises."""
    extra: dict[str, Any] = field(default_factory=dict)


def _sql_rows_of(split: SqlChunkSplit) -> list[Row]:
    assert not split.null_chunk
    assert not split.resumed
    assert split.skip == 0
    return [
        r
        for r in ROWS
        if (split.lo is None or r[0] >= split.lo) and (split.hi is None or r[0] < split.hi)
    ]


def _chunk_size(n: int) -> int:
    return NUM_ROWS if n == 1 else math.ceil(NUM_ROWS / n)


# --- collection


def _collection_case(monkeypatch: pytest.MonkeyPatch) -> Case:
    def make(n: int) -> Source[Any, Any]:
        return CollectionSource(ROWS, num_splits=n, schema=SCHEMA)

    def rows_of(split: CollectionSplit) -> list[Row]:
        return ROWS[split.start : split.end]

    def break_source() -> type[Exception]:
        from scan import collection

        def fail(self: Any) -> Any:
            raise RuntimeError("injected: the collection cannot be read")

        monkeypatch.setattr(collection._SplitReader, "fetch", fail)
        return SourceError

    return Case("collection", ROWS, make, rows_of, break_source)


# --- SQL


def _sqlite_case(tmp_path: Path) -> Case:
    path = str(tmp_path / "dim.db")
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT NOT NULL, score REAL)")
        db.executemany("INSERT INTO dim VALUES (?, ?, ?)", ROWS)
    factory = functools.partial(sqlite3.connect, path)

    def make(n: int) -> Source[Any, Any]:
        return SqlTableSource(factory, "dim", chunk_size=_chunk_size(n))

    def break_source() -> type[Exception]:
        with sqlite3.connect(path) as db:
            db.execute("DROP TABLE dim")
        return ConnectorError

    return Case("sqlite", ROWS, make, _sql_rows_of, break_source, {"factory": factory})


def _postgres_case(dsn: str, schema: str) -> Case:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE "{schema}".dim (id bigint PRIMARY KEY, name text NOT NULL, '
            "score double precision)"
        )
        with conn.cursor() as cursor:
            cursor.executemany(f'INSERT INTO "{schema}".dim VALUES (%s, %s, %s)', ROWS)
    factory = functools.partial(psycopg.connect, dsn, options=f"-c search_path={schema}")

    def make(n: int) -> Source[Any, Any]:
        return SqlTableSource(factory, "dim", chunk_size=_chunk_size(n))

    def break_source() -> type[Exception]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{schema}".dim')
        return ConnectorError

    return Case("postgres", ROWS, make, _sql_rows_of, break_source, {"factory": factory})


# --- files


def _parquet_case(tmp_path: Path) -> Case:
    import pyarrow as pa
    import pyarrow.parquet as pq

    files: dict[str, list[Row]] = {}
    group_size: dict[str, int] = {}

    def make(n: int) -> Source[Any, Any]:
        directory = tmp_path / f"parquet-{n}"
        directory.mkdir(exist_ok=True)
        parts = 1 if n == 1 else 2
        size = math.ceil(NUM_ROWS / n)
        paths = []
        for part in range(parts):
            rows = ROWS[part * NUM_ROWS // parts : (part + 1) * NUM_ROWS // parts]
            path = str(directory / f"part-{part}.parquet")
            table = pa.table(
                {
                    "id": [r[0] for r in rows],
                    "name": [r[1] for r in rows],
                    "score": [r[2] for r in rows],
                }
            )
            pq.write_table(table, path, row_group_size=size)
            files[path], group_size[path] = rows, size
            paths.append(path)
        return FileSource(paths, "parquet")

    def rows_of(split: FileSplit) -> list[Row]:
        size = group_size[split.path]
        assert split.row_group is not None
        return files[split.path][split.row_group * size : (split.row_group + 1) * size]

    def break_source() -> type[Exception]:
        for path in files:
            if os.path.exists(path):
                os.remove(path)
        return ConnectorError

    return Case("parquet", ROWS, make, rows_of, break_source)


def _csv_case(tmp_path: Path) -> Case:
    files: dict[str, list[Row]] = {}

    def make(n: int) -> Source[Any, Any]:
        directory = tmp_path / f"csv-{n}"
        directory.mkdir(exist_ok=True)
        (directory / "_SUCCESS").write_text("")  # a marker file, not data
        for part in range(n):
            rows = ROWS[part * NUM_ROWS // n : (part + 1) * NUM_ROWS // n]
            path = directory / f"part-{part:03d}.csv"
            lines = ["id,name,score", *(f"{r[0]},{r[1]},{r[2]}" for r in rows)]
            path.write_text("\n".join(lines) + "\n")
            files[str(path)] = rows
        return FileSource(directory, "csv", schema=SCHEMA)

    def rows_of(split: FileSplit) -> list[Row]:
        return files[split.path]

    def break_source() -> type[Exception]:
        for path in files:
            if os.path.exists(path):
                os.remove(path)
        return ConnectorError

    return Case("csv", ROWS, make, rows_of, break_source)


# --- lakehouse tables


def _arrow_rows(rows: list[Row]) -> Any:
    import pyarrow as pa

    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "name": [r[1] for r in rows], "score": [r[2] for r in rows]})


def _parts(n: int) -> list[list[Row]]:
    return [ROWS[part * NUM_ROWS // n : (part + 1) * NUM_ROWS // n] for part in range(n)]


def _delta_case(tmp_path: Path) -> Case:
    from deltalake import DeltaTable, write_deltalake

    from scan import DeltaSource
    from scan.sources import DeltaSplit

    files: dict[str, list[Row]] = {}

    def make(n: int) -> Source[Any, Any]:
        path = str(tmp_path / f"delta-{n}")
        if not os.path.exists(path):  # made once per n: a restore reads the same table
            for rows in _parts(n):  # one commit, one file each
                before = set(DeltaTable(path).file_uris()) if os.path.exists(path) else set()
                write_deltalake(path, _arrow_rows(rows), mode="append")
                (new,) = set(DeltaTable(path).file_uris()) - before
                files[new] = rows
        return DeltaSource(path)

    def rows_of(split: DeltaSplit) -> list[Row]:
        return files[split.file]

    def break_source() -> type[Exception]:
        for path in files:
            if os.path.isfile(path):
                os.remove(path)
        return ConnectorError

    return Case("delta", ROWS, make, rows_of, break_source)


def _iceberg_case(tmp_path: Path) -> Case:
    from pyiceberg.catalog import load_catalog

    from scan import IcebergSource
    from scan.sources import IcebergSplit

    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
               "warehouse": f"file://{tmp_path}/warehouse"}
    lake = load_catalog("default", **catalog)
    lake.create_namespace("suite")
    files: dict[str, list[Row]] = {}

    def make(n: int) -> Source[Any, Any]:
        name = f"suite.dim{n}"
        if lake.table_exists(name):  # made once per n: a restore reads the same table
            return IcebergSource(name, catalog=catalog)
        table = lake.create_table(name, schema=_arrow_rows(ROWS[:1]).schema)
        for rows in _parts(n):  # one commit, one file each
            before = {t.file.file_path for t in table.scan().plan_files()}
            table.append(_arrow_rows(rows))
            (new,) = {t.file.file_path for t in table.scan().plan_files()} - before
            files[new] = rows
        return IcebergSource(name, catalog=catalog)

    def rows_of(split: IcebergSplit) -> list[Row]:
        return files[split.file]

    def break_source() -> type[Exception]:
        for path in files:
            local = path.removeprefix("file://")
            if os.path.isfile(local):
                os.remove(local)
        return ConnectorError

    return Case("iceberg", ROWS, make, rows_of, break_source)


# --- Redis


def _redis_case(url: str, prefix: str, client: Any) -> Case:
    keyed = [(f"{prefix}{r[0]:04d}", *r) for r in ROWS]
    pipe = client.pipeline(transaction=False)
    for key, id_, name, score in keyed:
        pipe.hset(key, mapping={"id": id_, "name": name, "score": repr(score)})
    pipe.execute()
    by_key = {row[0].encode(): row for row in keyed}

    def make(n: int) -> Source[Any, Any]:
        # COUNT is a hint: a huge one makes SCAN cover the keyspace in one call.
        return RedisScanSource(
            url,
            prefix + "*",
            "hash",
            schema="_key STRING, " + SCHEMA,
            keys_per_split=1_000_000 if n == 1 else 10,
        )

    def rows_of(split: RedisKeysSplit) -> list[Row]:
        return [by_key[key] for key in split.keys]

    def break_source() -> type[Exception]:
        pipe = client.pipeline(transaction=False)
        for key in by_key:
            pipe.set(key, "not a hash")
        pipe.execute()
        return ConnectorError

    return Case("redis", keyed, make, rows_of, break_source)


@pytest.fixture(params=CASES)
def case(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Case]:
    """Each built-in source in turn, over the same rows."""
    name = request.param
    if name == "collection":
        yield _collection_case(monkeypatch)
    elif name == "sqlite":
        yield _sqlite_case(tmp_path)
    elif name == "postgres":
        yield _postgres_case(
            request.getfixturevalue("postgres_dsn"), request.getfixturevalue("pg_schema")
        )
    elif name == "parquet":
        yield _parquet_case(tmp_path)
    elif name == "csv":
        yield _csv_case(tmp_path)
    elif name == "delta":
        yield _delta_case(tmp_path)
    elif name == "iceberg":
        yield _iceberg_case(tmp_path)
    else:
        yield _redis_case(
            request.getfixturevalue("redis_url"),
            request.getfixturevalue("redis_prefix"),
            request.getfixturevalue("redis_client"),
        )


@pytest.fixture
def pg_factory(postgres_dsn: str, pg_schema: str) -> Callable[[], Any]:
    """A picklable connection factory whose search_path is the test's own schema."""
    import psycopg

    return functools.partial(psycopg.connect, postgres_dsn, options=f"-c search_path={pg_schema}")
