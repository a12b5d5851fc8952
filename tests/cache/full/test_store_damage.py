"""Damaged snapshot files on disk: truncated, bits flipped in a value, a string offset
pointing past the data. None is ever served or mapped as a table: the checksum refuses
it, it is set aside, and a runtime rebuilds the version from the source. Cleanup spares
directories that are not stores."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import cache.full.store as store_module
from cache.full.snapshot import FullSnapshot
from cache.full.store import SnapshotStore, sweep
from lookup.runtime.full import FullCachingRuntime
from tests.integration.processes import ManualTrigger, count_lines, make_db, provider, store_for


def names(rows: int) -> pa.Table:
    return pa.table({"id": pa.array(range(rows), pa.int64()),
                     "name": [f"n{i}" for i in range(rows)], "tier": ["old"] * rows})


def published(store: SnapshotStore, rows: int = 200) -> Path:
    with store.try_lock() as locked:
        assert locked
        record = store.publish(names(rows), version=1, loaded_at=time.time(), unique=True)
    return store.directory / record.file


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def flip_a_value(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = data.find(b"n150")  # a value of the name column
    assert at > 0
    data[at + 1] ^= 0x01  # "n150" -> "o150"
    path.write_bytes(bytes(data))


def break_an_offset(path: Path) -> None:
    """Point one string offset of the name column far past its data: read as a table, the
    value would reach outside the file (SIGBUS/SIGSEGV, or garbage)."""
    with pa.memory_map(str(path), "r") as source:
        base = source.read_buffer().address
        column = pa.ipc.open_file(source).read_all().column("name").chunk(0)
        offsets_at = column.buffers()[1].address - base
    data = bytearray(path.read_bytes())
    position = offsets_at + 4 * 100  # the offset where row 100 starts
    data[position:position + 4] = (2**31 - 16).to_bytes(4, "little")
    path.write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": truncate, "flipped value": flip_a_value, "bad offset": break_an_offset}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SnapshotStore]:
    store = SnapshotStore(tmp_path / "root" / "t", fingerprint="fp")
    store.attach()
    yield store
    store.detach()


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_version_is_refused_and_set_aside(store: SnapshotStore, damage: str) -> None:
    path = published(store)
    assert store.read_latest() is not None
    DAMAGE[damage](path)
    assert store.read_latest() is None  # refused before any byte is read as a table
    assert not path.exists()
    assert (store.directory / f".damaged-{path.name}").exists()
    # The next publish replaces it and clears the damaged file away.
    published(store, rows=50)
    found = store.read_latest()
    assert found is not None
    assert found[1].num_rows == 50
    assert not list(store.directory.glob(".damaged-*"))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_runtime_rebuilds_a_damaged_version_from_the_source(
        tmp_path: Path, damage: str) -> None:
    db = make_db(tmp_path / "dim.db")
    p = provider(db, tmp_path / "scans", trigger=ManualTrigger(interval=3600.0))
    path = published(store_for(p, tmp_path / "store"))
    DAMAGE[damage](path)
    runtime = FullCachingRuntime(p, store=store_for(p, tmp_path / "store"))
    runtime.open()
    try:
        runtime.trigger_reload().result(timeout=30)  # as a real trigger fires on open
        assert runtime.lookup((150,)) == ((150, "n150", "v1"),)  # the source's row
        assert count_lines(tmp_path / "scans") == 1  # rebuilt by one scan
        assert runtime.metrics.load_count == 1
    finally:
        runtime.close()


def test_cleanup_removes_only_directories_carrying_the_store_marker(tmp_path: Path) -> None:
    root = tmp_path / "root"
    old = SnapshotStore(root / "old", fingerprint="fp")
    old.attach()
    old.detach()
    os.utime(root / "old" / "users", (1.0, 1.0))
    # Someone else's directory beside the stores, with a file named like ours.
    mine = root / "not-a-store"
    mine.mkdir()
    (mine / "users").write_text("my data")
    os.utime(mine / "users", (1.0, 1.0))
    (root / ".trash-mine").mkdir()
    removed = sweep(root, retention=timedelta(hours=1))
    assert removed == [root / "old"]
    assert (mine / "users").read_text() == "my data"
    assert (root / ".trash-mine").is_dir()


# --- the key index: covered by its own checksum in the same pointer record


def published_with_index(store: SnapshotStore, rows: int = 200) -> tuple[Path, Path]:
    """A version whose ids are spread (3 apart), so its index holds a hash table."""
    table = pa.table({"id": pa.array(range(0, 3 * rows, 3), pa.int64()),
                      "name": [f"n{i}" for i in range(rows)], "tier": ["old"] * rows})
    snapshot = FullSnapshot.build(table, ["id"], loaded_at=time.time())
    with store.try_lock() as locked:
        assert locked
        record = store.publish(snapshot.table, version=1, loaded_at=snapshot.loaded_at,
                               unique=True, index=snapshot.key_index.payload())
    assert record.index
    assert record.index_checksum
    return store.directory / record.file, store.directory / record.index


def flip_a_bucket(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40  # in the last array (the buckets)
    path.write_bytes(bytes(data))


INDEX_DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": truncate, "flipped bits": flip_a_bucket}


@pytest.mark.parametrize("damage", sorted(INDEX_DAMAGE))
def test_a_damaged_index_is_refused_and_its_version_set_aside(
        store: SnapshotStore, damage: str) -> None:
    data, index = published_with_index(store)
    found = store.open_latest()
    assert found is not None
    assert found[1].key_index is not None
    INDEX_DAMAGE[damage](index)
    assert store.open_latest() is None  # refused before any of it is mapped
    assert not data.exists()
    assert not index.exists()
    assert (store.directory / f".damaged-{index.name}").exists()
    assert (store.directory / f".damaged-{data.name}").exists()


@pytest.mark.parametrize("damage", sorted(INDEX_DAMAGE))
def test_a_runtime_rebuilds_a_version_whose_index_is_damaged(tmp_path: Path, damage: str) -> None:
    db = make_db(tmp_path / "dim.db")
    p = provider(db, tmp_path / "scans", trigger=ManualTrigger(interval=3600.0))
    _, index = published_with_index(store_for(p, tmp_path / "store"))
    INDEX_DAMAGE[damage](index)
    runtime = FullCachingRuntime(p, store=store_for(p, tmp_path / "store"))
    runtime.open()
    try:
        runtime.trigger_reload().result(timeout=30)
        assert runtime.lookup((150,)) == ((150, "n150", "v1"),)  # the source's row
        assert count_lines(tmp_path / "scans") == 1
    finally:
        runtime.close()


def test_files_checked_once_are_trusted_until_they_change(
        store: SnapshotStore, monkeypatch: pytest.MonkeyPatch) -> None:
    data, index = published_with_index(store)
    checked: list[str] = []
    real = store_module.checksum

    def counting(path: Path) -> str:
        checked.append(path.name)
        return real(path)

    monkeypatch.setattr(store_module, "checksum", counting)
    assert store.open_latest() is not None
    assert checked == []  # the publisher checked them as it wrote them
    os.utime(index)  # any write through the file system changes the identity
    assert store.open_latest() is not None
    assert checked == [data.name, index.name]
    assert store.open_latest() is not None
    assert checked == [data.name, index.name]  # recorded again, trusted again


# --- versions a runtime loaded: streamed into the store, checked the same way


def spread_db(path: Path) -> Path:
    """The customers of ``make_db``, their ids 3 apart (a hash table in the index)."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, tier TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                         [(3 * i, f"n{i}", "v1") for i in range(200)])
    return path


