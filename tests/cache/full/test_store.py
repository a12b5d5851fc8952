"""SnapshotStore: crash-safe publication, memory-mapped reads, the loader's lock,
deletion of old versions, the pointer check, sweeps; and FullSnapshot.from_sorted."""

from __future__ import annotations

import doctest
import json
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import cache.full.store as store_module
import cache.full.store_write as store_write_module
from cache.full.snapshot import FullSnapshot
from cache.full.store import SnapshotStore, StoredSnapshot, sweep
from spark_lookup.errors import ConfigError
from tests.integration.processes import LockHolder, publish_and_get_killed


def table(n: int, tier: str = "v1") -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()),
                     "name": [f"n{i}" for i in range(n)], "tier": [tier] * n})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SnapshotStore]:
    s = SnapshotStore(tmp_path / "snaps" / "customers", fingerprint="fp")
    s.attach()
    yield s
    s.detach()


def publish(store: SnapshotStore, t: pa.Table, version: int, loaded_at: float = 100.0
            ) -> StoredSnapshot:
    with store.try_lock() as locked:
        assert locked
        return store.publish(t, version=version, loaded_at=loaded_at, unique=True)


def version_files(store: SnapshotStore) -> list[str]:
    return sorted(n for n in os.listdir(store.directory) if n.startswith("v"))


def test_published_version_reads_back_memory_mapped_without_a_copy(store: SnapshotStore) -> None:
    record = publish(store, table(1000), 1, loaded_at=1717400000.5)
    assert record.file == "v0000000001-1717400000500.arrow"
    before = pa.total_allocated_bytes()
    found = store.read_latest()
    assert found is not None
    got, mapped = found
    assert got == record
    assert mapped.equals(table(1000))
    assert mapped.schema.metadata is None  # our record stays in the file
    assert pa.total_allocated_bytes() == before  # the buffers are the map's pages


def test_the_pointer_is_a_versioned_json_record(store: SnapshotStore) -> None:
    record = publish(store, table(3), 7, loaded_at=5.0)
    raw = json.loads((store.directory / "CURRENT").read_text())
    assert raw == {"format": 3, "version": 7, "loaded_at": 5.0, "file": record.file,
                   "num_rows": 3, "unique": True, "fingerprint": "fp",
                   "checksum": record.checksum, "source_version": "", "index": "",
                   "index_checksum": ""}
    assert len(record.checksum) == 8
    # Format 2 (no source version, no key index) is still read: an unknown source
    # version, and its readers index the table themselves.
    old = {k: v for k, v in raw.items() if not k.startswith("index") and k != "source_version"}
    assert StoredSnapshot.from_json(json.dumps({**old, "format": 2}).encode()) == record
    raw["format"] = 4
    (store.directory / "CURRENT").write_text(json.dumps(raw))
    assert store.latest() is None  # a newer format is refused, never guessed
    with pytest.raises(ValueError, match="newer than the supported 3"):
        StoredSnapshot.from_json(json.dumps(raw).encode())
    with pytest.raises(ValueError, match="no checksum"):  # an older store: rebuilt
        StoredSnapshot.from_json(json.dumps({**raw, "format": 1}).encode())
    for bad in [b"", b"[]", b'{"format": 3}', json.dumps({**raw, "format": 3, "file": "../x"})
                .encode(), json.dumps({**raw, "format": 3, "index": "../x.index"}).encode(),
                json.dumps({**raw, "format": 2}).encode()]:
        with pytest.raises(ValueError):
            StoredSnapshot.from_json(bad)


def test_a_table_of_another_shape_is_ignored(store: SnapshotStore) -> None:
    publish(store, table(3), 1)
    other = SnapshotStore(store.directory, fingerprint="another")
    assert other.latest() is None
    assert other.read_latest() is None


def test_old_versions_and_dead_writers_temporaries_are_deleted(store: SnapshotStore) -> None:
    first = publish(store, table(10), 1)
    (store.directory / ".tmp-99999-deadbeef.arrow").write_bytes(b"half a file")
    second = publish(store, table(10, "v2"), 2, loaded_at=200.0)
    assert version_files(store) == [second.file]
    assert not any(n.startswith(".tmp-") for n in os.listdir(store.directory))
    assert first.file != second.file


def test_a_deleted_version_stays_readable_for_a_process_that_maps_it(
        store: SnapshotStore) -> None:
    publish(store, table(100), 1)
    found = store.read_latest()
    assert found is not None
    old = found[1]
    publish(store, table(100, "v2"), 2, loaded_at=200.0)
    assert len(version_files(store)) == 1  # v1 is unlinked...
    assert old.column("tier").to_pylist() == ["v1"] * 100  # ...and its pages still valid


