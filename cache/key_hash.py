"""64-bit hashes of Arrow key arrays, computed in bulk (no Python object per key).

A key of one integer-like column (integers, booleans, dates, timestamps, durations) or
one floating column hashes to its own 64 bits, so equal hashes are equal keys; every
other key (text, binary, decimals, several columns) hashes to a mix whose matches the
cache confirms by comparing the keys themselves.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["hash_keys", "is_exact", "spread"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_BASE = np.uint64(0x100000001B3)  # FNV's 64-bit prime, as the polynomial's base
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
# BASE**p is _LOW[p % 4096] * (BASE**4096)**(p // 4096): two small tables, not one
# entry per byte of the longest key (80 MB, kept for good, for one 10 MB key).
_LOW_BITS = 12
_LOW_MASK = (1 << _LOW_BITS) - 1
_LOW = np.cumprod(np.concatenate(([np.uint64(1)], np.full(_LOW_MASK, _BASE, dtype=np.uint64))),
                  dtype=np.uint64)  # wraps modulo 2**64, as meant
_STRIDE = np.uint64(int(_LOW[-1]) * int(_BASE) & (2**64 - 1))  # BASE**4096
# Bytes hashed per pass: the temporaries (about 50 bytes a byte) stay a few MiB however
# long the keys, and a batch of short keys is still one or two passes.
_BLOCK = 1 << 16


def spread(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: neighbouring integers land far apart (bucket choice)."""
    z = values.astype(np.uint64, copy=True)
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def _integer_like(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(arrow_type) or pa.types.is_boolean(arrow_type)
        or pa.types.is_temporal(arrow_type)
    )


def is_exact(types: Sequence[pa.DataType]) -> bool:
    """Whether keys of these column types hash to themselves (no comparison needed)."""
    if len(types) != 1:
        return False
    only = types[0]
    return _integer_like(only) or pa.types.is_floating(only)


def _high_powers(length: int) -> np.ndarray:
    """``(BASE**4096)**k`` for every ``k`` a position below ``length`` needs."""
    grown = np.full((length >> _LOW_BITS) + 1, _STRIDE, dtype=np.uint64)
    grown[0] = 1
    return np.cumprod(grown, dtype=np.uint64)


def _bytes_hash(array: pa.Array) -> np.ndarray:
    """A polynomial hash of each value's bytes (modulo 2**64), mixed with its length:
    the sum of ``(byte + 1) * BASE**position``, summed a block of bytes at a time."""
    large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    _, offsets_buffer, data_buffer = array.buffers()[:3]
    n = len(array)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if large else np.int32)
    offsets = offsets[array.offset : array.offset + n + 1].astype(np.int64)
    first = int(offsets[0]) if n else 0
    lengths = np.diff(offsets)
    total = int(offsets[-1]) - first if n else 0
    hashes = np.zeros(n, dtype=np.uint64)
    if total:
        data = np.frombuffer(data_buffer, dtype=np.uint8)[first : first + total]
        starts = offsets[:-1] - first
        ends = offsets[1:] - first
        high = _high_powers(int(lengths.max()))
        for low in range(0, total, _BLOCK):
            top = min(low + _BLOCK, total)
            # The keys with bytes in [low, top): a run of them (empty ones included).
            k0 = int(np.searchsorted(starts, low, side="right")) - 1
            k1 = int(np.searchsorted(starts, top - 1, side="right"))
            begin = np.clip(starts[k0:k1], low, top)
            end = np.clip(ends[k0:k1], low, top)
            position = np.arange(low, top, dtype=np.int64)
            position -= np.repeat(starts[k0:k1], end - begin)
            terms = data[low:top].astype(np.uint64)
            terms += np.uint64(1)
            terms *= _LOW[position & _LOW_MASK]
            position >>= _LOW_BITS
            terms *= high[position]
            del position
            sums = np.zeros(top - low + 1, dtype=np.uint64)
            np.cumsum(terms, out=sums[1:])
            del terms
            hashes[k0:k1] += sums[end - low] - sums[begin - low]
    return spread(hashes ^ (lengths.astype(np.uint64) * _GOLDEN))


def _column_hash(array: pa.Array) -> np.ndarray:
    arrow_type = array.type
    if _integer_like(arrow_type):
        if pa.types.is_temporal(arrow_type):  # its integer, as stored
            array = array.view(pa.int32() if arrow_type.bit_width == 32 else pa.int64())
        as_int = array if pa.types.is_uint64(arrow_type) else pc.cast(array, pa.int64())
        return np.asarray(as_int.to_numpy(zero_copy_only=False)).view(np.uint64)
    if pa.types.is_floating(arrow_type):
        values = np.asarray(pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False))
        return (values + 0.0).view(np.uint64)  # -0.0 is 0.0
    if pa.types.is_decimal128(arrow_type):
        words = np.frombuffer(array.buffers()[1], dtype=np.uint64)
        words = words[2 * array.offset : 2 * (array.offset + len(array))].reshape(-1, 2)
        return spread(words[:, 0] ^ spread(words[:, 1] + _GOLDEN))
    if (pa.types.is_string(arrow_type) or pa.types.is_binary(arrow_type)
            or pa.types.is_large_string(arrow_type) or pa.types.is_large_binary(arrow_type)):
        return _bytes_hash(array)
    if pa.types.is_fixed_size_binary(arrow_type):
        return _bytes_hash(pc.cast(array, pa.binary()))
    if pa.types.is_decimal(arrow_type):  # wider than 128 bits: its canonical text
        return _bytes_hash(pc.cast(array, pa.string()))
    raise TypeError(f"keys of type {arrow_type} cannot be cached")


def hash_keys(arrays: Sequence[pa.Array]) -> np.ndarray:
    """One ``uint64`` per key (row of ``arrays``, which hold no nulls)."""
    columns = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    if len(columns) == 1:
        only = _column_hash(columns[0])
        return only if is_exact([columns[0].type]) else spread(only)
    combined = np.zeros(len(columns[0]), dtype=np.uint64)
    for column in columns:
        combined = spread(combined * _BASE + _column_hash(column) + _GOLDEN)
    return combined
