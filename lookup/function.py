"""Lookup functions: how dimension rows are fetched by key (Flink's LookupFunction)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pyspark.sql.types import StructType

from cache.base import Key, Row, key_tuples
from spark_lookup.connection_budget import ConnectionBudget
from spark_lookup.errors import ConfigError
from spark_lookup.schema import SchemaLike, parse_schema

__all__ = ["AsyncLookupFunction", "LookupFunction", "LookupFunctionBase"]


class LookupFunctionBase:
    """What synchronous and asynchronous lookup functions share: the declared dimension
    ``schema`` and ``key_columns``, and the ``open``/``close`` lifecycle.

    A subclass sets ``schema`` (a Spark DDL string or ``StructType``) and ``key_columns``
    (names of schema fields, in key order) as class attributes or in ``__init__``.
    Instances are built on the driver and pickled to executors: keep clients out of
    ``__init__`` and create them in [`open`][], which runs where the function runs.
    """

    schema: SchemaLike = None
    key_columns: Sequence[str] = ()

    def open(self) -> None:  # optional hook
        """Open clients; called once per Python worker before the first lookup."""

    def close(self) -> None:  # optional hook
        """Close clients; called when the last user of the function in the worker is done."""

    def limit_connections(self, budget: ConnectionBudget | None) -> bool:  # optional hook
        """Open connections to the source under ``budget`` (each holding a slot of the
        host while open; `spark_lookup.connection_budget`), in this process; called
        before [`open`][]. Returns whether the function does: the connectors' do; by
        default a function opens its own connections, unbudgeted."""
        return False

    @property
    def struct(self) -> StructType:
        """The dimension schema as a ``StructType`` (parsed without a JVM)."""
        return parse_schema(self.schema, f"{type(self).__name__}.schema")

    def key_fields(self) -> list[str]:
        """``key_columns`` checked against the schema.

        Raises
        ------
        ConfigError
            When no key column is declared, one is not in the schema, or one repeats.
        """
        return check_key_columns(
            self.key_columns, self.struct.fieldNames(), f"{type(self).__name__}.key_columns",
            "declare the dimension key columns", "the schema",
        )


def check_key_columns(
    columns: Sequence[str] | str | None, fields: list[str], label: str, hint: str, schema: str
) -> list[str]:
    """``columns`` (one name or several) as a list of distinct fields of ``schema``; errors
    name them ``label``, and ``hint`` says what to give instead of none."""
    columns = [columns] if isinstance(columns, str) else list(columns or ())
    if not columns:
        raise ConfigError(f"{label} is empty: {hint}")
    for column in columns:
        if column not in fields:
            raise ConfigError(f"{label}: {column!r} is not a column of {schema} {fields}")
    if len(set(columns)) != len(columns):
        raise ConfigError(f"{label} repeats a column: {columns}")
    return columns


class LookupFunction(LookupFunctionBase, ABC):
    """Fetches the dimension rows of a key, synchronously.

    Subclasses implement [`lookup`][]; sources that can answer many keys in one round
    trip (SQL ``IN``, Redis pipelines) override [`lookup_batch`][], which the caching
    runtime calls once per batch of distinct misses.

    Examples
    --------
    >>> class Countries(LookupFunction):
    ...     schema = "code STRING, name STRING"
    ...     key_columns = ["code"]
    ...     def lookup(self, key):
    ...         return [("fr", "France")] if key == ("fr",) else []
    >>> Countries().lookup_batch([("fr",), ("xx",)])
    {('fr',): [('fr', 'France')], ('xx',): []}
    """

    @abstractmethod
    def lookup(self, key: Key) -> Sequence[Row]:
        """The rows whose key columns equal ``key`` (a tuple in ``key_columns`` order):
        empty when there is none, several for a one-to-many dimension.

        Runs on executors, in the Python worker, possibly from several threads.
        """

    def lookup_arrow(self, keys: Sequence[Any]) -> tuple[Any, Any]:
        """A batched lookup in Arrow: ``keys`` are one ``pyarrow.Array`` per key column
        (distinct keys, no nulls), the result is, for each row found, the position of
        its key (an int64 array) and the rows (a ``pyarrow.RecordBatch`` of the schema).

        Runs on executors. The default goes through [`lookup_batch`][] (a Python
        tuple per key and row); connectors answer in Arrow end to end.
        """
        import pyarrow as pa

        from spark_lookup.schema import to_arrow_schema

        tuples = key_tuples(keys)
        found = self.lookup_batch(tuples)
        positions: list[int] = []
        rows: list[Row] = []
        for position, key in enumerate(tuples):
            for row in found.get(key, ()):
                positions.append(position)
                rows.append(row)
        schema = to_arrow_schema(self.schema)
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
        batch = pa.RecordBatch.from_arrays(
            [pa.array(list(values), type=field.type) for values, field in zip(
                columns, schema, strict=True)], schema=schema,
        )
        return pa.array(positions, pa.int64()), batch

    def lookup_batch(self, keys: Sequence[Key]) -> Mapping[Key, Sequence[Row]]:
        """The rows of each of ``keys`` (distinct, none containing None), as a mapping
        with an entry for every key (empty for no match). The default loops over
        [`lookup`][]."""
        return {key: self.lookup(key) for key in keys}


class AsyncLookupFunction(LookupFunctionBase, ABC):
    """Fetches the dimension rows of a key with asyncio (Flink's AsyncLookupFunction).

    The runtime runs [`async_lookup`][] on its own event loop thread with at most
    ``capacity`` lookups in flight and a per-lookup ``timeout`` (provider options).
    """

    @abstractmethod
    async def async_lookup(self, key: Key) -> Sequence[Row]:
        """The rows of ``key``, as [`LookupFunction.lookup`][] returns them."""

    async def async_lookup_batch(self, keys: Sequence[Key]) -> Mapping[Key, Sequence[Row]]:
        """The rows of each key; by default the runtime awaits [`async_lookup`][] per key
        (bounded by ``capacity``). Override to answer a batch in one round trip."""
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Lets the runtime know whether a batched override exists.
        cls.has_batch = cls.async_lookup_batch is not AsyncLookupFunction.async_lookup_batch

    has_batch: ClassVar[bool] = False
