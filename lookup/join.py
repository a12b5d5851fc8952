"""lookup_join: enrich a (streaming or batch) DataFrame with dimension rows by key."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from lookup._assemble import JoinShape, join_batch
from lookup._worker import metrics_report, worker_runtime
from lookup.metrics import NOTE_PREFIX, REPORT_COLUMN, observe_metrics
from lookup.providers import LookupProvider
from spark_lookup._shown import shown
from spark_lookup.errors import ConfigError
from spark_lookup.options import check_bool
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


def _normalize_on(on: object, provider: LookupProvider, stream_columns: Sequence[str]
                  ) -> list[tuple[str, str]]:
    """``on`` as (stream column, dimension key column) pairs in the provider's key order.

    Each side is checked against its own columns, so the error names the side that lacks
    a column and lists that side's columns.
    """
    if isinstance(on, str):
        pairs = [(on, on)]
    elif isinstance(on, Mapping):
        pairs = [(str(s), str(d)) for s, d in on.items()]
    elif isinstance(on, Sequence) and all(isinstance(c, str) for c in on):
        pairs = [(c, c) for c in on]
    else:
        raise ConfigError("on must be a column name, a list of names, or a dict "
                          f"{{stream_column: dimension_key_column}}, got {shown(on)}")
    if not pairs:
        raise ConfigError("on is empty: name the key columns")
    absent = [s for s, _ in pairs if s not in stream_columns]
    if absent:
        raise ConfigError(
            f"on: {_not_a('column', absent)} of the stream DataFrame {list(stream_columns)}"
        )
    dim_names = [d for _, d in pairs]
    keys = list(provider.key_columns)
    schema_names = provider.schema.fieldNames()
    unknown = [d for d in dim_names if d not in schema_names]
    not_keys = [d for d in dim_names if d in schema_names and d not in keys]
    repeated = sorted({d for d in dim_names if dim_names.count(d) > 1})
    unnamed = [k for k in keys if k not in dim_names]
    problems = []
    if unknown:
        problems.append(f"{_not_a('column', unknown)} of the provider's schema {schema_names}")
    if not_keys:
        problems.append(f"{_not_a('key column', not_keys)} of the provider")
    if repeated:
        problems.append(f"{_names(repeated)} {_be(repeated)} named more than once")
    if unnamed and not (unknown or not_keys):
        problems.append(f"key column {_names(unnamed)} {_be(unnamed)} not named")
    if problems:
        hint = ""
        if (unknown or not_keys) and not isinstance(on, Mapping):
            hint = (" A string or list names columns of the same name on both sides; join a "
                    f"stream column of another name with "
                    f"on={{stream_column: {(unnamed or keys)[0]!r}}}")
        raise ConfigError(
            f"on={on!r}: {'; '.join(problems)}; the provider is keyed by {keys}.{hint}"
        )
    by_dim = {d: s for s, d in pairs}
    return [(by_dim[d], d) for d in keys]  # in the provider's key order


def _names(names: Sequence[str]) -> str:
    return repr(names[0]) if len(names) == 1 else repr(list(names))


def _be(names: Sequence[str]) -> str:
    return "is" if len(names) == 1 else "are"


def _not_a(what: str, names: Sequence[str]) -> str:
    """``'x' is not a {what}`` or ``['x', 'y'] are not {what}s``."""
    return (f"{names[0]!r} is not a {what}" if len(names) == 1
            else f"{list(names)!r} are not {what}s")


_JOIN_KINDS = {"left": "left", "leftouter": "left", "left_outer": "left", "inner": "inner"}


def _join_kind(how: object) -> str:
    """``"left"`` or ``"inner"`` from Spark's names for them, case-insensitive."""
    kind = _JOIN_KINDS.get(how.lower()) if isinstance(how, str) else None
    if kind is None:
        raise ConfigError(
            f"how must be a left or an inner join ({', '.join(map(repr, _JOIN_KINDS))}, any "
            f"case), got {how!r}"
        )
    return kind


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
    how = _join_kind(how)
    if prefix is not None and (not isinstance(prefix, str) or not prefix):
        raise ConfigError(f"prefix must be a non-empty string, got {prefix!r}")
    stream_fields = {f.name: f for f in stream_schema.fields}
    pairs = _normalize_on(on, provider, list(stream_fields))
    stream_of = {d: s for s, d in pairs}
    dim_schema = provider.schema
    for stream_column, dim_column in pairs:
        field = stream_fields[stream_column]
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
        raise ConfigError(f"output column(s) {clashes} exist in the stream DataFrame too; {hint}")
    out_fields = list(stream_schema.fields)
    for name, out_name in zip(chosen, out_names, strict=True):
        field = dim_schema[name]
        nullable = True if how == "left" else field.nullable
        out_fields.append(T.StructField(out_name, field.dataType, nullable, field.metadata))
    shape = JoinShape(stream_keys=tuple(s for s, _ in pairs), dim_columns=tuple(chosen),
                      out_names=tuple(out_names),
                      dim_types=tuple(to_arrow_type(dim_schema[n].dataType) for n in chosen),
                      how=how)
    return JoinPlan(shape, T.StructType(out_fields))


