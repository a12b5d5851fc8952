"""RedisScanSource specifics: value types, the key column, conversions, SCAN dedupe,
deleted and wrongly typed keys, and what error messages show of the URL."""

from __future__ import annotations

import datetime as dt
import json
import pickle
from decimal import Decimal
from typing import Any

import pytest

from connectors.redis import source as redis_scan
from scan import (
    LocalSourceRunner,
    ReaderOptions,
    RedisScanSource,
    plan_splits,
    read_arrow,
    read_split,
)
from scan.sources import RedisKeysSplit
from spark_lookup.errors import BadValueError, ConfigError, ConnectorError
from tests.scan.helpers import bag, run_all


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "http://x"}, "redis://"),
        ({"url": "redis://:hunter2@h"}, None),
        ({"match": ""}, "match"),
        ({"value_type": "list"}, "value_type"),
        ({"schema": None}, "needs a schema"),
        ({"value_type": "string", "schema": "a STRING, b STRING"}, "exactly one column besides"),
        ({"schema": "_key INT, v STRING"}, "STRING or BINARY"),
        ({"keys_per_split": 0}, "keys_per_split"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, Any], message: str | None) -> None:
    arguments = {"url": "redis://h", "match": "k:*", "value_type": "hash", "schema": "v STRING"}
    arguments.update(kwargs)
    if message is None:
        RedisScanSource(**arguments)  # a valid URL with a password
        return
    with pytest.raises(ConfigError, match=message):
        RedisScanSource(**arguments)


def test_passwords_are_masked() -> None:
    source = RedisScanSource("redis://user:hunter2@localhost:1/0", "k:*", schema="v STRING")
    assert "hunter2" not in repr(source)
    assert source.url == "redis://***@localhost:1/0"
    with pytest.raises(ConfigError) as raised:
        RedisScanSource("http://user:hunter2@localhost", "k:*", schema="v STRING")
    assert "hunter2" not in str(raised.value)


def test_unreachable_server_is_named_without_the_password() -> None:
    source = RedisScanSource("redis://:hunter2@127.0.0.1:1/0", "k:*", schema="v STRING")
    with pytest.raises(ConnectorError, match=r"127\.0\.0\.1:1") as raised:
        plan_splits(source)
    assert "hunter2" not in str(raised.value)


def test_string_values(redis_url: str, redis_prefix: str, redis_client: Any) -> None:
    redis_client.mset({f"{redis_prefix}{i}": str(i * 10) for i in range(20)})
    source = RedisScanSource(redis_url, redis_prefix + "*", "string", "value BIGINT")
    assert bag(run_all(source, 2)) == bag((i * 10,) for i in range(20))


def test_json_values_and_a_binary_key(redis_url: str, redis_prefix: str, redis_client: Any) -> None:
    document = {
        "id": 7,
        "price": "12.50",
        "day": "2024-02-29",
        "at": "2024-02-29T12:00:00+02:00",
        "tags": ["a", "b"],
        "attrs": {"k": 1},
        "ok": True,
        "blob": "AAE=",
    }
    redis_client.set(f"{redis_prefix}a", json.dumps(document))
    redis_client.set(f"{redis_prefix}b", json.dumps({"id": 8}))
    schema = (
        "_key BINARY, id INT, price DECIMAL(10,2), day DATE, at TIMESTAMP, tags ARRAY<STRING>, "
        "attrs MAP<STRING, BIGINT>, ok BOOLEAN, blob BINARY, missing STRING"
    )
    source = RedisScanSource(redis_url, redis_prefix + "*", "json", schema)
    rows = sorted(run_all(source, 1))
    assert rows == [
        (
            f"{redis_prefix}a".encode(),
            7,
            Decimal("12.50"),
            dt.date(2024, 2, 29),
            dt.datetime(2024, 2, 29, 10, tzinfo=dt.timezone.utc).astimezone(
                dt.timezone(dt.timedelta(hours=2))
            ),
            ["a", "b"],
            {"k": 1},
            True,
            b"\x00\x01",
            None,
        ),
        (f"{redis_prefix}b".encode(), 8, None, None, None, None, None, None, None, None),
    ]
    assert read_arrow(source).num_rows == 2


def test_hash_fields_convert_to_their_types(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    redis_client.hset(
        f"{redis_prefix}1",
        mapping={"n": "5", "f": "2.5", "ok": "true", "d": "2024-01-02", "ts": "2024-01-02 03:04"},
    )
    schema = "n SMALLINT, f FLOAT, ok BOOLEAN, d DATE, ts TIMESTAMP_NTZ, absent BIGINT"
    source = RedisScanSource(redis_url, redis_prefix + "*", "hash", schema)
    assert run_all(source, 1) == [
        (5, 2.5, True, dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4), None)
    ]


