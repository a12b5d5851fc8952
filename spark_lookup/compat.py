"""What the installed PySpark can do: one gate per Spark mechanism the library uses that
not every supported line (PySpark 3.5 to 4.3) has, in one place.

Each gate is a [`Capability`][] named for what it tests; its probe looks at the
installed PySpark itself (a module, a class, a parameter), never at a version number,
so a backport counts. The version in a gate is only what its error message names. An
entry point that needs a mechanism calls [`require`][] first, which raises a
``ConfigError`` naming the feature, the PySpark version that has it and the alternative;
nothing fails later with PySpark's ``ImportError``, ``AttributeError`` or
``TypeError``. Where the lines differ only in how a call is spelled (the Arrow type
mapping's parameters), the one spelling that works is here too.

Which line offers what: docs/spark-versions.md (the support table, verified by the
test matrix, ``noxfile.py``).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_lookup.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import types as T

__all__ = [
    "ARROW_UDF",
    "ARROW_UDTF_ANALYZE",
    "CONNECT_OBSERVED_METRICS",
    "OBSERVATION_FILLED_BY_ACTION",
    "PYTHON_DATA_SOURCE",
    "SESSION_TAGS",
    "UDTF_ANALYZE",
    "Capability",
    "analyze_result_class",
    "arrow_to_spark_type",
    "pyspark_version",
    "require",
    "spark_to_arrow_type",
]


@functools.cache
def pyspark_version() -> str:
    """The installed PySpark's version, e.g. ``"3.5.9"``."""
    import pyspark

    return str(pyspark.__version__)


def _version_tuple() -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", pyspark_version())[:3])


def _has_module(name: str) -> bool:
    # find_spec imports the parent packages (plain pyspark ones), not the module itself.
    return importlib.util.find_spec(name) is not None


@dataclass(frozen=True)
class Capability:
    """A Spark mechanism that some supported PySpark lines lack.

    Attributes
    ----------
    mechanism
        What it is, as the error message says it (``"Arrow UDTFs with analyze"``).
    since
        The first PySpark line that has it (``"4.1"``), for the message.
    probe
        Whether the installed PySpark has it; looks at PySpark, not at its version.
    connect_since
        For a mechanism a Connect session gained in another line than a classic one:
        the Connect client's first line, else None (both kinds alike).
    connect_probe
        For such a mechanism, whether a Connect session has it; else None.
    """

    mechanism: str
    since: str
    probe: Callable[[], bool]
    connect_since: str | None = None
    connect_probe: Callable[[], bool] | None = None

    def available(self, *, connect: bool = False) -> bool:
        """Whether the installed PySpark has it (on a Connect session if ``connect``)."""
        if connect and self.connect_probe is not None:
            return _cached(self.connect_probe)
        return _cached(self.probe)

    def first_line(self, *, connect: bool = False) -> str:
        """The first PySpark line that has it (on a Connect session if ``connect``)."""
        if connect and self.connect_since is not None:
            return self.connect_since
        return self.since


@functools.cache
def _cached(probe: Callable[[], bool]) -> bool:
    return probe()


def require(capability: Capability, feature: str, alternative: str, *,
            connect: bool = False) -> None:
    """Raise ``ConfigError`` when the installed PySpark lacks ``capability``.

    Parameters
    ----------
    capability
        The gate.
    feature
        What the caller asked for (``"register_lookup_join"``).
    alternative
        What to use instead on this PySpark (a sentence fragment).
    connect
        Whether the caller's session is a Spark Connect one (for a mechanism whose
        classic and Connect sessions differ).

    Raises
    ------
    ConfigError
        Naming ``feature``, the mechanism, the first PySpark line that has it, the
        installed version and ``alternative``.
    """
    if capability.available(connect=connect):
        return
    kind = ""
    if capability.connect_probe is not None:
        kind = " on a Spark Connect session" if connect else " on a classic session"
    raise ConfigError(
        f"{feature} needs {capability.mechanism}{kind}, which PySpark has from "
        f"{capability.first_line(connect=connect)} on; this is PySpark {pyspark_version()}: "
        f"{alternative}")


# --- the gates ----------------------------------------------------------------------


def _arrow_udtf_analyze() -> bool:
    # Spark runs `analyze` for an Arrow UDTF built with this evaluation type (4.1+).
    # (PySpark 3.5 has no UDTF analyze, nor pyspark.util.PythonEvalType.)
    if not _udtf_analyze():
        return False
    from pyspark.util import PythonEvalType

    return hasattr(PythonEvalType, "SQL_ARROW_UDTF")


def _udtf_analyze() -> bool:
    import pyspark.sql.udtf

    return hasattr(pyspark.sql.udtf, "AnalyzeResult")


def _arrow_udf() -> bool:
    import pyspark.sql.pandas.functions

    return hasattr(pyspark.sql.pandas.functions, "arrow_udf")


def _python_data_source() -> bool:
    return _has_module("pyspark.sql.datasource")


def _classic_session_tags() -> bool:
    # PySpark 3.5's classic SparkSession defines addTag, but only to raise
    # ("only supported with Spark Connect"); 4.0 implements it through the JVM.
    return _version_tuple() >= (4, 0)


def _connect_session_tags() -> bool:
    return True  # every Connect client of a supported line (3.5+)


