"""lookup_join: enrich a (streaming or batch) DataFrame with dimension rows by key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql import types as T

from lookup.providers import LookupProvider
from lookup.spark.interpreter import check_worker_python
from lookup.spark.join_plan import JoinPlan, keys_compatible, plan_join
from lookup.spark.join_worker import JoinFunction
from lookup.spark.metrics import REPORT_COLUMN, metrics_enabled, observe_metrics
from lookup.spark.pandas_wire import PandasJoin, pandas_input
from lookup.spark.session import is_connect
from spark_lookup.compat import CONNECT_OBSERVED_METRICS, require
from spark_lookup.errors import ConfigError
from spark_lookup.options import check_bool

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["JoinPlan", "keys_compatible", "lookup_join", "plan_join"]


def lookup_join(
    df: DataFrame,
    provider: LookupProvider,
    on: str | Sequence[str] | Mapping[str, str],
    how: str = "left",
    columns: Sequence[str] | str | None = None,
    prefix: str | None = None,
    *,
    engine: str = "arrow",
    metrics: bool | None = None,
    as_of: str | None = None,
) -> DataFrame:
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
    as_of
        For a provider with a [`Validity`][lookup.Validity] (a dimension keeping its
        versions): the stream column whose time picks each row's version, the one valid
        then (``valid_from <= as_of < valid_to``). A row with a NULL ``as_of``, or
        earlier than its key's first version, matches nothing (a left join: nulls).
        A TIMESTAMP ``as_of`` goes with TIMESTAMP versions, a TIMESTAMP_NTZ or DATE one
        with TIMESTAMP_NTZ or DATE versions (a DATE is its midnight). Without
        ``as_of``, such a provider answers the version valid when the batch is joined
        (processing time, as Flink's lookup join), on the session time zone's wall clock
        for TIMESTAMP_NTZ and DATE versions. See docs/point-in-time.md.
    metrics
        Report the workers' cache metrics to the driver for [`lookup.lookup_metrics`][].
        Off by default: they travel in an extra column that the plan observes and drops
        (DESIGN.md, lookup/, "Metrics are opt-in"), which costs about 10-25% of a
        full-cache join's throughput. ``None`` (default) follows the session setting
        ``spark.lookup.metrics.enabled`` (false unless set), read now; ``True`` or
        ``False`` decides for this join.

    Returns
    -------
    pyspark.sql.DataFrame
        ``df``'s columns in order, then the added dimension columns.

    Raises
    ------
    ConfigError
        (a ``ValueError``) on the driver for unknown columns, key types that cannot
        match, bad options or a name clash; and on a classic local session whose Python
        workers would start an interpreter that cannot import spark-lookup
        (``PYSPARK_PYTHON`` unset, ``python3`` on ``PATH`` another environment's);
        with metrics on a Spark Connect session of PySpark 3.5 (its client reads no
        observed metrics); for an ``as_of`` the stream lacks, not comparable with the
        version columns without a time zone, or given for a provider without validity.

    Notes
    -----
    With metrics on, a batch DataFrame is observed with a ``pyspark.sql.Observation``
    (read back by [`lookup.lookup_metrics`][]) and a streaming one under a name of
    its own, in each micro-batch's ``StreamingQueryProgress.observedMetrics``.

    Examples
    --------
    >>> enriched = lookup_join(orders, customers, on="customer_id")  # doctest: +SKIP
    >>> enriched = lookup_join(orders, countries, on={"country": "code"},
    ...                        columns=["name"], prefix="country_")  # doctest: +SKIP
    >>> at_order_time = lookup_join(orders, rates, on="currency",
    ...                             as_of="order_time")  # doctest: +SKIP
    """
    if engine not in ("arrow", "pandas"):
        raise ConfigError(f"engine must be 'arrow' or 'pandas', got {engine!r}")
    check_worker_python(df.sparkSession)
    if metrics is None:
        metrics = metrics_enabled(df.sparkSession)
    check_bool(metrics, "metrics")
    if metrics:
        require(CONNECT_OBSERVED_METRICS, "lookup_join(..., metrics=True)",
                "join without metrics (metrics=False, or leave spark.lookup.metrics.enabled "
                "off), or use a classic session", connect=is_connect(df.sparkSession))
    stream_schema = df.schema
    if metrics and REPORT_COLUMN in stream_schema.fieldNames():
        raise ConfigError(
            f"the stream DataFrame has a column {REPORT_COLUMN!r}, the name lookup_join "
            "uses for its metrics: rename it, or turn metrics off"
        )
    time_zone = "UTC"
    if getattr(provider, "validity", None) is not None:
        time_zone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    plan = plan_join(stream_schema, provider, on, how, columns, prefix, as_of, time_zone)
    added = plan.schema.fields[len(stream_schema.fields):]
    schema = plan.schema
    function = JoinFunction(
        provider, plan.shape, tuple(f.nullable for f in added) if metrics else None)
    if metrics:
        schema = T.StructType([*schema.fields, T.StructField(REPORT_COLUMN, T.StringType())])
    if engine == "pandas":
        source, wires = pandas_input(df, stream_schema)
        mapped = source.mapInPandas(PandasJoin(function, stream_schema, wires), schema)
    else:
        mapped = df.mapInArrow(function, schema)
    if not metrics:
        return mapped
    return observe_metrics(mapped, provider, report_rows=plan.shape.how != "left")