class _JoinFunction:
    """The function ``mapInArrow`` runs in executors' Python workers (picklable).

    With ``report_nullable`` (the nullability of each added dimension column), the
    output has one more column, :data:`lookup.metrics.REPORT_COLUMN`, holding the
    worker's cumulative metrics (see :mod:`lookup.metrics`) in one row of the task and
    null in every other. A left join puts them on its last joined row. An inner join may
    have none, so it adds a *report row* after its last batch instead, which holds
    valid values in every column (a stream row and placeholder dimension values)
    because Spark reads it as a row of the declared schema before the plan's filter
    drops it.
    """

    def __init__(self, provider: LookupProvider, shape: JoinShape,
                 report_nullable: tuple[bool, ...] | None = None) -> None:
        self.provider = provider
        self.shape = shape
        self.report_nullable = report_nullable

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        runtime = None
        sample: pa.RecordBatch | None = None  # one stream row, for the report row
        describe = self.provider.describe()
        reporting = self.report_nullable is not None
        # A left join has a row for every stream row: the report rides on the task's
        # last one, so the plan needs no filter. The last batch is known only when the
        # input ends, so each one is held until the next arrives.
        riding = reporting and self.shape.how == "left"
        held: pa.RecordBatch | None = None
        try:
            for batch in batches:
                if runtime is None:
                    runtime = worker_runtime(self.provider)
                out = join_batch(batch, self.shape, runtime, describe)
                if not reporting:
                    yield out
                    continue
                if batch.num_rows:
                    sample = batch.slice(batch.num_rows - 1, 1)
                if riding:
                    if out.num_rows:
                        if held is not None:
                            yield _with_report(held, pa.nulls(held.num_rows, pa.string()))
                        held = out
                    continue
                yield _with_report(out, pa.nulls(out.num_rows, pa.string()))
        except Exception as exc:
            if runtime is not None:
                _attach_report(exc, self.provider)
            raise
        report = metrics_report(self.provider) if reporting and runtime is not None else None
        if held is not None:
            last = pa.array([report], pa.string())
            yield _with_report(held, pa.concat_arrays(
                [pa.nulls(held.num_rows - 1, pa.string()), last]))
        elif report is not None and sample is not None and not riding:
            yield self._report_row(sample, report)
        # Otherwise (only empty batches) the report waits for this worker's next task:
        # reports are cumulative.

    def _report_row(self, sample: pa.RecordBatch, report: str) -> pa.RecordBatch:
        assert self.report_nullable is not None
        dims = [
            pa.nulls(1, arrow_type) if nullable else placeholder(arrow_type)
            for arrow_type, nullable in zip(
                self.shape.dim_types, self.report_nullable, strict=True)
        ]
        row = pa.RecordBatch.from_arrays([*sample.columns, *dims],
                                         names=[*sample.schema.names, *self.shape.out_names])
        return _with_report(row, pa.array([report], pa.string()))


