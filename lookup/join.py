"""lookup_join: enrich a (streaming or batch) DataFrame with dimension rows by key."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from lookup._assemble import JoinShape, join_batch
from lookup._worker import metrics_report, worker_handle
from lookup.metrics import metrics_accumulator
from lookup.providers import LookupProvider
from spark_lookup.errors import ConfigError
from spark_lookup.schema import to_arrow_type

__all__ = ["lookup_join", "plan_join"]

_FAMILIES: tuple[tuple[type[T.DataType], ...], ...] = (
    (T.ByteType, T.ShortType, T.IntegerType, T.LongType),
    (T.FloatType, T.DoubleType),
    (T.StringType, T.VarcharType, T.CharType),
    (T.DecimalType,),
    (T.BooleanType,),
    (T.BinaryType,),
    (T.DateType,),
    (T.TimestampType,),
    (T.TimestampNTZType,),
)


def _family(data_type: T.DataType) -> int | None:
    for number, family in enumerate(_FAMILIES):
        if isinstance(data_type, family):
            return number
    return None


def keys_compatible(stream_type: T.DataType, dim_type: T.DataType) -> bool:
    """Whether stream key values of ``stream_type`` can equal dimension keys of
    ``dim_type`` without a cast: the same family (integers, floating point, strings,
    decimals, ...), as an equi-join in SQL would compare them."""
    family = _family(stream_type)
    return family is not None and family == _family(dim_type)


def _normalize_on(on: object, provider: LookupProvider) -> list[tuple[str, str]]:
    if isinstance(on, str):
        pairs = [(on, on)]
    elif isinstance(on, Mapping):
        pairs = [(str(s), str(d)) for s, d in on.items()]
    elif isinstance(on, Sequence) and all(isinstance(c, str) for c in on):
        pairs = [(c, c) for c in on]
    else:
        raise ConfigError(
            "on must be a column name, a list of names, or a dict "
            f"{{stream_column: dimension_key_column}}, got {on!r:.80}"
        )
    if not pairs:
        raise ConfigError("on is empty: name the key columns")
    dim_names = [d for _, d in pairs]
    keys = list(provider.key_columns)
    if sorted(dim_names) != sorted(keys) or len(set(dim_names)) != len(dim_names):
        raise ConfigError(
            f"on={on!r} names the dimension columns {dim_names}, but the provider is keyed "
            f"by {keys}: name each key column exactly once"
        )
    by_dim = {d: s for s, d in pairs}
    return [(by_dim[d], d) for d in keys]  # in the provider's key order


@dataclass(frozen=True)
class JoinPlan:
    """A validated lookup join: what executors do and the output schema."""

    shape: JoinShape
    schema: T.StructType


def plan_join(
    stream_schema: T.StructType,
    provider: LookupProvider,
    on: object,
    how: str = "left",
    columns: Sequence[str] | str | None = None,
    prefix: str | None = None,
) -> JoinPlan:
    """Validate a lookup join on the driver, before any task runs.

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an unknown column on either side, key types that cannot
        match, a bad ``how``, ``columns`` or ``prefix``, or an output name clash.
    """
    if not isinstance(provider, LookupProvider):
        raise ConfigError(f"provider must be a lookup provider, got {type(provider).__name__}")
    if how not in ("left", "inner"):
        raise ConfigError(f"how must be 'left' or 'inner', got {how!r}")
    if prefix is not None and (not isinstance(prefix, str) or not prefix):
        raise ConfigError(f"prefix must be a non-empty string, got {prefix!r}")
    pairs = _normalize_on(on, provider)
    stream_of = {d: s for s, d in pairs}
    stream_fields = {f.name: f for f in stream_schema.fields}
    dim_schema = provider.schema
    for stream_column, dim_column in pairs:
        field = stream_fields.get(stream_column)
        if field is None:
            raise ConfigError(
                f"on: {stream_column!r} is not a column of the stream DataFrame "
                f"{list(stream_fields)}"
            )
        dim_type = dim_schema[dim_column].dataType
        if not keys_compatible(field.dataType, dim_type):
            raise ConfigError(
                f"on: stream column {stream_column!r} is {field.dataType.simpleString()} but "
                f"dimension key {dim_column!r} is {dim_type.simpleString()}; cast one side "
                f"(e.g. F.col({stream_column!r}).cast({dim_type.simpleString()!r}))"
            )
    keys = set(provider.key_columns)
    value_columns = [f.name for f in dim_schema.fields if f.name not in keys]
    if columns is None:
        chosen = value_columns
    else:
        chosen_list = [columns] if isinstance(columns, str) else list(columns)
        for name in chosen_list:
            if name in keys:
                raise ConfigError(
                    f"columns: {name!r} is a key column; its values equal the stream's "
                    f"{stream_of[name]!r}"
                )
            if name not in value_columns:
                raise ConfigError(
                    f"columns: {name!r} is not a column of the dimension {value_columns}"
                )
        if len(set(chosen_list)) != len(chosen_list):
            raise ConfigError(f"columns repeats a name: {chosen_list}")
        chosen_set = set(chosen_list)
        chosen = [name for name in value_columns if name in chosen_set]  # schema order
    out_names = [f"{prefix}{name}" if prefix else name for name in chosen]
    clashes = [name for name in out_names if name in stream_fields]
    if clashes:
        hint = "choose another prefix" if prefix else "pass prefix= (or columns=)"
        raise ConfigError(
            f"output column(s) {clashes} exist in the stream DataFrame too; {hint}"
        )
    out_fields = list(stream_schema.fields)
    for name, out_name in zip(chosen, out_names, strict=True):
        field = dim_schema[name]
        nullable = True if how == "left" else field.nullable
        out_fields.append(T.StructField(out_name, field.dataType, nullable, field.metadata))
    positions = {f.name: i for i, f in enumerate(dim_schema.fields)}
    shape = JoinShape(
        stream_keys=tuple(s for s, _ in pairs),
        dim_columns=tuple(chosen),
        out_names=tuple(out_names),
        dim_types=tuple(to_arrow_type(dim_schema[n].dataType) for n in chosen),
        dim_positions=tuple(positions[n] for n in chosen),
        how=how,
    )
    return JoinPlan(shape, T.StructType(out_fields))


class _JoinFunction:
    """The function ``mapInArrow`` runs in executors' Python workers (picklable)."""

    def __init__(self, provider: LookupProvider, shape: JoinShape, accumulator: Any) -> None:
        self.provider = provider
        self.shape = shape
        self.accumulator = accumulator

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        runtime = None
        describe = self.provider.describe()
        try:
            for batch in batches:
                if runtime is None:
                    runtime = worker_handle(self.provider).runtime
                yield join_batch(batch, self.shape, runtime, describe)
        finally:
            if runtime is not None:
                self.accumulator.add(metrics_report(self.provider))

    def pandas(self, frames: Iterator[Any]) -> Iterator[Any]:
        """The same join for ``mapInPandas`` (exact integers kept as Python ints)."""
        for batch in self(pa.RecordBatch.from_pandas(f, preserve_index=False) for f in frames):
            yield batch.to_pandas(integer_object_nulls=True, date_as_object=True)


