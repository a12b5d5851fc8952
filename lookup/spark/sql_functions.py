"""Lookups from Spark SQL: a scalar function (first matching row as a struct) and a table
function (every matching row, for ``LATERAL`` joins).

Design notes: DESIGN.md, lookup/ ``lookup/spark/sql_functions.py``.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import re
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
import pyarrow as pa
from pyspark.sql import types as T

from cache.base import Key, Row
from connectors.keys import KeyCodec
from lookup.providers import LookupProvider
from lookup.runtime.base import LookupRuntime
from lookup.runtime.worker import worker_runtime
from lookup.spark.assemble import (
    JoinShape,
    PointInTime,
    factorize,
    known_range,
    pick_versions,
)
from lookup.spark.join_plan import keys_compatible
from lookup.spark.session import is_connect
from lookup.versions import comparable, now_micros, version_index
from spark_lookup.compat import ARROW_UDF, UDTF_ANALYZE, require
from spark_lookup.errors import ConfigError, KeyKindError
from spark_lookup.schema import to_arrow_type
from spark_lookup.spark_types import AnySparkSession, AnyTableFunction

if TYPE_CHECKING:
    from pyspark.sql._typing import UserDefinedFunctionLike

__all__ = ["register_lookup_function", "register_lookup_table_function"]

_FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")

_MEMO_MAX_KEYS = 10_000
"""Distinct keys a table function remembers within one task before starting over."""

_TIME_ZONE = "spark.sql.session.timeZone"
_AS_OF = "as_of"  # the time argument's column in the batch a scalar function picks from
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=dt.timezone.utc)
_MICRO = dt.timedelta(microseconds=1)


# --- driver side --------------------------------------------------------------------


def _checked(spark: AnySparkSession, name: object, provider: object
             ) -> tuple[str, LookupProvider]:
    """The checked function name and provider of a registration (the provider first)."""
    checked = _check_provider(provider)
    return _check_name(spark, name), checked


def _check_provider(provider: object) -> LookupProvider:
    if not isinstance(provider, LookupProvider):
        raise ConfigError(f"provider must be a lookup provider (PartialCachingLookupProvider, "
                          f"FullCachingLookupProvider, ...), got {type(provider).__name__}")
    for field in provider.schema.fields:
        to_arrow_type(field.dataType)  # ConfigError for a type with no Arrow mapping
    return provider


def _check_name(spark: AnySparkSession, name: object) -> str:
    """A plain SQL identifier that does not name a built-in function (Spark resolves
    built-ins first, so a function registered under such a name would never be called)."""
    if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
        raise ConfigError(f"invalid SQL function name {name!r}: use letters, digits and '_', not "
                          "starting with a digit, at most 128 characters")
    if spark.catalog.functionExists(name):
        existing = spark.catalog.getFunction(name)
        class_name = existing.className or ""
        if class_name.startswith("org.apache.spark.sql.catalyst."):
            raise ConfigError(f"{name!r} is a built-in Spark SQL function; Spark would call the "
                              "built-in instead: choose another name")
    return name


def _key_signature(provider: LookupProvider) -> str:
    schema = provider.schema
    return ", ".join(f"{c} {schema[c].dataType.simpleString()}" for c in provider.key_columns)


def _argument_error(name: str, provider: LookupProvider, position: int, actual: T.DataType
                    ) -> str | None:
    """Why argument ``position`` (0-based) of type ``actual`` cannot be a key, or None."""
    if isinstance(actual, T.NullType):  # a NULL literal: never matches, is fine
        return None
    column = provider.key_columns[position]
    expected = provider.schema[column].dataType
    if keys_compatible(actual, expected):
        return None
    return (
        f"{name}: argument {position + 1} is {actual.simpleString()} but the key column "
        f"{column!r} is {expected.simpleString()}; cast it, e.g. "
        f"{name}(CAST(... AS {expected.simpleString().upper()}))"
    )


def _arity_error(name: str, provider: LookupProvider, given: int, as_of: bool = False
                 ) -> str | None:
    arity = len(provider.key_columns) + as_of
    if given == arity:
        return None
    time_ = " and a time" if as_of else ""
    return (f"{name} takes {len(provider.key_columns)} key argument(s) "
            f"({_key_signature(provider)}){time_}, got {given} argument(s)")


def _nullable(schema: T.StructType) -> T.StructType:
    return T.StructType([T.StructField(f.name, f.dataType, True, f.metadata) for f in schema])


def _point_in_time(spark: AnySparkSession, name: str, provider: LookupProvider,
                   as_of: object) -> PointInTime | None:
    """How a function of ``provider`` picks versions (None: it has no validity): at its
    last argument (``as_of``) or now, on the registering session's time zone for
    wall-clock versions (a task reads the query's, `query_zone`)."""
    if not isinstance(as_of, bool):
        raise ConfigError(f"{name}: as_of must be True or False, got {as_of!r}")
    validity = provider.validity
    if validity is None:
        if as_of:
            raise ConfigError(
                f"{name}: as_of=True, but {provider.describe()} has no validity, so its keys "
                "have one version each; give the provider validity=lookup.Validity(...)")
        return None
    instants = isinstance(provider.schema[validity.valid_from].dataType, T.TimestampType)
    zone = None if instants else (spark.conf.get(_TIME_ZONE) or "UTC")
    retention = (None if validity.retention is None
                 else validity.retention // dt.timedelta(microseconds=1))
    return PointInTime(_AS_OF if as_of else None, zone, retention)


def query_zone(point_in_time: PointInTime) -> PointInTime:
    """``point_in_time`` reading "now" against TIMESTAMP_NTZ or DATE versions (without
    ``as_of``, and for a retention) on the wall clock of the query's session time zone.

    A function's Python process sees no session conf, so the registration's zone is
    what it was given; but Spark hands each task the SQL settings set on the session at
    query time as local properties, so a zone set after the registration (``SET TIME
    ZONE``) is the one the query means. Unset, the registration's zone is the session's
    default still.
    """
    if point_in_time.wall_clock_zone is None:
        return point_in_time  # instants: no zone to read
    from pyspark import TaskContext

    context = TaskContext.get()
    zone = None if context is None else context.getLocalProperty(_TIME_ZONE)
    if not zone or zone == point_in_time.wall_clock_zone:
        return point_in_time
    return dataclasses.replace(point_in_time, wall_clock_zone=zone)


def _time_error(name: str, provider: LookupProvider, actual: T.DataType) -> str | None:
    """Why a time argument of type ``actual`` cannot pick a version, or None."""
    if isinstance(actual, T.NullType):  # a NULL literal: never matches, is fine
        return None
    validity = provider.validity
    assert validity is not None
    for column in validity.columns:
        expected = provider.schema[column].dataType
        if not comparable(actual, expected):
            return (
                f"{name}: the time argument (the last) is {actual.simpleString()} but the "
                f"version column {column!r} is {expected.simpleString()}: they compare only "
                "through a time zone. TIMESTAMP goes with TIMESTAMP; TIMESTAMP_NTZ and DATE "
                "with each other; cast one side in the zone you mean")
    return None


# --- scalar function ----------------------------------------------------------------


class _StructLookup:
    """What the Arrow UDF runs in executors' Python workers (picklable): each batch of
    key arrays in, a struct array of the first matching rows out."""

    def __init__(self, name: str, provider: LookupProvider,
                 point_in_time: PointInTime | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.provider = provider
        self.point_in_time = point_in_time
        self.as_of = point_in_time is not None and point_in_time.as_of is not None
        self.clock = clock
        schema = provider.schema
        names = tuple(f.name for f in schema.fields)
        self.shape = JoinShape(stream_keys=tuple(provider.key_columns), dim_columns=names,
                               out_names=names,
                               dim_types=tuple(to_arrow_type(f.dataType) for f in schema.fields),
                               how="left")
        self.struct_type = pa.struct(
            [pa.field(n, t) for n, t in zip(names, self.shape.dim_types, strict=True)]
        )

    def __call__(self, batches: Iterator[Any]) -> Iterator[pa.Array]:
        runtime: LookupRuntime | None = None
        checked = False
        if self.point_in_time is not None:
            self.point_in_time = query_zone(self.point_in_time)
        for item in batches:
            arrays: list[pa.Array] = list(item) if isinstance(item, tuple) else [item]
            if not checked:
                self._check_arguments(arrays)
                checked = True
            if runtime is None:
                runtime = worker_runtime(self.provider)
            yield self.lookup_batch(arrays, runtime)

    def _check_arguments(self, arrays: Sequence[pa.Array]) -> None:
        from spark_lookup.compat import arrow_to_spark_type

        problem = _arity_error(self.name, self.provider, len(arrays), self.as_of)
        keys = arrays[:-1] if self.as_of else arrays
        for position, array in enumerate(keys):
            if problem is not None:
                break
            problem = _argument_error(
                self.name, self.provider, position,
                arrow_to_spark_type(array.type, prefer_timestamp_ntz=True)
            )
        if problem is not None:
            raise KeyKindError(problem)
        if self.as_of:
            problem = _time_error(self.name, self.provider, arrow_to_spark_type(
                arrays[-1].type, prefer_timestamp_ntz=True))
            if problem is not None:
                raise ConfigError(problem)

    def lookup_batch(self, arrays: Sequence[pa.Array], runtime: LookupRuntime) -> pa.Array:
        """The first matching row of each row's key as a struct; NULL when none. With
        a validity, the version valid at the row's time (the last argument) or now."""
        n = len(arrays[0]) if arrays else 0
        if not n or any(pa.types.is_null(a.type) for a in arrays):
            return pa.nulls(n, type=self.struct_type)
        point_in_time = self.point_in_time
        times = pa.RecordBatch.from_arrays(
            [arrays[-1] if self.as_of else pa.nulls(n)], names=[_AS_OF])
        if self.as_of:
            arrays = arrays[:-1]
        codes, uniques = factorize(arrays)
        describe = self.provider.describe()
        # The times read before the probe, as a join reads them (`join_batch`).
        row_times = None if point_in_time is None or not self.as_of else (
            point_in_time.times(times, self.clock))
        probe = runtime.probe(uniques, describe,
                              None if row_times is None else known_range(row_times))
        unique_groups, offsets = probe.groups, probe.offsets
        dim = probe.rows.select(list(self.shape.dim_columns))
        if len(unique_groups):
            groups = np.where(codes >= 0, unique_groups[np.maximum(codes, 0)], -1)
        else:
            groups = np.full(n, -1, dtype=np.int64)
        if point_in_time is not None:
            groups = pick_versions(point_in_time, times, runtime, probe, groups, self.clock,
                                   row_times)
        missing = groups < 0
        # One row a key: a group is its row (a full snapshot then keeps no offsets); a
        # picked version is its row too.
        first = groups if probe.one_row_each or point_in_time is not None else np.where(
            missing, -1, offsets[np.maximum(groups, 0)])
        take = pa.array(first, type=pa.int64(), mask=missing)
        children = [column.take(take).combine_chunks() for column in dim.columns]
        return pa.StructArray.from_arrays(
            children, fields=list(self.struct_type), mask=pa.array(missing, type=pa.bool_())
        )


def register_lookup_function(spark: AnySparkSession, name: str, provider: LookupProvider,
                             *, as_of: bool = False, clock: Callable[[], float] = time.time
                             ) -> UserDefinedFunctionLike:
    """Register ``name`` as a SQL function returning the first row matching its key(s),
    as a struct of all dimension columns (NULL when no row matches or a key is null).

    Runs on the driver, now: validates ``name`` and ``provider`` and registers a
    temporary function in ``spark``'s session. The lookups run in executors' Python
    workers, per Arrow batch: the batch's distinct keys go to the worker's shared runtime
    of ``provider`` (the same runtime and cache ``lookup_join`` uses in that worker), and
    the struct column is assembled vectorized.

    Parameters
    ----------
    spark
        The ``SparkSession`` to register in.
    name
        The SQL function name: letters, digits and ``_``, not a built-in function's name.
        Registering a name again replaces the earlier function.
    provider
        A lookup provider; the function takes its key columns as arguments, in
        ``provider.key_columns`` order (a composite key: several arguments). With a
        [`Validity`][lookup.Validity], it answers the version valid now (processing
        time, as ``lookup_join`` without ``as_of``; on the wall clock of the query's
        session time zone against TIMESTAMP_NTZ and DATE versions).
    as_of
        For a provider with a validity: the function takes one more argument, last, the
        time whose version it answers (TIMESTAMP against TIMESTAMP versions, TIMESTAMP_NTZ
        or DATE against the others; else the query fails when it runs). NULL, a time
        before the key's first version or older than the retention: NULL.
    clock
        "Now", epoch seconds (``time.time``; tests give another).

    Returns
    -------
    pyspark.sql.udf.UserDefinedFunction
        The registered function, also usable with DataFrames.

    Raises
    ------
    ConfigError
        (a ``ValueError``) on the driver for an invalid or built-in ``name``, a
        ``provider`` that is not a lookup provider, ``as_of=True`` for a provider
        without validity, or a PySpark without Arrow UDFs (before 4.1).

    Notes
    -----
    "First" is the first row the runtime returns for the key: for partial caches and
    uncached providers, the first row the lookup function returned; for full caches,
    the first in the snapshot, where the rows of a key are ordered by their other
    columns (nested ones aside), so the same data gives the same first row after every
    reload. Use [`register_lookup_table_function`][] when a key has several rows and
    all matter.

    A key argument whose type cannot equal the key column's (``STRING`` for a ``BIGINT``
    key) fails the query when it runs, with a message naming the function, the argument
    and both types; integer widths, floating widths and string types mix freely.

    Spark SQL does not parse ``name(key).*``; expand the struct in an outer query:
    ``SELECT d.* FROM (SELECT name(key) AS d FROM t)``. ``name(key).column`` works.

    Works on classic and Spark Connect sessions. Its lookups are not reported to
    [`lookup.lookup_metrics`][] (see `lookup.spark.sql_functions`).

    Examples
    --------
    >>> register_lookup_function(spark, "customer", customers)  # doctest: +SKIP
    >>> spark.sql("SELECT order_id, customer(customer_id).tier FROM orders")  # doctest: +SKIP
    """
    require(ARROW_UDF, "register_lookup_function",
            "use register_lookup_table_function (LEFT JOIN LATERAL name(key) d ON true) or "
            "lookup_join on a DataFrame", connect=is_connect(spark))
    from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf

    name, provider = _checked(spark, name, provider)
    function = _StructLookup(name, provider, _point_in_time(spark, name, provider, as_of), clock)
    with warnings.catch_warnings():
        # The iterator kind is given explicitly (one argument or several, the same
        # callable); PySpark would rather read it from type hints.
        warnings.filterwarnings("ignore", "It is preferred to specify type hints", UserWarning)
        # (PySpark's stubs leave out struct return types, which it supports.)
        udf = cast(Any, arrow_udf)(function, returnType=_nullable(provider.schema),
                                   functionType=ArrowUDFType.SCALAR_ITER)
    return spark.udf.register(name, udf)


# --- table function -----------------------------------------------------------------


class _LookupTableFunction:
    """Base of the UDTF classes [`register_lookup_table_function`][] builds (one
    subclass per registration, holding the provider as class attributes).

    Spark creates one instance per task in each executor Python worker and calls
    `eval` once per input row.
    """

    _name: str = ""
    _provider: LookupProvider
    _point_in_time: PointInTime | None = None  # the provider has a validity
    _clock: Callable[[], float] = staticmethod(time.time)

    def __init__(self) -> None:
        self._runtime: LookupRuntime | None = None
        self._memo: dict[Key, Any] = {}
        point_in_time = self._point_in_time
        self._as_of = point_in_time is not None and point_in_time.as_of is not None
        self._at = None if point_in_time is None else query_zone(point_in_time)

    def eval(self, *arguments: Any) -> tuple[Row, ...]:
        """Every row matching the key (the function's arguments), in the order the
        runtime returns them; none for a null key. With a validity, the version valid
        at the time (the last argument) or now: one row or none."""
        at = self._at
        if at is None:
            rows: tuple[Row, ...] = self._memoized(arguments)
            return rows
        if not self._as_of:
            return self._version(self._memoized(arguments),
                                 now_micros(self._clock, at.wall_clock_zone))
        when = arguments[-1]
        versions = self._memoized(arguments[:-1])
        if when is None:
            return ()
        micros = _spark_micros(when, at.wall_clock_zone is None)
        retention = at.retention_micros
        if retention is not None and micros < now_micros(
                self._clock, at.wall_clock_zone) - retention:
            # As a join: never a version a load may have dropped the right one before.
            assert self._runtime is not None
            self._runtime.metrics.inc_out_of_retention(1)
            return ()
        return self._version(versions, micros)

    @staticmethod
    def _version(versions: _KeyVersions, micros: int) -> tuple[Row, ...]:
        i = bisect.bisect_right(versions.starts, micros) - 1
        return (versions.rows[i],) if i >= 0 and micros < versions.ends[i] else ()

    def _memoized(self, key: Key) -> Any:
        """The rows of ``key`` (with a validity: its `_KeyVersions`), from the memo."""
        try:
            return self._memo[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable value (a struct or array argument)
            return self._answer(key)
        answer = self._answer(key)
        if len(self._memo) >= _MEMO_MAX_KEYS:
            self._memo.clear()
        self._memo[key] = answer
        return answer

    def _answer(self, key: Key) -> Any:
        rows = self._lookup(key)
        return rows if self._at is None else _key_versions(self._provider, rows)

    def _lookup(self, key: Key) -> tuple[Row, ...]:
        runtime = self._runtime
        if runtime is None:
            # Without UDTF analyze (PySpark 3.5) the keys are checked here, at the first
            # row: their number, and their kinds by the provider's key codec (KeyKindError
            # for a value its column never holds, a str for a BIGINT).
            problem = _arity_error(self._name, self._provider, len(key) + self._as_of,
                                   self._as_of)
            if problem is not None:
                raise KeyKindError(problem)
            provider = self._provider
            KeyCodec(list(provider.key_columns), provider.key_types,
                     f"{self._name}'s key").normalize(key)
            runtime = self._runtime = worker_runtime(provider)
        return runtime.lookup(key)


class _KeyVersions(NamedTuple):
    """A key's disjoint validity pieces in start order (microseconds, as
    `lookup.versions.instants` reads them) and the row answering in each."""

    starts: list[int]
    ends: list[int]
    rows: list[Row]


def _key_versions(provider: LookupProvider, rows: tuple[Row, ...]) -> _KeyVersions:
    """The pieces of one key's versions, as a join reads them (`version_index`): a
    table function's row is looked up alone, once per key and task."""
    validity = provider.validity
    assert validity is not None
    schema = provider.schema
    names = schema.fieldNames()

    def column(name: str) -> pa.Array:
        at = names.index(name)
        return pa.array([row[at] for row in rows], to_arrow_type(schema[name].dataType))

    index = version_index(np.zeros(len(rows), dtype=np.int64), column(validity.valid_from),
                          None if validity.valid_to is None else column(validity.valid_to))
    return _KeyVersions(index.start.tolist(), index.end.tolist(),
                        [rows[r] for r in index.row.tolist()])


def _spark_micros(value: object, instants: bool) -> int:
    """A time argument as a row UDTF gets it (a TIMESTAMP: a naive datetime on the
    worker's local clock; a TIMESTAMP_NTZ: naive on the wall clock; a DATE: a date) as
    microseconds comparable with the versions (analyze checked their kinds match)."""
    if isinstance(value, dt.datetime):
        if instants:
            # A naive one is local time: astimezone reads it so, folds included.
            return (value.astimezone(dt.timezone.utc) - _EPOCH_UTC) // _MICRO
        return (value.replace(tzinfo=None) - _EPOCH) // _MICRO
    if isinstance(value, dt.date):
        return (dt.datetime.combine(value, dt.time()) - _EPOCH) // _MICRO
    raise ConfigError(f"a version's time is a TIMESTAMP, TIMESTAMP_NTZ or DATE, "
                      f"got {type(value).__name__}: {value!r}")


def _make_analyze(name: str, provider: LookupProvider, schema: T.StructType,
                  as_of: bool = False) -> Callable[..., Any]:
    def analyze(*arguments: Any) -> Any:
        from pyspark.sql.udtf import AnalyzeResult

        problem = _arity_error(name, provider, len(arguments), as_of)
        for position, argument in enumerate(arguments):
            if problem is not None:
                break
            if argument.isTable:
                problem = f"{name}: argument {position + 1} is a TABLE; pass key columns"
            elif as_of and position == len(arguments) - 1:
                problem = _time_error(name, provider, argument.dataType)
                if problem is not None:
                    raise ConfigError(problem)
            else:
                problem = _argument_error(name, provider, position, argument.dataType)
        if problem is not None:
            raise KeyKindError(problem)
        return AnalyzeResult(schema)

    return analyze


def register_lookup_table_function(spark: AnySparkSession, name: str,
                                   provider: LookupProvider, *, as_of: bool = False,
                                   clock: Callable[[], float] = time.time
                                   ) -> AnyTableFunction:
    """Register ``name`` as a SQL table function yielding every dimension row that
    matches its key(s), for one-to-many ``LATERAL`` joins.

    Runs on the driver, now: validates ``name`` and ``provider`` and registers a Python
    UDTF in ``spark``'s session. At each query's analysis, Spark runs its ``analyze`` in
    a Python worker, which checks the number and types of the key arguments (a bad type
    fails the query before any task runs; PySpark 3.5 has no ``analyze``: there the
    first row looked up checks them). In executors' Python workers, ``eval`` runs
    once per input row; it looks each distinct key up once per task in the worker's
    shared runtime of ``provider`` (the one ``lookup_join`` uses there too) and answers
    repeats from a small per-task memo.

    The output columns are all dimension columns in schema order (key columns included).

    ``spark``, ``name``, ``provider``, ``as_of`` and ``clock`` are as for
    [`register_lookup_function`][], and so are the errors raised on the driver: with
    a validity, a key yields the one version valid now (or at the last argument,
    ``as_of=True``; checked in analysis, which ``as_of`` needs: PySpark 4.0+).

    Returns
    -------
    pyspark.sql.udtf.UserDefinedTableFunction
        The registered table function.

    Notes
    -----
    A *left* lateral join needs ``ON true``:

        SELECT t.*, d.name FROM t LEFT JOIN LATERAL name(t.id) d ON true

    Without ``ON true`` (``FROM t, LATERAL name(t.id) d``, ``JOIN LATERAL`` and even
    ``LEFT JOIN LATERAL ... d`` with no ``ON``) Spark gives inner-join results: input
    rows without a match (or with a null key) are dropped.

    Works on classic and Spark Connect sessions. Its lookups are not reported to
    [`lookup.lookup_metrics`][] (see `lookup.spark.sql_functions`).

    ``eval`` is called once per row, so each row costs a Python call and pickling
    (roughly 10-20 microseconds per row where the scalar function costs a few); for
    one-to-many enrichment of large data, ``lookup_join`` is vectorized and loads the
    misses of a whole batch in one call, where this function loads one key at a time.

    Examples
    --------
    >>> register_lookup_table_function(spark, "order_lines", lines)  # doctest: +SKIP
    >>> spark.sql("SELECT o.id, l.* FROM orders o, LATERAL order_lines(o.id) l")  # doctest: +SKIP
    """
    from pyspark.sql.functions import udtf

    name, provider = _checked(spark, name, provider)
    point_in_time = _point_in_time(spark, name, provider, as_of)
    attributes: dict[str, Any] = {"_name": name, "_provider": provider,
                                  "_point_in_time": point_in_time,
                                  "_clock": staticmethod(clock)}
    if UDTF_ANALYZE.available():
        attributes["analyze"] = staticmethod(
            _make_analyze(name, provider, provider.schema, as_of))
        return_type: T.StructType | None = None
    else:  # PySpark 3.5: a fixed return type; the keys are checked at the first row
        if as_of:
            # The time's type decides how to read it; only analyze sees the type.
            raise ConfigError(f"{name}: as_of=True needs UDTF analyze (PySpark 4.0+)")
        return_type = provider.schema
    handler = type(f"LookupTableFunction_{name}", (_LookupTableFunction,), attributes)
    # Of the session's kind at run time (udtf builds a Connect one in Connect mode),
    # which its stubs cannot say.
    function: Any = udtf(handler, returnType=return_type, useArrow=False)
    return spark.udtf.register(name, function)