def test_a_value_that_does_not_fit_is_named(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    redis_client.hset(f"{redis_prefix}bad", mapping={"n": "five"})
    source = RedisScanSource(redis_url, redis_prefix + "*", "hash", "n BIGINT",
                             mode="FAILFAST")
    with pytest.raises(BadValueError, match=r"bad'.*column 'n'.*'five' as bigint"):
        run_all(source, 1)
    lenient = RedisScanSource(redis_url, redis_prefix + "*", "hash", "n BIGINT")
    assert run_all(lenient, 1) == [(None,)]  # PERMISSIVE: null, and counted
    assert lenient.bad_value_count == 1
    dropping = RedisScanSource(redis_url, redis_prefix + "*", "hash", "n BIGINT",
                               mode="DROPMALFORMED")
    assert run_all(dropping, 1) == []
    redis_client.set(f"{redis_prefix}bad", "[1, 2]")
    source = RedisScanSource(redis_url, redis_prefix + "*", "json", "n BIGINT",
                             mode="FAILFAST")
    with pytest.raises(BadValueError, match="JSON object or array of objects"):
        run_all(source, 1)


def test_a_key_of_another_type_is_named(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    redis_client.set(f"{redis_prefix}str", "x")
    source = RedisScanSource(redis_url, redis_prefix + "*", "hash", "v STRING")
    with pytest.raises(ConnectorError, match=r"str'.*WRONGTYPE"):
        run_all(source, 1)


def test_keys_deleted_after_the_scan_are_skipped(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    for i in range(10):
        redis_client.hset(f"{redis_prefix}{i}", mapping={"i": i})
    source = RedisScanSource(redis_url, redis_prefix + "*", "hash", "i INT")
    (split,) = plan_splits(source)  # on the driver
    redis_client.delete(f"{redis_prefix}3", f"{redis_prefix}9")
    assert bag(read_split(source, split)) == bag((i,) for i in range(10) if i not in (3, 9))


class _FakeRedis:
    """SCAN pages as a rehashing server may give them: keys repeat across pages."""

    pages = [(5, [b"a", b"b"]), (9, [b"b", b"c", b"c"]), (2, []), (0, [b"a", b"d"])]

    def __init__(self) -> None:
        self.calls: list[int] = []

    def scan(self, cursor: int, match: str, count: int) -> tuple[int, list[bytes]]:
        self.calls.append(cursor)
        index = {0: 0, 5: 1, 9: 2, 2: 3}[cursor]
        return self.pages[index]

    def close(self) -> None:
        pass


def test_keys_returned_twice_by_scan_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeRedis()
    monkeypatch.setattr(redis_scan, "_connect", lambda url: fake)
    source = RedisScanSource("redis://fake", "*", "string", "v STRING")
    splits = plan_splits(source)
    assert [s.keys for s in splits] == [(b"a", b"b"), (b"c",), (b"d",)]
    assert fake.calls == [0, 5, 9, 2]


def test_dedupe_survives_a_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    from scan.planners import PullEnumeratorState

    monkeypatch.setattr(redis_scan, "_connect", lambda url: _FakeRedis())
    source = RedisScanSource("redis://fake", "*", "string", "v STRING")
    planner = redis_scan._KeyPlanner("redis://fake", "*", 10)
    assert planner.next_split() == RedisKeysSplit(0, (b"a", b"b"))
    serializer = source.enumerator_state_serializer
    state = serializer.deserialize(
        1, serializer.serialize(PullEnumeratorState((), planner.progress()))
    )
    restored = redis_scan._KeyPlanner("redis://fake", "*", 10, state.progress)
    assert [restored.next_split(), restored.next_split(), restored.next_split()] == [
        RedisKeysSplit(1, (b"c",)),
        RedisKeysSplit(2, (b"d",)),
        None,
    ]


def test_checkpoint_inside_a_split_resumes_at_the_next_key(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    redis_client.mset({f"{redis_prefix}{i:03d}": i for i in range(50)})
    source = RedisScanSource(
        redis_url, redis_prefix + "*", "string", "_key STRING, v INT", keys_per_split=1_000_000
    )
    with LocalSourceRunner(source, 1, options=ReaderOptions(records_per_poll=6)) as runner:
        before = runner.run(10)
        checkpoint = runner.checkpoint()
    with LocalSourceRunner(source, 3, restore_from=checkpoint) as runner:
        rest = runner.run()
    assert len(before) == 12
    assert bag(before + rest) == bag((f"{redis_prefix}{i:03d}", i) for i in range(50))


def test_source_pickles_without_a_client(redis_url: str, redis_prefix: str) -> None:
    source = RedisScanSource(redis_url, redis_prefix + "*", "hash", "v STRING")
    run_all(source, 1)
    copy = pickle.loads(pickle.dumps(source))
    assert copy.match == redis_prefix + "*"
    assert run_all(copy, 1) == []