def lookup_join(
    df: Any,
    provider: LookupProvider,
    on: str | Sequence[str] | Mapping[str, str],
    how: str = "left",
    columns: Sequence[str] | str | None = None,
    prefix: str | None = None,
    *,
    engine: str = "arrow",
) -> Any:
    """Enrich ``df`` with the dimension rows ``provider`` looks up by key.

    Works on batch and Structured Streaming DataFrames (append mode: it is a narrow,
    per-row transformation). Validation runs on the driver, now; the lookups run in
    executors' Python workers, where each worker keeps one runtime (and cache) per
    provider across tasks and micro-batches.

    Parameters
    ----------
    df
        The stream (or batch) ``pyspark.sql.DataFrame``.
    provider
        A lookup provider (``PartialCachingLookupProvider``, ``FullCachingLookupProvider``...).
    on
        A column present on both sides, a list of them, or a dict
        ``{stream_column: dimension_key_column}``; together they name each of the
        provider's key columns once (composite keys in any order).
    how
        ``"left"`` keeps stream rows without a match (dimension columns null);
        ``"inner"`` drops them. A key with several rows repeats the stream row once per
        dimension row. A key holding a null never matches.
    columns
        Dimension columns to add (default: all but the key columns, whose values equal
        the stream's), in schema order.
    prefix
        Prepended to the added column names; needed when a name exists in ``df``.
    engine
        ``"arrow"`` (default): ``DataFrame.mapInArrow``, exact types and no pandas
        conversion; ``"pandas"``: ``DataFrame.mapInPandas`` (the same rows, except that
        PySpark's pandas conversion turns a NaN of a stream DOUBLE column into null).

    Returns
    -------
    pyspark.sql.DataFrame
        ``df``'s columns in order, then the added dimension columns.

    Raises
    ------
    ConfigError
        (a ``ValueError``) on the driver for unknown columns, key types that cannot
        match, bad options or a name clash.

    Examples
    --------
    >>> enriched = lookup_join(orders, customers, on="customer_id")  # doctest: +SKIP
    >>> enriched = lookup_join(orders, countries, on={"country": "code"},
    ...                        columns=["name"], prefix="country_")  # doctest: +SKIP
    """
    if engine not in ("arrow", "pandas"):
        raise ConfigError(f"engine must be 'arrow' or 'pandas', got {engine!r}")
    plan = plan_join(df.schema, provider, on, how, columns, prefix)
    accumulator = metrics_accumulator(df.sparkSession, provider)
    function = _JoinFunction(provider, plan.shape, accumulator)
    if engine == "pandas":
        return df.mapInPandas(function.pandas, plan.schema)
    return df.mapInArrow(function, plan.schema)
