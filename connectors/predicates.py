"""Filters pushed into loads: structured predicates, never SQL text.

A [`Predicate`][] names a column, an operator and a value. A source evaluates a
list of them (all must hold) where the data lives: a database gets ``"column" = ?``
with the value bound; a Parquet file's row groups are skipped, unread, when their
statistics rule the predicates out (`predicates_to_pruning`, a pyarrow dataset
expression), and the rows read are filtered after conversion to the declared types
(`predicates_mask`); Redis rows are filtered after the read. As Iceberg's Flink
lookup source applies a join's constant conditions to its full cache, so a full cache
of ``WHERE active = true`` holds only those rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from spark_lookup.errors import ConfigError
from spark_lookup.identifiers import validate_identifier
from spark_lookup.shown import shown

__all__ = [
    "OPERATORS",
    "Predicate",
    "VersionBoundedLookup",
    "VersionBounds",
    "predicates_mask",
    "predicates_to_pruning",
    "predicates_to_sql",
    "statistics_decide",
]

OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null")
_UNARY = ("is null", "is not null")


@dataclass(frozen=True)
class Predicate:
    """``column op value``: one condition a loaded row must meet.

    Small, frozen and picklable; travels with its source.

    Parameters
    ----------
    column
        A column of the source's schema (validated as an identifier).
    op
        One of ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``,
        ``is null``, ``is not null`` (any case).
    value
        A scalar (None for the ``is`` operators), or for ``in`` / ``not in`` a
        non-empty list or tuple of scalars. A null value compares as SQL does (never
        true): use ``is null``.

    Examples
    --------
    >>> Predicate("country", "in", ["NL", "BE"])
    Predicate(column='country', op='in', value=('NL', 'BE'))
    """

    column: str
    op: str
    value: Any = None

    def __post_init__(self) -> None:
        validate_identifier(self.column, "predicate column")
        op = self.op.strip().lower() if isinstance(self.op, str) else self.op
        if op not in OPERATORS:
            raise ConfigError(
                f"predicate operator must be one of {list(OPERATORS)}, got {self.op!r}"
            )
        object.__setattr__(self, "op", op)
        if op in _UNARY:
            if self.value is not None:
                raise ConfigError(f"predicate {self.column!r} {op} takes no value")
        elif op in ("in", "not in"):
            if isinstance(self.value, (str, bytes)) or not isinstance(self.value, Sequence):
                raise ConfigError(f"predicate {self.column!r} {op} needs a list of values, "
                                  f"got {shown(self.value, 60)}")
            if not self.value:
                raise ConfigError(f"predicate {self.column!r} {op} needs at least one value")
            object.__setattr__(self, "value", tuple(self.value))
        elif self.value is None:
            raise ConfigError(
                f"predicate {self.column!r} {op} None is never true in SQL: use 'is null'"
            )


@dataclass(frozen=True)
class VersionBounds:
    """The versions a point-in-time lookup may leave unread: those starting after
    ``latest_start`` and, given ``valid_to``, those ending at or before
    ``earliest_end``. Times are microseconds as `lookup.versions.instants` reads the
    version columns (a TIMESTAMP's since the epoch in UTC, a TIMESTAMP_NTZ's or a
    DATE's on the wall clock).

    A bound, not a filter: a source may read more (rows whose times it cannot order
    as they read), never fewer; rows whose ``valid_from`` is NULL are read (the
    bad-value policy counts them). Which joins may use it is the runtime's to decide
    (`lookup.runtime.partial`).
    """

    valid_from: str
    latest_start: int
    valid_to: str | None = None
    earliest_end: int | None = None


@runtime_checkable
class VersionBoundedLookup(Protocol):
    """A lookup function that can leave versions out of a batched load
    (``SqlLookupFunction``): a no-cache point-in-time join asks it for the versions
    its batch's times may need only."""

    def lookup_arrow_between(self, keys: Sequence[Any], bounds: VersionBounds
                             ) -> tuple[Any, Any]:
        """``lookup_arrow``, reading no version ``bounds`` rules out."""
        ...


def check_predicates(
    predicates: object, columns: Sequence[str], what: str
) -> tuple[Predicate, ...]:
    """``predicates`` as a tuple, each naming a column of ``columns``.

    Raises
    ------
    ConfigError
        For something that is not a list of [`Predicate`][], or an unknown column.
    """
    if predicates is None:
        return ()
    if isinstance(predicates, Predicate):
        predicates = [predicates]
    if not isinstance(predicates, Sequence) or not all(
        isinstance(p, Predicate) for p in predicates
    ):
        raise ConfigError(f"filters of {what} must be a list of Predicate, got {shown(predicates)}")
    unknown = [p.column for p in predicates if p.column not in columns]
    if unknown:
        raise ConfigError(
            f"filters of {what} name unknown column(s) {unknown}; it has {list(columns)}"
        )
    return tuple(predicates)


def predicates_to_sql(
    predicates: Sequence[Predicate],
    column_sql: Callable[[str], str],
    placeholder: Callable[[int], str],
    first: int = 0,
) -> tuple[list[str], list[Any]]:
    """SQL conditions for ``predicates`` and their values, to bind in order.

    ``column_sql`` quotes a column name; ``placeholder(i)`` is the driver's placeholder
    of parameter ``i``; parameters are numbered from ``first``.
    """
    conditions: list[str] = []
    values: list[Any] = []

    def bind(value: Any) -> str:
        values.append(value)
        return placeholder(first + len(values) - 1)

    for predicate in predicates:
        column = column_sql(predicate.column)
        op = predicate.op
        if op in _UNARY:
            conditions.append(f"{column} {op.upper()}")
        elif op in ("in", "not in"):
            listed = ", ".join(bind(v) for v in predicate.value)
            conditions.append(f"{column} {op.upper()} ({listed})")
        else:
            sql_op = "<>" if op == "!=" else op
            conditions.append(f"{column} {sql_op} {bind(predicate.value)}")
    return conditions, values


def predicates_to_pruning(predicates: Sequence[Predicate], file_schema: Any, schema: Any) -> Any:
    """A ``pyarrow.compute.Expression`` over a file's columns that pyarrow.dataset may
    test Parquet row-group statistics against (min, max, null count): false only for
    row groups in which no row, read as ``schema``, meets every predicate. None when no
    predicate can be tested so.

    A predicate is left out (it still filters the rows read, `predicates_mask`)
    unless the file holds its column as the declared type (or another layout of the
    same text or binary values), so that statistics describe the values read, and
    unless statistics can decide it: floating statistics leave NaN out, so ``!=`` and
    ``not in`` (which NaN meets) and NaN operands are not tested on floating columns,
    nor ``in`` (pyarrow 26 rules ``x in (0.0)`` out of a row group of 0.0, whose
    statistics are -0.0 and 0.0); a date or timestamp out of Spark's range reads as
    null (the bad-value policy), so ``is null`` is not tested on them. A predicate SQL
    never holds (``in`` of nulls only, ``not in`` with a null) is false.

    Parameters
    ----------
    predicates
        The predicates, all of which must hold.
    file_schema
        The file's Arrow schema (a fragment's ``physical_schema``).
    schema
        The declared Arrow schema, which the predicates' columns are in.
    """
    expression = None
    for predicate in predicates:
        index = file_schema.get_field_index(predicate.column)
        if index < 0:
            continue
        file_type = file_schema.field(index).type
        if not _same_values(file_type, schema.field(predicate.column).type):
            continue
        try:
            term = _pruning_term(predicate, file_type)
        except (ValueError, TypeError, OverflowError):  # a value not of the column's type
            term = None  # the rows' filter meets it as it always did
        if term is not None:
            expression = term if expression is None else expression & term
    return expression


def _same_values(file_type: Any, declared: Any) -> bool:
    """Whether values of ``file_type`` read as ``declared`` are the same values."""
    import pyarrow as pa

    # (Not the view layouts: pyarrow 26 has no is_in kernel for them.)
    text = (pa.types.is_string, pa.types.is_large_string)
    binary = (pa.types.is_binary, pa.types.is_large_binary)
    for kind in (text, binary):
        if any(test(file_type) for test in kind) and any(test(declared) for test in kind):
            return True
    plain = (pa.types.is_boolean, pa.types.is_integer, pa.types.is_floating,
             pa.types.is_decimal, pa.types.is_date, pa.types.is_timestamp)
    return bool(file_type == declared and any(test(file_type) for test in plain))


def _pruning_term(predicate: Predicate, data_type: Any) -> Any:
    """``predicate`` as an expression fit for statistics, or None where it is not."""
    import pyarrow as pa
    import pyarrow.compute as pc

    field = pc.field(predicate.column)
    op = predicate.op
    floating = pa.types.is_floating(data_type)
    if op == "is null":
        times = pa.types.is_date(data_type) or pa.types.is_timestamp(data_type)
        return None if times else field.is_null()
    if op == "is not null":
        return field.is_valid()
    if op in ("in", "not in"):
        values = [value for value in predicate.value if value is not None]
        if not values or (op == "not in" and len(values) < len(predicate.value)):
            return pc.scalar(False)  # SQL never holds it
    if not statistics_decide(predicate, floating):
        return None
    if op in ("in", "not in"):
        term = field.isin(pa.array(values, type=data_type))
        return term if op == "in" else ~term
    value = pa.scalar(predicate.value, type=data_type)
    return {
        "=": field == value, "!=": field != value, "<": field < value,
        "<=": field <= value, ">": field > value, ">=": field >= value,
    }[op]


def statistics_decide(predicate: Predicate, floating: bool) -> bool:
    """Whether a column's min/max statistics can rule ``predicate`` out (for row groups,
    and for whole files by a table format's statistics). Floating statistics leave NaN
    out, so ``!=`` and ``not in`` (which NaN meets) and NaN operands cannot be decided,
    nor ``in`` (pyarrow 26 rules ``x in (0.0)`` out of a row group of -0.0 and 0.0).

    Raises
    ------
    ValueError, TypeError
        For a floating column's operand that is no number.
    """
    if not floating or predicate.op in ("is null", "is not null"):
        return True
    if predicate.op in ("!=", "in", "not in"):
        return False
    return not math.isnan(float(predicate.value))


def predicates_mask(batch: Any, predicates: Sequence[Predicate]) -> Any:
    """A boolean array: which rows of ``batch`` meet every predicate (a null comparison
    is not a match, as in SQL).

    Raises
    ------
    ConfigError
        For a predicate on a column ``batch`` does not have.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = pa.array(np.ones(batch.num_rows, dtype=bool))
    for predicate in predicates:
        index = batch.schema.get_field_index(predicate.column)
        if index < 0:  # column(-1) would be the last column
            raise ConfigError(f"no column {predicate.column!r} to filter by; "
                              f"there are {batch.schema.names}")
        column = batch.column(index)
        op = predicate.op
        if op == "is null":
            term = pc.is_null(column)
        elif op == "is not null":
            term = pc.is_valid(column)
        elif op == "not in" and None in predicate.value:
            # SQL: x NOT IN (1, NULL) is x <> 1 AND x <> NULL, never true.
            term = pa.nulls(batch.num_rows, pa.bool_())
        elif op in ("in", "not in"):
            values = pa.array(list(predicate.value), type=column.type)
            if pa.types.is_floating(column.type):
                # Hashed, -0.0 is not 0.0; compared (=), it is: adding 0.0 makes it 0.0.
                column, values = pc.add(column, 0.0), pc.add(values, 0.0)
            term = pc.is_in(column, value_set=values)
            term = pc.if_else(pc.is_valid(column), term, pa.scalar(None, pa.bool_()))
            if op == "not in":
                term = pc.invert(term)
        else:
            value = pa.scalar(predicate.value, type=column.type)
            term = {
                "=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
                ">": pc.greater, ">=": pc.greater_equal,
            }[op](column, value)
        mask = pc.and_(mask, pc.fill_null(term, False))
    return mask
