"""Hashes of text and binary keys: the same for a key wherever it lies in a batch, and
computed in memory a small multiple of the keys' bytes."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pyarrow as pa

from cache import DefaultLookupCache
from cache.key_hash import hash_keys


def test_a_keys_hash_does_not_depend_on_its_neighbours() -> None:
    """Keys are hashed a block of bytes at a time; a key across blocks hashes the same."""
    rng = np.random.default_rng(11)
    keys = [rng.bytes(int(n)) for n in rng.choice([0, 1, 7, 5000, 70_000, 140_000], 40)]
    alone = np.concatenate([hash_keys([pa.array([key], pa.binary())]) for key in keys])
    together = hash_keys([pa.array(keys, pa.binary())])
    assert (together == alone).all()
    sliced = pa.array([b"x" * 100_000, *keys], pa.large_binary()).slice(1)
    assert (hash_keys([sliced]) == alone).all()
    assert len(set(alone[np.unique(keys, return_index=True)[1]].tolist())) == len(set(keys))


def test_one_huge_text_key_needs_little_memory_and_none_after_close() -> None:
    """Issue 26: a 10 MB key needed 30x its bytes to hash and left 80 MiB held."""
    key = "k" * 8_000_000
    array = pa.array([key, "a", ""])
    gc.collect()
    tracemalloc.start()
    try:
        hash_keys([array])
        _, peak = tracemalloc.get_traced_memory()
        assert peak <= 4 * len(key)
        schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
        cache = DefaultLookupCache.new_builder().maximum_size(10).build()
        cache.bind(schema, ["k"])
        cache.open()
        arrow_before = pa.total_allocated_bytes()
        numpy_before, _ = tracemalloc.get_traced_memory()
        cache.put((key,), [(key, 1)])
        assert cache.get_if_present((key,)) == ((key, 1),)
        cache.invalidate((key,))  # the only entry: the store is emptied at once
        assert cache.metrics.num_cached_bytes == 0
        cache.put((key,), [(key, 2)])
        cache.close()
        gc.collect()
        numpy_after, _ = tracemalloc.get_traced_memory()
        assert numpy_after - numpy_before < 1_000_000
        assert pa.total_allocated_bytes() - arrow_before < 1_000_000
    finally:
        tracemalloc.stop()
