"""The versions of a refreshed temp view: each load held by Spark as a version, the view
pointed at one of them, and the versions it replaced released (for
``ScheduledTableRefresh``)."""

from __future__ import annotations

import enum
import logging
import re
import threading
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from spark_lookup.spark_types import AnySparkSession
from triggers.scheduler import Scheduled, process_scheduler

if TYPE_CHECKING:
    from pyspark import StorageLevel
    from pyspark.sql import DataFrame
    from pyspark.sql import types as T

__all__ = ["Materialization", "Version", "ViewVersions"]

log = logging.getLogger("lookup")


class Materialization(enum.Enum):
    """How a loaded version is held by Spark."""

    AUTO = "AUTO"
    """Cache it, then turn it into a local relation if its cached size is at most
    ``local_max_bytes`` (the table is scanned once either way)."""
    LOCAL = "LOCAL"
    """Collect it to the driver as Arrow and serve a ``LocalRelation`` built from it:
    the rows live in the plan (no executor storage, never recomputed from the source)
    and Spark broadcasts it in joins. Only for tables that fit the driver."""
    CACHE = "CACHE"
    """``persist(storage_level)`` on the executors, materialized before the swap."""


@dataclass(frozen=True)
class Version:
    """One load of the table as Spark holds it; numbered when the view starts serving it."""

    number: int
    df: DataFrame  # the DataFrame the view points at
    mode: Materialization  # LOCAL or CACHE
    rows: int
    bytes: int | None
    source_version: str | None  # the repr of the source's version read (None: unknown)

    def release(self) -> None:
        """Drop the cached blocks of a CACHE version (a LOCAL one has none)."""
        if self.mode is Materialization.CACHE:
            self.df.unpersist(blocking=False)


class ViewVersions:
    """The versions of one temp view: reads a load into a new version, points the view at
    it with one catalog call, and unpersists a cached version it replaced
    ``unpersist_delay`` later.

    Its owner serializes `serve`, `placeholder` and `close`, which change `current`
    (a refresh loads on one thread and serves under its lock); `materialize` changes
    nothing.
    """

    def __init__(self, spark: AnySparkSession, view: str, data_source: str,
                 struct: T.StructType, *, mode: Materialization, local_max_bytes: int,
                 storage_level: StorageLevel | None, unpersist_delay: timedelta) -> None:
        from pyspark import StorageLevel

        self._spark = spark
        self._view = view
        self._data_source = data_source
        self._struct = struct
        self.mode = mode
        """The ``materialization`` asked for (``AUTO`` picks per version)."""
        self._local_max_bytes = local_max_bytes
        # None: what DataFrame.cache() uses.
        self._storage_level = (StorageLevel.MEMORY_AND_DISK_DESER if storage_level is None
                               else storage_level)
        self._unpersist_delay = unpersist_delay
        self.current: Version | None = None
        """The version the view serves (None before the first, or while it raises)."""
        # Guards _retiring, which the scheduler's thread empties when a delay ends.
        self._lock = threading.Lock()
        self._retiring: dict[int, tuple[Version, Scheduled]] = {}

    def materialize(self, source_version: str | None) -> Version:
        """Read the source, at ``source_version``, through its data source (executors read
        the splits) and hold the rows as the next version; nothing is visible to queries
        yet."""
        df = self._spark.read.format(self._data_source).load()
        if self.mode is Materialization.LOCAL:
            return self._local(df.toArrow(), source_version)
        df = df.persist(self._storage_level)
        try:
            rows = df.count()  # builds every cached partition before the swap
            size = _cached_size(self._spark, df)
            if self.mode is Materialization.AUTO and size is not None and (
                size <= self._local_max_bytes
            ):
                version = self._local(df.toArrow(), source_version)
                df.unpersist(blocking=False)  # it only staged the read
                return version
        except BaseException:
            df.unpersist(blocking=False)
            raise
        return Version(0, df, Materialization.CACHE, rows, size, source_version)

    def _local(self, table: pa.Table, source_version: str | None) -> Version:
        # The given schema keeps the source's exact types and nullability.
        df = self._spark.createDataFrame(table, schema=self._struct)
        return Version(0, df, Materialization.LOCAL, table.num_rows, table.nbytes,
                       source_version)

    def serve(self, version: Version, number: int) -> Version:
        """Point the view at ``version`` as number ``number`` and retire the version it
        replaces; returns the numbered version."""
        version = replace(version, number=number)
        # One catalog call: a query resolves either the old or the new version.
        version.df.createOrReplaceTempView(self._view)
        previous, self.current = self.current, version
        if previous is not None:
            self._retire(previous)
        return version

    def placeholder(self, why: str) -> str:
        """Serve, as the view, a frame of its schema whose every query fails with ``why``,
        and retire the version it served, if any; returns the message."""
        message = f"spark-lookup: temp view {self._view!r} {why}"
        _stale_frame(self._spark, self._struct, message).createOrReplaceTempView(self._view)
        previous, self.current = self.current, None
        if previous is not None:
            self._retire(previous)
        return message

    def close(self, *, keep_current: bool) -> Version | None:
        """Release every retired version now; returns the current one, which is
        forgotten unless ``keep_current`` (the owner drops or keeps the view)."""
        current = self.current
        if not keep_current:
            self.current = None
        with self._lock:
            retiring = list(self._retiring.values())
            self._retiring.clear()
        for version, timer in retiring:
            timer.cancel()
            version.release()
        return current

    def _retire(self, version: Version) -> None:
        if version.mode is not Materialization.CACHE:
            return  # a local version lives as long as the plans that hold it
        delay = self._unpersist_delay.total_seconds()
        if delay == 0:
            version.release()
            return
        # Under the lock, so the timer cannot fire before its version is listed.
        with self._lock:
            timer = process_scheduler().call_later(
                delay, partial(self._release_retired, version.number),
                f"unpersist version {version.number} of view {self._view}")
            self._retiring[version.number] = (version, timer)

    def _release_retired(self, number: int) -> None:
        with self._lock:
            entry = self._retiring.pop(number, None)
        if entry is not None:
            entry[0].release()
            log.debug("temp view %r: unpersisted replaced version %d", self._view, number)


