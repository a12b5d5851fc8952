"""Turning what a driver returned into the columns of the dimension schema.

Design notes: DESIGN.md, connectors/ ``connectors/convert.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from connectors.policy import BadValue, BadValuePolicy, BadValueStats
from spark_lookup.shown import shown

__all__ = ["Conformer", "cast_column", "castable"]

_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError)
# Bad values are looked for in slices of this many values before one by one, so a batch
# with one bad value costs a few hundred small casts, not one per value.
_PROBE_SLICE = 256
# An offset follows a time of day: a date alone ('2024-01-01') ends in '-01' too.
_OFFSET = r"[T ]\d\d(?::?\d\d(?::?\d\d(?:[.,]\d+)?)?)?(?:[Zz]|[+-]\d\d(?::?\d\d)?)$"
# Arrow's integer parser also reads hexadecimal ('0xff'), wrapped into the type.
_INTEGER_TEXT = r"^[+-]?[0-9]+$"
# Spark's spellings of an infinity (any case): any other text that overflows the type
# is out of its range.
_INFINITY_TEXT = r"^[+-]?inf(?:inity)?$"
# 0001-01-01 and 10000-01-01 in days since 1970: Spark's DATE and TIMESTAMP range, and
# Python's, whose dates and datetimes the per-key APIs hand out.
_FIRST_DAY, _END_DAY = -719162, 2932897
_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def _is_text(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_string(data_type) or pa.types.is_large_string(data_type))


def _all(mask: pa.Array) -> bool:
    """Whether every non-null entry of a boolean array is true."""
    return bool(pc.all(mask, min_count=0).as_py())


def _any(mask: pa.Array) -> bool:
    """Whether some non-null entry of a boolean array is true."""
    return bool(pc.any(mask, min_count=0).as_py())


def _cast(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` as ``target``, raising ``ArrowInvalid`` if any value is bad."""
    if array.type == target and not _holds_times(target):
        return array
    nested = _cast_nested(array, target)
    if nested is not None:
        return nested
    result = _cast_scalar(array, target)
    if pa.types.is_floating(target):
        _refuse_overflow(array, result, target)
    elif pa.types.is_date(target) or pa.types.is_timestamp(target):
        _refuse_out_of_range(result, target)
    return result


def _holds_times(data_type: pa.DataType) -> bool:
    """Whether values of the type are (or hold) dates or timestamps, which are checked
    against Spark's range even when the driver gave the type itself."""
    if pa.types.is_date(data_type) or pa.types.is_timestamp(data_type):
        return True
    return any(_holds_times(data_type.field(i).type) for i in range(data_type.num_fields))


def _cast_scalar(array: pa.Array, target: pa.DataType) -> pa.Array:
    wire = array.type
    if wire == target:
        return array
    if _is_text(wire):
        if pa.types.is_integer(target):
            return _integer_of_text(array, target)
        if pa.types.is_decimal(target):
            return _decimal_of_text(array, target)
        if pa.types.is_timestamp(target) and target.tz is not None:
            return _instant_of_text(array, target)
        return pc.cast(array, target)
    if pa.types.is_decimal(target) and (pa.types.is_integer(wire) or pa.types.is_floating(wire)):
        # Arrow rounds a double to the scale (0.125 as decimal(10,2) is 0.12) and refuses
        # an int64 as any decimal of fewer than 21 digits: both go by their shortest text
        # (0.1, not 0.1000000000000000055), which the decimal rule reads exactly or refuses.
        return _decimal_of_text(pc.cast(array, pa.string()), target)
    if pa.types.is_integer(wire) and pa.types.is_floating(target):
        return pc.cast(array, target, safe=False)  # rounds, as Spark's cast does
    if pa.types.is_timestamp(wire) and pa.types.is_date(target):
        # Arrow drops the time of day, as it never drops a fraction: a time other than
        # midnight is no date (a key 23:59 would find the day's row).
        day = pc.cast(array, target)
        if not _all(pc.equal(pc.cast(day, wire), array)):
            raise pa.ArrowInvalid(f"a time of day other than midnight ({target})")
        return day
    return pc.cast(array, target, safe=True)


