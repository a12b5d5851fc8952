"""Lookup functions for tests: plain Python dimension tables that count their calls.

They are real LookupFunction implementations (our code), not mocks of a server.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cache.base import key_tuples
from lookup import AsyncLookupFunction, LookupFunction
from spark_lookup.schema import to_arrow_schema


class DictLookup(LookupFunction):
    """A dimension table in a dict; counts lookup_batch calls and keys asked, and can be
    told to fail the next N calls."""

    schema = "id BIGINT, name STRING"
    key_columns = ["id"]

    def __init__(self, rows: Sequence[tuple[Any, ...]] = (), key_index: Sequence[int] = (0,),
                 schema: str | None = None, key_columns: Sequence[str] | None = None) -> None:
        self.rows = list(rows)
        self.key_index = tuple(key_index)
        if schema is not None:
            self.schema = schema
        if key_columns is not None:
            self.key_columns = list(key_columns)
        self.batch_calls: list[list[tuple[Any, ...]]] = []
        self.fail_next = 0
        self.opened = 0
        self.closed = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def open(self) -> None:
        self.opened += 1

    def close(self) -> None:
        self.closed += 1

    def lookup(self, key: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return [r for r in self.rows if tuple(r[i] for i in self.key_index) == key]

    def lookup_batch(self, keys: Sequence[tuple[Any, ...]]) -> Mapping[tuple[Any, ...], list[Any]]:
        with self._lock:
            self.batch_calls.append(list(keys))
            if self.fail_next:
                self.fail_next -= 1
                raise ConnectionError("database is down")
        return {key: self.lookup(key) for key in keys}

    @property
    def keys_asked(self) -> list[tuple[Any, ...]]:
        return [k for call in self.batch_calls for k in call]


class ArrowDictLookup(LookupFunction):
    """A dimension table in Arrow that answers batches in Arrow (``lookup_arrow``: keys
    matched by ``index_in``, no Python object per key or row), as the connectors do;
    records the keys of every ``lookup_arrow`` call (one call: one round trip)."""

    schema = "id BIGINT, name STRING"
    key_columns = ["id"]

    def __init__(self, rows: Sequence[tuple[Any, ...]] = (), schema: str | None = None,
                 key_columns: Sequence[str] | None = None) -> None:
        if schema is not None:
            self.schema = schema
        if key_columns is not None:
            self.key_columns = list(key_columns)
        self.rows = list(rows)
        self.arrow_calls: list[list[tuple[Any, ...]]] = []
        self.key_types: list[list[pa.DataType]] = []

    def lookup(self, key: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        _, batch = self.lookup_arrow([pa.array([value]) for value in key])
        return [tuple(row.values()) for row in batch.to_pylist()]

    def lookup_arrow(self, keys: Sequence[Any]) -> tuple[pa.Int64Array, pa.RecordBatch]:
        self.arrow_calls.append(key_tuples(list(keys)))
        self.key_types.append([array.type for array in keys])
        schema = to_arrow_schema(self.schema)
        table = pa.Table.from_pylist(
            [dict(zip(schema.names, row, strict=True)) for row in self.rows], schema=schema)
        if len(keys) == 1:
            match = pc.index_in(table[self.key_columns[0]], value_set=keys[0]).fill_null(-1)
        else:  # several key columns: each row's key looked up in Python (tests only)
            asked = {key: i for i, key in enumerate(key_tuples(list(keys)))}
            names = list(self.key_columns)
            match = pa.array([asked.get(tuple(row[n] for n in names), -1)
                              for row in table.to_pylist()], pa.int64())
        rows = pc.indices_nonzero(pc.greater_equal(match, 0))
        return (match.take(rows).cast(pa.int64()),
                table.take(rows).combine_chunks().to_batches()[0] if len(rows)
                else pa.RecordBatch.from_pylist([], schema=schema))

    @property
    def keys_asked(self) -> list[tuple[Any, ...]]:
        return [k for call in self.arrow_calls for k in call]


class AsyncDictLookup(AsyncLookupFunction):
    """The async twin of DictLookup; ``delay`` seconds per lookup, ``fail_keys`` fail
    ``fail_times`` times each."""

    schema = "id BIGINT, name STRING"
    key_columns = ["id"]

    def __init__(self, rows: Sequence[tuple[Any, ...]] = (), delay: float = 0.0) -> None:
        self.rows = list(rows)
        self.delay = delay
        self.calls: list[tuple[Any, ...]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.fail_keys: dict[tuple[Any, ...], int] = {}

    async def async_lookup(self, key: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        self.calls.append(key)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if self.fail_keys.get(key, 0) > 0:
                self.fail_keys[key] -= 1
                raise ConnectionError(f"lookup of {key} failed")
            return [r for r in self.rows if (r[0],) == key]
        finally:
            self.in_flight -= 1


class RecordingSleep:
    """A picklable sleep that records the waits instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
