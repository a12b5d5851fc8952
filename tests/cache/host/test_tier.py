"""The host tier of partial caches: shared answers, bounds, claims, and no wrong row
whatever happens to its files (torn slots, damaged blocks, a deleted directory, a
writer killed mid-put)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cache.host.slots import ENTRY, SLOT_BYTES
from cache.host.tier import HostTier, sweep
from cache.key_hash import hash_keys

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
TEXT = pa.schema([("code", pa.string()), ("n", pa.int64())])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def tier(directory: Path, *, schema: pa.Schema = SCHEMA, key: str = "id",
         clock: Clock | None = None, maximum_size: int | None = 10_000,
         write_ttl: float | None = 60.0, missing_ttl: float | None = None) -> HostTier:
    t = HostTier(directory, schema, [key], maximum_size=maximum_size, write_ttl=write_ttl,
                 missing_ttl=missing_ttl, cache_missing_key=True,
                 clock=clock or time.time)
    t.open()
    return t


def rows_of(keys: np.ndarray, version: int = 1, each: int = 1) -> tuple[np.ndarray, pa.Table]:
    """``each`` rows per key; a row's name says its key and version."""
    index = np.repeat(np.arange(len(keys)), each)
    ids = keys[index]
    names = [f"{k}-v{version}" for k in ids.tolist()]
    return index, pa.table({"id": pa.array(ids, pa.int64()), "name": names})


def check_rows(keys: np.ndarray, answer: object) -> None:
    """Every row served is a row of the key it answers (any version)."""
    counts = answer.counts  # type: ignore[attr-defined]
    rows = answer.rows  # type: ignore[attr-defined]
    owners = np.repeat(keys, counts)
    assert rows.column("id").to_pylist() == owners.tolist()
    for key, name in zip(owners.tolist(), rows.column("name").to_pylist(), strict=True):
        assert name.startswith(f"{key}-v")


def test_one_process_puts_and_another_reads(tmp_path: Path) -> None:
    a, b = tier(tmp_path / "p"), tier(tmp_path / "p")
    try:
        keys = np.arange(100, dtype=np.int64)
        index, rows = rows_of(keys[::2], each=2)
        a.put([pa.array(keys)], index * 2, rows)
        found = b.get([pa.array(keys)])
        assert found.hit.all()  # the odd keys are cached misses (integer keys)
        assert found.counts.tolist() == [2, 0] * 50
        check_rows(keys, found)
    finally:
        a.close()
        b.close()


def test_rows_and_missing_keys_expire(tmp_path: Path) -> None:
    clock = Clock()
    t = tier(tmp_path / "p", clock=clock, write_ttl=60, missing_ttl=5)
    try:
        keys = pa.array([1, 2], pa.int64())
        t.put([keys], np.array([0]), pa.table({"id": [1], "name": ["1-v1"]}))
        clock.now += 6
        assert t.get([keys]).hit.tolist() == [True, False]  # key 2's miss lived 5 s
        age = t.get([keys]).age[0]
        assert age == pytest.approx(6)  # in-process copies live what is left
        clock.now += 55
        assert not t.get([keys]).hit.any()
    finally:
        t.close()


def test_a_missing_text_key_is_shared_and_checked_against_its_key(tmp_path: Path) -> None:
    # Its slot points at a row of its key alone: another process gets its "no rows", and
    # a text key that finds that slot (the same tag) is not answered by it.
    a, b = tier(tmp_path / "p", schema=TEXT, key="code"), tier(tmp_path / "p", schema=TEXT,
                                                              key="code")
    try:
        keys = pa.array(["a", "b"])
        a.put([keys], np.array([0]), pa.table({"code": ["a"], "n": [1]}))
        found = b.get([keys])
        assert found.hit.tolist() == [True, True]
        assert found.counts.tolist() == [1, 0]
        assert found.rows.to_pylist() == [{"code": "a", "n": 1}]
        assert b._slots is not None
        b._slots.words[_slot_of(b, "a")] = b._slots.words[_slot_of(b, "b")]
        assert b.get([keys]).hit.tolist() == [False, True]
    finally:
        a.close()
        b.close()


