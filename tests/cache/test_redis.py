"""RedisLookupCache against real Redis servers: the shared one (REDIS_URL) for behaviour,
private redis-server processes for outages and round-trip counts."""

from __future__ import annotations

import logging
import math
import pickle
import time
from datetime import date, datetime, timedelta, timezone
from datetime import time as time_of_day
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cache import CacheMetrics, DefaultLookupCache, LookupCache, RedisLookupCache, TieredLookupCache
from cache._codec import FORMAT_PREFIX, decode_rows, encode_key
from lookup import PartialCachingLookupProvider, RedisLookupFunction, open_lookup
from spark_lookup.errors import ConfigError
from spark_lookup.schema import to_arrow_schema
from tests.cache.contract import Binding, LookupCacheContract
from tests.clock import FakeTimer
from tests.connectors.conftest import RedisServer, free_port

pytestmark = pytest.mark.redis


def namespace_of(prefix: str) -> str:
    return prefix.rstrip(":")  # the redis_prefix fixture deletes '<prefix>*' afterwards


@pytest.fixture
def make(redis_url: str, redis_prefix: str) -> Any:
    def build(metrics: CacheMetrics | None = None, bind: Binding | None = None,
              **options: Any) -> RedisLookupCache:
        options.setdefault("ttl", 60)
        cache = RedisLookupCache(redis_url, namespace_of(redis_prefix), **options)
        if bind is not None:
            cache.bind(*bind)
        cache.open(metrics)
        return cache

    return build


class TestContract(LookupCacheContract):
    @pytest.fixture
    def make_cache(self, make: Any) -> Any:
        return make

    def test_metrics_count_hits_and_misses(self, make_cache: Any) -> None:
        # Same counting as every cache; the gauges stay 0 (documented): the entries are
        # shared by all workers, so a per-worker count would be multiplied when summed.
        metrics = CacheMetrics()
        cache = make_cache(metrics=metrics)
        cache.put((1,), [(1, "a")])
        cache.get_if_present((1,))
        cache.get_if_present((2,))
        cache.get_all([(1,), (2,), (3,)])
        assert (metrics.hit_count, metrics.miss_count) == (2, 3)
        assert (metrics.num_cached_records, metrics.num_cached_bytes) == (0, 0)
        assert metrics.num_cache_errors == 0


