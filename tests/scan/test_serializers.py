"""Versioned, pickle-free serialization of splits, enumerator state and checkpoints."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scan.checkpoint import _FORMER_NAMES, CheckpointData, decode_checkpoint, encode_checkpoint
from scan.planners import PullEnumeratorState
from scan.serializers import (
    JsonVersionedSerializer,
    decode_value,
    encode_value,
    pack_versioned,
    unpack_versioned,
)
from scan.sources import CollectionSplit, FileSplit, RedisKeysSplit, SqlChunkSplit
from spark_lookup.errors import SourceError
from tests.fixtures.scan import ROWS, SCHEMA

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.dates(),
    st.datetimes(),
    st.datetimes(timezones=st.just(dt.timezone(dt.timedelta(hours=-5)))),
    st.times(),
    st.uuids(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.sampled_from(["a", "$date", "$tuple", "$dict", "x"]), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(values)
def test_tagged_json_round_trips_every_value(value: Any) -> None:
    import json

    text = json.dumps(encode_value(value))
    assert decode_value(json.loads(text)) == value


def test_tagged_json_keeps_types_apart() -> None:
    value = (1, True, 1.0, b"1", Decimal("1"), "1", dt.date(2024, 1, 1), uuid.UUID(int=1))
    assert [type(v) for v in decode_value(encode_value(value))] == [type(v) for v in value]


def test_a_dict_that_looks_like_a_tag_stays_a_dict() -> None:
    tricky = {"$date": "2024-01-01"}
    assert decode_value(encode_value(tricky)) == tricky


def test_unserializable_values_are_named() -> None:
    with pytest.raises(TypeError, match="object"):
        encode_value(object())
    with pytest.raises(TypeError, match="string keys"):
        encode_value({1: "a"})


class _Point(JsonVersionedSerializer[tuple[int, int]]):
    VERSION = 2
    WHAT = "a point"

    def to_json(self, obj: tuple[int, int]) -> Any:
        return {"x": obj[0], "y": obj[1]}

    def from_json(self, version: int, value: Any) -> tuple[int, int]:
        if version == 1:  # version 1 wrote a list
            return (value[0], value[1])
        return (value["x"], value["y"])


def test_serializer_reads_older_versions_and_refuses_newer() -> None:
    serializer = _Point()
    assert serializer.deserialize(2, serializer.serialize((1, 2))) == (1, 2)
    assert serializer.deserialize(1, b"[3,4]") == (3, 4)
    with pytest.raises(SourceError, match=r"a point was written in format version 3.*up to 2"):
        serializer.deserialize(3, b"{}")


@pytest.mark.parametrize("version", [0, -1, True, "1", None])
def test_serializer_refuses_invalid_versions(version: Any) -> None:
    with pytest.raises(SourceError, match="invalid serialization version"):
        _Point().deserialize(version, b"[1,2]")


@pytest.mark.parametrize("data", [b"", b"\xff", b"not json", b'{"x": 1}', b"[1]"])
def test_serializer_reports_malformed_data(data: bytes) -> None:
    with pytest.raises(SourceError, match="a point is malformed"):
        _Point().deserialize(2, data)


def test_packed_entries_carry_their_version() -> None:
    packed = pack_versioned(_Point(), (5, 6))
    assert packed["version"] == 2
    assert unpack_versioned(_Point(), packed, "p") == (5, 6)
    with pytest.raises(SourceError, match="malformed"):
        unpack_versioned(_Point(), {"data": "x"}, "p")
    with pytest.raises(SourceError, match="malformed"):
        unpack_versioned(_Point(), {"version": 2, "data": "!!"}, "p")


def test_checkpoint_envelope_round_trips() -> None:
    data = CheckpointData("a.B", 7, {"version": 1, "data": ""}, [[], [{"version": 1, "data": ""}]])
    assert decode_checkpoint(encode_checkpoint(data)) == data


# Written by 9c4b7e9^ (before the sources moved): CollectionSource(rows 0-9 of
# "id BIGINT, v STRING", num_splits=2) at parallelism 1, after run(3) emitted rows 0-4.
_CHECKPOINT_BEFORE_THE_MOVE = (
    b'SLSCAN\x00\x01{"source":"scan.sources.collection.CollectionSource","checkpoint_id":1,'
    b'"enumerator":{"version":1,"data":"eyJwZW5kaW5nIjpbXSwicHJvZ3Jlc3MiOnsicG9zaXRpb24iOjF9fQ=="},'
    b'"readers":[[{"version":1,"data":"WzAsNSw1XQ=="}]]}'
)


def test_a_checkpoint_written_before_the_sources_moved_restores() -> None:
    from scan import CollectionSource, LocalSourceRunner

    rows = [(i, f"v{i}") for i in range(10)]
    source = CollectionSource(rows, num_splits=2, schema="id BIGINT, v STRING")
    assert decode_checkpoint(_CHECKPOINT_BEFORE_THE_MOVE).source == (
        "scan.collection.CollectionSource")
    with LocalSourceRunner(source, 2, restore_from=_CHECKPOINT_BEFORE_THE_MOVE) as runner:
        assert sorted(runner.run()) == rows[5:]


@pytest.mark.parametrize("former", sorted(_FORMER_NAMES))
def test_every_former_source_name_reads_as_its_class(former: str) -> None:
    import importlib

    data = CheckpointData(former, 1, {"version": 1, "data": ""}, [])
    current = decode_checkpoint(encode_checkpoint(data)).source
    module, _, name = current.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert f"{cls.__module__}.{cls.__qualname__}" == current
    assert name == former.rpartition(".")[2]


@pytest.mark.parametrize(
    "split",
    [
        CollectionSplit(3, 10, 20),
        FileSplit("/data/a b.parquet", 4, 17),
        FileSplit("/data/x.csv"),
        RedisKeysSplit(2, (b"k:1", b"\xff\x00binary"), 1),
        SqlChunkSplit(0, None, 100),
        SqlChunkSplit(
            5, Decimal("1.50"), Decimal("9.99"), resume_after=Decimal("2.5"), resumed=True
        ),
        SqlChunkSplit(6, dt.datetime(2024, 3, 31, 2, 30), None, skip=12),
        SqlChunkSplit(7, "a", "m", resume_after="c", resumed=True),
        SqlChunkSplit(8, uuid.UUID(int=5), None),
        SqlChunkSplit(-1, null_chunk=True, skip=3),
    ],
    ids=lambda s: type(s).__name__,
)
def test_builtin_splits_round_trip_as_json(split: Any, tmp_path: Any) -> None:
    import functools
    import json
    import sqlite3

    from scan import CollectionSource, FileSource, RedisScanSource, SqlTableSource

    sources = {
        CollectionSplit: CollectionSource(ROWS, schema=SCHEMA),
        FileSplit: FileSource(str(tmp_path)),
        RedisKeysSplit: RedisScanSource("redis://x", "*", schema="v STRING"),
        SqlChunkSplit: SqlTableSource(functools.partial(sqlite3.connect, ":memory:"), "t"),
    }
    source = sources[type(split)]
    data = source.split_serializer.serialize(split)
    json.loads(data)  # JSON, not pickle
    version = source.split_serializer.version
    assert source.split_serializer.deserialize(version, data) == split
    with pytest.raises(SourceError, match=f"version {version + 1}"):
        source.split_serializer.deserialize(version + 1, data)
    state = PullEnumeratorState((split,), {"cursor": split.split_id, "n": math.pi})
    serializer = source.enumerator_state_serializer
    assert serializer.deserialize(1, serializer.serialize(state)) == state
