"""The key index of a full snapshot: flat numpy arrays, built once, mapped by every reader.

Design notes: DESIGN.md, cache/ ``cache/full/index.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cache.full.dense_keys import DenseKeys, dense_rows
from cache.hash_table import HashTable
from cache.key_hash import hash_keys, is_exact

__all__ = ["FORMAT", "HASH_VERSION", "KeyIndex"]

FORMAT = 1
"""Version of the index's header and arrays; another one is rebuilt, never guessed."""

HASH_VERSION = 1
"""Version of `cache.key_hash.hash_keys`: an index hashed otherwise is rebuilt."""

_INTEGER_LIKE = (pa.types.is_integer, pa.types.is_temporal)
# Keys hashed or checked at once: the temporaries (a dozen words a key) stay a few MB,
# small beside a key index (1 << 18 held 40 MB of them, no faster).
_CHUNK = 1 << 16


def _combined(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


@dataclass(frozen=True, eq=False)  # eq: numpy arrays do not compare to one bool
class _HashedKeys:
    """A hash index: each group's key hash (by group number) and the hash table finding
    them. ``hashes_in_table``: the hashes are the key column's own bytes (one 64-bit
    integer-like column, a key a row), neither stored in the index file nor copied by a
    reader."""

    hashes: np.ndarray
    buckets: HashTable
    hashes_in_table: bool

    @classmethod
    def of(cls, hashes: np.ndarray, hashes_in_table: bool) -> _HashedKeys:
        buckets = HashTable()
        buckets.rebuild(hashes)
        return cls(hashes, buckets, hashes_in_table)

    @property
    def nbytes(self) -> int:
        own = 0 if self.hashes_in_table else int(self.hashes.nbytes)
        return self.buckets.nbytes + own


class KeyIndex:
    """The groups of a sorted table's distinct keys (see the module's docstring).

    Build it with `build` (the loading process) or `from_payload` (a process
    mapping a published one). Immutable and thread-safe.

    Attributes
    ----------
    num_keys : int
    offsets : numpy.ndarray or None
        ``int64``, ``num_keys + 1`` row offsets; None when every key has one row.
    """

    __slots__ = ("_columns", "_dense", "_exact", "_hashed_keys", "_types", "num_keys",
                 "offsets")

    def __init__(self, table: pa.Table, key_columns: Sequence[str], num_keys: int,
                 offsets: np.ndarray | None = None, *, dense: DenseKeys | None = None,
                 hashed: _HashedKeys | None = None) -> None:
        self._columns = [table.column(name) for name in key_columns]
        self._types = [column.type for column in self._columns]
        self._exact = is_exact(self._types)
        self.num_keys = num_keys
        self.offsets = offsets
        # Keys are found by their dense range, or by their hashes; neither: no keys.
        self._dense = dense
        self._hashed_keys = hashed

    @staticmethod
    def hashes_needed(types: Sequence[pa.DataType]) -> bool:
        """Whether `of_unique` hashes keys of these column types (all but one
        64-bit integer-like column, which is its own hash array): a load may compute
        them batch by batch (`row_hashes`) and give them to it."""
        only = types[0] if len(types) == 1 else None
        return only is None or not (any(test(only) for test in _INTEGER_LIKE)
                                    and only.bit_width == 64)

    @staticmethod
    def row_hashes(arrays: Sequence[pa.Array]) -> np.ndarray:
        """The hash of each row of key ``arrays`` (no nulls) that `of_unique`
        enters in its table."""
        return _hashes_of([_combined(array) for array in arrays])

    @classmethod
    def of_unique(cls, table: pa.Table, key_columns: Sequence[str],
                  hashes: np.ndarray | None = None) -> KeyIndex | None:
        """Index ``table`` in the order it is in (no null key, one chunk per column) when
        every key has one row: group ``g`` is row ``g``, nothing is sorted. None when a
        key has several rows (sort the table and `build` it).

        ``hashes``, when given, are `row_hashes` of the table's key columns (a
        load computed them as the rows arrived): the key columns are then read only
        where two keys share a hash, not hashed here."""
        n = table.num_rows
        arrays = [_combined(table.column(name)) for name in key_columns]
        if len(arrays) == 1 and any(test(arrays[0].type) for test in _INTEGER_LIKE):
            dense, unique = dense_rows(arrays[0])
            if unique is False:
                return None
            if dense is not None:
                return cls(table, key_columns, n, dense=dense)
        if not n:
            return cls(table, key_columns, 0)
        in_table = _column_hashes([table.column(name) for name in key_columns])
        if in_table is not None:
            hashes = in_table
        elif hashes is None:
            hashes = _hashes_of(arrays)
        elif len(hashes) != n:
            raise ValueError(f"{len(hashes)} key hashes for a table of {n} rows")
        hashed = _HashedKeys.of(hashes, in_table is not None)
        exact = is_exact([a.type for a in arrays])
        for start in range(0, n, _CHUNK):
            # A key whose hash finds an earlier row repeats that row's hash: the same key
            # (exact hashes), or a collision, told apart by comparing the keys.
            stop = min(start + _CHUNK, n)
            found, _ = hashed.buckets.find(hashes[start:stop], hashes)
            again = np.flatnonzero(found != np.arange(start, stop))
            if not len(again):
                continue
            if exact:
                return None
            rows = pa.array(again + start, type=pa.int64())
            earlier = pa.array(found[again], type=pa.int64())
            same = np.ones(len(again), dtype=bool)
            for array in arrays:
                equal = pc.equal(array.take(rows), array.take(earlier))
                same &= np.asarray(equal.to_numpy(zero_copy_only=False), dtype=bool)
            if same.any():
                return None
        return cls(table, key_columns, n, hashed=hashed)

    # --- building

    @classmethod
    def build(cls, table: pa.Table, key_columns: Sequence[str], unique: bool) -> KeyIndex:
        """Index ``table``: sorted by ``key_columns``, no null key; ``unique`` when every
        key has one row."""
        n = table.num_rows
        offsets: np.ndarray | None = None
        firsts = [table.column(name) for name in key_columns]
        if not unique:
            starts = key_starts(table, key_columns)
            offsets = np.append(starts, np.int64(n))
            take = pa.array(starts, type=pa.int64())
            firsts = [column.take(take) for column in firsts]
        num_keys = n if offsets is None else len(offsets) - 1
        arrays = [_combined(column) for column in firsts]
        dense = None
        if len(arrays) == 1 and any(test(arrays[0].type) for test in _INTEGER_LIKE):
            # Sorted surrogate keys filling most of their range need no hashing at all.
            dense = DenseKeys.of(arrays[0])
        if dense is not None or not num_keys:
            return cls(table, key_columns, num_keys, offsets, dense=dense)
        in_table = _column_hashes(arrays) if offsets is None else None
        hashes = _hashes_of(arrays) if in_table is None else in_table
        del arrays, firsts
        return cls(table, key_columns, num_keys, offsets,
                   hashed=_HashedKeys.of(hashes, in_table is not None))

    def payload(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The header (JSON-able) and arrays that `from_payload` reads back."""
        header: dict[str, Any] = {
            "format": FORMAT, "hash": HASH_VERSION, "num_keys": self.num_keys,
            "num_rows": self._num_rows(), "key_types": [str(t) for t in self._types],
        }
        arrays: dict[str, np.ndarray] = {}
        if self.offsets is not None:
            arrays["offsets"] = self.offsets
        if self._dense is not None:
            header.update(mode="dense", lowest=self._dense.lowest, span=self._dense.span)
            if self._dense.positions is not None:
                arrays["positions"] = self._dense.positions
        elif (hashed := self._hashed_keys) is not None:
            header.update(mode="hash", count=hashed.buckets.count,
                          hashes="table" if hashed.hashes_in_table else "file")
            if not hashed.hashes_in_table:
                arrays["hashes"] = hashed.hashes
            arrays["buckets"] = hashed.buckets.buckets
        else:
            header.update(mode="empty")
        return header, arrays

    @classmethod
    def from_payload(cls, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                     table: pa.Table, key_columns: Sequence[str]) -> KeyIndex:
        """An index over ``table`` from what `payload` gave (mapped arrays are used
        as they are: nothing is copied). Checks, in constant time, that it is an index of
        this table by this version of the library.

        Raises
        ------
        ValueError
            When it is not (another format or hash, other key types, wrong sizes).
        """
        if header.get("format") != FORMAT or header.get("hash") != HASH_VERSION:
            raise ValueError(f"key index format {header.get('format')!r}, hash "
                             f"{header.get('hash')!r}: not this library's {FORMAT}, {HASH_VERSION}")
        types = [str(table.schema.field(name).type) for name in key_columns]
        num_keys = header.get("num_keys")
        if (header.get("key_types") != types or header.get("num_rows") != table.num_rows
                or not isinstance(num_keys, int) or not 0 <= num_keys <= table.num_rows):
            raise ValueError("the key index is not one of this table")
        offsets = _array(arrays, "offsets", np.int64, num_keys + 1, optional=True)
        if (offsets is None) != (num_keys == table.num_rows):
            raise ValueError("the key index's row offsets do not fit the table")
        mode = header.get("mode")
        if mode == "dense":
            lowest, span = header.get("lowest"), header.get("span")
            if not isinstance(lowest, int) or not isinstance(span, int) or span < num_keys:
                raise ValueError("bad dense key range")
            positions = _array(arrays, "positions", np.int32, span, optional=span == num_keys)
            dense = DenseKeys(lowest, span, positions)
            return cls(table, key_columns, num_keys, offsets, dense=dense)
        if mode == "hash":
            if header.get("hashes") == "table":
                hashes = _column_hashes([table.column(name) for name in key_columns])
                if hashes is None or offsets is not None:
                    raise ValueError("the key column cannot be the index's hashes")
            else:
                hashes = _array(arrays, "hashes", np.uint64, num_keys)
            buckets = arrays.get("buckets")
            count = header.get("count")
            if (buckets is None or buckets.dtype != np.int32 or len(buckets) < 16
                    or len(buckets) & (len(buckets) - 1) or count != num_keys):
                raise ValueError("bad hash table buckets")
            hashed = _HashedKeys(hashes, HashTable.over(buckets, num_keys),
                                 header.get("hashes") == "table")
            return cls(table, key_columns, num_keys, offsets, hashed=hashed)
        if mode == "empty" and num_keys == 0:
            return cls(table, key_columns, 0, offsets)
        raise ValueError(f"unknown key index mode {mode!r}")

    def _num_rows(self) -> int:
        return len(self._columns[0]) if self._columns else 0

    @property
    def nbytes(self) -> int:
        """Bytes of the index's arrays (mapped or not; not the table's own)."""
        total = 0 if self.offsets is None else int(self.offsets.nbytes)
        if self._dense is not None:
            total += self._dense.nbytes
        if self._hashed_keys is not None:
            total += self._hashed_keys.nbytes
        return total

    # --- probing

    def groups(self, keys: Sequence[pa.Array]) -> np.ndarray:
        """The group of each key given as one array per key column (-1: none). Keys are
        compared as values of the table's key types: a key of another type is cast
        (one that no value of the key type equals, or a null, matches nothing)."""
        n = len(keys[0]) if keys else 0
        if not self.num_keys or not n:
            return np.full(n, -1, dtype=np.int64)
        arrays, usable = self._typed(keys)
        if self._dense is not None:
            found = self._dense.groups(arrays[0])
            return found if usable is None else np.where(usable, found, -1)
        if usable is not None:
            kept = np.flatnonzero(usable)
            result = np.full(n, -1, dtype=np.int64)
            result[kept] = self._hashed(
                [a.take(pa.array(kept, type=pa.int64())) for a in arrays])
            return result
        return self._hashed(arrays)

    def _typed(self, keys: Sequence[pa.Array]) -> tuple[list[pa.Array], np.ndarray | None]:
        """The keys as arrays of the key types, and which can match (None: all)."""
        arrays: list[pa.Array] = []
        usable: np.ndarray | None = None
        for key, kind in zip(keys, self._types, strict=True):
            key = _combined(key)
            if key.type != kind:
                key = _cast(key, kind)
            if key.null_count:
                valid = key.is_valid().to_numpy(zero_copy_only=False)
                usable = valid if usable is None else usable & valid
            if pa.types.is_floating(kind):
                not_nan = ~np.isnan(key.to_numpy(zero_copy_only=False))
                usable = not_nan if usable is None else usable & not_nan
            arrays.append(key)
        if usable is not None and usable.all():
            usable = None
        return arrays, usable

    def _hashed(self, keys: Sequence[pa.Array]) -> np.ndarray:
        hashed = self._hashed_keys
        assert hashed is not None
        hashes = hash_keys(keys)
        slots, _ = hashed.buckets.find(hashes, hashed.hashes)
        if self._exact:
            return slots
        found = np.flatnonzero(slots >= 0)
        if not len(found):
            return slots
        rows = slots[found] if self.offsets is None else self.offsets[slots[found]]
        same = np.ones(len(found), dtype=bool)
        at, rows_at = pa.array(found, type=pa.int64()), pa.array(rows, type=pa.int64())
        for key, column in zip(keys, self._columns, strict=True):
            equal = pc.equal(key.take(at), column.take(rows_at))
            same &= np.asarray(pc.fill_null(equal, False).to_numpy(zero_copy_only=False),
                               dtype=bool)
        for position in found[~same].tolist():
            # Its hash is another key's: rare; walk that hash's chain comparing keys.
            slots[position] = self._walk(keys, position, int(hashes[position]))
        return slots

    def _walk(self, keys: Sequence[pa.Array], position: int, hash_value: int) -> int:
        hashed = self._hashed_keys
        assert hashed is not None
        wanted = [key[position].as_py() for key in keys]
        for slot in hashed.buckets.slots_of(hash_value, hashed.hashes):
            row = slot if self.offsets is None else int(self.offsets[slot])
            if [column[row].as_py() for column in self._columns] == wanted:
                return slot
        return -1


def _hashes_of(arrays: Sequence[pa.Array]) -> np.ndarray:
    """`hash_keys` of every row, a chunk of rows at a time: its temporaries (a
    few words a key) stay bounded however many keys a snapshot has."""
    n = len(arrays[0])
    hashes = np.empty(n, dtype=np.uint64)
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        hashes[start:stop] = hash_keys([a.slice(start, stop - start) for a in arrays])
    return hashes


def _column_hashes(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray | None:
    """The hashes `hash_keys` gives one 64-bit integer-like column of one chunk
    and no null, as a view of the column's own values (they are their own hashes);
    None for any other key."""
    if len(columns) != 1:
        return None
    column = columns[0]
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks != 1:
            return None
        column = column.chunk(0)
    kind = column.type
    if (column.null_count or not any(test(kind) for test in _INTEGER_LIKE)
            or kind.bit_width != 64):
        return None
    values = column.buffers()[1]
    return np.frombuffer(values, dtype=np.uint64, count=len(column), offset=column.offset * 8)


def _array(arrays: Mapping[str, np.ndarray], name: str, dtype: type, length: int, *,
           optional: bool = False) -> Any:
    array = arrays.get(name)
    if array is None and optional:
        return None
    if array is None or array.dtype != dtype or len(array) != length:
        raise ValueError(f"the key index's {name} array is missing or of the wrong size")
    return array


def _cast(key: pa.Array, kind: pa.DataType) -> pa.Array:
    """``key`` as values of ``kind``; a value that is no value of it becomes null."""
    try:
        return pc.cast(key, kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values = []
    for value in key:
        try:
            values.append(pc.cast(pa.array([value.as_py()], key.type), kind)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
            values.append(None)
    return pa.array(values, type=kind)


def key_starts(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """Where each key's rows start in ``table`` (sorted by ``keys``, no null key)."""
    n = table.num_rows
    if not n:
        return np.zeros(0, dtype=np.int64)
    changed = np.zeros(n - 1, dtype=bool)
    for name in keys:
        column = table.column(name)
        diff = pc.not_equal(column.slice(1), column.slice(0, n - 1))
        changed |= np.asarray(diff.to_numpy(zero_copy_only=False), dtype=bool)
    return np.concatenate(([0], np.flatnonzero(changed) + 1)).astype(np.int64)