def test_the_size_bound_keeps_the_newest(tmp_path: Path) -> None:
    t = tier(tmp_path / "p", maximum_size=1_000)
    try:
        for start in range(0, 5_000, 500):
            keys = np.arange(start, start + 500, dtype=np.int64)
            t.put([pa.array(keys)], *rows_of(keys))
        newest = t.get([pa.array(np.arange(4_000, 5_000, dtype=np.int64))])
        assert newest.hit.all()
        check_rows(np.arange(4_000, 5_000), newest)
        assert t.get([pa.array(np.arange(0, 2_000, dtype=np.int64))]).hit.sum() == 0
        assert t.nbytes() < 5_000 * SLOT_BYTES * 10
    finally:
        t.close()


def test_torn_slots_and_damaged_blocks_are_misses(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    t = tier(directory)
    try:
        keys = np.arange(2_000, dtype=np.int64)
        t.put([pa.array(keys)], *rows_of(keys))
        generation = directory / (directory / "CURRENT").read_text()
        index = generation / "index"
        data = bytearray(index.read_bytes())
        rng = np.random.default_rng(7)
        for at in rng.integers(4096, len(data), 400):
            data[at] ^= 0xFF
        index.write_bytes(bytes(data))  # the same inode: readers see it at once
        reader = tier(directory)
        found = reader.get([pa.array(keys)])
        assert 0 < found.hit.sum() < len(keys)
        check_rows(keys, found)
        reader.close()
        segment = generation / "seg-00000"
        with open(segment, "r+b") as f:
            f.seek(64 + 16 + 200)
            f.write(b"\xff" * 64)
        fresh = tier(directory)
        found = fresh.get([pa.array(keys)])
        assert not found.hit[found.counts > 0].any()  # the block failed its CRC
        fresh.close()
    finally:
        t.close()


def test_a_deleted_tier_serves_misses_then_starts_again(tmp_path: Path) -> None:
    import shutil

    directory = tmp_path / "p"
    t = tier(directory)
    try:
        keys = np.arange(10, dtype=np.int64)
        t.put([pa.array(keys)], *rows_of(keys))
        shutil.rmtree(directory)
        assert not t.get([pa.array(keys)]).hit.any()
        directory.mkdir()
        t.put([pa.array(keys)], *rows_of(keys, version=2))
        found = t.get([pa.array(keys)])
        assert found.hit.all()
        assert found.rows.column("name").to_pylist()[0] == "0-v2"
    finally:
        t.close()


def test_claims_single_out_one_loader(tmp_path: Path) -> None:
    a, b = tier(tmp_path / "p"), tier(tmp_path / "p")
    try:
        keys = [pa.array([1, 2, 3], pa.int64())]
        mine, others = a.claim(keys)
        assert mine.all()
        assert not others.any()
        assert b.get(keys).claimed.all()
        a.put([keys[0].slice(0, 2)], np.array([0, 1]),
              pa.table({"id": [1, 2], "name": ["1-v1", "2-v1"]}))
        a.release([keys[0].slice(2)])  # key 3 failed: its claim ends
        found = b.get(keys)
        assert found.hit.tolist() == [True, True, False]
        assert not found.claimed.any()
    finally:
        a.close()
        b.close()


def _claim_and_die(directory: str, ready: multiprocessing.synchronize.Event) -> None:
    t = tier(Path(directory))
    t.claim([pa.array([7], pa.int64())])
    ready.set()
    time.sleep(60)


def test_a_dead_loaders_claim_is_not_waited_for(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    child = context.Process(target=_claim_and_die, args=(str(tmp_path / "p"), ready))
    child.start()
    t = tier(tmp_path / "p")
    try:
        assert ready.wait(60)
        mine, others = t.claim([pa.array([7], pa.int64())])
        assert others.all()
        assert not mine.any()
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        mine, others = t.claim([pa.array([7], pa.int64())])
        assert mine.all()
        assert not others.any()
    finally:
        if child.is_alive():
            child.kill()
        t.close()


def _write_forever(directory: str, ready: multiprocessing.synchronize.Event) -> None:
    t = tier(Path(directory), maximum_size=3_000)
    version = 0
    rng = np.random.default_rng(os.getpid())
    while True:
        version += 1
        keys = np.unique(rng.integers(0, 5_000, 700)).astype(np.int64)
        t.put([pa.array(keys)], *rows_of(keys, version, each=int(rng.integers(1, 3))))
        ready.set()


def test_writers_killed_mid_put_leave_no_wrong_row(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    reader = tier(tmp_path / "p")
    keys = np.arange(5_000, dtype=np.int64)
    served = 0
    try:
        for round_ in range(4):
            ready = context.Event()
            child = context.Process(target=_write_forever, args=(str(tmp_path / "p"), ready))
            child.start()
            try:
                assert ready.wait(60)
                deadline = time.monotonic() + 0.3 + 0.1 * round_
                while time.monotonic() < deadline:
                    found = reader.get([pa.array(keys)])
                    check_rows(keys, found)
                    served += int(found.hit.sum())
            finally:
                os.kill(child.pid, signal.SIGKILL)  # wherever it is: mid-put, mid-compaction
                child.join(10)
            found = reader.get([pa.array(keys)])
            check_rows(keys, found)
        assert served > 0
        survivor = tier(tmp_path / "p")  # and the next writer carries on
        survivor.put([pa.array(keys[:10])], *rows_of(keys[:10], 99))
        assert survivor.get([pa.array(keys[:10])]).rows.column("name")[0].as_py() == "0-v99"
        survivor.close()
    finally:
        reader.close()


def test_a_sweep_deletes_only_tiers_nobody_uses(tmp_path: Path) -> None:
    used, unused = tier(tmp_path / "used"), tier(tmp_path / "unused")
    unused.close()
    (tmp_path / "not-ours").mkdir()
    try:
        removed = sweep(tmp_path)
        assert [p.name for p in removed] == ["unused"]
        assert (tmp_path / "used").exists()
        assert (tmp_path / "not-ours").exists()
    finally:
        used.close()


def test_many_small_puts_are_merged_into_few_blocks(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    t = tier(directory, maximum_size=None, write_ttl=None)
    try:
        rng = np.random.default_rng(3)
        latest: dict[int, int] = {}
        for version in range(1, 301):
            keys = np.unique(rng.integers(0, 3_000, 40)).astype(np.int64)
            t.put([pa.array(keys)], *rows_of(keys, version, each=1 + version % 2))
            latest.update(dict.fromkeys(keys.tolist(), version))
        assert t._segments is not None
        _, blocks = t._segments.blocks(t._segments.last())
        # Every block stays readable, but reads touch few: merged blocks, not 300.
        generation = directory / (directory / "CURRENT").read_text()
        found = t.get([pa.array(np.arange(3_000, dtype=np.int64))])
        check_rows(np.arange(3_000), found)
        wanted = sorted(latest)
        assert np.flatnonzero(found.hit).tolist() == wanted
        names = found.rows.column("name").to_pylist()
        owners = np.repeat(np.arange(3_000), found.counts)
        served = {int(k): int(n.split("-v")[1]) for k, n in zip(owners, names, strict=True)}
        assert served == latest  # each key's newest rows, through every merge
        assert generation.exists()
        assert t._slots is not None
        _, entries = t._slots.whole()
        # Blocks the slots refer to:
        touched = len(np.unique(entries["segment"] * (1 << 48) + entries["offset"]))
        assert touched <= 16 + 12
        assert len(blocks) > touched  # merged blocks stay in the file until compaction
    finally:
        t.close()


def _slot_of(t: HostTier, key: int | str) -> int:
    from cache.key_hash import hash_keys

    assert t._slots is not None
    kind = pa.string() if isinstance(key, str) else pa.int64()
    found, _ = t._slots.find(hash_keys([pa.array([key], kind)]))
    assert found[0] >= 0
    return int(found[0])


def test_a_slot_half_written_is_a_miss_whichever_word_landed(tmp_path: Path) -> None:
    # A writer killed between a slot's two 8-byte stores: old and new words mixed.
    t = tier(tmp_path / "p")
    try:
        keys = np.arange(50, dtype=np.int64)
        t.put([pa.array(keys)], *rows_of(keys, 1))
        assert t._slots is not None
        at = _slot_of(t, 7)
        old = t._slots.words[at].copy()
        t.put([pa.array(keys[7:8])], *rows_of(keys[7:8], 2, each=2))
        assert _slot_of(t, 7) == at
        new = t._slots.words[at].copy()
        for mixed in ([new[0], old[1]], [old[0], new[1]], [new[0], 0], [0, new[1]]):
            t._slots.words[at] = mixed
            found = t.get([pa.array(keys)])
            assert not found.hit[7]
            assert found.hit.sum() == 49
            check_rows(keys, found)
        t._slots.words[at] = new
        assert t.get([pa.array(keys[7:8])]).rows.column("name").to_pylist() == ["7-v2"] * 2
    finally:
        t.close()


def test_a_missing_key_is_checked_against_its_key(tmp_path: Path) -> None:
    # A slot keeps a tag, not the key: an answer "no rows" is checked against a row
    # holding the key, so another key's slot (same tag) never answers for it.
    t = tier(tmp_path / "p")
    try:
        keys = pa.array([1, 2], pa.int64())
        t.put([keys], np.array([0]), pa.table({"id": [1], "name": ["1-v1"]}))
        found = t.get([keys])
        assert found.hit.tolist() == [True, True]
        assert found.counts.tolist() == [1, 0]
        assert found.rows.num_rows == 1  # the key-only row of 2 is never served
        assert t._slots is not None
        one, two = _slot_of(t, 1), _slot_of(t, 2)
        t._slots.words[one] = t._slots.words[two]  # key 1 finds key 2's "no rows"
        assert t.get([keys]).hit.tolist() == [False, True]
    finally:
        t.close()


def test_write_times_survive_merges_and_compactions(tmp_path: Path) -> None:
    clock = Clock()
    t = tier(tmp_path / "p", clock=clock, write_ttl=60, missing_ttl=None, maximum_size=None)
    try:
        early = np.arange(0, 100, dtype=np.int64)
        index, rows = rows_of(early[::2])
        t.put([pa.array(early)], index * 2, rows)  # odd keys: missing
        for round_ in range(40):  # many small puts: merged with the first block
            clock.now += 1
            later = np.arange(1_000 + 10 * round_, 1_010 + 10 * round_, dtype=np.int64)
            t.put([pa.array(later)], *rows_of(later))
        assert t._segments is not None
        t._compact(np.zeros(0, dtype=ENTRY))
        found = t.get([pa.array(early)])
        assert found.hit.all()
        assert found.age == pytest.approx(np.full(100, 40.0))
        assert found.counts.tolist() == [1, 0] * 50
        clock.now += 21  # 61 s after the first put, 21 after the last
        assert not t.get([pa.array(early)]).hit.any()
        assert t.get([pa.array(np.arange(1_390, 1_400, dtype=np.int64))]).hit.all()
    finally:
        t.close()


def test_a_damaged_run_is_a_miss_and_a_checked_run_is_read_from_its_copy(
        tmp_path: Path) -> None:
    a, b = tier(tmp_path / "p"), tier(tmp_path / "p")
    try:
        keys = np.arange(10, dtype=np.int64)
        a.put([pa.array(keys)], *rows_of(keys))
        assert a._slots is not None
        run = int(a._slots.find(hash_keys([pa.array([3], pa.int64())]))[1]["run"][0])
        good = a._slots.runs[run].copy()
        # Checked once by a: its copy serves from then on, whatever the file says.
        assert a.get([pa.array(keys)]).hit.all()
        a._slots.runs["base"][run] = good["base"] + 1  # damaged in the file
        found = a.get([pa.array(keys)])
        assert found.hit.all()
        check_rows(keys, found)
        # b reads the run for the first time: its checksum fails, its keys are misses.
        found = b.get([pa.array(keys)])
        assert not found.hit.all()
        check_rows(keys, found)
    finally:
        a.close()
        b.close()
