"""What the connector lookup functions share: keys read as their columns' Spark types
([`connectors.keys.KeyCodec`][]), each batch answered by one query of the store."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from cache.base import Key, Row
from connectors.keys import EncodedKeys, KeyCodec
from connectors.policy import CountsBadValues
from connectors.rows import group_rows, python_rows
from lookup.function import LookupFunction
from spark_lookup.schema import to_arrow_schema


class KeyedLookupFunction(CountsBadValues, LookupFunction):
    """A lookup function whose store answers a batch of encoded keys with the position
    of each row's key and the rows (`_query`)."""

    _codec: KeyCodec
    _struct: T.StructType

    @abstractmethod
    def _query(self, encoded: EncodedKeys) -> tuple[pa.Int64Array, pa.RecordBatch]:
        """The rows of the distinct encoded keys, and the index of each row's key."""

    @property
    def struct(self) -> T.StructType:
        """The dimension schema as a ``StructType``."""
        return self._struct

    def lookup(self, key: Key) -> Sequence[Row]:
        """The rows whose key columns equal ``key``; one round trip.

        Runs on executors. Raises as [`lookup_batch`][] does.
        """
        return self.lookup_batch([key])[key]

    def lookup_batch(self, keys: Sequence[Key]) -> Mapping[Key, Sequence[Row]]:
        """The rows of every key of ``keys`` (an entry for each, empty for no match), in
        one round trip (one statement or pipeline per batch).

        Runs on executors, possibly from several threads.

        Raises
        ------
        ConfigError
            For a key of the wrong length, a key value of a kind that can never equal
            its column's, or one its column's type cannot hold (naming key and column);
            for Redis, an ambiguous key part that the stored value cannot confirm.
        ConnectorError
            If the store fails (transient or permanent); names the table or Redis key.
        BadValueError
            Under ``mode="FAILFAST"``, for a stored value that cannot be read.
        TypeError
            If a key is not a tuple.
        """
        encoded = self._codec.encode(keys)
        if not len(encoded):
            return {key: [] for key in keys}
        index, batch = self._query(encoded)
        return group_rows(keys, encoded.positions, index.to_pylist(), python_rows(batch))

    def lookup_arrow(self, keys: Sequence[Any]) -> tuple[pa.Int64Array, pa.RecordBatch]:
        """A batched lookup in Arrow end to end: ``keys`` are one array per key column
        (distinct keys, no nulls, cast here to the key columns' types), the result the
        position of each row's key and the rows, with no Python object per key or row.

        Runs on executors. Raises as [`lookup_batch`][] does.
        """
        return self._arrow_answer(keys, self._query)

    def _arrow_answer(self, keys: Sequence[Any],
                      query: Callable[[EncodedKeys], tuple[pa.Int64Array, pa.RecordBatch]]
                      ) -> tuple[pa.Int64Array, pa.RecordBatch]:
        """`lookup_arrow`'s answer, the encoded keys asked of ``query``."""
        encoded = self._codec.encode_arrays(keys)
        if not len(encoded):
            schema = to_arrow_schema(self._struct)
            return pa.array([], pa.int64()), pa.RecordBatch.from_pylist([], schema=schema)
        index, batch = query(encoded)
        return encoded.original_positions(index), batch
