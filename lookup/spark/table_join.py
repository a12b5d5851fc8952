"""register_lookup_join: a whole lookup join as one SQL table function over a table
argument, ``SELECT * FROM enrich(TABLE(orders))``.

It runs the worker side of [`lookup.lookup_join`][] (the same runtime, caches, key
checks, type rules, one-to-many rows, left and inner) once per Arrow batch of the
table argument, at the speed of ``mapInArrow``.

Why a vectorized (Arrow) UDTF with an ``analyze`` method, built as
``UserDefinedTableFunction(..., evalType=SQL_ARROW_UDTF)``: the output is the table
argument's columns followed by the dimension's, so its schema is known only when a
query names its argument, which is what ``analyze`` is for; and only an Arrow UDTF sees
whole batches. PySpark 4.3's ``arrow_udtf`` decorator refuses an ``analyze`` method
(SPARK-53286: "support analyze for Arrow UDTFs"), but Spark itself runs it for this
evaluation type, on classic and Connect sessions alike; the row UDTF (``udtf``) calls
Python once per row, 6x slower. If a later PySpark refuses the combination, the
registration fails at once with PySpark's error, never a query.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import types as T

from lookup.providers import LookupProvider
from lookup.runtime.worker import worker_runtime
from lookup.spark.assemble import JoinShape, join_batch
from lookup.spark.join_plan import plan_join
from lookup.spark.session import is_connect
from lookup.spark.sql_functions import _TIME_ZONE, _checked, query_zone
from spark_lookup.compat import ARROW_UDTF_ANALYZE, analyze_result_class, require
from spark_lookup.errors import ConfigError
from spark_lookup.spark_types import AnySparkSession, AnyTableFunction

if TYPE_CHECKING:
    from pyspark.sql.udtf import AnalyzeResult
else:
    AnalyzeResult = analyze_result_class()  # PySpark 3.5 has none: see register_lookup_join

__all__ = ["register_lookup_join"]

class _LookupJoinTable:
    """Base of the UDTF classes [`register_lookup_join`][] builds (one subclass per
    registration, holding its configuration as class attributes). Spark runs
    `analyze` on the driver side when a query is analyzed, and creates one
    instance per task in executors' Python workers, calling `eval` once per Arrow
    batch of the table argument."""

    _name: str = ""
    _provider: LookupProvider
    _on: Any
    _how: str = "left"
    _columns: Sequence[str] | str | None = None
    _prefix: str | None = None
    _as_of: str | None = None
    _time_zone: str = "UTC"  # the session's when registered

    def __init__(self, analyze_result: _JoinAnalysis) -> None:
        shape = analyze_result.shape
        assert shape is not None  # analyze always sets it
        self._shape = _in_query_zone(shape)
        self._describe = self._provider.describe()

    def eval(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """The joined rows of one batch of the table argument."""
        runtime = worker_runtime(self._provider)
        out = join_batch(batch, self._shape, runtime, self._describe)
        if out.num_rows:
            yield out


@dataclasses.dataclass
class _JoinAnalysis(AnalyzeResult):
    """What ``analyze`` hands each instance: the output schema and the join's shape
    (Spark pickles it to every task)."""

    shape: JoinShape | None = None


def _make_analyze(cls: type[_LookupJoinTable]) -> Any:
    def analyze(*arguments: Any) -> _JoinAnalysis:
        name = cls._name
        try:
            if len(arguments) != 1 or not arguments[0].isTable:
                raise ConfigError(
                    f"{name} takes one table argument: SELECT * FROM {name}(TABLE(t)) or "
                    f"{name}(TABLE(SELECT ...)); got {len(arguments)} argument(s)"
                    + ("" if len(arguments) != 1 else " that is not a TABLE"))
            plan = plan_join(arguments[0].dataType, cls._provider, cls._on, cls._how,
                             cls._columns, cls._prefix, cls._as_of, cls._time_zone)
        except ConfigError as exc:
            error = _spark_message(name, exc)
        else:
            return _JoinAnalysis(schema=plan.schema, shape=plan.shape)
        raise error  # outside the handler: no context, one line

    return analyze


def _in_query_zone(shape: JoinShape) -> JoinShape:
    """``shape`` reading "now" on the query's session time zone (`query_zone`):
    ``analyze`` runs in a Python process that sees no session conf, so the plan holds
    the zone of the registration."""
    point_in_time = shape.point_in_time
    if point_in_time is None:
        return shape
    zoned = query_zone(point_in_time)
    return shape if zoned is point_in_time else dataclasses.replace(
        shape, point_in_time=zoned)


def _spark_message(name: str, exc: ConfigError) -> Exception:
    """Our planning error as Spark shows it first: of an ``analyze`` failure, Spark keeps
    only what follows ``PySparkValueError:`` as its message (the traceback dropped), so
    the user reads ``[TABLE_VALUED_FUNCTION_FAILED_TO_ANALYZE_IN_PYTHON] ...: <ours>``
    on one line (and Spark's log line of it stays one line too)."""
    from pyspark.errors import PySparkValueError

    text = " ".join(str(exc).split()).replace("the stream DataFrame", "the table argument")
    return PySparkValueError(message=f"lookup join {name!r}: ConfigError: {text}")


def register_lookup_join(
    spark: AnySparkSession,
    name: str,
    provider: LookupProvider,
    on: str | Sequence[str] | Mapping[str, str],
    how: str = "left",
    columns: Sequence[str] | str | None = None,
    prefix: str | None = None,
    metrics: bool | None = None,
    *,
    as_of: str | None = None,
) -> AnyTableFunction:
    """Register ``name`` as a SQL table function that enriches its table argument with
    the dimension rows ``provider`` looks up by key: ``lookup_join`` in one SQL call.

    Runs on the driver, now: checks ``name``, ``provider`` and the options, and
    registers the function in ``spark``'s session (classic or Spark Connect). When a
    query is analyzed, Spark runs its ``analyze`` with the table argument's schema,
    which checks ``on``, ``how``, ``columns`` and ``prefix`` against it with the
    messages of [`lookup.lookup_join`][] (a bad key type fails the query before any
    task runs). In executors' Python workers it joins each Arrow batch of the argument
    with the worker's runtime of ``provider`` (the one ``lookup_join`` and the other SQL
    functions use there too).

    Parameters
    ----------
    spark
        The session to register in.
    name
        The SQL function name (letters, digits, ``_``; not a built-in's).
    provider, on, how, columns, prefix
        As for [`lookup.lookup_join`][]; ``on`` names columns of the table argument.
    as_of
        As for [`lookup.lookup_join`][]: the column of the table argument whose time
        picks each row's version of a provider with a [`Validity`][lookup.Validity],
        checked when a query is analyzed. Without it, such a provider answers the
        version valid when the batch is joined, on the wall clock of the session time
        zone (the query's) for TIMESTAMP_NTZ and DATE versions.
    metrics
        ``None`` or ``False``. A table function's output is not observable from here
        (no DataFrame of ours in the query), so it reports no metrics, like the other
        SQL functions; its lookups count in the worker's runtime, which a later
        ``lookup_join`` task reports.

    Returns
    -------
    pyspark.sql.udtf.UserDefinedTableFunction
        The registered function.

    Raises
    ------
    ConfigError
        On the driver, for a bad name, provider, ``how``, ``prefix`` or ``metrics=True``,
        for an ``as_of`` that is no column name or given for a provider without
        validity, or on a PySpark without Arrow UDTFs with ``analyze`` (before 4.1); in
        the query's analysis, for columns, key types or an ``as_of`` type that do not
        fit its argument.

    Examples
    --------
    >>> register_lookup_join(spark, "enrich_orders", customers, on="customer_id")  # doctest: +SKIP
    >>> spark.sql("SELECT * FROM enrich_orders(TABLE(orders))")  # doctest: +SKIP
    >>> spark.sql("SELECT * FROM enrich_orders(TABLE(SELECT * FROM orders "
    ...           "WHERE region = 'EU'))")  # doctest: +SKIP
    >>> register_lookup_join(spark, "priced", rates, on="currency",
    ...                      as_of="order_time")  # doctest: +SKIP
    """
    require(ARROW_UDTF_ANALYZE, "register_lookup_join",
            "use register_lookup_table_function (a LATERAL join per key) or lookup_join on a "
            "DataFrame", connect=is_connect(spark))
    name, provider = _checked(spark, name, provider)
    if metrics:
        raise ConfigError(
            f"{name}: a SQL table function reports no metrics (its output is not observable "
            "from the driver); use lookup_join(..., metrics=True) on a DataFrame for them")
    if metrics is not None and not isinstance(metrics, bool):
        raise ConfigError(f"metrics must be None or False, got {metrics!r}")
    # Checked now too, as far as the argument's schema is not needed: bad options fail
    # the registration, not each query.
    from lookup.spark.join_plan import _join_kind, _point_in_time

    _join_kind(how)
    if prefix is not None and (not isinstance(prefix, str) or not prefix):
        raise ConfigError(f"prefix must be a non-empty string, got {prefix!r}")
    if as_of is not None and (not isinstance(as_of, str) or provider.validity is None):
        # Refused before any schema is read: the registration fails, not each query. (The
        # column and its type are the argument's: checked in analyze.)
        _point_in_time(T.StructType(), provider, as_of, "UTC")
    time_zone = "UTC"
    if provider.validity is not None:
        time_zone = spark.conf.get(_TIME_ZONE) or "UTC"
    handler = type(f"LookupJoin_{name}", (_LookupJoinTable,), {
        "_name": name, "_provider": provider, "_on": on, "_how": how, "_columns": columns,
        "_prefix": prefix, "_as_of": as_of, "_time_zone": time_zone})
    handler.analyze = staticmethod(_make_analyze(handler))  # type: ignore[attr-defined]
    from pyspark.util import PythonEvalType

    if is_connect(spark):
        from pyspark.sql.connect.udtf import UserDefinedTableFunction as ConnectUDTF

        function: Any = ConnectUDTF(handler, returnType=None, name=name,
                                    evalType=PythonEvalType.SQL_ARROW_UDTF)
    else:
        from pyspark.sql.udtf import UserDefinedTableFunction

        function = UserDefinedTableFunction(handler, returnType=None, name=name,
                                            evalType=PythonEvalType.SQL_ARROW_UDTF)
    return spark.udtf.register(name, function)