EVERY_TYPE = (
    None, True, False, 0, -(2**100), 2**63, 1.5, -0.0, math.inf, -math.inf, "", "é\U0001f600",
    "\ud800", b"", b"\x00\xff", Decimal("1.50"), Decimal("-1E+30"), Decimal("-Infinity"),
    date(2024, 2, 29), datetime(2024, 2, 29, 23, 59, 59, 999999),
    datetime(2024, 1, 1, 10, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
    time_of_day(10, 0, 0, 5), timedelta(days=-1, microseconds=3), [1, "a", [None]],
    (1, ("nested",)), {"k": 1, 2: [b"x"], (1, 2): None},
)


def test_every_supported_type_round_trips(make: Any) -> None:
    cache = make()
    rows = [EVERY_TYPE, (math.nan, Decimal("NaN"), "second row")]
    cache.put(("k", 1), rows)
    (first, second) = cache.get_if_present(("k", 1))
    assert first == EVERY_TYPE
    assert [type(v) for v in first] == [type(v) for v in EVERY_TYPE]
    assert math.isnan(second[0])
    assert second[1].is_nan()
    assert second[2] == "second row"


def test_keys_that_python_calls_equal_do_not_collide(make: Any) -> None:
    cache = make()
    keys = [(1,), ("1",), (True,), (1.0,), (Decimal(1),), (b"1",)]
    for i, key in enumerate(keys):
        cache.put(key, [(i,)])
    for i, key in enumerate(keys):
        assert cache.get_if_present(key) == ((i,),)
    assert cache.size() == len(keys)


def test_namespaces_separate_providers(redis_url: str, redis_prefix: str) -> None:
    a = RedisLookupCache(redis_url, redis_prefix + "a", ttl=60)
    b = RedisLookupCache(redis_url, redis_prefix + "b", ttl=60)
    a.put((1,), [("from a",)])
    assert b.get_if_present((1,)) is None
    assert a.get_if_present((1,)) == (("from a",),)


def test_size_counts_its_own_namespace_not_a_longer_one(redis_url: str,
                                                        redis_prefix: str) -> None:
    short = RedisLookupCache(redis_url, redis_prefix + "a", ttl=60)
    longer = RedisLookupCache(redis_url, redis_prefix + "a:b", ttl=60)
    short.put_all({(1,): [("x",)], (2,): []})
    longer.put_all({(1,): [("y",)], (2,): [("z",)], (3,): []})
    assert (short.size(), longer.size()) == (2, 3)


@pytest.mark.parametrize("namespace", ["customers\n", "a b", "", "x" * 201, "a*", "a[1]"])
def test_a_namespace_with_other_characters_is_refused(redis_url: str, namespace: str) -> None:
    with pytest.raises(ConfigError, match="namespace"):
        RedisLookupCache(redis_url, namespace, ttl=60)


def test_redis_enforces_the_ttl(make: Any, redis_client: Any, redis_prefix: str) -> None:
    # Redis expires by its own clock: the TTL leaves room for a busy machine's stalls.
    cache = make(ttl=timedelta(milliseconds=400))
    cache.put((1,), [(1,)])
    cache.put_all({(2,): [(2,)], (3,): []})
    names = sorted(redis_client.scan_iter(match=redis_prefix + "*"))
    assert len(names) == 3
    assert all(0 < redis_client.pttl(name) <= 400 for name in names)
    assert cache.get_if_present((2,)) == ((2,),)
    time.sleep(0.5)
    assert cache.get_all([(1,), (2,), (3,)]) == {}
    long = make(ttl=3600)
    long.put((1,), [(1,)])
    (name,) = redis_client.scan_iter(match=redis_prefix + "*")
    assert 3_599_000 < redis_client.pttl(name) <= 3_600_000


def test_a_missing_key_gets_its_own_redis_ttl(make: Any, redis_client: Any,
                                              redis_prefix: str) -> None:
    # Redis expires by its own clock: the TTLs set are checked, nothing sleeps.
    cache = make(ttl=3600, expire_missing_after=timedelta(seconds=30))
    cache.put_all({(1,): [(1,)], (2,): []})
    cache.put((3,), [])
    pttl = {cache._redis_key(key): redis_client.pttl(cache._redis_key(key))
            for key in [(1,), (2,), (3,)]}
    assert 3_599_000 < pttl[cache._redis_key((1,))] <= 3_600_000  # a row: the ttl
    assert 29_000 < pttl[cache._redis_key((2,))] <= 30_000  # a miss: its own
    assert 29_000 < pttl[cache._redis_key((3,))] <= 30_000
    assert cache.get_all([(1,), (2,)]) == {(1,): ((1,),), (2,): ()}
    redis_client.delete(cache._redis_key((2,)))  # as Redis does 30 s on
    assert cache.get_if_present((2,)) is None  # so the runtime looks it up again
    cache.put((2,), [(2, "late")])  # and finds the late row: a row's TTL from now
    assert redis_client.pttl(cache._redis_key((2,))) > 3_599_000
    assert cache.get_if_present((2,)) == ((2, "late"),)


def test_the_missing_ttl_is_configuration_that_travels(make: Any) -> None:
    cache = make(ttl=60, expire_missing_after=0.5)
    assert cache.expire_missing_after == timedelta(milliseconds=500)
    assert repr(cache).endswith("ttl=60.0s, expire_missing_after=0.5s)")
    copy = pickle.loads(pickle.dumps(cache))
    assert (copy.expire_missing_after, repr(copy)) == (cache.expire_missing_after, repr(cache))
    assert make(ttl=60).expire_missing_after is None


def test_missing_keys_cached_only_when_asked(make: Any) -> None:
    cache = make(cache_missing_key=False)
    cache.put((1,), [(1,)])
    cache.put((1,), [])  # not cached, and the stale rows are gone
    cache.put_all({(2,): []})
    assert cache.get_all([(1,), (2,)]) == {}
    assert cache.size() == 0


def _only_key(redis_client: Any, prefix: str) -> bytes:
    (name,) = list(redis_client.scan_iter(match=prefix + "*"))
    return bytes(name)


def test_a_tampered_value_is_a_counted_miss(make: Any, redis_client: Any,
                                            redis_prefix: str) -> None:
    metrics = CacheMetrics()
    cache = make(metrics)
    cache.put((1,), [(1, "a")])
    name = _only_key(redis_client, redis_prefix)
    for tampered in (b"garbage", FORMAT_PREFIX + b'[[{"x": 1}]]', FORMAT_PREFIX + b"[[1]"):
        redis_client.set(name, tampered)
        assert cache.get_if_present((1,)) is None
        assert cache.get_all([(1,)]) == {}
    assert metrics.num_cache_errors == 6
    assert metrics.miss_count == 6
    redis_client.delete(name)
    redis_client.hset(name, "f", "v")  # another type at the key: a failed command
    assert cache.get_if_present((1,)) is None
    assert metrics.num_cache_errors == 7
    cache.put((1,), [(1, "b")])  # overwrites whatever is there
    assert cache.get_if_present((1,)) == ((1, "b"),)


# Entries another writer left in the tier, in the codec's format, for a row of
# "id BIGINT, n BIGINT, s STRING" (issue 26, items 6 and 7).
FOREIGN_ENTRIES = {
    "beyond BIGINT": b'[[1, 99999999999999999999999, "x"]]',
    "a fraction in BIGINT": b'[[1, 1.5, "x"]]',
    "a boolean in BIGINT": b'[[1, true, "x"]]',
    "text in BIGINT": b'[[1, "20", "x"]]',
    "an integer in STRING": b"[[1, 5, 55]]",
    "a boolean in STRING": b"[[1, 5, true]]",
    "another writer's row": b'[[1, 5, "y"]]',  # of the schema's types: it is served
    "a short row": b"[[1, 5]]",
}


@pytest.mark.parametrize("tiered", [False, True], ids=["redis", "tiered"])
@pytest.mark.parametrize("entry", list(FOREIGN_ENTRIES), ids=list(FOREIGN_ENTRIES))
@pytest.mark.parametrize("path", ["lookup", "lookup_batch", "probe"])
def test_an_entry_not_of_the_schemas_types_is_reloaded_on_every_path(
    redis_url: str, redis_prefix: str, redis_client: Any, tiered: bool, entry: str, path: str
) -> None:
    redis_client.hset(f"{redis_prefix}u:1", mapping={"id": "1", "n": "7", "s": "x"})
    function = RedisLookupFunction(redis_url, redis_prefix + "u:{id}",
                                   "id BIGINT, n BIGINT, s STRING", ["id"])
    far = RedisLookupCache(redis_url, namespace_of(redis_prefix) + ":tier", ttl=60)
    cache = (TieredLookupCache(DefaultLookupCache.new_builder().maximum_size(10).build(), far)
             if tiered else far)
    name = f"{far.namespace}:{encode_key((1,))}"
    stored = FORMAT_PREFIX + FOREIGN_ENTRIES[entry]
    redis_client.set(name, stored)
    with open_lookup(PartialCachingLookupProvider.of(function, cache)) as handle:
        if path == "lookup":
            rows = list(handle.lookup((1,)))
        elif path == "lookup_batch":
            rows = list(handle.lookup_batch([(1,)])[(1,)])
        else:
            probe = handle.runtime.probe([pa.array([1], pa.int64())])
            rows = [tuple(r.values()) for r in probe.rows.take(
                pa.array(range(probe.offsets[probe.groups[0]],
                               probe.offsets[probe.groups[0] + 1]))).to_pylist()]
        errors = handle.metrics.num_cache_errors
    if entry == "another writer's row":
        assert (rows, errors) == ([(1, 5, "y")], 0)
        assert redis_client.get(name) == stored
        return
    assert rows == [(1, 7, "x")]  # loaded again ...
    assert errors >= 1  # ... counted ...
    assert decode_rows(redis_client.get(name)) == ((1, 7, "x"),)  # ... and overwritten


def test_a_bound_cache_checks_entries_for_every_caller(make: Any, redis_client: Any,
                                                       redis_prefix: str) -> None:
    metrics = CacheMetrics()
    cache = make(metrics)
    cache.bind(to_arrow_schema("id BIGINT, n DOUBLE, d DECIMAL(4,2), t TIMESTAMP"), ["id"])
    good = (1, 2.0, Decimal("1.50"), datetime(2024, 1, 1, tzinfo=timezone.utc))
    cache.put((1,), [good])
    assert cache.get_if_present((1,)) == (good,)
    name = _only_key(redis_client, redis_prefix)
    for foreign in (b'[[1, 2, {"n": "1.5"}, null]]',  # an integer in DOUBLE
                    b'[[1, 2.0, {"n": "1.505"}, null]]',  # a digit beyond the scale
                    b'[[1, 2.0, {"n": "100"}, null]]',  # beyond the precision
                    b'[[1, 2.0, null, {"dt": "2024-01-01T00:00:00"}]]'):  # no zone
        redis_client.set(name, FORMAT_PREFIX + foreign)
        assert cache.get_if_present((1,)) is None
        assert cache.get_all([(1,)]) == {}
    assert metrics.num_cache_errors == 8
    assert pickle.loads(pickle.dumps(cache)).get_all([(1,)]) == {}  # a copy checks too


class Sentinel:
    """Unpickling this would create ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (Path.touch, (self.path,))


def test_a_pickle_payload_is_never_unpickled(make: Any, redis_client: Any, redis_prefix: str,
                                            tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(Sentinel(marker))
    pickle.loads(payload)  # the payload works ...
    assert marker.exists()
    marker.unlink()
    cache = make()
    cache.put((1,), [(1,)])
    name = _only_key(redis_client, redis_prefix)
    for value in (payload, FORMAT_PREFIX + payload):
        redis_client.set(name, value)
        assert cache.get_if_present((1,)) is None
        assert cache.get_all([(1,)]) == {}
    assert not marker.exists()  # ... but the cache never ran it


def test_rows_without_a_safe_encoding_are_not_cached(make: Any) -> None:
    metrics = CacheMetrics()
    cache = make(metrics)
    cache.put((1,), [(1, "old")])
    cache.put((1,), [(1, object())])  # the stale entry is removed, nothing raised
    assert cache.get_if_present((1,)) is None
    cache.put((object(),), [(1,)])
    assert cache.get_if_present((object(),)) is None
    assert metrics.num_cache_errors == 3
    with pytest.raises(TypeError):
        cache.put((1,), [[1]])  # a contract violation is still the caller's error


def test_pickles_as_configuration_and_shares_entries(make: Any) -> None:
    cache = make(ttl=timedelta(minutes=5), cool_down=0.5, socket_timeout=1)
    cache.put((1,), [(1,)])
    copy = pickle.loads(pickle.dumps(cache))
    assert copy._client._client is None  # no client travelled
    assert (copy.namespace, copy.ttl) == (cache.namespace, timedelta(minutes=5))
    assert copy.get_if_present((1,)) == ((1,),)  # the same shared entry
    copy.close()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"url": "http://x"}, "not a Redis URL"),
        ({"url": 5}, "Redis URL string"),
        ({"url": "redis://:pw@host:port/0"}, "not a valid URL"),
        ({"max_keys_per_command": 0}, "max_keys_per_command"),
        ({"namespace": ""}, "namespace"),
        ({"namespace": "a*b"}, "namespace"),
        ({"namespace": "a b"}, "namespace"),
        ({"ttl": 0}, "ttl must be positive"),
        ({"ttl": None}, "ttl"),
        ({"socket_timeout": -1}, "socket_timeout"),
        ({"cool_down": -1}, "cool_down"),
        ({"cache_missing_key": "yes"}, "cache_missing_key"),
        ({"expire_missing_after": 0}, "expire_missing_after must be positive, got 0: to cache "
                                      "no missing key, set cache_missing_key=False instead"),
        ({"expire_missing_after": -1}, "expire_missing_after must be positive"),
        ({"expire_missing_after": "1 s"}, "expire_missing_after must be a datetime.timedelta"),
        ({"expire_missing_after": 2}, r"expire_missing_after \(0:00:02\) is longer than ttl "
                                      r"\(0:00:01\)"),
        ({"expire_missing_after": 0.5, "cache_missing_key": False},
         r"expire_missing_after \(0:00:00.500000\) is given while cache_missing_key is false"),
    ],
)
def test_invalid_configuration(arguments: dict[str, Any], message: str) -> None:
    kwargs: dict[str, Any] = {"url": "redis://localhost", "namespace": "n", "ttl": 1}
    kwargs.update(arguments)
    with pytest.raises(ConfigError, match=message):
        RedisLookupCache(**kwargs)


def test_repr_hides_the_password() -> None:
    cache = RedisLookupCache("redis://user:s3cret@localhost:6379/2", "n", ttl=1)
    assert "s3cret" not in repr(cache)
    assert "redis://***@localhost:6379/2" in repr(cache)


# --- private servers: round trips and outages ------------------------------------------


def test_get_all_and_put_all_are_one_round_trip_each(shared_private_redis: RedisServer) -> None:
    server = shared_private_redis
    cache = RedisLookupCache(server.url, "rt", ttl=60)
    cache.open()
    cache.put((0,), [(0,)])  # connected before counting
    one_put, calls = server.reads_during(lambda: cache.put_all({(1,): [(1,)]}))
    assert calls == {"set": 1}
    many_put, calls = server.reads_during(
        lambda: cache.put_all({(i,): [(i, "x")] for i in range(50)})
    )
    assert calls == {"set": 50}
    assert many_put == one_put == 1
    one_get, calls = server.reads_during(lambda: cache.get_all([(1,)]))
    assert calls == {"mget": 1}
    found: dict[Any, Any] = {}
    many_get, calls = server.reads_during(
        lambda: found.update(cache.get_all([(i,) for i in range(80)]))
    )
    assert calls == {"mget": 1}
    assert many_get == one_get == 1
    assert len(found) == 50
    chunked = RedisLookupCache(server.url, "rt", ttl=60, max_keys_per_command=20)
    chunked.get_all([(0,)])
    reads, calls = server.reads_during(lambda: chunked.get_all([(i,) for i in range(70)]))
    assert calls == {"mget": 4}
    assert reads == 1
    cache.close()
    chunked.close()


def test_get_all_counts_every_key_asked(make: Any) -> None:
    metrics = CacheMetrics()
    cache = make(metrics)
    cache.put((1,), [(1,)])
    assert cache.get_all([(1,), (1,), (2,), (2,)]) == {(1,): ((1,),)}
    assert (metrics.hit_count, metrics.miss_count) == (2, 2)


def test_an_outage_is_a_miss_never_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                            redis_server: RedisServer) -> None:
    timer = FakeTimer()
    metrics = CacheMetrics()
    cache = RedisLookupCache(redis_server.url, "outage", ttl=60, cool_down=5, timer=timer)
    cache.open(metrics)
    cache.put((1,), [(1, "a")])
    assert cache.get_if_present((1,)) == ((1, "a"),)

    redis_server.kill()
    caplog.set_level(logging.WARNING, logger="cache.redis")
    started = time.monotonic()
    assert cache.get_if_present((1,)) is None  # fails, opens the breaker
    assert metrics.num_cache_errors == 1
    assert cache.get_all([(1,), (2,)]) == {}  # skipped while cooling down
    cache.put((2,), [(2,)])
    cache.put_all({(3,): [(3,)]})
    cache.invalidate((1,))
    assert cache.size() == 0
    assert time.monotonic() - started < 2
    assert metrics.num_cache_errors == 6
    assert metrics.miss_count == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # rate-limited
    assert "serving misses" in warnings[0].getMessage()
    assert str(redis_server.port) in warnings[0].getMessage()

    timer.tick(6)  # the breaker half-opens: Redis is tried again, still down
    assert cache.get_if_present((1,)) is None
    assert metrics.num_cache_errors == 7

    redis_server.start()  # same port, empty
    assert cache.get_if_present((1,)) is None  # still cooling down: not even asked
    timer.tick(6)
    cache.put((1,), [(1, "b")])
    assert cache.get_if_present((1,)) == ((1, "b"),)
    assert metrics.num_cache_errors == 8
    cache.close()


def test_an_unreachable_server_costs_little(caplog: pytest.LogCaptureFixture) -> None:
    metrics = CacheMetrics()
    cache = RedisLookupCache(f"redis://127.0.0.1:{free_port()}/0", "none", ttl=60,
                             cool_down=0, warn_interval=3600)
    cache.open(metrics)
    started = time.monotonic()
    for i in range(50):  # no cool-down: each one tries, and is refused at once
        assert cache.get_all([(i,)]) == {}
        cache.put_all({(i,): [(i,)]})
    assert time.monotonic() - started < 5
    assert metrics.num_cache_errors == 100
    assert len([r for r in caplog.records if r.name == "cache.redis"]) == 1


def test_password_in_the_url(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, password="s3cret")
    server.start()
    try:
        good = RedisLookupCache(server.url, "auth", ttl=60)
        good.put((1,), [(1,)])
        assert good.get_if_present((1,)) == ((1,),)
        metrics = CacheMetrics()
        bad = RedisLookupCache(server.url.replace("s3cret", "wrong"), "auth", ttl=60)
        bad.open(metrics)
        assert bad.get_if_present((1,)) is None
        assert metrics.num_cache_errors == 1
        assert "s3cret" not in repr(good)
    finally:
        server.kill()


def test_is_a_lookup_cache() -> None:
    assert issubclass(RedisLookupCache, LookupCache)
