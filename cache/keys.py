"""Python key tuples as Arrow arrays of a cache's key types, read by the connectors' rules.

The caches answer the per-key API (``get_if_present``, ``get_all``, ``put``) from the
same Arrow store as the batch API, so each Python key is converted to its column's
Arrow type first. That conversion is [`connectors.keys.KeyCodec`][]'s (one set of
rules for lookups and caches): exact or nothing, so ``1.5`` is no key of an integer
column, ``datetime(2024, 1, 1, 23, 59)`` none of a date column, and no value is ever
rounded or truncated into another key. What differs for a cache is only the outcome:
a key that cannot be a value of its column is absent on a read, and refused on a put.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from cache.base import Key
from connectors.keys import KeyCodec
from spark_lookup.errors import ConfigError, KeyKindError
from spark_lookup.shown import shown

__all__ = ["CacheKeys", "matchable"]


def matchable(key: Key) -> bool:
    """Whether no part of ``key`` is null, NaN, NaT or ``pd.NA`` (such a key never
    matches, and is silently never cached)."""
    for value in key:
        if value is None:
            return False
        try:
            if value != value:
                return False
        except (TypeError, ValueError, ArithmeticError):  # pd.NA, a signalling NaN
            return False
    return True


class CacheKeys:
    """Converts Python keys to arrays of a cache's Arrow key types.

    Raises
    ------
    ConfigError
        At construction, for a key type no lookup key can have (lists, times...).
    """

    __slots__ = ("_codec", "types")

    def __init__(self, names: Sequence[str], types: Sequence[pa.DataType]) -> None:
        self.types = list(types)
        self._codec = KeyCodec.for_arrow(list(names), self.types, "the cache")

    def arrays(self, keys: Sequence[Key], *, strict: bool) -> tuple[list[pa.Array], np.ndarray]:
        """The distinct keys of ``keys`` that can match, as one array per key column,
        and for each key the position of its distinct key there (-1: it never matches).

        Raises
        ------
        KeyKindError
            When ``strict`` (a put), for a key that is no value of the key types (a
            wrong kind, out of range, or inexact: ``1.5`` for an integer column); a key
            holding a null or NaN is never refused, only never cached.
        """
        codec = self._codec
        try:
            encoded = codec.encode(keys)
            positions = np.asarray(encoded.positions, dtype=np.int64)
            arrays = encoded.arrays
        except (ConfigError, TypeError):  # a wrong kind or length, somewhere in the batch
            normal: list[Any] = []
            for key in keys:
                try:
                    normal.append(codec.normalize(key))
                except (ConfigError, TypeError) as exc:
                    if strict:
                        raise self._refused(key, exc) from None
                    normal.append(None)
            usable = [i for i, key in enumerate(normal) if key is not None]
            encoded = codec.encode([normal[i] for i in usable])
            positions = np.full(len(keys), -1, dtype=np.int64)
            positions[usable] = encoded.positions
            arrays = encoded.arrays
        if strict:
            for i in np.flatnonzero(positions < 0).tolist():
                if matchable(keys[i]):  # not a null: a value no key of the column equals
                    raise self._refused(keys[i], "no value of the column's type equals it")
        return arrays, positions

    def _refused(self, key: Key, why: object) -> KeyKindError:
        return KeyKindError(f"key {shown(key)} does not convert to the cache's key types "
                         f"{[str(t) for t in self.types]}: {why}")
