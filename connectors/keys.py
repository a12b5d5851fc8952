"""Lookup keys: Python key tuples checked against the key columns' Spark types and
turned into Arrow arrays, the form every connector sends to its store.

A key value is read as a value of its column's Spark type, never compared as a Python
object: ``True`` is no key of an INT column and ``1`` none of a STRING column (each is
a [`KeyKindError`][]), ``1.0`` is the BIGINT ``1``, ``Decimal('1.50')``
the DECIMAL(10,2) ``1.50``. A key holding None, NaN or NaT, or a value of the right kind
that no value of the column can equal (``1.5`` for a BIGINT column, ``1.005`` for a
DECIMAL(10,2), text with a lone surrogate) never matches and is never sent. A value
the column's type cannot hold (an integer beyond its range, ``Decimal('1E+1000000')``,
``10**400`` for a DOUBLE) is a [`KeyKindError`][] at once, found without
materializing it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from datetime import date, datetime, timezone
from decimal import Decimal
from operator import itemgetter
from types import MethodType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from spark_lookup.errors import ConfigError, KeyKindError
from spark_lookup.schema import to_arrow_type
from spark_lookup.shown import shown
from spark_lookup.type_families import FLOAT_TYPES, STRING_TYPES

__all__ = ["NO_MATCH", "EncodedKeys", "KeyCodec", "KeyKindError", "has_null", "key_spark_type"]

Key = tuple[Any, ...]


class _NoMatch:
    def __repr__(self) -> str:
        return "NO_MATCH"


NO_MATCH: Any = _NoMatch()
"""A key value no column value can equal: the key is not sent."""


_INT_BITS: dict[type[T.DataType], int] = {
    T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32, T.LongType: 64,
}
_FLOAT32_MAX = 3.4028234663852886e38


def _signless_zero(array: pa.Array) -> pa.Array:
    """Floats with -0.0 made 0.0: one key, as Spark compares them (Arrow's hash kernels
    tell them apart)."""
    if not pa.types.is_floating(array.type):
        return array
    return pc.add(array, pa.scalar(0.0, array.type))


def has_null(key: Key) -> bool:
    """Whether ``key`` holds a null (None, NaN, NaT, ``pd.NA``, a signalling NaN): such
    a key never matches (SQL's ``NULL = NULL`` is not true) and is never sent."""
    for value in key:
        if value is None:
            return True
        try:
            if value != value:  # NaN, NaT, Decimal NaN
                return True
        except (TypeError, ValueError, ArithmeticError):  # pd.NA, a signalling NaN
            return True
    return False


def _is_bool(value: object) -> bool:
    # numpy.bool_, named "bool" since numpy 2
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool")


def _type_name(data_type: T.DataType) -> str:
    return str(data_type.simpleString())


class _Coercer:
    """Reads one key value as a value of a Spark type: the value, NO_MATCH, or raises
    a message (str) through `_Refused`."""

    def __init__(self, data_type: T.DataType) -> None:
        self.data_type = data_type
        self.fast_types: frozenset[type] = frozenset()
        self.convert: Callable[[Any], Any]
        if type(data_type) in _INT_BITS:
            bits = _INT_BITS[type(data_type)]
            self.low, self.high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
            self.digits = len(str(self.high))
            self.fast_types = frozenset({int})
            self.convert = self._integral
        else:
            found = next(((python, convert) for spark, python, convert in _KINDS
                          if isinstance(data_type, spark)), None)
            if found is None:
                raise ConfigError(
                    f"a {_type_name(data_type)} column cannot be a lookup key column")
            python, convert = found
            self.fast_types = frozenset() if python is None else frozenset({python})
            self.convert = MethodType(convert, self)
        self.arrow = to_arrow_type(data_type)

    def _wrong_kind(self, value: Any) -> _Refused:
        kind = type(value).__name__
        article = "an" if kind[:1] in "aeiou" else "a"
        return _Refused(f"{article} {kind} value ({shown(value, 60)}) can never equal a value of a "
                        f"{_type_name(self.data_type)} column")

    def _cannot_hold(self, value: Any) -> _Refused:
        text = value if isinstance(value, str) else shown(value, 60)
        return _Refused(f"{text} is out of the range of {_type_name(self.data_type)}")

    def _integral(self, value: Any) -> Any:
        if _is_bool(value):
            raise self._wrong_kind(value)
        if isinstance(value, numbers.Integral):
            number = int(value)
        elif isinstance(value, Decimal):
            if value.is_nan():
                return NO_MATCH
            if value.is_infinite() or value.adjusted() >= self.digits:
                raise self._cannot_hold(value)  # checked before int(): 1E+1000000
            if value != value.to_integral_value():
                return NO_MATCH
            number = int(value)
        elif isinstance(value, numbers.Real):
            real = float(value)
            if math.isnan(real):
                return NO_MATCH
            if math.isinf(real):
                raise self._cannot_hold(value)
            if not real.is_integer():
                return NO_MATCH
            number = int(real)
        else:
            raise self._wrong_kind(value)
        if not self.low <= number <= self.high:
            raise self._cannot_hold(value)
        return number

    def _floating(self, value: Any) -> Any:
        if _is_bool(value) or not isinstance(value, (numbers.Real, Decimal)):
            raise self._wrong_kind(value)
        if isinstance(value, Decimal) and value.is_finite() and value.adjusted() > 308:
            raise self._cannot_hold(value)
        try:
            number = float(value)
        except OverflowError as exc:  # an int beyond the double range
            raise self._cannot_hold(value) from exc
        if math.isnan(number):
            return NO_MATCH
        if isinstance(self.data_type, T.FloatType):
            if math.isfinite(number) and abs(number) > _FLOAT32_MAX:
                raise self._cannot_hold(value)
            # The FLOAT it is: 1.1 and the FLOAT nearest 1.1 are one key.
            return float(np.float32(number))
        return number

    def _decimal(self, value: Any) -> Any:
        data_type = self.data_type
        assert isinstance(data_type, T.DecimalType)
        if isinstance(value, Decimal):
            number = value
        elif isinstance(value, numbers.Integral) and not _is_bool(value):
            number = Decimal(int(value))
        elif isinstance(value, numbers.Real) and not _is_bool(value):
            real = float(value)
            if math.isnan(real):
                return NO_MATCH
            if math.isinf(real):
                raise self._cannot_hold(value)
            number = Decimal(repr(real))
        else:
            raise self._wrong_kind(value)
        if number.is_nan():
            return NO_MATCH
        if number.is_infinite() or (
            number and number.adjusted() >= data_type.precision - data_type.scale
        ):
            raise self._cannot_hold(value)
        exponent = number.as_tuple().exponent
        assert isinstance(exponent, int)
        if -exponent > data_type.scale:
            # Checked without materializing: 1E-1000000 has more digits than any scale.
            if -exponent - (len(number.as_tuple().digits) - 1) > 38 + data_type.scale:
                return NO_MATCH
            scaled = number.quantize(Decimal(1).scaleb(-data_type.scale))
            if scaled != number:
                return NO_MATCH  # more fractional digits than the column holds
            number = scaled
        return number

    def _boolean(self, value: Any) -> Any:
        if not _is_bool(value):
            raise self._wrong_kind(value)
        return bool(value)

    def _text(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise self._wrong_kind(value)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no store holds it
            return NO_MATCH
        return str(value)

    def _binary(self, value: Any) -> Any:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise self._wrong_kind(value)
        return bytes(value)

    def _date(self, value: Any) -> Any:
        if not isinstance(value, date) or isinstance(value, datetime):
            raise self._wrong_kind(value)
        return date(value.year, value.month, value.day)

    def _instant(self, value: Any) -> Any:
        if not isinstance(value, datetime):
            raise self._wrong_kind(value)
        if value != value or getattr(value, "nanosecond", 0) != 0:  # NaT; under a microsecond
            return NO_MATCH
        plain = _plain_datetime(value)
        if plain.tzinfo is None:
            return plain.replace(tzinfo=timezone.utc)  # naive: UTC, as Arrow reads it
        return plain.astimezone(timezone.utc)

    def _wall_clock(self, value: Any) -> Any:
        if not isinstance(value, datetime):
            raise self._wrong_kind(value)
        if value != value or getattr(value, "nanosecond", 0) != 0:  # NaT; under a microsecond
            return NO_MATCH
        if value.tzinfo is not None:
            raise _Refused(
                f"an aware datetime ({shown(value, 60)}) is no value of a timestamp_ntz column: "
                "pass a naive datetime (local wall-clock time)"
            )
        return _plain_datetime(value)


# Key column types after the integers: the Python type a value of it already is (the
# fast path; none for an instant, which needs its zone checked) and the converter.
_Converter = Callable[["_Coercer", Any], Any]
_KINDS: tuple[tuple[type | tuple[type, ...], type | None, _Converter], ...] = (
    (FLOAT_TYPES, float, _Coercer._floating),
    (T.DecimalType, Decimal, _Coercer._decimal),
    (T.BooleanType, bool, _Coercer._boolean),
    (STRING_TYPES, str, _Coercer._text),
    (T.BinaryType, bytes, _Coercer._binary),
    (T.DateType, date, _Coercer._date),
    (T.TimestampType, None, _Coercer._instant),
    (T.TimestampNTZType, datetime, _Coercer._wall_clock),
)


# Arrow types with no Spark type of their own, read as the Spark type that holds all
# their values; the cast back to them refuses what they cannot hold.
_WIDER: tuple[tuple[pa.DataType, T.DataType], ...] = (
    (pa.uint8(), T.ShortType()), (pa.uint16(), T.IntegerType()),
    (pa.uint32(), T.LongType()), (pa.uint64(), T.DecimalType(20, 0)),
    (pa.date64(), T.DateType()),
)


def key_spark_type(arrow_type: pa.DataType) -> T.DataType:
    """The Spark type a key value for a column of ``arrow_type`` is read as.

    Raises
    ------
    ConfigError
        For an Arrow type no key column can have (lists, times, intervals...).
    """
    from pyspark.errors import PySparkException

    from spark_lookup.compat import arrow_to_spark_type

    for arrow, spark in _WIDER:
        if arrow_type == arrow:
            return spark
    try:
        return arrow_to_spark_type(arrow_type, prefer_timestamp_ntz=True)
    except (PySparkException, TypeError) as exc:
        raise ConfigError(f"a {arrow_type} column cannot be a lookup key column") from exc


class _Refused(Exception):
    """A key value refused by a coercer; the message says why."""


def _plain_datetime(value: datetime) -> datetime:
    if type(value) is datetime:
        return value
    # pandas.Timestamp and other subclasses: the plain datetime of the same instant.
    return datetime(value.year, value.month, value.day, value.hour, value.minute, value.second,
                    value.microsecond, value.tzinfo, fold=value.fold)


class EncodedKeys:
    """A batch of keys as the store receives it.

    Attributes
    ----------
    arrays
        One Arrow array per key column (the key's Arrow type), the distinct keys that
        can match, in first-seen order.
    positions
        For each key given, the index of its distinct key in ``arrays``, or -1 when it
        can never match (a null part, NaN, a value no column value equals). Distinct
        keys are numbered in first-seen order: when there are as many as keys given,
        key ``i`` is distinct key ``i``.
    """

    __slots__ = ("_distinct", "arrays", "kept", "positions")

    def __init__(
        self, arrays: list[pa.Array], positions: Sequence[int],
        distinct: list[Key] | None = None,
        kept: pa.Array | None = None,
    ) -> None:
        self.arrays = arrays
        self.positions = positions
        self._distinct = distinct
        self.kept = kept
        """For keys given as arrays: the position in them of each key in ``arrays``
        (None: all, in order)."""

    def original_positions(self, index: pa.Array) -> pa.Array:
        """``index`` (positions in ``arrays``) as positions in the arrays given."""
        return index if self.kept is None else self.kept.take(index)

    @property
    def distinct(self) -> list[Key]:
        """The distinct keys as normalized Python tuples (what the arrays hold)."""
        if self._distinct is None:
            columns = [array.to_pylist() for array in self.arrays]
            self._distinct = list(zip(*columns, strict=True)) if columns else []
        return self._distinct

    def key_at(self, position: int) -> Key:
        """The distinct key at ``position`` as a Python tuple, for messages (no other
        key is turned into Python objects)."""
        if self._distinct is not None:
            return self._distinct[position]
        return tuple(array[position].as_py() for array in self.arrays)

    def __len__(self) -> int:
        return len(self.arrays[0]) if self.arrays else 0


class KeyCodec:
    """Checks and encodes lookup keys for the key columns of one table.

    Built where the connector is configured; cheap to rebuild after unpickling.

    Parameters
    ----------
    names
        The key column names, in key order.
    spark_types
        Their Spark types.
    where
        What the keys are for, in messages (``"table 'customers'"``).
    arrow_types
        The Arrow types to encode into, when not the Spark types' own (a cache bound to
        an Arrow schema, see [`for_arrow`][]): a value that its own type holds but
        this one does not (a fraction of a second for ``timestamp[s]``) never matches.

    Raises
    ------
    ConfigError
        For a key column of a type no key can have (arrays, maps, structs).
    """

    def __init__(self, names: Sequence[str], spark_types: Sequence[T.DataType], where: str,
                 arrow_types: Sequence[pa.DataType] | None = None) -> None:
        self.names = list(names)
        self.where = where
        self._spark_types = list(spark_types)
        self._coercers = []
        for name, data_type in zip(self.names, spark_types, strict=True):
            try:
                self._coercers.append(_Coercer(data_type))
            except ConfigError as exc:
                raise ConfigError(f"key column {name!r} of {where}: {exc}") from exc
        own = [c.arrow for c in self._coercers]
        self.arrow_types = own if arrow_types is None else list(arrow_types)
        self._given_types = None if arrow_types is None else self.arrow_types
        # Per column, the Arrow type to cast to after building in the Spark type's own
        # (safe casts: a value lost on the way fails, it is never rounded or cut).
        self._recast = [None if theirs == mine else theirs
                        for mine, theirs in zip(own, self.arrow_types, strict=True)]

    @classmethod
    def for_arrow(cls, names: Sequence[str], arrow_types: Sequence[pa.DataType],
                  where: str) -> KeyCodec:
        """A codec of keys for columns of these Arrow types, each read as the Spark type
        of `key_spark_type` and encoded as its Arrow type exactly.

        Raises
        ------
        ConfigError
            For an Arrow type no key column can have.
        """
        spark_types = []
        for name, arrow_type in zip(names, arrow_types, strict=True):
            try:
                spark_types.append(key_spark_type(arrow_type))
            except ConfigError as exc:
                raise ConfigError(f"key column {name!r} of {where}: {exc}") from exc
        return cls(names, spark_types, where, arrow_types)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its configuration where it lands (the coercers hold methods).
        return (KeyCodec, (self.names, self._spark_types, self.where, self._given_types))

    def _to_arrow(self, values: Sequence[Any], column: int) -> pa.Array:
        """Values of a column's Spark type as an array of its Arrow type (exact, or raises)."""
        array = pa.array(values, type=self._coercers[column].arrow)
        target = self._recast[column]
        return _signless_zero(array if target is None else array.cast(target))

    def check_shape(self, key: Any) -> None:
        """Refuse a key that is not a tuple of one value per key column.

        Raises
        ------
        KeyKindError
            If ``key`` is not a tuple, or has the wrong number of values.
        """
        if not isinstance(key, tuple):
            raise KeyKindError(f"a key must be a tuple of key values, got {type(key).__name__}")
        if len(key) != len(self.names):
            raise KeyKindError(
                f"key {shown(key, 60)} has {len(key)} value(s); {self.where} is looked up "
                f"by {len(self.names)}: {self.names}"
            )

    def normalize(self, key: Key) -> Key | None:
        """One key as normalized values of its columns' types, or None when it can
        never match.

        Raises
        ------
        KeyKindError
            As [`encode`][].
        """
        self.check_shape(key)
        if any(value is None for value in key):
            return None  # never sent, so never checked either (SQL: NULL = x is not true)
        values: list[Any] = []
        matchable = True
        for column, (name, coercer, value) in enumerate(
                zip(self.names, self._coercers, key, strict=True)):
            try:
                normalized = coercer.convert(value)
            except _Refused as exc:
                raise KeyKindError(
                    f"key {shown(key, 60)} for {self.where}, column {name!r}: {exc}"
                ) from None
            if normalized is not NO_MATCH and self._recast[column] is not None:
                try:
                    self._to_arrow([normalized], column)
                except (pa.ArrowInvalid, OverflowError):  # beyond a narrower Arrow type
                    normalized = NO_MATCH
            if normalized is NO_MATCH:
                matchable = False
            values.append(normalized)
        return tuple(values) if matchable else None

    def encode(self, keys: Sequence[Key], *, skip_null_keys: bool = False,
               shapes_checked: bool = False) -> EncodedKeys:
        """The distinct matchable keys of ``keys`` as Arrow arrays, and where each key
        went. Every key is checked (a wrong kind is reported whichever other keys
        there are), except, with ``skip_null_keys``, a key holding a null anywhere
        (`has_null`): it never matches, so its other values are not looked at
        (the lookup runtime's rule: such a key is never sent).

        ``shapes_checked`` says the caller already checked that every key is a tuple
        of one value per key column.

        Keys of their columns' plain Python types (``int`` for an integer column,
        ``str`` for text...; no null, no NaN) are checked column by column and built
        into arrays by Arrow, which refuses what does not fit in C, and deduplicated by
        Arrow's hash kernels: no Python object per key. Any other key is read value by
        value.

        Raises
        ------
        KeyKindError
            For a key that is not a tuple or of the wrong length, a value of the wrong
            kind, or a value its column's type cannot hold, naming the key and column.
        """
        if keys and not shapes_checked and (
                set(map(type, keys)) != {tuple} or set(map(len, keys)) != {len(self.names)}):
            for key in keys:  # found in C above; named here
                self.check_shape(key)
        columns = self._plain_columns(keys)
        if columns is not None:
            # Values of their columns' plain Python types are their own normal form; Arrow
            # checks ranges, scales and encodings as it builds the arrays, and anything
            # it refuses is looked at value by value below.
            try:
                return self._encoded_plain(columns)
            except (OverflowError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError):
                pass
        if skip_null_keys:
            return self._encoded([None if has_null(key) else self.normalize(key)
                                  for key in keys])
        return self._encoded([self.normalize(key) for key in keys])

    def encode_arrays(self, arrays: Sequence[pa.Array]) -> EncodedKeys:
        """Distinct keys given as Arrow arrays (one per key column, no nulls), cast to
        the key columns' types (numbers among numbers, as Spark compares them; other
        kinds only as themselves: text is no key of an INT column); a key that cannot
        be cast exactly, or holds a null or NaN, never matches and is left out (``kept``
        says which were kept).

        Raises
        ------
        KeyKindError
            For the wrong number of arrays, or arrays of a type that can never equal
            the column's (text for a BIGINT column).
        """
        if len(arrays) != len(self.names):
            raise KeyKindError(
                f"{len(arrays)} key array(s) for {self.where}, looked up by {self.names}"
            )
        from connectors.convert import _kind, cast_column, castable

        cast: list[pa.Array] = []
        usable = None
        for name, array, target in zip(self.names, arrays, self.arrow_types, strict=True):
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            if array.type != target:
                if not castable(array.type, target) or (
                    _kind(array.type) != _kind(target)
                    and {_kind(array.type), _kind(target)} != {"integer", "number"}
                ):
                    raise KeyKindError(
                        f"keys of type {array.type} for {self.where}, column {name!r}, can "
                        f"never equal its {target} values"
                    )
                given = array
                array, _ = cast_column(array, target)  # what does not fit never matches
                if pa.types.is_float32(target):
                    # Arrow rounds a number beyond the FLOAT range to infinity, which is
                    # no key it was: only an infinity stays one.
                    array = pc.if_else(pc.and_(pc.is_inf(array), pc.is_finite(given)),
                                       pa.scalar(None, target), array)
            floating = pa.types.is_floating(array.type)
            cast.append(_signless_zero(array))
            if not array.null_count and not floating:
                continue  # every key of the column usable (the usual case)
            ok = pc.is_valid(array)
            if floating:
                # Kleene: a null's is_nan is null, and a null must not pass as usable.
                ok = pc.and_kleene(ok, pc.invert(pc.is_nan(array)))
            usable = ok if usable is None else pc.and_(usable, ok)
        if usable is None or pc.all(usable).as_py():
            # A range, not a list: no Python int per key on the probe path.
            return EncodedKeys(cast, range(len(cast[0]) if cast else 0))
        kept = pc.indices_nonzero(usable)
        return EncodedKeys([a.take(kept) for a in cast], [], kept=kept)

    def _encoded_plain(self, columns: Sequence[Sequence[Any]]) -> EncodedKeys:
        """Keys of plain values, given column by column, built into arrays and
        deduplicated by Arrow's hash kernels (no Python object per key beyond the ones
        given): each column's values numbered by ``unique``/``index_in``, several
        columns' numbers combined in numpy."""
        arrays = [self._to_arrow(column, i) for i, column in enumerate(columns)]
        if len(arrays) == 1:
            unique = pc.unique(arrays[0])
            if len(unique) == len(arrays[0]):  # distinct already (the runtime's keys are)
                return EncodedKeys(arrays, list(range(len(unique))))
            positions = pc.index_in(arrays[0], value_set=unique)
            return EncodedKeys([unique], positions.to_pylist())
        combined: np.ndarray | None = None
        for array in arrays:
            unique = pc.unique(array)
            code = pc.index_in(array, value_set=unique).to_numpy().astype(np.int64)
            if combined is None:
                combined = code
                continue
            # Renumbered densely first, so the combined number stays below n * n.
            _, dense = np.unique(combined, return_inverse=True)
            combined = dense.reshape(-1) * len(unique) + code
        assert combined is not None
        _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # distinct keys in first-seen order
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order), dtype=np.int64)
        take = pa.array(first[order], type=pa.int64())
        return EncodedKeys([array.take(take) for array in arrays],
                           rank[inverse.reshape(-1)].tolist())

    def _encoded(self, normalized: list[Key | None]) -> EncodedKeys:
        index: dict[Key, int] = {}
        positions = []
        for key in normalized:
            if key is None:
                positions.append(-1)
                continue
            position = index.get(key)
            if position is None:
                position = index[key] = len(index)
            positions.append(position)
        distinct = list(index)
        return EncodedKeys(self._arrays(distinct), positions, distinct)

    def _plain_columns(self, keys: Sequence[Key]) -> list[tuple[Any, ...]] | None:
        """The keys' values column by column when every value is of its column's plain
        Python type and neither null nor NaN (checked column by column, in C loops);
        else None."""
        if not keys:
            return [() for _ in self.names]
        columns = [tuple(map(itemgetter(i), keys)) for i in range(len(self.names))]
        for coercer, column in zip(self._coercers, columns, strict=True):
            kinds = set(map(type, column))
            if not kinds <= coercer.fast_types:
                return None
            if float in kinds and any(v != v for v in column):  # NaN never matches
                return None
            if float in kinds and isinstance(coercer.data_type, T.FloatType) and any(
                    _FLOAT32_MAX < abs(v) < math.inf for v in column):
                return None  # beyond FLOAT: refused value by value, not made infinite
            if Decimal in kinds and not all(v.is_finite() for v in column):
                return None
            if datetime in kinds and any(v.tzinfo is not None for v in column):
                return None
        return columns

    def _arrays(self, distinct: list[Key]) -> list[pa.Array]:
        if not distinct:
            return [pa.array([], type=arrow) for arrow in self.arrow_types]
        columns = list(zip(*distinct, strict=True))
        return [self._to_arrow(column, i) for i, column in enumerate(columns)]
