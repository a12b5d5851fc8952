"""Turning what a driver returned into the columns of the dimension schema.

Every backend reads a column in a *wire* form of its own choosing (the database's
native type, or its text where the database prints the value best), as Arrow. One set
of vectorized Arrow casts then turns the wire form into the column's Spark type, the
same for every driver, cache mode and refresh, so the same table gives the same values
everywhere. A value that does not cast is a *bad value*, handled by the
:class:`~connectors.BadValuePolicy` of the connector.

Casts are Arrow's, made strict where Arrow is lenient: text must be exactly a number,
a date (``YYYY-MM-DD``) or an ISO 8601 timestamp; decimals never round (a digit beyond
the scale or the precision is a bad value); integers never wrap. Numbers widen as in
Spark (an integer read as DOUBLE rounds to the nearest double). Text read as TIMESTAMP
(an instant) may carry an offset (``Z``, ``+02:00``); without one it is UTC. Text read
as TIMESTAMP_NTZ must have no offset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from connectors.policy import BadValue, BadValuePolicy, BadValueStats
from spark_lookup._shown import shown

__all__ = ["Conformer", "cast_column", "castable"]

_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError)
# Bad values are looked for in slices of this many values before one by one, so a batch
# with one bad value costs a few hundred small casts, not one per value.
_PROBE_SLICE = 256
_OFFSET = r"(?:[Zz]|[+-]\d\d(?::?\d\d)?)$"


def _is_text(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_string(data_type) or pa.types.is_large_string(data_type))


def _cast(array: pa.Array, target: pa.DataType) -> pa.Array:
    wire = array.type
    if wire == target:
        return array
    if _is_text(wire) and pa.types.is_timestamp(target) and target.tz is not None:
        # Arrow reads text with an offset as an instant and refuses text without one:
        # those are UTC wall-clock times.
        with_offset = pc.match_substring_regex(array, _OFFSET)
        if pc.all(pc.fill_null(with_offset, True)).as_py():
            return pc.cast(array, target)
        naive = pc.cast(
            pc.if_else(with_offset, pa.scalar(None, wire), array), pa.timestamp(target.unit)
        )
        aware = pc.cast(pc.if_else(with_offset, array, pa.scalar(None, wire)), target)
        return pc.if_else(with_offset, aware, pc.cast(naive, target))
    if _is_text(wire) and pa.types.is_decimal(target):
        # Arrow rescales before it checks the precision, and a rescale beyond 128 bits
        # wraps around ('1e30' read as decimal(38,18) comes out as another number): too
        # many integer digits are refused first, by magnitude.
        limit = 10.0 ** (target.precision - target.scale) * 1.000001
        try:
            magnitude = pc.abs(pc.cast(array, pa.float64()))
        except pa.ArrowInvalid:
            return pc.cast(array, target)  # not a number: the decimal parser says why
        if pc.any(pc.greater_equal(magnitude, limit)).as_py():
            raise pa.ArrowInvalid(f"more integer digits than {target.precision - target.scale} "
                                  f"(decimal({target.precision},{target.scale}))")
        return pc.cast(array, target)
    if pa.types.is_integer(wire) and pa.types.is_floating(target):
        return pc.cast(array, target, safe=False)  # rounds, as Spark's cast does
    return pc.cast(array, target, safe=True)


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
        If no cast from the wire type exists (connectors check :func:`castable` first).
    """
    if wire.type == target:
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


@dataclass(frozen=True)
class _Column:
    name: str
    target: pa.DataType
    spark: str
    nullable: bool


class Conformer:
    """Reads wire columns as the dimension schema, applying the bad-value policy.

    Built by a connector where it runs (it holds the connector's :class:`BadValueStats`).
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
            _Column(field.name, field.type, spark, field.nullable)
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
            converted, reasons = cast_column(wire, column.target)
            flags = None if flagged is None else flagged[index]
            found: dict[int, tuple[str, str]] = {
                position: (shown(wire[position].as_py()), reason)
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
