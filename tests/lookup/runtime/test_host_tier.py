"""A partial cache's host tier in the runtime: a key one worker loaded is a hit for
the others, keys several workers miss at once are loaded once, and
``share_across_workers=False`` keeps each worker alone. Workers are real processes."""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cache import DefaultLookupCache
from connectors.sql.lookup_function import SqlLookupFunction
from lookup import PartialCachingAsyncLookupProvider, PartialCachingLookupProvider
from lookup.runtime.partial import LoadingRuntime
from spark_lookup.errors import LookupLoadError
from tests.lookup.functions import AsyncDictLookup, DictLookup


class CountingLookup(SqlLookupFunction):
    """A SQLite lookup that appends each batch's keys to ``counter`` and takes ``delay``
    seconds, so that workers' loads overlap."""

    def __init__(self, db: Path, counter: Path, delay: float = 0.0) -> None:
        super().__init__(functools.partial(sqlite3.connect, str(db)), "dim", "id")
        self.counter, self.delay = str(counter), delay

    def lookup_arrow(self, keys: Any) -> Any:
        line = ",".join(str(k) for k in keys[0].to_pylist()) + "\n"
        fd = os.open(self.counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        time.sleep(self.delay)
        return super().lookup_arrow(keys)


def make_db(path: Path, n: int = 500) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE dim (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO dim VALUES (?, ?)", [(i, f"n{i}") for i in range(n)])
    conn.close()
    return path


def provider(tmp_path: Path, delay: float = 0.0, share: bool | None = True
             ) -> PartialCachingLookupProvider:
    return PartialCachingLookupProvider.of(
        CountingLookup(make_db(tmp_path / "d.db") if not (tmp_path / "d.db").exists()
                       else tmp_path / "d.db", tmp_path / "loads", delay),
        DefaultLookupCache.new_builder().maximum_size(10_000).build(),
        share_across_workers=share)


def loaded_keys(tmp_path: Path) -> list[int]:
    path = tmp_path / "loads"
    text = path.read_text() if path.exists() else ""
    return [int(k) for line in text.splitlines() for k in line.split(",") if k]


def probe(p: PartialCachingLookupProvider, keys: list[int]) -> dict[int, str | None]:
    runtime = LoadingRuntime(p)
    runtime.open()
    try:
        answers = runtime.probe([pa.array(keys, pa.int64())])
        names = answers.rows.column("name").to_pylist()
        return {k: (names[r] if r >= 0 else None)
                for k, r in zip(keys, answers.first_rows().tolist(), strict=True)}
    finally:
        runtime.close()


def test_a_key_one_worker_loaded_is_a_hit_for_the_next(tmp_path: Path) -> None:
    p = provider(tmp_path)
    first = probe(p, list(range(0, 600, 3)))
    assert first[3] == "n3"
    assert first[597] is None
    runtime = LoadingRuntime(p)  # another worker: an empty in-process cache
    runtime.open()
    try:
        answers = runtime.probe([pa.array(list(range(0, 600, 3)), pa.int64())])
        assert runtime.metrics.load_count == 0
        assert runtime.metrics.num_host_hits == 200
        names = answers.rows.column("name").to_pylist()
        assert names[answers.first_rows()[1]] == "n3"
        assert answers.groups[-1] == -1  # 597: no such row, a cached miss
    finally:
        runtime.close()
    assert sorted(loaded_keys(tmp_path)) == list(range(0, 600, 3))


def test_share_across_workers_false_keeps_each_worker_alone(tmp_path: Path) -> None:
    p = provider(tmp_path, share=False)
    probe(p, [1, 2, 3])
    probe(p, [1, 2, 3])
    assert loaded_keys(tmp_path) == [1, 2, 3, 1, 2, 3]


def _worker(p: PartialCachingLookupProvider, keys: list[int], start: float,
            out: Any) -> None:
    time.sleep(max(0.0, start - time.time()))
    runtime = LoadingRuntime(p)
    runtime.open()
    try:
        answers = runtime.probe([pa.array(keys, pa.int64())])
        names = answers.rows.column("name").to_pylist()
        got = [names[r] if r >= 0 else None for r in answers.first_rows().tolist()]
        out.put((got, runtime.metrics.num_host_hits, runtime.metrics.num_host_waits))
    finally:
        runtime.close()


def test_keys_several_workers_miss_at_once_are_loaded_once(tmp_path: Path) -> None:
    p = provider(tmp_path, delay=0.5)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    keys = list(range(100, 300))
    start = time.time() + 3.0  # all three started and imported by then
    workers = [context.Process(target=_worker, args=(p, keys, start, out)) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        results = [out.get(timeout=60) for _ in workers]
    finally:
        for w in workers:
            w.join(30)
            if w.is_alive():
                w.kill()
    for got, _, _ in results:
        assert got == [f"n{k}" for k in keys]
    loaded = loaded_keys(tmp_path)
    assert sorted(loaded) == keys  # each key loaded once, by one of them
    # The other two had every key from the host tier: waited for while it loaded (the
    # usual case), or read after (a worker that started late on a busy machine).
    assert sum(hits for _, hits, _ in results) == 2 * len(keys)
    assert all(waits in (0, len(keys)) for _, _, waits in results)


def _application(db: str, counter: str, keys: list[int], out: Any) -> None:
    # A provider built in its own "application" from the same code: its own id.
    import sqlite3 as sqlite

    with sqlite.connect(db) as conn:
        name = conn.execute("SELECT name FROM dim WHERE id = 1").fetchone()[0]
    p = PartialCachingLookupProvider.of(
        CountingLookup(Path(db), Path(counter)),
        DefaultLookupCache.new_builder().maximum_size(10_000).build(),
        share_across_workers=True)
    got = probe(p, keys)
    out.put((name, got, p.host_tier_directory().name))


def test_two_applications_with_the_same_provider_never_read_each_others_rows(
        tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    apps = []
    for app in ("a", "b"):
        (tmp_path / app).mkdir()
        db = make_db(tmp_path / app / "d.db")
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE dim SET name = name || ?", (f"-{app}",))
        conn.close()
        apps.append(context.Process(target=_application, args=(
            str(db), str(tmp_path / app / "loads"), list(range(50)), out)))
    for a in apps:
        a.start()
    try:
        results = [out.get(timeout=60) for _ in apps]
    finally:
        for a in apps:
            a.join(30)
            if a.is_alive():
                a.kill()
    assert len({tier for _, _, tier in results}) == 2
    for first, got, _ in results:
        suffix = first.rsplit("-", 1)[1]
        assert got == {k: f"n{k}-{suffix}" for k in range(50)}


def test_a_tier_damaged_or_deleted_under_load_serves_only_right_rows(tmp_path: Path) -> None:
    """Index slots garbled and generations deleted while two workers look up: every
    answer is the source's, and the host tier keeps serving between the blows."""
    import random
    import shutil
    import threading

    p = PartialCachingLookupProvider.of(
        CountingLookup(make_db(tmp_path / "d.db"), tmp_path / "loads"),
        # Room for few keys in-process: most answers come through the host tier.
        DefaultLookupCache.new_builder().maximum_size(20).build(),
        share_across_workers=True)
    directory = p.host_tier_directory()
    writer, reader = LoadingRuntime(p), LoadingRuntime(p)
    writer.open()
    reader.open()
    stop = threading.Event()

    def vandal() -> None:
        rng = random.Random(5)
        while not stop.is_set():
            try:
                paths = list(directory.rglob("*"))
            except OSError:  # a generation the vandal deleted, under the walk
                continue
            for path in paths:
                if stop.is_set():
                    break
                try:
                    # Index slots are read afresh each time; a block's bytes are checked
                    # when a process first reads it (see docs/partial-cache.md).
                    if path.name == "index" and rng.random() < 0.5:
                        with open(path, "r+b") as f:
                            f.seek(rng.randrange(64, max(65, min(path.stat().st_size, 1 << 20))))
                            f.write(rng.randbytes(32))
                    elif path.name == "CURRENT" and rng.random() < 0.1:
                        shutil.rmtree(directory / path.read_text(), ignore_errors=True)
                except OSError:
                    pass
            time.sleep(0.002)

    thread = threading.Thread(target=vandal)
    thread.start()
    try:
        rng = random.Random(9)
        deadline = time.monotonic() + 3.0
        checked = 0
        while time.monotonic() < deadline:
            keys = rng.sample(range(600), 50)
            for runtime in (writer, reader):
                answers = runtime.probe([pa.array(keys, pa.int64())])
                names = answers.rows.column("name").to_pylist()
                for key, row in zip(keys, answers.first_rows().tolist(), strict=True):
                    want = f"n{key}" if key < 500 else None
                    assert (names[row] if row >= 0 else None) == want
                    checked += 1
        assert checked > 1_000
        assert reader.metrics.num_host_hits > 0
    finally:
        stop.set()
        thread.join(10)
        writer.close()
        reader.close()


def _shared_workers(make: Any, keys: list[int]) -> tuple[list[Any], list[Any], Any]:
    """The answers of two workers of one provider (built by ``make(cache)``), each with
    its own in-process cache: the first's per-key answers, then the second's probe."""
    first = LoadingRuntime(make(DefaultLookupCache.new_builder().maximum_size(100).build()))
    second = LoadingRuntime(dataclasses.replace(
        first.provider, cache=DefaultLookupCache.new_builder().maximum_size(100).build()))
    first.open()
    second.open()
    try:
        by_key = first.lookup_batch([(k,) for k in keys])
        answers = second.probe([pa.array(keys, pa.int64())])
        names = answers.rows.column("name").to_pylist()
        probed = [names[r] if r >= 0 else None for r in answers.first_rows().tolist()]
        return [by_key[(k,)] for k in keys], probed, second.metrics
    finally:
        first.close()
        second.close()


def test_a_function_answering_python_tuples_shares_the_host_tier() -> None:
    function = DictLookup([(1, "a"), (2, "b")])
    by_key, probed, metrics = _shared_workers(
        lambda cache: PartialCachingLookupProvider.of(function, cache,
                                                      share_across_workers=True), [1, 2, 3])
    assert by_key == [((1, "a"),), ((2, "b"),), ()]
    assert probed == ["a", "b", None]
    assert (metrics.num_host_hits, metrics.load_count) == (3, 0)  # 3: a shared miss
    assert function.keys_asked == [(1,), (2,), (3,)]


def test_an_async_function_shares_the_host_tier() -> None:
    function = AsyncDictLookup([(1, "a"), (2, "b")])
    by_key, probed, metrics = _shared_workers(
        lambda cache: PartialCachingAsyncLookupProvider.of(function, cache,
                                                           share_across_workers=True),
        [1, 2, 3])
    assert by_key == [((1, "a"),), ((2, "b"),), ()]
    assert probed == ["a", "b", None]
    assert (metrics.num_host_hits, metrics.load_count) == (3, 0)
    assert sorted(function.calls) == [(1,), (2,), (3,)]


def test_python_rows_that_do_not_fit_the_schema_are_refused_naming_the_column() -> None:
    function = DictLookup([(1, 12)])  # an INT where the name is a STRING
    runtime = LoadingRuntime(PartialCachingLookupProvider.of(
        function, DefaultLookupCache.new_builder().maximum_size(10).build(),
        share_across_workers=True))
    runtime.open()
    try:
        with pytest.raises(LookupLoadError, match="name"):
            runtime.lookup_batch([(1,)])
    finally:
        runtime.close()