def test_a_reader_that_lost_the_race_with_a_deletion_reads_the_pointer_again(
        store: SnapshotStore) -> None:
    first = publish(store, table(5), 1)
    second = publish(store, table(5, "v2"), 2, loaded_at=200.0)
    with pytest.raises(FileNotFoundError):
        store.read(first)
    found = store.read_latest()
    assert found is not None
    assert found[0] == second


def test_publishing_needs_the_lock_and_the_lock_is_exclusive(store: SnapshotStore) -> None:
    with pytest.raises(RuntimeError, match="needs the lock"):
        store.publish(table(1), version=1, loaded_at=0.0, unique=True)
    other = SnapshotStore(store.directory, fingerprint="fp")  # another open file: as a process
    with store.try_lock() as mine:
        assert mine
        with other.try_lock() as theirs:
            assert not theirs
    with other.try_lock() as theirs:
        assert theirs


def test_the_lock_held_by_another_process_is_contended_and_freed(store: SnapshotStore) -> None:
    holder = LockHolder(store.directory, "fp")
    try:
        assert holder.locked
        with store.try_lock() as locked:
            assert not locked
    finally:
        holder.release()
    with store.try_lock() as locked:
        assert locked


def test_a_writer_killed_midway_leaves_the_previous_version_and_nothing_partial(
        store: SnapshotStore) -> None:
    first = publish(store, table(50), 1)
    exitcode = publish_and_get_killed(store.directory, "fp", rows=1000, kill_after=3)
    assert exitcode == -9  # SIGKILL, after 3 of 100 record batches
    temporaries = [n for n in os.listdir(store.directory) if n.startswith(".tmp-")]
    assert len(temporaries) == 1
    assert (store.directory / temporaries[0]).stat().st_size > 0
    assert version_files(store) == [first.file]  # no v2 under any name
    found = store.read_latest()
    assert found is not None
    assert found[0] == first
    assert found[1].equals(table(50))
    with store.try_lock() as locked:  # the kernel released the dead writer's lock
        assert locked
        second = store.publish(table(50, "v2"), version=2, loaded_at=300.0, unique=True)
    assert version_files(store) == [second.file]
    assert not any(n.startswith(".tmp-") for n in os.listdir(store.directory))


# --- a version spooled as it is loaded (SnapshotStore.spool, publish(spool=...))


def spooled(store: SnapshotStore, t: pa.Table, batch_rows: int = 7) -> tuple[pa.Table, Any]:
    spool = store.spool(t.schema)
    for batch in t.to_batches(batch_rows):
        spool.append(batch)
    return spool.finish(), spool


@pytest.mark.parametrize("batch_rows", [None, 30])
def test_a_spooled_table_is_published_byte_for_byte_as_in_memory(
        tmp_path: Path, batch_rows: int | None) -> None:
    t = FullSnapshot.build(table(100).append_column("score", pa.array(
        [None if i % 9 == 0 else i / 3 for i in range(100)])), ["id"], loaded_at=5.0)
    records = []
    for name in ("in-memory", "spooled"):
        s = SnapshotStore(tmp_path / name / "t", fingerprint="fp", batch_rows=batch_rows)
        with s.try_lock() as locked:
            assert locked
            if name == "spooled":
                data, spool = spooled(s, t.table)
                records.append(s.publish(data, version=1, loaded_at=5.0, unique=True,
                                         index=t.key_index.payload(), spool=spool))
                spool.discard()
            else:
                records.append(s.publish(t.table, version=1, loaded_at=5.0, unique=True,
                                         index=t.key_index.payload()))
        assert (s.directory / records[-1].file).read_bytes() == (
            tmp_path / "in-memory" / "t" / records[0].file).read_bytes()
        assert not [n for n in os.listdir(s.directory) if n.startswith((".spool-", ".tmp-"))]
    assert records[0] == records[1]  # the same checksums


def test_a_spooled_table_is_written_from_its_files_not_through_its_map(
        store: SnapshotStore, monkeypatch: pytest.MonkeyPatch) -> None:
    copied: list[int] = []
    real = store_write_module._ChecksummingSink._copy

    def counting(self: Any, path: Path, start: int, size: int) -> None:
        copied.append(size)
        real(self, path, start, size)

    monkeypatch.setattr(store_write_module._ChecksummingSink, "_copy", counting)
    with store.try_lock():
        data, spool = spooled(store, table(1000))
        store.publish(data, version=1, loaded_at=5.0, unique=True, spool=spool)
        assert sum(copied) == sum(span.size for span in spool.spans())
        spool.discard()
    found = store.read_latest()
    assert found is not None
    assert found[1].equals(table(1000))