def _integer_of_text(array: pa.Array, target: pa.DataType) -> pa.Array:
    if not _all(pc.match_substring_regex(array, _INTEGER_TEXT)):
        raise pa.ArrowInvalid(f"not an integer in decimal digits ({target})")
    # Arrow refuses the leading '+' that Spark's CAST and PostgreSQL accept. Beyond the
    # type's range it refuses decimal digits: they never wrap.
    return pc.cast(pc.replace_substring_regex(array, r"^\+", ""), target)


def _decimal_of_text(array: pa.Array, target: pa.DataType) -> pa.Array:
    # Arrow rescales before it checks the precision, and a rescale beyond 128 bits
    # wraps around ('1e30' read as decimal(38,18) comes out as another number): too
    # many integer digits are refused first, by magnitude.
    limit = 10.0 ** (target.precision - target.scale) * 1.000001
    try:
        magnitude = pc.abs(pc.cast(array, pa.float64()))
    except pa.ArrowInvalid:
        return pc.cast(array, target)  # not a number: the decimal parser says why
    if _any(pc.greater_equal(magnitude, limit)):
        raise pa.ArrowInvalid(f"more integer digits than {target.precision - target.scale} "
                              f"(decimal({target.precision},{target.scale}))")
    return pc.cast(array, target)


def _instant_of_text(array: pa.Array, target: pa.DataType) -> pa.Array:
    # Arrow reads text with an offset as an instant and refuses text without one:
    # those are UTC wall-clock times.
    wire = array.type
    with_offset = pc.match_substring_regex(array, _OFFSET)
    if _all(with_offset):
        return pc.cast(array, target)
    naive = pc.cast(
        pc.if_else(with_offset, pa.scalar(None, wire), array), pa.timestamp(target.unit)
    )
    aware = pc.cast(pc.if_else(with_offset, array, pa.scalar(None, wire)), target)
    return pc.if_else(with_offset, aware, pc.cast(naive, target))


def _refuse_overflow(array: pa.Array, result: pa.Array, target: pa.DataType) -> None:
    """Arrow turns a finite number beyond the type's range (text ``1e400``, a double
    1e39 as FLOAT) into an infinity; only an infinity may read as one."""
    overflow = pc.is_inf(result)
    if not _any(overflow):
        return
    if _is_text(array.type):
        meant = pc.match_substring_regex(array, _INFINITY_TEXT, ignore_case=True)
        overflow = pc.and_not(overflow, meant)
    elif pa.types.is_floating(array.type):
        overflow = pc.and_not(overflow, pc.is_inf(array))
    if _any(overflow):
        raise pa.ArrowInvalid(f"out of the range of {target}")


def _refuse_out_of_range(result: pa.Array, target: pa.DataType) -> None:
    """Arrow's dates and timestamps reach far beyond Spark's years 1 to 9999 (text
    ``0000-01-01``, a PostgreSQL date of year 200000): outside, no value of the type."""
    if pa.types.is_date32(target):
        raw, first, end = result.view(pa.int32()), _FIRST_DAY, _END_DAY
    elif pa.types.is_timestamp(target):
        per_day = _PER_DAY[target.unit]
        raw, first, end = result.view(pa.int64()), _FIRST_DAY * per_day, _END_DAY * per_day
    else:
        return
    bounds = pc.min_max(raw)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is not None and (low < first or high >= end):
        raise pa.ArrowInvalid(f"outside the years 1 to 9999 ({target})")