_INTEGERS = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_FLOATS = (T.FloatType, T.DoubleType)


@dataclass(frozen=True)
class _Wire:
    """How one stream column crosses ``mapInPandas`` (see :func:`_pandas_input`)."""

    arrow_type: pa.DataType | None
    """Its Arrow type in the joined batch (None: as pyarrow infers it)."""
    values: pa.DataType | None
    """The Arrow type of the numpy values it travels as, or None: pandas objects."""
    mask: int | None
    """The position of the boolean column saying where its nulls were, if any."""


def _pandas_input(df: Any, stream: T.StructType) -> tuple[Any, tuple[_Wire, ...]]:
    """``df`` as ``mapInPandas`` should see it, and how to read each column back.

    PySpark's Arrow to pandas conversion (4.3: ``ArrowArrayToPandasConversion``, its
    ``convert_numpy`` path, taken when every column is numeric, binary, boolean or
    temporal) turns an integer column holding a null into float64, which cannot hold
    every BIGINT (2**53 + 1 becomes 2**53), and a floating column's null into NaN, like
    its NaN; it hands TIMESTAMP values over as wall-clock times of the session's zone
    (an hour repeats when clocks go back; a key then no longer equals the dimension's
    instant). So each nullable numeric column travels with its nulls replaced (integers
    by 0: no null left, so no float64) and one boolean column more, after the stream's,
    saying where they were; a TIMESTAMP travels as its microseconds since the epoch.
    :class:`_PandasJoin` rebuilds the stream's Arrow batch from them. No session
    setting is read or changed (``preferIntExtensionDtype`` would change every pandas
    UDF of the session, and is read when an action plans the query, not here). The
    columns are renamed by position, so no stream name can clash with a mask's.
    """
    from pyspark.sql import functions as F

    count = len(stream.fields)
    values: list[Any] = []
    nulls: list[Any] = []
    wires: list[_Wire] = []
    for field in stream.fields:
        column = F.col("`" + field.name.replace("`", "``") + "`")
        data_type = field.dataType
        try:
            arrow_type: pa.DataType | None = to_arrow_type(data_type)
        except ConfigError:
            arrow_type = None  # no Arrow mapping of ours: left to pyarrow
        if isinstance(data_type, T.TimestampType):
            column, data_type = F.unix_micros(column), T.LongType()
        elif arrow_type is not None:
            arrow_type = _wall_clock(arrow_type)
        if not isinstance(data_type, _INTEGERS + _FLOATS):
            wires.append(_Wire(arrow_type, None, None))
            values.append(column)
            continue
        mask = None
        if field.nullable:
            mask = count + len(nulls)
            nulls.append(column.isNull())
            if isinstance(data_type, _INTEGERS):
                column = F.coalesce(column, F.lit(0).cast(data_type))
        wires.append(_Wire(arrow_type, to_arrow_type(data_type), mask))
        values.append(column)
    if not nulls and not any(isinstance(f.dataType, T.TimestampType) for f in stream.fields):
        return df, tuple(wires)  # nothing to change: every number is read as it comes
    columns = [c.alias(f"_{i}") for i, c in enumerate([*values, *nulls])]
    return df.select(*columns), tuple(wires)