def test_spools_need_the_lock_and_dead_loaders_spools_are_deleted(
        store: SnapshotStore) -> None:
    with pytest.raises(RuntimeError, match="needs the lock"):
        store.spool(table(1).schema)
    (store.directory / ".spool-99999-deadbeef-0-0.values").write_bytes(b"left by a crash")
    with store.try_lock():
        data, spool = spooled(store, table(10))
        assert not (store.directory / ".spool-99999-deadbeef-0-0.values").exists()
        (store.directory / ".spool-99999-deadbeef-0-1.values").write_bytes(b"another")
        with pytest.raises(ValueError, match="the spool finished"):
            store.publish(table(10), version=1, loaded_at=5.0, unique=True, spool=spool)
        store.publish(data, version=1, loaded_at=5.0, unique=True, spool=spool)
        assert not (store.directory / ".spool-99999-deadbeef-0-1.values").exists()
        assert all(spool.holds(n) for n in os.listdir(store.directory) if n.startswith(".spool"))
        spool.discard()


def test_the_pointer_key_changes_with_every_publication(store: SnapshotStore) -> None:
    assert store.pointer_key() is None
    publish(store, table(2), 1)
    first = store.pointer_key()
    assert first is not None
    assert store.pointer_key() == first
    publish(store, table(2), 2, loaded_at=200.0)
    assert store.pointer_key() != first


def test_an_empty_table_round_trips(store: SnapshotStore) -> None:
    publish(store, table(0), 1)
    found = store.read_latest()
    assert found is not None
    assert found[1].num_rows == 0
    assert found[1].schema.names == ["id", "name", "tier"]


def test_failures_are_recorded_for_waiting_processes(store: SnapshotStore) -> None:
    assert store.last_failure() is None
    store.record_failure(123.5, "ConnectionError('down')")
    assert store.last_failure() == (123.5, "ConnectionError('down')")


def test_directories_must_be_private(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        SnapshotStore(shared / "t").attach()
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ConfigError, match="not a directory"):
        SnapshotStore(tmp_path / "link" / "t").try_lock().__enter__()
    with pytest.raises(ConfigError, match="letters, digits"):
        SnapshotStore(tmp_path / "..")
    with pytest.raises(ConfigError, match="batch_rows"):
        SnapshotStore(tmp_path / "t", batch_rows=0)


def test_sweep_deletes_only_stores_unused_for_the_retention(tmp_path: Path) -> None:
    root = tmp_path / "root"
    old, used, recent = (SnapshotStore(root / n) for n in ("old", "used", "recent"))
    for s in (old, used, recent):
        s.attach()
    old.detach()
    recent.detach()
    os.utime(root / "old" / "users", (1.0, 1.0))
    os.utime(root / "used" / "users", (1.0, 1.0))  # old, but a process still uses it
    removed = sweep(root, retention=timedelta(hours=1))
    assert removed == [root / "old"]
    assert sorted(os.listdir(root)) == ["recent", "used"]
    used.detach()


def test_attach_after_a_sweep_makes_a_new_store(tmp_path: Path) -> None:
    s = SnapshotStore(tmp_path / "root" / "t")
    s.attach()
    s.detach()
    os.utime(tmp_path / "root" / "t" / "users", (1.0, 1.0))
    assert sweep(tmp_path / "root") == [tmp_path / "root" / "t"]
    s.attach()
    assert (tmp_path / "root" / "t" / "users").exists()
    s.detach()


def test_from_sorted_indexes_what_build_made_even_in_several_chunks() -> None:
    raw = pa.table({"k": [3, 1, 2, 1, None, 3, 3], "v": list("abcdefg")})
    built = FullSnapshot.build(raw, ["k"], loaded_at=1.0)
    chunked = pa.Table.from_batches(built.table.to_batches(max_chunksize=2))
    for unique in (None, False):
        again = FullSnapshot.from_sorted(chunked, ["k"], loaded_at=1.0, unique=unique)
        assert again.offsets.tolist() == built.offsets.tolist()
        assert again.num_keys == built.num_keys == 3
        probes = [(1,), (2,), (3,), (4,)]
        assert [a.tolist() for a in again.locate(probes)] == [
            a.tolist() for a in built.locate(probes)]
    fast = FullSnapshot.from_sorted(pa.table({"k": [1, 2], "v": ["a", "b"]}), ["k"],
                                    loaded_at=1.0, unique=True)
    assert fast.unique
    assert fast.rows(fast.locate([(2,)])[1]) == [(2, "b")]


def test_docstring_examples_run() -> None:
    assert doctest.testmod(store_module).failed == 0