def _observation_filled_by_action() -> bool:
    # PySpark 3.5's JVM fills a classic Observation from a QueryExecutionListener, on
    # the listener bus, after the action has returned; 4.0 fills it before.
    return _version_tuple() >= (4, 0)


def _connect_observed_metrics() -> bool:
    # 4.0's Connect client fills an Observation from the server's reply and runs
    # StreamingQueryListeners in the client (3.5's ran them in the server's Python), but
    # 4.0's server left an action's observed metrics out of its reply now and then (about
    # one action in twenty in the test matrix, 2026-11-28): metrics that may silently
    # never arrive are refused there, as on 3.5.
    return _has_module("pyspark.sql.connect.observation") and _version_tuple() >= (4, 1)


def _classic_observed_metrics() -> bool:
    return True  # Observation and observedMetrics on every classic line


ARROW_UDTF_ANALYZE = Capability("Arrow UDTFs with an analyze method", "4.1",
                                _arrow_udtf_analyze)
"""An Arrow (vectorized) Python UDTF whose output schema ``analyze`` decides:
[`register_lookup_join`][lookup.register_lookup_join]."""

UDTF_ANALYZE = Capability("Python UDTFs with an analyze method", "4.0", _udtf_analyze)
"""A Python UDTF whose ``analyze`` checks its arguments when a query is analyzed:
[`register_lookup_table_function`][lookup.register_lookup_table_function] checks key
types then (without it, when the first row is looked up)."""

ARROW_UDF = Capability("Arrow UDFs (pyspark.sql.functions.arrow_udf)", "4.1", _arrow_udf)
"""A scalar Arrow UDF returning a struct, NULL for no match:
[`register_lookup_function`][lookup.register_lookup_function]."""

PYTHON_DATA_SOURCE = Capability("the Python data source API (pyspark.sql.datasource)", "4.0",
                                _python_data_source)
"""``spark.dataSource.register``: [`register_data_source`][scan.register_data_source]
and the loads of [`ScheduledTableRefresh`][lookup.ScheduledTableRefresh]."""

SESSION_TAGS = Capability("SparkSession.addTag and interruptTag", "4.0",
                          _classic_session_tags, connect_since="3.5",
                          connect_probe=_connect_session_tags)
"""Tagging a thread's Spark jobs and interrupting them: how
[`close`][lookup.ScheduledTableRefresh.close] stops a load in progress."""

OBSERVATION_FILLED_BY_ACTION = Capability(
    "an Observation filled before its action returns", "4.0", _observation_filled_by_action)
"""Not a refusal: where it lacks, [`lookup_metrics`][lookup.lookup_metrics] waits longer for a
classic observation that its action has not filled yet."""

CONNECT_OBSERVED_METRICS = Capability(
    "observed metrics read by the client (Observation, client-side StreamingQueryListener)",
    "3.5", _classic_observed_metrics, connect_since="4.1",
    connect_probe=_connect_observed_metrics)
"""``lookup_join(..., metrics=True)``: an ``Observation`` filled in the driver's
process and a streaming listener that runs there (on Connect: delivered reliably from 4.1)."""


# --- spellings that differ ----------------------------------------------------------


@functools.cache
def _to_arrow_keywords() -> dict[str, Any]:
    from pyspark.sql.pandas.types import to_arrow_type

    parameters = inspect.signature(to_arrow_type).parameters
    # 4.2+: timezone=; 4.0 and 4.1: timestamp_utc=; 3.5: always UTC, no parameter.
    if "timezone" in parameters:
        return {"timezone": "UTC"}
    if "timestamp_utc" in parameters:
        return {"timestamp_utc": True}
    return {}


def spark_to_arrow_type(data_type: T.DataType) -> pa.DataType:
    """PySpark's own Arrow type of ``data_type``, timestamps as UTC instants in
    microseconds, whatever the line's parameters for that are.

    Raises
    ------
    pyspark.errors.PySparkException, TypeError
        PySpark's errors for a type it has no Arrow mapping for (the caller says so).
    """
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(data_type, **_to_arrow_keywords())


def arrow_to_spark_type(arrow_type: pa.DataType, *, prefer_timestamp_ntz: bool) -> T.DataType:
    """PySpark's own Spark type of ``arrow_type``; a timestamp without a zone is
    TIMESTAMP_NTZ when ``prefer_timestamp_ntz``, else TIMESTAMP (the lines' defaults
    differ: 3.5 and 4.3 True, 4.0 to 4.2 False, so it is always given).

    Raises
    ------
    pyspark.errors.PySparkException, TypeError
        PySpark's errors for a type it has no Spark counterpart for.
    """
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow_type, prefer_timestamp_ntz=prefer_timestamp_ntz)


@dataclass
class _NoAnalyzeResult:
    """Stands in for ``pyspark.sql.udtf.AnalyzeResult`` where PySpark has none (3.5)."""

    schema: Any = None


def analyze_result_class() -> type[Any]:
    """``pyspark.sql.udtf.AnalyzeResult``, or where PySpark lacks UDTF ``analyze``
    ([`UDTF_ANALYZE`][]) a stand-in with its ``schema`` field, so that a module
    subclassing it imports on every line (its entry point refuses first)."""
    if not UDTF_ANALYZE.available():
        return _NoAnalyzeResult
    from pyspark.sql.udtf import AnalyzeResult

    return AnalyzeResult
