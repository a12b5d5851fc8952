"""RedisLookupFunction against real Redis: hashes, JSON and plain strings."""

from __future__ import annotations

import json
import math
import pickle
import shutil
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cache import DefaultLookupCache, RedisLookupCache
from connectors.policy import BadValuePolicy
from connectors.redis.values import MAX_DEPTH
from lookup import (
    FullCachingLookupProvider,
    PartialCachingLookupProvider,
    RedisLookupFunction,
    open_lookup,
)
from scan import RedisScanSource, read_arrow
from spark_lookup.errors import BadValueError, ConfigError, ConnectorError
from tests.connectors.conftest import RedisServer, free_port
from triggers import PeriodicCacheReloadTrigger

pytestmark = pytest.mark.redis

USERS = "id BIGINT, name STRING, score DOUBLE, born DATE, vip BOOLEAN, balance DECIMAL(8, 2)"


@pytest.fixture
def users(redis_url: str, redis_prefix: str, redis_client: Any) -> RedisLookupFunction:
    redis_client.hset(f"{redis_prefix}user:1", mapping={
        "name": "Ada", "score": "1.5", "born": "1990-01-02", "vip": "true", "balance": "10.50",
        "ignored": "extra fields are ignored",
    })
    redis_client.hset(f"{redis_prefix}user:2", mapping={"name": "Bob", "id": "2"})
    fn = RedisLookupFunction(redis_url, redis_prefix + "user:{id}", USERS, ["id"])
    fn.open()
    return fn


def test_hash_values_are_typed_by_the_schema(users: RedisLookupFunction) -> None:
    assert users.lookup((1,)) == [
        (1, "Ada", 1.5, date(1990, 1, 2), True, Decimal("10.50"))
    ]
    assert users.lookup((2,)) == [(2, "Bob", None, None, None, None)]  # missing fields: None
    assert users.lookup((3,)) == []
    assert users.lookup_batch([(1.0,), (None,), (math.nan,), (2,), (3,)]) == {
        (1.0,): [(1, "Ada", 1.5, date(1990, 1, 2), True, Decimal("10.50"))],
        (None,): [], (math.nan,): [], (2,): [(2, "Bob", None, None, None, None)], (3,): [],
    }


def test_a_bad_value_names_the_key_and_field(
    users: RedisLookupFunction, redis_client: Any, redis_prefix: str
) -> None:
    strict = pickle.loads(pickle.dumps(users))
    strict._redis.mode = strict._redis.conformer.policy = BadValuePolicy.FAILFAST
    for field, value in [("score", "high"), ("born", "yesterday"), ("vip", "maybe"),
                         ("balance", "1.234"), ("balance", "1234567.1"), ("name", b"\xff"),
                         ("id", "1.5")]:
        redis_client.hset(f"{redis_prefix}user:1", field, value)
        with pytest.raises(BadValueError, match=rf"user:1'.*column '{field}'"):
            strict.lookup((1,))
        # PERMISSIVE (the default): the value reads as null, the row is kept, it is counted.
        before = users.bad_value_count
        (row,) = users.lookup((1,))
        assert row[users.struct.fieldNames().index(field)] in (None, 1)  # the key fills id
        assert users.bad_value_count == before + 1
        redis_client.hdel(f"{redis_prefix}user:1", field)