def _wall_clock(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with its timestamps zone-less: how PySpark hands over (and reads
    back) the TIMESTAMP values nested in a struct, an array or a map."""
    if pa.types.is_timestamp(arrow_type):
        return pa.timestamp(arrow_type.unit)
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(_wall_clock(f.type)) for f in arrow_type])
    if pa.types.is_map(arrow_type):
        return pa.map_(arrow_type.key_field.with_type(_wall_clock(arrow_type.key_type)),
                       arrow_type.item_field.with_type(_wall_clock(arrow_type.item_type)))
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        field = arrow_type.value_field.with_type(_wall_clock(arrow_type.value_type))
        return pa.list_(field) if pa.types.is_list(arrow_type) else pa.large_list(field)
    return arrow_type


def _as_pandas_type(arrow_type: pa.DataType) -> Any:
    """Numbers as Arrow-backed pandas columns, which PySpark reads back without a mask
    of its own: exact integers next to nulls (no float64, no Python int per value), and
    a NaN stays a NaN (a NaN of a float64 column would come back null)."""
    import pandas as pd

    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        return pd.ArrowDtype(arrow_type)
    return None


class _PandasJoin:
    """The join for ``mapInPandas`` over :func:`_pandas_input`'s DataFrame (picklable):
    each frame back to the stream's Arrow batch, by position, then the same join as
    ``mapInArrow``'s, then pandas again."""

    def __init__(self, join: _JoinFunction, stream: T.StructType,
                 wires: tuple[_Wire, ...]) -> None:
        self.join = join
        self.names = list(stream.fieldNames())
        self.wires = wires

    def __call__(self, frames: Iterator[Any]) -> Iterator[Any]:
        for batch in self.join(self._stream_batch(frame) for frame in frames):
            yield batch.to_pandas(types_mapper=_as_pandas_type, integer_object_nulls=True,
                                  date_as_object=True, maps_as_pydicts="strict")

    def _stream_batch(self, frame: Any) -> pa.RecordBatch:
        arrays = []
        for i, wire in enumerate(self.wires):
            column = frame.iloc[:, i]
            if wire.values is None:
                arrays.append(pa.Array.from_pandas(column, type=wire.arrow_type))
                continue
            # No integer holds a null here (masked, or not nullable): none is a float64.
            # pa.array, not from_pandas: a NaN stays a NaN.
            mask = None if wire.mask is None else frame.iloc[:, wire.mask].to_numpy(dtype=bool)
            array = pa.array(column.to_numpy(dtype=wire.values.to_pandas_dtype()),
                             type=wire.values, mask=mask)
            arrays.append(array if wire.arrow_type in (None, wire.values)
                          else array.cast(wire.arrow_type))
        return pa.RecordBatch.from_arrays(arrays, names=self.names)


def _with_report(batch: pa.RecordBatch, column: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [*batch.columns, column], names=[*batch.schema.names, REPORT_COLUMN]
    )


def _attach_report(exc: BaseException, provider: LookupProvider) -> None:
    """Put the worker's report on the error of a failing task: Spark drops the task's
    rows (and its report row), and the worker exits; the error's text is what reaches
    the driver (a streaming query's termination event carries it)."""
    add_note = getattr(exc, "add_note", None)  # Python 3.11+
    report = metrics_report(provider)
    if add_note is not None and report is not None:
        add_note(NOTE_PREFIX + report)


def placeholder(arrow_type: pa.DataType) -> pa.Array:
    """One non-null value of ``arrow_type`` (zero, empty, false, the epoch): what a
    report row holds in a non-nullable dimension column. Never seen by users."""
    if pa.types.is_struct(arrow_type):
        return pa.StructArray.from_arrays(
            [placeholder(f.type) for f in arrow_type], fields=list(arrow_type)
        )
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or (
        pa.types.is_map(arrow_type)
    ):
        return pa.array([[]], type=arrow_type)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.array([""], type=arrow_type)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pa.array([b""], type=arrow_type)
    if pa.types.is_boolean(arrow_type):
        return pa.array([False], type=arrow_type)
    if pa.types.is_decimal(arrow_type):
        return pa.array([Decimal(0)], type=arrow_type)
    if pa.types.is_date32(arrow_type):
        return pa.array([0], type=pa.int32()).cast(arrow_type)
    return pa.array([0], type=pa.int64()).cast(arrow_type)


def lookup_join(
    df: Any,
    provider: LookupProvider,
    on: str | Sequence[str] | Mapping[str, str],
    how: str = "left",
    columns: Sequence[str] | str | None = None,
    prefix: str | None = None,
    *,
    engine: str = "arrow",
    metrics: bool = True,
) -> Any:
    """Enrich ``df`` with the dimension rows ``provider`` looks up by key.

    Works on batch and Structured Streaming DataFrames (append mode: it is a narrow,
    per-row transformation), of classic and Spark Connect sessions alike. Validation
    runs on the driver, now; the lookups run in executors' Python workers, where each
    worker keeps one runtime (and cache) per provider across tasks and micro-batches.

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
        ``"inner"`` drops them. Spark's other names for them are accepted too, in any
        case: ``"leftouter"``, ``"left_outer"``. A key with several rows repeats the
        stream row once per dimension row. A key holding a null never matches.
    columns
        Dimension columns to add (default: all but the key columns, whose values equal
        the stream's), in schema order.
    prefix
        Prepended to the added column names; needed when a name exists in ``df``.
    engine
        ``"arrow"`` (default): ``DataFrame.mapInArrow``, exact types and no pandas
        conversion; ``"pandas"``: ``DataFrame.mapInPandas``, the same rows and types.
        PySpark's pandas conversion would turn an integer column holding a null into
        float64 (BIGINT beyond 2**53 inexact), a NaN into null, and a TIMESTAMP into a
        wall-clock time; so each nullable numeric stream column travels with its nulls
        replaced and a boolean column saying where they were, a TIMESTAMP as its
        microseconds, and numbers come back as Arrow-backed pandas columns. No session
        setting is read or changed. (A TIMESTAMP_NTZ outside the years 1677-2262 fails
        in PySpark's conversion: use ``"arrow"``.)
    metrics
        Report the workers' cache metrics to the driver for :func:`lookup.lookup_metrics`
        (default). They travel in one extra row per task that the plan observes and
        drops right away (see :mod:`lookup.metrics`); ``False`` leaves the plan a bare
        map.

    Returns
    -------
    pyspark.sql.DataFrame
        ``df``'s columns in order, then the added dimension columns.

    Raises
    ------
    ConfigError
        (a ``ValueError``) on the driver for unknown columns, key types that cannot
        match, bad options or a name clash.

    Notes
    -----
    With ``metrics``, a batch DataFrame is observed with a ``pyspark.sql.Observation``
    (read back by :func:`lookup.lookup_metrics`) and a streaming one under a name of
    its own, in each micro-batch's ``StreamingQueryProgress.observedMetrics``.

    Examples
    --------
    >>> enriched = lookup_join(orders, customers, on="customer_id")  # doctest: +SKIP
    >>> enriched = lookup_join(orders, countries, on={"country": "code"},
    ...                        columns=["name"], prefix="country_")  # doctest: +SKIP
    """
    if engine not in ("arrow", "pandas"):
        raise ConfigError(f"engine must be 'arrow' or 'pandas', got {engine!r}")
    check_bool(metrics, "metrics")
    stream_schema = df.schema
    if REPORT_COLUMN in stream_schema.fieldNames():
        raise ConfigError(
            f"the stream DataFrame has a column {REPORT_COLUMN!r}, the name lookup_join "
            "uses for its metrics: rename it, or pass metrics=False"
        )
    plan = plan_join(stream_schema, provider, on, how, columns, prefix)
    added = plan.schema.fields[len(stream_schema.fields):]
    schema = plan.schema
    function = _JoinFunction(
        provider, plan.shape, tuple(f.nullable for f in added) if metrics else None)
    if metrics:
        schema = T.StructType([*schema.fields, T.StructField(REPORT_COLUMN, T.StringType())])
    if engine == "pandas":
        source, wires = _pandas_input(df, stream_schema)
        mapped = source.mapInPandas(_PandasJoin(function, stream_schema, wires), schema)
    else:
        mapped = df.mapInArrow(function, schema)
    if not metrics:
        return mapped
    return observe_metrics(mapped, provider, report_rows=plan.shape.how != "left")
