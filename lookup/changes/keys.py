"""The keys of a feed's change notifications as arrays of a provider's key types."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from connectors.json_keys import decode_json_keys
from connectors.keys import KeyCodec
from lookup.changes.feed import ChangeFeed

__all__ = ["ChangedKeys"]


class ChangedKeys:
    """Reads notified keys (tuples of JSON values in the feed's column order) as the
    provider's keys: reordered to its key columns, decoded to their Spark types, and
    checked and encoded by its [`KeyCodec`][]."""

    def __init__(self, feed: ChangeFeed, key_columns: Sequence[str], key_types: Sequence[Any],
                 codec: KeyCodec) -> None:
        self.names = list(key_columns)
        self._types = list(key_types)
        self.codec = codec
        # Position in a feed's key of each of the provider's key columns.
        order = [feed.key_columns.index(name) for name in key_columns]
        self._order = None if order == list(range(len(order))) else order

    def arrays(self, keys: list[tuple[Any, ...]]) -> list[pa.Array] | None:
        """The matchable keys among ``keys`` as arrays of the key types (None: none).

        Raises
        ------
        ValueError, TypeError
            For a key that is no key of the provider.
        """
        if not keys:
            return None
        if self._order is not None:
            order = self._order
            keys = [tuple(key[i] for i in order) for key in keys]
        encoded = self.codec.encode(decode_json_keys(keys, self._types, self.names),
                                    skip_null_keys=True)
        return encoded.arrays if len(encoded) else None