def test_json_objects_and_arrays(redis_url: str, redis_prefix: str, redis_client: Any) -> None:
    schema = ("shop STRING, sku BIGINT, qty INT, price DECIMAL(10, 2), at TIMESTAMP, "
              "tags ARRAY<STRING>, attrs MAP<STRING, DOUBLE>, dims STRUCT<w: INT, h: INT>, "
              "raw BINARY")
    fn = RedisLookupFunction(redis_url, redis_prefix + "stock:{shop}:{sku:05d}", schema,
                             ["shop", "sku"], value_type="json")
    redis_client.set(f"{redis_prefix}stock:s1:00007", json.dumps({
        "qty": 3, "price": 19.99, "at": "2024-01-01T10:00:00Z", "tags": ["a", "b"],
        "attrs": {"x": 1.5}, "dims": {"w": 2, "h": 3}, "raw": "AAE=",
    }))
    redis_client.set(f"{redis_prefix}stock:s1:00008", json.dumps([{"qty": 1}, {"qty": 2}]))
    redis_client.set(f"{redis_prefix}stock:s1:00009", "[]")
    redis_client.set(f"{redis_prefix}stock:s2:00007", json.dumps({"shop": "S2", "qty": None}))
    result = fn.lookup_batch([("s1", 7), ("s1", 8), ("s1", 9), ("s2", 7), ("s3", 7)])
    assert result[("s1", 7)] == [(
        "s1", 7, 3, Decimal("19.99"), datetime(2024, 1, 1, 10, tzinfo=timezone.utc), ["a", "b"],
        {"x": 1.5}, {"w": 2, "h": 3}, b"\x00\x01",
    )]
    assert [row[2] for row in result[("s1", 8)]] == [1, 2]
    assert result[("s1", 9)] == result[("s3", 7)] == []
    # A stored key column must be the looked-up key's: this row says it is shop S2's.
    assert result[("s2", 7)] == []


@pytest.mark.parametrize(
    ("stored", "message"),
    [
        ("{not json", "document.*not JSON"),
        ("42", "document.*a JSON object"),
        ('[{"qty": 1}, "x"]', "document.*a JSON object"),
        ('{"qty": "many"}', "column 'qty'.*JSON number"),
        ('{"qty": true}', "column 'qty'"),
        ('{"qty": 1.5}', "column 'qty'"),
        ('{"qty": 99999999999}', "column 'qty'.*as int"),
    ],
)
def test_bad_json_names_the_key(redis_url: str, redis_prefix: str, redis_client: Any,
                                stored: str, message: str) -> None:
    fn = RedisLookupFunction(redis_url, redis_prefix + "j:{id}", "id STRING, qty INT", "id",
                             value_type="json", mode="FAILFAST")
    redis_client.set(f"{redis_prefix}j:x", stored)
    with pytest.raises(BadValueError, match=rf"j:x'.*{message}"):
        fn.lookup(("x",))
    permissive = RedisLookupFunction(redis_url, redis_prefix + "j:{id}", "id STRING, qty INT",
                                     "id", value_type="json")
    assert permissive.lookup(("x",))[0][1] is None
    assert permissive.bad_value_count == 1


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [400, 900])
@pytest.mark.parametrize("column", ["STRING", "ARRAY<STRING>"])
def test_a_deeply_nested_json_value_is_a_bad_value_never_a_failure(
    redis_url: str, redis_prefix: str, redis_client: Any, depth: int, column: str
) -> None:
    # Reading it recursed past Python's limit: a RecursionError, retried 3 times, then
    # the lookup failed (issue 26, item 10).
    redis_client.set(f"{redis_prefix}j:x", f'{{"id": "x", "doc": {_nested(depth)}}}')
    redis_client.set(f"{redis_prefix}j:y", '{"id": "y", "doc": [[]]}')
    schema = f"id STRING, doc {column}"
    shallow = "[[]]" if column == "STRING" else ["[]"]

    def function(mode: str) -> RedisLookupFunction:
        return RedisLookupFunction(redis_url, redis_prefix + "j:{id}", schema, "id",
                                   value_type="json", mode=mode)

    permissive = function("PERMISSIVE")
    with open_lookup(PartialCachingLookupProvider.of(
            permissive, DefaultLookupCache.new_builder().maximum_size(10).build(),
            max_retries=3)) as handle:
        found = handle.lookup_batch([("x",), ("y",)])
        assert found == {("x",): (("x", None),), ("y",): (("y", shallow),)}
        assert (handle.metrics.num_bad_values, handle.metrics.num_retries) == (1, 0)
        assert handle.metrics.num_load_failures == 0
    assert function("DROPMALFORMED").lookup_batch([("x",), ("y",)]) == {
        ("x",): [], ("y",): [("y", shallow)]}
    with pytest.raises(BadValueError, match=rf"'{redis_prefix}j:x'.*column 'doc'.*"
                                            rf"nested deeper than {MAX_DEPTH} levels"):
        function("FAILFAST").lookup(("x",))