def _members(array: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The offsets (from 0) and members of a list or map array's entries, its slice
    and its null entries accounted for."""
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
    values = array.values.slice(start, end - start)
    zeroed = pc.subtract(offsets, pa.scalar(start, offsets.type))
    if not array.null_count:
        return zeroed, values
    # A null entry may cover members left behind it, which are no values (and may not
    # cast): only the members of valid entries are kept.
    kind = pa.LargeListArray if pa.types.is_large_list(array.type) else pa.ListArray
    listed = kind.from_arrays(zeroed, values, mask=array.is_null())
    lengths = pc.fill_null(pc.list_value_length(listed), 0).cast(offsets.type)
    counted = pa.concat_arrays([pa.array([0], offsets.type), pc.cumulative_sum(lengths)])
    return counted, pc.list_flatten(listed)


def _cast_nested(array: pa.Array, target: pa.DataType) -> pa.Array | None:
    """Lists, maps and structs cast member by member with the same strict casts (Arrow's
    own cast of a list would read its text leniently); None for other types."""
    wire = array.type
    mask = array.is_null() if array.null_count else None
    if pa.types.is_map(wire) and pa.types.is_map(target):
        offsets, entries = _members(array)
        keys, items = entries.flatten()
        return pa.MapArray.from_arrays(offsets, _cast(keys, target.key_type),
                                       _cast(items, target.item_type), type=target, mask=mask)
    for is_kind, kind in ((pa.types.is_list, pa.ListArray),
                          (pa.types.is_large_list, pa.LargeListArray)):
        if is_kind(wire) and is_kind(target):
            offsets, values = _members(array)
            return kind.from_arrays(offsets, _cast(values, target.value_type), type=target,
                                    mask=mask)
    if (pa.types.is_struct(wire) and pa.types.is_struct(target)
            and wire.num_fields == target.num_fields):
        children = [_cast(child, field.type)
                    for child, field in zip(array.flatten(), target, strict=True)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    return None


_KINDS: tuple[tuple[Callable[[pa.DataType], bool], str], ...] = (
    (_is_text, "text"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "binary"),
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_integer, "integer"),
    (lambda t: pa.types.is_floating(t) or pa.types.is_decimal(t), "number"),
    (lambda t: pa.types.is_date(t) or pa.types.is_timestamp(t), "time"),
    (lambda t: pa.types.is_list(t) or pa.types.is_large_list(t), "list"),
    (pa.types.is_map, "map"),
    (pa.types.is_struct, "struct"),
)


def _kind(data_type: pa.DataType) -> str:
    """The family of an Arrow type: text, binary, boolean, integer, number, time..."""
    return next((kind for test, kind in _KINDS if test(data_type)), "other")


# Which stored kinds read as which Spark kinds. Text reads as anything (it is parsed);
# other kinds as their own family, as Spark casts them (numbers among numbers, integers
# also as booleans, dates and timestamps among themselves) and as text (Arrow prints
# them; the SQL connectors read STRING columns as the database's own text instead).
# Arrow casts more (a date as an integer, bytes as a number); those are refused.
_READS_AS = {
    "text": {"text", "binary", "boolean", "integer", "number", "time", "list", "map", "struct"},
    "binary": {"binary", "text"},
    "boolean": {"boolean", "text"},
    "integer": {"integer", "number", "boolean", "text"},
    "number": {"integer", "number", "text"},
    "time": {"time", "text"},
    "list": {"list"},
    "map": {"map"},
    "struct": {"struct"},
}


def castable(wire: pa.DataType, target: pa.DataType) -> bool:
    """Whether values of ``wire`` can be read as ``target`` at all (some values may
    still be bad); checked when a connector plans its reads."""
    if wire == target or pa.types.is_null(wire):
        return True
    wire_kind, target_kind = _kind(wire), _kind(target)
    if target_kind not in _READS_AS.get(wire_kind, set()):
        return False
    if wire_kind == "list" and not castable(wire.value_type, target.value_type):
        return False
    try:
        _cast(pa.nulls(1, wire), target)
    except pa.ArrowNotImplementedError:
        return False
    except _CAST_ERRORS:
        return True
    return True


def _first_error(array: pa.Array, target: pa.DataType) -> str:
    try:
        _cast(array, target)
    except _CAST_ERRORS as exc:
        return str(exc).split("\n")[0][:160]
    return ""


def cast_column(wire: pa.Array, target: pa.DataType) -> tuple[pa.Array, dict[int, str]]:
    """``wire`` read as ``target``, and the bad values: ``{position: reason}``.

    Bad positions read as null in the result. The common case (no bad value) is one
    vectorized cast; only a batch that holds a bad value is probed slice by slice.

    Raises
    ------
    pyarrow.ArrowNotImplementedError
        If no cast from the wire type exists (connectors check `castable` first).
    """
    if wire.type == target and not _holds_times(target):
        return wire, {}
    if wire.null_count == len(wire):
        return pa.nulls(len(wire), target), {}
    try:
        return _cast(wire, target), {}
    except pa.ArrowNotImplementedError:
        raise
    except _CAST_ERRORS:
        pass
    bad: dict[int, str] = {}
    for start in range(0, len(wire), _PROBE_SLICE):
        piece = wire.slice(start, _PROBE_SLICE)
        if not _first_error(piece, target):
            continue
        for offset in range(len(piece)):
            reason = _first_error(piece.slice(offset, 1), target)
            if reason:
                bad[start + offset] = reason
    mask = _mask(len(wire), bad)
    cleaned = pc.if_else(mask, pa.scalar(None, wire.type), wire)
    return _cast(cleaned, target), bad


def _mask(length: int, positions: Sequence[int] | dict[int, str]) -> pa.BooleanArray:
    flags = [False] * length
    for position in positions:
        flags[position] = True
    return pa.array(flags, pa.bool_())


def _shown_wire(wire: pa.Array, position: int) -> str:
    """A wire value for messages, even one Python cannot hold (a date of year 0)."""
    try:
        return shown(wire[position].as_py())
    except (OverflowError, ValueError):
        return str(pc.cast(wire.slice(position, 1), pa.string())[0].as_py())


@dataclass(frozen=True)
class _Column:
    name: str
    target: pa.DataType
    spark: str
    nullable: bool
    checked: bool
    """Values of the target type itself are still checked (dates and timestamps,
    against Spark's range): a wire of the target type is not taken as it is."""


class Conformer:
    """Reads wire columns as the dimension schema, applying the bad-value policy.

    Built by a connector where it runs (it holds the connector's `BadValueStats`).
    Thread-safe: it keeps no per-call state.

    Parameters
    ----------
    table
        What to call the table in messages.
    schema
        The target Arrow schema (the dimension schema's).
    spark_types
        The Spark type names of the fields (``bigint``, ``decimal(10,2)``), for messages.
    policy, stats
        The bad-value policy and where bad values are counted.
    """

    def __init__(
        self,
        table: str,
        schema: pa.Schema,
        spark_types: Sequence[str],
        policy: BadValuePolicy,
        stats: BadValueStats,
    ) -> None:
        self.table = table
        self.schema = schema
        self.policy = policy
        self.stats = stats
        self._columns = [
            _Column(field.name, field.type, spark, field.nullable, _holds_times(field.type))
            for field, spark in zip(schema, spark_types, strict=True)
        ]

    def conform(
        self,
        wires: Sequence[pa.Array],
        describe_key: Callable[[int], str],
        flagged: Sequence[pa.Array | None] | None = None,
        where: str | None = None,
    ) -> tuple[list[pa.Array], pa.BooleanArray | None]:
        """The target columns, and which rows to keep (None: all).

        Parameters
        ----------
        wires
            One wire array per schema field, all of one length.
        describe_key
            The key of row ``i`` as text, for messages (called only for bad values).
        flagged
            Per field, an optional array that is non-null exactly where the backend
            already knows the value is bad (its text, for messages): SQLite's storage
            class did not suit the column.
        where
            What to call the table in messages, when not the conformer's own name (a
            file's path).

        Raises
        ------
        BadValueError
            Under ``FAILFAST``, for the first bad value.
        """
        columns: list[pa.Array] = []
        bad: list[BadValue] = []
        drop: set[int] = set()
        for index, (column, wire) in enumerate(zip(self._columns, wires, strict=True)):
            flags = None if flagged is None else flagged[index]
            if flags is None and not column.checked and wire.type == column.target:
                columns.append(wire)  # the target's own values: nothing to cast or find
                continue
            converted, reasons = cast_column(wire, column.target)
            found: dict[int, tuple[str, str]] = {
                position: (_shown_wire(wire, position), reason)
                for position, reason in reasons.items()
            }
            if flags is not None and flags.null_count < len(flags):
                # The backend's own text of the value and why it does not suit the
                # column (SQLite's quote() and storage class, a JSON kind...).
                for position in pc.indices_nonzero(pc.is_valid(flags)).to_pylist():
                    found[position] = (str(flags[position].as_py())[:120], "")
            if not found:
                columns.append(converted)
                continue
            for position in sorted(found):
                raw, reason = found[position]
                value = BadValue(where or self.table, describe_key(position), column.name, raw,
                                 column.spark, reason)
                if self.policy is BadValuePolicy.FAILFAST:
                    self.stats.record([value], self.policy)
                    raise value.error()
                bad.append(value)
            if self.policy is BadValuePolicy.DROPMALFORMED or not column.nullable:
                drop.update(found)
            if flags is not None:
                converted = pc.if_else(pc.is_valid(flags), pa.scalar(None, column.target),
                                       converted)
            columns.append(converted)
        self.stats.record(bad, self.policy)
        if not drop:
            return columns, None
        return columns, pc.invert(_mask(len(wires[0]), sorted(drop)))
