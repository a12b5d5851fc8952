"""The PySpark gates (``spark_lookup.compat``): on every supported line (the test
matrix runs this module on each: noxfile.py), an entry point either works or refuses at
once with a ``ConfigError`` naming the mechanism, the line that has it and the
alternative; never PySpark's ``ImportError``, ``AttributeError`` or ``TypeError``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from lookup import (
    ScheduledTableRefresh,
    lookup_join,
    register_lookup_function,
    register_lookup_join,
)
from scan import CollectionSource, register_data_source
from spark_lookup import compat as _compat
from spark_lookup.compat import (
    ARROW_UDF,
    ARROW_UDTF_ANALYZE,
    CONNECT_OBSERVED_METRICS,
    PYTHON_DATA_SOURCE,
    SESSION_TAGS,
    UDTF_ANALYZE,
    Capability,
    arrow_to_spark_type,
    require,
    spark_to_arrow_type,
)
from spark_lookup.errors import ConfigError
from tests.lookup.spark.sql_support import customers_provider
from triggers import PeriodicCacheReloadTrigger

pytestmark = [pytest.mark.matrix, pytest.mark.connect_on_every_line]  # noxfile.py


def test_arrow_types_are_the_same_on_every_line() -> None:
    assert spark_to_arrow_type(T.TimestampType()) == pa.timestamp("us", tz="UTC")
    assert spark_to_arrow_type(T.TimestampNTZType()) == pa.timestamp("us")
    nested = T.StructType([T.StructField("a", T.ArrayType(T.TimestampType()))])
    assert spark_to_arrow_type(nested) == pa.struct(
        [pa.field("a", pa.list_(pa.field("element", pa.timestamp("us", tz="UTC"))))])
    assert spark_to_arrow_type(T.DecimalType(38, 10)) == pa.decimal128(38, 10)
    # The lines' defaults differ (3.5 and 4.3: NTZ; 4.0 to 4.2: TIMESTAMP): always given.
    zoneless = pa.timestamp("us")
    assert arrow_to_spark_type(zoneless, prefer_timestamp_ntz=True) == T.TimestampNTZType()
    assert arrow_to_spark_type(zoneless, prefer_timestamp_ntz=False) == T.TimestampType()
    assert arrow_to_spark_type(pa.int64(), prefer_timestamp_ntz=True) == T.LongType()


def test_a_missing_capability_names_feature_line_and_alternative() -> None:
    absent = Capability("a time machine", "9.1", lambda: False, connect_since="9.2",
                        connect_probe=lambda: False)
    version = re.escape(_compat.pyspark_version())
    with pytest.raises(ConfigError, match=(
            r"^travel needs a time machine on a classic session, which PySpark has from 9\.1 "
            rf"on; this is PySpark {version}: walk instead$")):
        require(absent, "travel", "walk instead")
    with pytest.raises(ConfigError, match=r"on a Spark Connect session, which PySpark has "
                                          r"from 9\.2 on"):
        require(absent, "travel", "walk instead", connect=True)
    require(Capability("air", "1.0", lambda: True), "breathe", "none")  # present: no error


def test_the_gates_agree_with_the_lines_they_name() -> None:
    """Each probe looks at PySpark itself; the line it names in messages must be the
    one where the probe turns true."""
    line = tuple(int(p) for p in re.findall(r"\d+", _compat.pyspark_version())[:2])
    assert ARROW_UDTF_ANALYZE.available() == (line >= (4, 1))
    assert ARROW_UDF.available() == (line >= (4, 1))
    assert UDTF_ANALYZE.available() == (line >= (4, 0))
    assert PYTHON_DATA_SOURCE.available() == (line >= (4, 0))
    assert SESSION_TAGS.available() == (line >= (4, 0))
    assert SESSION_TAGS.available(connect=True)
    assert CONNECT_OBSERVED_METRICS.available()
    assert _compat.OBSERVATION_FILLED_BY_ACTION.available() == (line >= (4, 0))
    assert CONNECT_OBSERVED_METRICS.available(connect=True) == (line >= (4, 1))


def _refresh(spark: Any) -> Any:
    source = CollectionSource([(1, "a")], schema="id BIGINT, name STRING")
    return ScheduledTableRefresh(spark, source, PeriodicCacheReloadTrigger(timedelta(hours=1)),
                                 "compat_view")


def _stream(spark: Any) -> Any:
    return spark.createDataFrame([(1,)], "id BIGINT")


# Each gated entry point, called as a user would, with what it needs.
ENTRY_POINTS = {
    "register_lookup_join": (
        [ARROW_UDTF_ANALYZE],
        lambda spark: register_lookup_join(spark, "compat_join", customers_provider("full"),
                                           on="id")),
    "register_lookup_function": (
        [ARROW_UDF],
        lambda spark: register_lookup_function(spark, "compat_fn", customers_provider("full"))),
    "scan.register_data_source": (
        [PYTHON_DATA_SOURCE],
        lambda spark: register_data_source(
            spark, "compat_source", CollectionSource([(1,)], schema="id BIGINT"))),
    "ScheduledTableRefresh": ([PYTHON_DATA_SOURCE, SESSION_TAGS], _refresh),
    "lookup_join(..., metrics=True)": (
        [CONNECT_OBSERVED_METRICS],
        lambda spark: lookup_join(_stream(spark), customers_provider("full"), on="id",
                                  metrics=True)),
}


@pytest.mark.spark
@pytest.mark.parametrize("feature", list(ENTRY_POINTS))
def test_an_entry_point_works_or_refuses_at_once(spark: Any, spark_kind: str,
                                                 feature: str) -> None:
    capabilities, call = ENTRY_POINTS[feature]
    connect = spark_kind == "connect"
    missing = [c for c in capabilities if not c.available(connect=connect)]
    if not missing:
        call(spark)  # the gate passes; what the call does is tested elsewhere
        return
    first = missing[0]
    with pytest.raises(ConfigError) as raised:
        call(spark)
    message = str(raised.value)
    assert message.startswith(f"{feature} needs {first.mechanism}"), message
    assert f"which PySpark has from {first.first_line(connect=connect)} on" in message
    assert f"this is PySpark {_compat.pyspark_version()}: " in message