def test_a_deeply_nested_json_value_costs_a_full_cache_one_value(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    # One such value made the whole load fail, so a full cache never had a snapshot.
    redis_client.set(f"{redis_prefix}j:x", f'{{"id": "x", "doc": {_nested(600)}}}')
    redis_client.set(f"{redis_prefix}j:y", '{"id": "y", "doc": [[1]]}')
    source = RedisScanSource(redis_url, value_type="json", schema="id STRING, doc STRING",
                             key_template=redis_prefix + "j:{id}", key_columns=["id"])
    assert sorted(read_arrow(source, parallelism=2).to_pylist(), key=lambda r: r["id"]) == [
        {"id": "x", "doc": None}, {"id": "y", "doc": "[[1]]"}]
    provider = FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
        share_across_workers=False)
    with open_lookup(provider) as handle:
        assert handle.lookup_batch([("x",), ("y",)]) == {
            ("x",): (("x", None),), ("y",): (("y", "[[1]]"),)}
        assert handle.metrics.num_bad_values == 1
    with pytest.raises(BadValueError, match=r"j:x'.*column 'doc'.*nested deeper"):
        read_arrow(RedisScanSource(redis_url, value_type="json", schema="id STRING, doc STRING",
                                   key_template=redis_prefix + "j:{id}", key_columns=["id"],
                                   mode="FAILFAST"))


def test_string_values(redis_url: str, redis_prefix: str, redis_client: Any) -> None:
    fn = RedisLookupFunction(redis_url, redis_prefix + "rate:{ccy}", "ccy STRING, rate DOUBLE",
                             "ccy", value_type="string")
    redis_client.mset({f"{redis_prefix}rate:EUR": "1.1", f"{redis_prefix}rate:GBP": "1.3"})
    assert fn.lookup_batch([("EUR",), ("GBP",), ("XXX",)]) == {
        ("EUR",): [("EUR", 1.1)], ("GBP",): [("GBP", 1.3)], ("XXX",): [],
    }
    with pytest.raises(ConfigError, match="exactly one column besides the key columns"):
        RedisLookupFunction(redis_url, "r:{ccy}", "ccy STRING, a DOUBLE, b DOUBLE", "ccy",
                            value_type="string")