def _cached_size(spark: AnySparkSession, df: DataFrame) -> int | None:
    """Spark's size of a materialized cached DataFrame (what its broadcast decision
    reads), or None if Spark does not say."""
    # PySpark has no API for a cached relation's statistics on either kind of session
    # (classic would need the JVM): EXPLAIN COST prints them, to three significant
    # digits ("15.5 KiB"); tests/lookup/spark/test_refresh_formats.py pins the format on both.
    # A fresh query, as a plan's statistics are computed once (maybe before the cache
    # was built), over a projection: a classic session passes df to spark.sql as a temp
    # view that it drops afterwards, and dropping a view of df's own plan uncaches it.
    probe = df.selectExpr("*", f"1 AS `{_PROBE_COLUMN}`")
    try:
        row = spark.sql("EXPLAIN COST SELECT * FROM {df}", df=probe).first()
        plan = None if row is None else str(row[0])
    except Exception:  # the size is informative, never required
        log.debug("no cached size for %r", df, exc_info=True)
        return None
    return None if plan is None else _parse_size(plan)


_PROBE_COLUMN = "__spark_lookup_size_probe"
_SIZE = re.compile(r"InMemoryRelation [^\n]*?sizeInBytes=([0-9.]+(?:E[0-9]+)?)\s*([KMGTPE]i)?B")
_UNITS: dict[str | None, int] = {None: 0, "Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}


def _parse_size(plan: str) -> int | None:
    """The size of the cached relation in an ``EXPLAIN COST`` text, in bytes."""
    match = _SIZE.search(plan)
    if match is None:
        return None
    number, unit = match.groups()
    return round(float(number) * float(1024 ** _UNITS[unit]))


def _stale_frame(spark: AnySparkSession, struct: T.StructType, message: str) -> DataFrame:
    """A DataFrame of ``struct``'s schema whose every evaluation raises ``message``.

    The error sits both in a filter (``count(*)`` prunes every column) and in every
    column (a filter on a typed-null literal column would be folded away unevaluated).
    """
    from pyspark.sql import functions as F

    error = F.raise_error(F.lit(message))
    return spark.range(1).where(error.isNull()).select(
        *[error.cast(field.dataType).alias(field.name) for field in struct.fields]
    )
