"""The entry points are typed with Spark's and Arrow's own classes, not ``Any``: an
editor and mypy can help the user. (The Spark classes are imported by the library under
``TYPE_CHECKING`` only; here they are given to ``get_type_hints``.)"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation
from pyspark.sql import SparkSession as ClassicSession
from pyspark.sql import types as T
from pyspark.sql.connect.session import SparkSession as ConnectSession
from pyspark.sql.connect.udtf import UserDefinedTableFunction as ConnectTableFunction
from pyspark.sql.udtf import UserDefinedTableFunction as ClassicTableFunction

from cache import LookupCache
from cache.answers import Answers
from cache.base import CachedAnswers
from lookup import (
    ScheduledTableRefresh,
    lookup_join,
    lookup_metrics,
    register_lookup_function,
    register_lookup_join,
    register_lookup_table_function,
)
from scan import register_data_source
from scan.source import Source
from triggers import CacheReloadTrigger

# The types of the PySpark the whole suite runs on (4.3); older lines of the test matrix
# lack some (the data source API is 4.0+), and this module is theirs to skip.
DataSource = pytest.importorskip("pyspark.sql.datasource").DataSource

SESSION = ClassicSession | ConnectSession
TABLE_FUNCTION = ClassicTableFunction | ConnectTableFunction
NAMES = {
    "ClassicSession": ClassicSession, "ConnectSession": ConnectSession,
    "ClassicTableFunction": ClassicTableFunction, "ConnectTableFunction": ConnectTableFunction,
    "DataFrame": DataFrame, "StorageLevel": StorageLevel, "Source": Source,
    "CacheReloadTrigger": CacheReloadTrigger, "Observation": Observation, "T": T,
    "DataSource": DataSource,
    "UserDefinedFunctionLike": Any,  # a Protocol of PySpark's stubs only
}


def hints(function: Callable[..., Any]) -> dict[str, Any]:
    return typing.get_type_hints(function, localns=NAMES)


def test_lookup_join_takes_and_returns_a_dataframe() -> None:
    found = hints(lookup_join)
    assert (found["df"], found["return"]) == (DataFrame, DataFrame)


@pytest.mark.parametrize("function", [register_lookup_function, register_lookup_join,
                                      register_lookup_table_function, register_data_source])
def test_registrations_take_a_session_of_either_kind(function: Callable[..., Any]) -> None:
    assert hints(function)["spark"] == SESSION


@pytest.mark.parametrize("function", [register_lookup_join, register_lookup_table_function])
def test_table_functions_are_returned_as_either_kind(function: Callable[..., Any]) -> None:
    assert hints(function)["return"] == TABLE_FUNCTION


def test_lookup_metrics_takes_an_optional_session() -> None:
    assert hints(lookup_metrics)["spark"] == SESSION | None


def test_a_refreshed_view_is_built_from_typed_parts() -> None:
    found = hints(ScheduledTableRefresh.__init__)
    assert found["spark"] == SESSION
    assert found["source"] == Source[Any, Any]
    assert found["trigger"] is CacheReloadTrigger
    assert found["storage_level"] == StorageLevel | None
    assert hints(ScheduledTableRefresh.table)["return"] is DataFrame


def test_get_arrow_names_the_parts_of_its_answer() -> None:
    assert hints(LookupCache.get_arrow)["return"] is Answers is CachedAnswers
    found = typing.get_type_hints(Answers)
    assert {name: found[name] for name in ("hit", "groups", "offsets", "rows")} == {
        "hit": np.ndarray | None, "groups": np.ndarray, "offsets": np.ndarray, "rows": pa.Table}
    assert hints(LookupCache.put_arrow)["rows"] == pa.Table | pa.RecordBatch