def test_a_batch_is_one_round_trip(shared_private_redis: RedisServer) -> None:
    server = shared_private_redis
    client = server.client()
    client.mset({f"rt:json:{i}": json.dumps({"v": i}) for i in range(100)})
    for i in range(100):
        client.hset(f"rt:hash:{i}", "v", str(i))
    client.close()
    for value_type, command in (("hash", "hmget"), ("json", "mget")):
        fn = RedisLookupFunction(server.url, f"rt:{value_type}:{{id}}", "id INT, v INT", "id",
                                 value_type=value_type, max_keys_per_command=30)
        fn.lookup((0,))  # connected before counting
        one, calls = server.reads_during(lambda fn=fn: fn.lookup((1,)))
        assert calls == {command: 1}
        result: dict[Any, Any] = {}
        many, calls = server.reads_during(
            lambda fn=fn, result=result: result.update(fn.lookup_batch([(i,) for i in range(60)]))
        )
        assert calls == {command: 60 if value_type == "hash" else 2}
        assert many == one == 1
        assert all(result[(i,)] == [(i, i)] for i in range(60))
        fn.close()


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("user:{id}:{other}", "not a key column"),
        ("user:{}", "not a key column"),
        ("user:{0}", "not a key column"),
        ("user:{id.__class__}", "not a key column"),
        ("user:{id!r}", "no conversion"),
        ("user:{id:{w}}", "nested"),
        ("user:{id", "key_template"),
        ("user:{id:05z}", "does not format"),
        ("user", "no placeholder for key column"),
    ],
)
def test_invalid_templates(template: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RedisLookupFunction("redis://localhost", template, "id BIGINT, n STRING", "id")


def test_other_invalid_configuration() -> None:
    with pytest.raises(ConfigError, match="value_type"):
        RedisLookupFunction("redis://localhost", "u:{id}", "id INT", "id", value_type="list")
    with pytest.raises(ConfigError, match="not a Redis URL"):
        RedisLookupFunction("postgresql://x", "u:{id}", "id INT", "id")
    with pytest.raises(ConfigError, match="cannot be read from text"):
        RedisLookupFunction("redis://localhost", "u:{id}", "id INT, t ARRAY<INT>", "id")
    with pytest.raises(ConfigError, match="not a column"):
        RedisLookupFunction("redis://localhost", "u:{id}", "id INT", "key")


def test_keys_are_normalized_checked_and_never_sent_when_hopeless(
    users: RedisLookupFunction,
) -> None:
    assert users.redis_key((7.0,)).endswith("user:7")  # type: ignore[union-attr]
    assert users.redis_key((7.5,)) is None
    assert users.redis_key((None,)) is None
    with pytest.raises(ConfigError, match=r"column 'id': a str"):
        users.lookup(("7",))
    with pytest.raises(ConfigError, match="has 2 value"):
        users.lookup((1, 2))


def test_pickles_as_configuration(users: RedisLookupFunction) -> None:
    copy = pickle.loads(pickle.dumps(users))
    assert copy._redis._client._client is None
    assert copy.lookup((2,)) == [(2, "Bob", None, None, None, None)]
    copy.close()


def test_failures_are_connector_errors_without_the_password(tmp_path: Path) -> None:
    fn = RedisLookupFunction(f"redis://:s3cret@127.0.0.1:{free_port()}/0", "u:{id}",
                             "id INT, n STRING", "id", connect_timeout=0.5)
    with pytest.raises(ConnectorError, match=r"Redis lookup of 1 key\(s\) \(first 'u:1'\)") as info:
        fn.lookup((1,))
    assert "s3cret" not in str(info.value)
    assert "s3cret" not in repr(fn)


def test_password_in_the_url(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, password="s3cret")
    server.start()
    try:
        client = server.client()
        client.hset("u:1", "n", "x")
        client.close()
        fn = RedisLookupFunction(server.url, "u:{id}", "id INT, n STRING", "id")
        assert fn.lookup((1,)) == [(1, "x")]
        wrong = RedisLookupFunction(server.url.replace("s3cret", "nope"), "u:{id}",
                                    "id INT, n STRING", "id")
        with pytest.raises(ConnectorError, match="Authentication|invalid|WRONGPASS"):
            wrong.lookup((1,))
    finally:
        server.kill()


def test_recovers_after_a_server_restart(redis_server: RedisServer) -> None:
    fn = RedisLookupFunction(redis_server.url, "u:{id}", "id INT, n STRING", "id")
    client = redis_server.client()
    client.hset("u:1", "n", "x")
    client.close()
    assert fn.lookup((1,)) == [(1, "x")]
    redis_server.kill()
    with pytest.raises(ConnectorError):
        fn.lookup((1,))
    redis_server.start()
    client = redis_server.client()
    client.hset("u:1", "n", "y")
    client.close()
    assert fn.lookup((1,)) == [(1, "y")]


def test_tls_through_a_rediss_url(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH")
    server = RedisServer(tmp_path, password="s3cret", tls=True)
    try:
        server.start()
    except RuntimeError:
        pytest.skip("this redis-server has no TLS support")
    try:
        assert server.url.startswith("rediss://:s3cret@")
        client = server.client()
        client.hset("u:1", "n", "over tls")
        client.close()
        fn = RedisLookupFunction(server.url, "u:{id}", "id INT, n STRING", "id")
        assert fn.lookup((1,)) == [(1, "over tls")]
        cache = RedisLookupCache(server.url, "tls", ttl=60)
        cache.put((1,), [(1,)])
        assert cache.get_if_present((1,)) == ((1,),)
        plain = RedisLookupFunction(server.url.replace("rediss://", "redis://").split("?")[0],
                                    "u:{id}", "id INT, n STRING", "id", socket_timeout=0.5)
        with pytest.raises(ConnectorError):
            plain.lookup((1,))
    finally:
        server.kill()
