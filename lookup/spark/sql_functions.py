"""Lookups from Spark SQL: a scalar function (first matching row as a struct) and a table
function (every matching row, for ``LATERAL`` joins).

Design notes: DESIGN.md, lookup/ ``lookup/spark/sql_functions.py``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
from pyspark.sql import types as T

from cache.base import Key, Row
from connectors.keys import KeyCodec
from lookup.providers import LookupProvider
from lookup.runtime.base import LookupRuntime
from lookup.runtime.worker import worker_runtime
from lookup.spark.assemble import JoinShape, factorize
from lookup.spark.join_plan import keys_compatible
from lookup.spark.session import is_connect
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


def _arity_error(name: str, provider: LookupProvider, given: int) -> str | None:
    arity = len(provider.key_columns)
    if given == arity:
        return None
    return f"{name} takes {arity} key argument(s) ({_key_signature(provider)}), got {given}"


def _nullable(schema: T.StructType) -> T.StructType:
    return T.StructType([T.StructField(f.name, f.dataType, True, f.metadata) for f in schema])


# --- scalar function ----------------------------------------------------------------


class _StructLookup:
    """What the Arrow UDF runs in executors' Python workers (picklable): each batch of
    key arrays in, a struct array of the first matching rows out."""

    def __init__(self, name: str, provider: LookupProvider) -> None:
        self.name = name
        self.provider = provider
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

        problem = _arity_error(self.name, self.provider, len(arrays))
        for position, array in enumerate(arrays):
            if problem is not None:
                break
            problem = _argument_error(
                self.name, self.provider, position,
                arrow_to_spark_type(array.type, prefer_timestamp_ntz=True)
            )
        if problem is not None:
            raise KeyKindError(problem)

    def lookup_batch(self, arrays: Sequence[pa.Array], runtime: LookupRuntime) -> pa.Array:
        """The first matching row of each row's key as a struct; NULL when none."""
        n = len(arrays[0]) if arrays else 0
        if not n or any(pa.types.is_null(a.type) for a in arrays):
            return pa.nulls(n, type=self.struct_type)
        codes, uniques = factorize(arrays)
        describe = self.provider.describe()
        probe = runtime.probe(uniques, describe)
        unique_groups, offsets = probe.groups, probe.offsets
        dim = probe.rows.select(list(self.shape.dim_columns))
        if len(unique_groups):
            groups = np.where(codes >= 0, unique_groups[np.maximum(codes, 0)], -1)
        else:
            groups = np.full(n, -1, dtype=np.int64)
        missing = groups < 0
        # One row a key: a group is its row (a full snapshot then keeps no offsets).
        first = groups if probe.one_row_each else np.where(
            missing, -1, offsets[np.maximum(groups, 0)])
        take = pa.array(first, type=pa.int64(), mask=missing)
        children = [column.take(take).combine_chunks() for column in dim.columns]
        return pa.StructArray.from_arrays(
            children, fields=list(self.struct_type), mask=pa.array(missing, type=pa.bool_())
        )


def register_lookup_function(spark: AnySparkSession, name: str, provider: LookupProvider
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
        ``provider.key_columns`` order (a composite key: several arguments).

    Returns
    -------
    pyspark.sql.udf.UserDefinedFunction
        The registered function, also usable with DataFrames.

    Raises
    ------
    ConfigError
        (a ``ValueError``) on the driver for an invalid or built-in ``name``, a
        ``provider`` that is not a lookup provider, or a PySpark without Arrow UDFs
        (before 4.1).

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
    function = _StructLookup(name, provider)
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

    def __init__(self) -> None:
        self._runtime: LookupRuntime | None = None
        self._memo: dict[Key, tuple[Row, ...]] = {}

    def eval(self, *key: Any) -> tuple[Row, ...]:
        """Every row matching ``key`` (the function's arguments), in the order the
        runtime returns them; none for a null key."""
        try:
            return self._memo[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable value (a struct or array argument)
            return self._lookup(key)
        rows = self._lookup(key)
        if len(self._memo) >= _MEMO_MAX_KEYS:
            self._memo.clear()
        self._memo[key] = rows
        return rows

    def _lookup(self, key: Key) -> tuple[Row, ...]:
        runtime = self._runtime
        if runtime is None:
            # Without UDTF analyze (PySpark 3.5) the keys are checked here, at the first
            # row: their number, and their kinds by the provider's key codec (KeyKindError
            # for a value its column never holds, a str for a BIGINT).
            problem = _arity_error(self._name, self._provider, len(key))
            if problem is not None:
                raise KeyKindError(problem)
            provider = self._provider
            KeyCodec(list(provider.key_columns), provider.key_types,
                     f"{self._name}'s key").normalize(key)
            runtime = self._runtime = worker_runtime(provider)
        return runtime.lookup(key)


def _make_analyze(name: str, provider: LookupProvider, schema: T.StructType) -> Callable[..., Any]:
    def analyze(*arguments: Any) -> Any:
        from pyspark.sql.udtf import AnalyzeResult

        problem = _arity_error(name, provider, len(arguments))
        for position, argument in enumerate(arguments):
            if problem is not None:
                break
            if argument.isTable:
                problem = f"{name}: argument {position + 1} is a TABLE; pass key columns"
            else:
                problem = _argument_error(name, provider, position, argument.dataType)
        if problem is not None:
            raise KeyKindError(problem)
        return AnalyzeResult(schema)

    return analyze


def register_lookup_table_function(spark: AnySparkSession, name: str,
                                   provider: LookupProvider) -> AnyTableFunction:
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

    ``spark``, ``name`` and ``provider`` are as for [`register_lookup_function`][],
    and so are the errors raised on the driver.

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
    attributes: dict[str, Any] = {"_name": name, "_provider": provider}
    if UDTF_ANALYZE.available():
        attributes["analyze"] = staticmethod(_make_analyze(name, provider, provider.schema))
        return_type: T.StructType | None = None
    else:  # PySpark 3.5: a fixed return type; the keys are checked at the first row
        return_type = provider.schema
    handler = type(f"LookupTableFunction_{name}", (_LookupTableFunction,), attributes)
    # Of the session's kind at run time (udtf builds a Connect one in Connect mode),
    # which its stubs cannot say.
    function: Any = udtf(handler, returnType=return_type, useArrow=False)
    return spark.udtf.register(name, function)
