"""The key index of full snapshots: exact for every key type, the same after a trip
through a mapped file, and never fooled by a hash collision."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import cache.full.index as key_index_module
from cache.full.index import KeyIndex
from cache.full.index_file import map_arrays, write_arrays
from cache.full.snapshot import FullSnapshot

D = decimal.Decimal

KEYS: dict[str, tuple[pa.DataType, list[Any], list[Any]]] = {
    # type, keys in the table, probes that are not keys of it
    "dense int": (pa.int64(), list(range(100)), [-1, 100, 10**12]),
    "gapped int": (pa.int32(), [*range(0, 120, 3), 200], [1, 2, 199]),
    "sparse int": (pa.int64(), [i * 10**9 for i in range(50)], [1, -10**9]),
    "uint64 past int64": (pa.uint64(), [0, 2**63, 2**64 - 1], [1, 2**63 + 1]),
    "string": (pa.string(), [f"k{i}" for i in range(60)] + ["", "é"], ["k60", "K1", "e"]),
    "binary": (pa.binary(), [b"\x00", b"\x00\x00", b"ab"], [b"", b"a"]),
    "date": (pa.date32(), [dt.date(2024, 1, d) for d in range(1, 29)], [dt.date(2023, 1, 1)]),
    "timestamp": (pa.timestamp("us", "UTC"),
                  [dt.datetime(2024, 1, 1, h, tzinfo=dt.timezone.utc) for h in range(24)],
                  [dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc)]),
    "decimal": (pa.decimal128(10, 2), [D("1.00"), D("1.01"), D("-3.50")], [D("1.02")]),
    "double": (pa.float64(), [0.5, -1.25, 3.0], [0.25]),
}


def mapped(snapshot: FullSnapshot, tmp_path: Path) -> FullSnapshot:
    """The snapshot with its index written to a file and mapped back."""
    path = tmp_path / "index"
    write_arrays(path, *snapshot.key_index.payload())
    header, arrays = map_arrays(path)
    index = KeyIndex.from_payload(header, arrays, snapshot.table, snapshot.key_columns)
    assert all(not array.flags.writeable for array in arrays.values())
    return FullSnapshot(snapshot.table, snapshot.key_columns, index, 0.0, 1)


@pytest.mark.parametrize("case", sorted(KEYS))
@pytest.mark.parametrize("repeat", [1, 2])
def test_every_key_type_finds_its_rows_and_nothing_else(case: str, repeat: int,
                                                         tmp_path: Path) -> None:
    kind, keys, absent = KEYS[case]
    values = [k for k in keys for _ in range(repeat)]
    table = pa.table({"k": pa.array(values, kind), "row": range(len(values))})
    built = FullSnapshot.build(table, ["k"], loaded_at=0.0)
    for snapshot in (built, mapped(built, tmp_path)):
        probe = pa.array([*reversed(keys), *absent, None], kind)
        groups = snapshot.groups([probe])
        found = [snapshot.table.column("k")[int(snapshot.expand(np.array([g]))[1][0])].as_py()
                 if g >= 0 else None for g in groups.tolist()]
        assert found == [*reversed(keys), *[None] * (len(absent) + 1)]


def test_composite_keys_compare_every_column(tmp_path: Path) -> None:
    table = pa.table({"a": [1, 1, 2, 2], "b": ["x", "y", "x", "y"], "v": [10, 11, 20, 21]})
    built = FullSnapshot.build(table, ["a", "b"], loaded_at=0.0)
    for snapshot in (built, mapped(built, tmp_path)):
        got = snapshot.locate([(2, "x"), (1, "y"), (1, "z"), (3, "x")])
        assert snapshot.rows(got[1]) == [(2, "x", 20), (1, "y", 11)]
        assert got[0].tolist() == [0, 1]


def test_keys_of_another_type_are_compared_as_values_of_the_key_type() -> None:
    snapshot = FullSnapshot.build(pa.table({"k": pa.array([1, 2, 300], pa.int16())}), ["k"],
                                  loaded_at=0.0)
    probe = pa.array([300, 2, 70000, None], pa.int64())  # 70000 is no INT16: no match
    assert snapshot.groups([probe]).tolist() == [2, 1, -1, -1]
    text = FullSnapshot.build(pa.table({"k": ["a", "b"]}), ["k"], loaded_at=0.0)
    assert text.groups([pa.array(["b", "c"], pa.large_string())]).tolist() == [1, -1]


def test_a_hash_collision_costs_a_walk_never_a_wrong_row(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Every key hashes alike: each probe must still find its own key, and an absent key
    # none, by comparing the keys themselves.
    monkeypatch.setattr(key_index_module, "hash_keys",
                        lambda arrays: np.full(len(arrays[0]), 42, dtype=np.uint64))
    keys = [f"k{i}" for i in range(20)]
    built = FullSnapshot.build(pa.table({"k": keys, "v": range(20)}), ["k"], loaded_at=0.0)
    for snapshot in (built, mapped(built, tmp_path)):
        probe = ["k7", "nope", "k0", "k19"]
        positions, rows = snapshot.locate([(k,) for k in probe])
        assert snapshot.rows(rows) == [("k7", 7), ("k0", 0), ("k19", 19)]
        assert positions.tolist() == [0, 2, 3]


def test_an_index_of_another_table_or_format_is_refused(tmp_path: Path) -> None:
    built = FullSnapshot.build(pa.table({"k": ["a", "b", "c"]}), ["k"], loaded_at=0.0)
    header, arrays = built.key_index.payload()
    other = pa.table({"k": ["a", "b"]})
    with pytest.raises(ValueError, match="not one of this table"):
        KeyIndex.from_payload(header, arrays, other, ["k"])
    with pytest.raises(ValueError, match="format"):
        KeyIndex.from_payload({**header, "hash": 99}, arrays, built.table, ["k"])
    with pytest.raises(ValueError, match="hashes"):
        KeyIndex.from_payload(header, {**arrays, "hashes": arrays["hashes"][:2]},
                              built.table, ["k"])


def test_a_damaged_index_file_header_is_refused(tmp_path: Path) -> None:
    built = FullSnapshot.build(pa.table({"k": ["a", "b", "c"]}), ["k"], loaded_at=0.0)
    path = tmp_path / "index"
    write_arrays(path, *built.key_index.payload())
    data = path.read_bytes()
    for bad in (data[:20], b"XXXXXXXX" + data[8:], data[:8] + (2**40).to_bytes(8, "little")
                + data[16:], data.replace(b'"buckets": ["<i4", ', b'"buckets": ["<i4", 9')):
        path.write_bytes(bad)
        with pytest.raises(ValueError):
            map_arrays(path)
