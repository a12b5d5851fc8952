"""Dense integer keys: a group found by subtraction (and one array read when the keys
leave gaps), exactly as the hash table would find it."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cache.full.dense_keys import DenseKeys
from cache.full.snapshot import FullSnapshot

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def test_keys_filling_their_range_need_no_array() -> None:
    dense = DenseKeys.of(pa.array([5, 6, 7, 8], pa.int64()))
    assert dense is not None
    assert dense.positions is None
    assert dense.nbytes == 0
    probe = pa.array([8, 5, 4, 9, None, 6, INT64_MIN, INT64_MAX], pa.int64())
    assert dense.groups(probe).tolist() == [3, 0, -1, -1, -1, 1, -1, -1]


def test_keys_with_gaps_map_through_one_array() -> None:
    dense = DenseKeys.of(pa.array([-3, -1, 0, 4], pa.int64()))
    assert dense is not None
    assert dense.positions is not None
    probe = pa.array([-3, -2, -1, 0, 1, 4, 5, -4], pa.int64())
    assert dense.groups(probe).tolist() == [0, -1, 1, 2, -1, 3, -1, -1]


def test_sparse_keys_are_left_to_the_hash_table() -> None:
    assert DenseKeys.of(pa.array([0, 10, 1000], pa.int64())) is None
    assert DenseKeys.of(pa.array([], pa.int64())) is None
    assert DenseKeys.of(pa.array([0, 2**40], pa.int64())) is None


def test_keys_at_the_ends_of_int64_do_not_wrap() -> None:
    top = DenseKeys.of(pa.array([INT64_MAX - 1, INT64_MAX], pa.int64()))
    assert top is not None
    probe = pa.array([INT64_MIN, INT64_MIN + 1, INT64_MAX, 0], pa.int64())
    assert top.groups(probe).tolist() == [-1, -1, 1, -1]
    bottom = DenseKeys.of(pa.array([INT64_MIN, INT64_MIN + 1], pa.int64()))
    assert bottom is not None
    probe = pa.array([INT64_MAX, INT64_MIN, -1, INT64_MIN + 1], pa.int64())
    assert bottom.groups(probe).tolist() == [-1, 0, -1, 1]


def test_unsigned_keys_past_int64() -> None:
    assert DenseKeys.of(pa.array([2**63, 2**63 + 1], pa.uint64())) is None
    dense = DenseKeys.of(pa.array([1, 2, 3], pa.uint64()))
    assert dense is not None
    assert dense.groups(pa.array([3, 1], pa.uint64())).tolist() == [2, 0]
    # A key past int64 in the batch misses alone.
    assert dense.groups(pa.array([2**64 - 1, 3, None, 2**63 + 1], pa.uint64())).tolist() == [
        -1, 2, -1, -1]


def test_dates_and_timestamps() -> None:
    days = pa.array([dt.date(2024, 1, d) for d in (1, 2, 4)], pa.date32())
    dense = DenseKeys.of(days)
    assert dense is not None
    probe = pa.array([dt.date(2024, 1, 4), dt.date(2024, 1, 3), None], pa.date32())
    assert dense.groups(probe).tolist() == [2, -1, -1]
    stamps = pa.array([0, 1, 2], pa.timestamp("us"))
    dense = DenseKeys.of(stamps)
    assert dense is not None
    assert dense.positions is None
    assert dense.groups(pa.array([2, 3], pa.timestamp("us"))).tolist() == [2, -1]


@pytest.mark.parametrize("keys", [
    np.arange(1000),                         # fills its range
    np.arange(0, 1500, 3)[:700] // 2,        # gaps, dense enough
    np.unique(np.random.default_rng(3).integers(0, 10**12, 500)),  # sparse: hashed
])
def test_a_snapshot_answers_the_same_whichever_index_it_chose(keys: np.ndarray) -> None:
    keys = np.unique(keys).astype(np.int64)
    table = pa.table({"k": keys, "v": keys * 2})
    snapshot = FullSnapshot.build(table, ["k"], loaded_at=0.0)
    rng = np.random.default_rng(5)
    probe = np.concatenate([rng.choice(keys, 300), rng.integers(-5, int(keys.max()) + 5, 300)])
    groups = snapshot.groups([pa.array(probe, pa.int64())])
    expected = pd.Index(keys).get_indexer(probe)  # keys: sorted, distinct: group = position
    assert groups.tolist() == expected.tolist()


def test_keys_in_any_order_find_their_rows() -> None:
    from cache.full.dense_keys import dense_rows

    keys = pa.array([7, 3, 5, 4, 6], pa.int64())  # fill 3..7, shuffled: a position array
    dense, unique = dense_rows(keys)
    assert unique
    assert dense is not None
    assert dense.positions is not None
    assert dense.groups(pa.array([3, 7, 8, 2, None], pa.int64())).tolist() == [1, 0, -1, -1, -1]
    in_order, _ = dense_rows(pa.array([3, 4, 5], pa.int64()))
    assert in_order is not None
    assert in_order.positions is None  # sorted and filling the range: subtraction alone
    assert dense_rows(pa.array([3, 4, 3], pa.int64())) == (None, False)  # a repeat
    assert dense_rows(pa.array([1, 2, 2, 5], pa.int64())) == (None, False)
    assert dense_rows(pa.array([0, 10**9], pa.int64())) == (None, None)  # sparse: hash it
