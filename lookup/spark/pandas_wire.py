"""How a stream crosses ``mapInPandas`` exactly: the columns PySpark's pandas
conversion would change travel in a form it keeps, and come back as the stream's Arrow
batch in the worker (``lookup_join(..., engine="pandas")``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import types as T

from lookup.spark.join_worker import JoinFunction
from spark_lookup.errors import ConfigError
from spark_lookup.schema import to_arrow_type
from spark_lookup.type_families import FLOAT_TYPES, INTEGER_TYPES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["PandasJoin", "pandas_input"]



@dataclass(frozen=True)
class _Wire:
    """How one stream column crosses ``mapInPandas`` (see `pandas_input`)."""

    arrow_type: pa.DataType | None
    """Its Arrow type in the joined batch (None: as pyarrow infers it)."""
    values: pa.DataType | None
    """The Arrow type of the numpy values it travels as, or None: pandas objects."""
    mask: int | None
    """The position of the boolean column saying where its nulls were, if any."""
    text: pa.DataType | None = None
    """The Arrow type it travels as when the integers in its arrays travel as text
    (see `_integers_in_arrays_as_text`), else None."""


def pandas_input(df: DataFrame, stream: T.StructType) -> tuple[DataFrame, tuple[_Wire, ...]]:
    """``df`` as ``mapInPandas`` should see it, and how to read each column back (the
    wire format: DESIGN.md, "lookup/"). Runs on the driver."""
    from pyspark.sql import functions as F

    count = len(stream.fields)
    values: list[Column] = []
    nulls: list[Column] = []
    wires: list[_Wire] = []
    changed = False  # a column travels in another form than it has
    for field in stream.fields:
        column = F.col("`" + field.name.replace("`", "``") + "`")
        data_type = field.dataType
        try:
            arrow_type: pa.DataType | None = to_arrow_type(data_type)
        except ConfigError:
            arrow_type = None  # no Arrow mapping of ours: left to pyarrow
        if isinstance(data_type, T.TimestampType):
            # PySpark would hand it over as a wall-clock time of the session's zone, in
            # which an hour repeats when clocks go back.
            column, data_type = F.unix_micros(column), T.LongType()
            changed = True
        elif arrow_type is not None:
            arrow_type = _wall_clock(arrow_type)
        if not isinstance(data_type, INTEGER_TYPES + FLOAT_TYPES):
            text_type = _integers_in_arrays_as_text(data_type)
            if text_type == data_type or arrow_type is None:
                wires.append(_Wire(arrow_type, None, None))
            else:
                column = column.cast(text_type)
                changed = True
                wires.append(_Wire(arrow_type, None, None, _wall_clock(to_arrow_type(text_type))))
            values.append(column)
            continue
        mask = None
        if field.nullable:
            # PySpark turns an integer column holding a null into float64 (2**53 + 1
            # becomes 2**53) and a float's null into NaN: the nulls travel as a mask.
            mask = count + len(nulls)
            nulls.append(column.isNull())
            if isinstance(data_type, INTEGER_TYPES):
                column = F.coalesce(column, F.lit(0).cast(data_type))
        wires.append(_Wire(arrow_type, to_arrow_type(data_type), mask))
        values.append(column)
    if not nulls and not changed:
        return df, tuple(wires)  # nothing to change: every number is read as it comes
    # Renamed by position: no stream column's name can clash with a mask's.
    columns = [c.alias(f"_{i}") for i, c in enumerate([*values, *nulls])]
    return df.select(*columns), tuple(wires)


def _integers_in_arrays_as_text(data_type: T.DataType) -> T.DataType:
    """``data_type`` with the integers of its arrays (at any depth) as STRING.

    PySpark before 4.3 hands an array column to pandas as numpy arrays, and the values of
    an integer array holding a null as float64 (2**53 + 1 becomes 2**53); text crosses
    exactly, and Arrow casts it back."""
    if isinstance(data_type, T.ArrayType):
        element = data_type.elementType
        inner = T.StringType() if isinstance(element, INTEGER_TYPES) else (
            _integers_in_arrays_as_text(element))
        return T.ArrayType(inner, data_type.containsNull)
    if isinstance(data_type, T.MapType):
        return T.MapType(_integers_in_arrays_as_text(data_type.keyType),
                         _integers_in_arrays_as_text(data_type.valueType),
                         data_type.valueContainsNull)
    if isinstance(data_type, T.StructType):
        return T.StructType([T.StructField(f.name, _integers_in_arrays_as_text(f.dataType),
                                           f.nullable, f.metadata) for f in data_type])
    return data_type


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


class PandasJoin:
    """The join for ``mapInPandas`` over `pandas_input`'s DataFrame (picklable):
    each frame back to the stream's Arrow batch, by position, then the same join as
    ``mapInArrow``'s, then pandas again."""

    def __init__(self, join: JoinFunction, stream: T.StructType,
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
            if wire.text is not None:
                text = pa.Array.from_pandas(column, type=wire.text)
                arrays.append(text.cast(wire.arrow_type))
                continue
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