LOADED_DAMAGE = {**{f"data {name}": (False, damage) for name, damage in DAMAGE.items()},
                 **{f"index {name}": (True, damage) for name, damage in INDEX_DAMAGE.items()}}


@pytest.mark.parametrize("damaged", sorted(LOADED_DAMAGE))
def test_a_version_a_runtime_loaded_is_refused_when_damaged_and_rebuilt(
        tmp_path: Path, damaged: str) -> None:
    db = spread_db(tmp_path / "dim.db")
    p = provider(db, tmp_path / "scans", trigger=ManualTrigger(interval=3600.0))
    loader = FullCachingRuntime(p, store=store_for(p, tmp_path / "store"))
    loader.open()
    try:
        loader.trigger_reload().result(timeout=30)  # streamed into the store, published
        assert loader.lookup((450,)) == ((450, "n150", "v1"),)
    finally:
        loader.close()
    record = store_for(p, tmp_path / "store").latest()
    assert record is not None
    assert record.index
    assert not list((tmp_path / "store").glob(".spool-*"))  # deleted once published
    in_index, damage = LOADED_DAMAGE[damaged]
    damage(tmp_path / "store" / (record.index if in_index else record.file))
    reader = FullCachingRuntime(p, store=store_for(p, tmp_path / "store"))
    reader.open()
    try:
        reader.trigger_reload().result(timeout=30)  # not due, but unreadable: loaded again
        assert reader.lookup((450,)) == ((450, "n150", "v1"),)
        assert reader.lookup((451,)) == ()
        assert reader.cache.snapshot().version == 2
        assert count_lines(tmp_path / "scans") == 2
    finally:
        reader.close()
