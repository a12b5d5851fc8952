"""Any bounded ``scan.Source`` as a PySpark Python data source.

``spark.read.format(name).load()`` plans the splits with the source's enumerator on the
driver ([`scan.plan_splits`][]), makes one Spark partition per split, and reads each
split on an executor with a fresh reader ([`scan.read_split_arrow`][]), yielding Arrow
record batches of the source's declared schema. Sources that fetch Arrow (files,
collections) hand their batches through unconverted (checked against the declared
schema, re-chunked to ``maxBatchRows`` by slicing and concatenation); row sources are
converted column by column. The data source classes are in ``scan._data_source``,
imported only where PySpark has the API (4.0+).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from scan.source import Source, check_bounded
from spark_lookup.compat import PYTHON_DATA_SOURCE, require
from spark_lookup.errors import ConfigError
from spark_lookup.options import check_int
from spark_lookup.schema import parse_schema
from spark_lookup.spark_types import AnySparkSession

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSource

__all__ = ["register_data_source"]

DATA_SOURCE_ALTERNATIVE = (
    "read the source on the driver with scan.read_arrow(source) and "
    "spark.createDataFrame(table.to_pandas()) for a small table, or look it up by key "
    "with a FullCachingLookupProvider and lookup_join, which loads it in each worker")
"""What replaces a data source where PySpark has none (3.5)."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}$")


def _default_parallelism(spark: AnySparkSession) -> int:
    """``spark.default.parallelism`` when the session sets it, else the driver's CPUs
    (what local mode defaults it to); read through the conf, which both session kinds
    have."""
    configured = spark.conf.get("spark.default.parallelism", None)
    try:
        if configured is not None and int(configured) >= 1:
            return int(configured)
    except ValueError:
        pass
    return os.cpu_count() or 1


def register_data_source(spark: AnySparkSession, name: str, source: Source[Any, Any], *,
                         parallelism: int | None = None) -> type[DataSource]:
    """Register ``source`` under ``name`` for ``spark.read.format(name).load()``.

    Runs on the driver. The source is pickled with the data source class to the
    executors (it must be picklable; clients are opened by its readers there). Each
    query plans the splits anew, so a reload reads the table as it is then.

    Parameters
    ----------
    spark
        The SparkSession, classic or Spark Connect.
    name
        The format name (letters, digits, ``_``, ``.``, ``-``).
    source
        A bounded ``scan.Source`` declaring its ``schema``.
    parallelism
        The readers the splits are planned for (the enumerator's
        ``current_parallelism``; a ``SqlTableSource`` of default ``chunk_size`` plans one
        chunk, so one partition, per reader); default ``spark.default.parallelism`` if the
        session sets it, else the driver's CPU count. Option ``parallelism`` overrides it
        per read.

    Returns
    -------
    type
        The registered ``pyspark.sql.datasource.DataSource`` subclass.

    Raises
    ------
    ConfigError
        For a bad name, an unbounded source, or a source without a schema; on PySpark
        3.5, which has no Python data sources (see ``DATA_SOURCE_ALTERNATIVE``).

    Notes
    -----
    Option ``maxBatchRows`` (default 65536) bounds the rows of one Arrow batch. Unbounded
    sources are not exposed to ``readStream`` yet.

    Examples
    --------
    >>> source = SqlTableSource(connect, "countries")  # doctest: +SKIP
    >>> register_data_source(spark, "countries", source)  # doctest: +SKIP
    >>> spark.read.format("countries").load().count()  # doctest: +SKIP
    """
    require(PYTHON_DATA_SOURCE, "scan.register_data_source", DATA_SOURCE_ALTERNATIVE)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"invalid data source name {name!r}")
    check_bounded(source, "a batch data source")
    if parallelism is not None:
        check_int(parallelism, "parallelism")
    struct = parse_schema(source.schema, f"{type(source).__name__}.schema")
    from scan._data_source import SourceDataSource

    cls = type(
        f"ScanDataSource_{re.sub(r'[^A-Za-z0-9_]', '_', name)}",
        (SourceDataSource,),
        {"source": source, "registered_name": name, "struct": struct,
         "parallelism": parallelism or _default_parallelism(spark), "__module__": __name__},
    )
    spark.dataSource.register(cls)
    return cls
