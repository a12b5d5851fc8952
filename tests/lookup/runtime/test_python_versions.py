"""Versions loaded as Python tuples (asynchronous functions; functions answering in
tuples, asked per key) are screened at load as the Arrow path screens them (issue 45):
bad history under the function's bad-value policy (counted), versions that ended
before the retention dropped, each key's in valid_from order; so an asynchronous
provider, a tuple function asked per key and the same function joined in Arrow all
answer alike."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from cache import DefaultLookupCache
from connectors.policy import BadValuePolicy
from lookup import (
    AsyncLookupFunctionProvider,
    LookupFunctionProvider,
    LookupProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
    Validity,
    open_lookup,
)
from lookup.spark.assemble import join_batch
from lookup.spark.join_plan import plan_join
from spark_lookup.errors import BadValueError
from tests.lookup.functions import AsyncDictLookup, DictLookup

UTC = dt.timezone.utc
SCHEMA = "id BIGINT, price DOUBLE, valid_from TIMESTAMP, valid_to TIMESTAMP"
NOW = dt.datetime(2024, 6, 1, tzinfo=UTC)


def ago(days: int) -> dt.datetime:
    return NOW - dt.timedelta(days=days)


# Listed newest first: the runtimes order each key's versions. Key 1 overlaps (1.1 within
# 1.0), key 2 has an inverted interval and a good version, key 3 a version that ended
# before the retention (30 days), one within it and an open one.
ROWS = [
    (1, 1.1, ago(80), ago(70)), (1, 1.0, ago(100), None),
    (2, 2.1, ago(50), None), (2, 2.0, ago(60), ago(65)),
    (3, 3.2, ago(10), None), (3, 3.1, ago(100), ago(10)), (3, 3.0, ago(400), ago(100)),
]
KEYS = [(1,), (1,), (1,), (2,), (2,), (3,), (3,), (3,), (3,), (4,)]
TIMES = [ago(90), ago(75), ago(60), ago(62), ago(20), ago(200), ago(50), ago(20), ago(1),
         ago(1)]


class _Async(AsyncDictLookup):
    schema = SCHEMA

    def __init__(self, rows: list[tuple[Any, ...]], mode: BadValuePolicy) -> None:
        super().__init__(rows)
        self.bad_value_mode = mode


class _Tuples(DictLookup):
    def __init__(self, rows: list[tuple[Any, ...]], mode: BadValuePolicy) -> None:
        super().__init__(rows, schema=SCHEMA)
        self.bad_value_mode = mode


def _provider(kind: str, mode: BadValuePolicy, retention: dt.timedelta | None
              ) -> LookupProvider:
    validity = Validity("valid_from", "valid_to", retention=retention)
    cache = DefaultLookupCache.new_builder().maximum_size(100).build()
    if kind == "async":
        return AsyncLookupFunctionProvider.of(_Async(ROWS, mode), validity=validity)
    if kind == "async-partial":
        return PartialCachingAsyncLookupProvider.of(_Async(ROWS, mode), cache,
                                                   validity=validity)
    if kind == "tuples":
        return LookupFunctionProvider.of(_Tuples(ROWS, mode), validity=validity)
    return PartialCachingLookupProvider.of(_Tuples(ROWS, mode), cache, validity=validity)


PYTHON_KINDS = ["async", "async-partial", "tuples", "tuples-partial"]
STREAM = T.StructType([T.StructField("id", T.LongType()), T.StructField("at", T.TimestampType())])


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    handles: list[Any] = []
    yield handles
    for handle in handles:
        handle.close()


def _open(provider: LookupProvider, opened: list[Any]) -> Any:
    handle = open_lookup(provider)
    opened.append(handle)
    # Loads and the handle read one "now": the retention's cutoffs are fixed.
    handle.clock = NOW.timestamp
    handle.runtime.clock = NOW.timestamp
    return handle


def _by_arrow(mode: BadValuePolicy, retention: dt.timedelta | None, opened: list[Any]
              ) -> tuple[list[float | None], int]:
    """What a join answers through the Arrow load path, and the bad values it counted."""
    provider = _provider("tuples", mode, retention)
    handle = _open(provider, opened)
    plan = plan_join(STREAM, provider, "id", "left", ["price"], as_of="at")
    batch = pa.RecordBatch.from_arrays(
        [pa.array([k[0] for k in KEYS], pa.int64()), pa.array(TIMES, pa.timestamp("us", "UTC"))],
        names=["id", "at"])
    out = join_batch(batch, plan.shape, handle.runtime, clock=NOW.timestamp)
    return out.column("price").to_pylist(), handle.metrics.num_bad_values


@pytest.mark.parametrize("retention", [None, dt.timedelta(days=30)])
@pytest.mark.parametrize("mode", [BadValuePolicy.PERMISSIVE, BadValuePolicy.DROPMALFORMED])
@pytest.mark.parametrize("kind", PYTHON_KINDS)
def test_python_loads_answer_as_the_arrow_path(kind: str, mode: BadValuePolicy,
                                               retention: dt.timedelta | None,
                                               opened: list[Any]) -> None:
    want, bad = _by_arrow(mode, retention, opened)
    # The reference itself: overlaps won by the later start (PERMISSIVE) or dropped,
    # the inverted version never matching; with the retention, the version of key 1
    # that ended 70 days ago is dropped at load (no overlap left), and every time older
    # than 30 days gets none.
    kept = mode is BadValuePolicy.PERMISSIVE
    if retention is None:
        assert want == [1.0 if kept else None, 1.1 if kept else None, 1.0 if kept else None,
                        None, 2.1, 3.0, 3.1, 3.1, 3.2, None]
        assert bad == 3
    else:
        assert want == [None, None, None, None, 2.1, None, None, 3.1, 3.2, None]
        assert bad == 1
    kind_cached = kind.endswith("partial")
    handle = _open(_provider(kind, mode, retention), opened)
    for _ in range(2):  # the second from the cache, where there is one
        found = handle.lookup_batch(KEYS, as_of=TIMES)
        assert [rows[0][1] if rows else None for rows in found] == want
    assert handle.metrics.num_bad_values == bad * (1 if kind_cached else 2)  # per load
    # What was loaded: each key's versions by valid_from, the ended ones dropped.
    versions = handle.runtime.lookup_batch([(1,), (2,), (3,)])
    prices = {key[0]: [row[1] for row in rows] for key, rows in versions.items()}
    if retention is None:
        assert prices == {1: [1.0, 1.1] if kept else [], 2: [2.0, 2.1] if kept else [2.1],
                          3: [3.0, 3.1, 3.2]}
    else:
        assert prices == {1: [1.0], 2: [2.0, 2.1] if kept else [2.1], 3: [3.1, 3.2]}


@pytest.mark.parametrize("kind", PYTHON_KINDS)
def test_failfast_refuses_bad_history_loaded_as_tuples(kind: str, opened: list[Any]) -> None:
    handle = _open(_provider(kind, BadValuePolicy.FAILFAST, None), opened)
    assert handle.lookup((3,), as_of=ago(50))[0][1] == 3.1
    with pytest.raises(BadValueError, match=r"key 1: versions overlapping"):
        handle.lookup((1,), as_of=ago(50))
