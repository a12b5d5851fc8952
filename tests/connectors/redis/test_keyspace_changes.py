"""RedisKeyspaceChanges on a real Redis: changed Redis keys read back into typed lookup
keys, the server setting checked, partial caches kept fresh by keyspace notifications,
and a killed subscription made up for by a flush."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pytest

from cache import DefaultLookupCache
from connectors.redis.keyspace_changes import keyspace_flags_missing
from lookup import (
    PartialCachingLookupProvider,
    RedisKeyspaceChanges,
    RedisLookupFunction,
    open_lookup,
)
from spark_lookup.errors import ConfigError
from tests.polling import wait_until

# The tests switch the server's notify-keyspace-events: under pytest-xdist, one worker.
pytestmark = pytest.mark.xdist_group("redis-keyspace-events")

SCHEMA = "id BIGINT, name STRING"


@pytest.fixture
def keyspace_events(redis_client: Any) -> Iterator[None]:
    """The server publishes keyspace events (KA) during the test; the setting as it was
    afterwards."""
    before = redis_client.config_get("notify-keyspace-events")["notify-keyspace-events"]
    redis_client.config_set("notify-keyspace-events", "KA")
    try:
        yield
    finally:
        redis_client.config_set("notify-keyspace-events", before)


@pytest.mark.parametrize(("flags", "missing"), [
    ("KA", []), ("AK", []), ("Kg$hx", []), ("KEA", []),
    ("", ["K (keyspace channels)", "g (generic commands (DEL, EXPIRE, RENAME))",
          "$ (strings)", "h (hashes)", "x (expiries)"]),
    ("EA", ["K (keyspace channels)"]),
    ("K$h", ["g (generic commands (DEL, EXPIRE, RENAME))", "x (expiries)"]),
])
def test_the_flags_a_feed_needs(flags: str, missing: list[str]) -> None:
    assert keyspace_flags_missing(flags) == missing


def test_changed_redis_keys_read_back_as_typed_keys() -> None:
    feed = RedisKeyspaceChanges(
        "redis://127.0.0.1:6379/3",
        "t|{id}|{day}|{price}|{flag}|{at}|{name}",
        "id BIGINT, day DATE, price DECIMAL(10,2), flag BOOLEAN, at TIMESTAMP, name STRING",
        check=False)
    at = datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=timezone.utc)
    canonical = f"t|42|2024-01-02|1.50|True|{at}|bob"
    keys = feed.keys_of([canonical, f"t|042|2024-01-02|1.50|True|{at}|bob",
                         "t|42|2024-01-02|1.5|True|x|bob", "other:1"])
    assert len(keys) == 1
    assert keys[0][:4] == (42, date(2024, 1, 2), Decimal("1.50"), True)
    assert keys[0][4] == at
    assert keys[0][5] == "bob"
    assert feed.channel_pattern == "__keyspace@3__:t|*|*|*|*|*|*"


def test_a_zero_padded_integer_reads_back_and_lossy_specs_are_refused() -> None:
    feed = RedisKeyspaceChanges("redis://127.0.0.1:6379", "stock:{sku:08d}", "sku BIGINT",
                                check=False)
    assert feed.keys_of(["stock:00000042", "stock:42"]) == [(42,)]
    for template, schema in (("p:{price:.2f}", "price DOUBLE"), ("n:{name:>10}", "name STRING")):
        with pytest.raises(ConfigError, match="cannot read placeholder"):
            RedisKeyspaceChanges("redis://127.0.0.1:6379", template, schema, check=False)


def test_a_template_column_the_schema_lacks_is_refused() -> None:
    with pytest.raises(ConfigError, match="lacks"):
        RedisKeyspaceChanges("redis://127.0.0.1:6379", "c:{id}", "name STRING", check=False)


def test_a_server_without_keyspace_events_is_refused(redis_url: str, redis_client: Any) -> None:
    before = redis_client.config_get("notify-keyspace-events")["notify-keyspace-events"]
    redis_client.config_set("notify-keyspace-events", "")
    try:
        with pytest.raises(ConfigError, match="CONFIG SET notify-keyspace-events KA"):
            RedisKeyspaceChanges(redis_url, "c:{id}", SCHEMA)
    finally:
        redis_client.config_set("notify-keyspace-events", before)


def test_the_password_is_never_shown() -> None:
    feed = RedisKeyspaceChanges("redis://:s3cret@127.0.0.1:6379/0", "c:{id}", SCHEMA,
                                check=False)
    assert "s3cret" not in repr(feed)
    assert "s3cret" not in feed.describe()


def test_a_partial_cache_follows_keyspace_notifications(
        redis_url: str, redis_prefix: str, redis_client: Any, keyspace_events: None) -> None:
    template = redis_prefix + "c:{id}"
    redis_client.hset(redis_prefix + "c:1", mapping={"name": "ada"})
    redis_client.hset(redis_prefix + "c:2", mapping={"name": "bob"})
    feed = RedisKeyspaceChanges(redis_url, template, SCHEMA, min_interval=0)
    function = RedisLookupFunction(redis_url, template, SCHEMA, "id")
    provider = PartialCachingLookupProvider.of(
        function, DefaultLookupCache.new_builder().maximum_size(100).build(), changes=feed)
    with open_lookup(provider) as handle:
        assert handle.lookup((1,)) == ((1, "ada"),)
        assert handle.lookup((2,)) == ((2, "bob"),)
        loads = handle.metrics.load_count
        redis_client.hset(redis_prefix + "c:1", "name", "ada2")
        wait_until(lambda: handle.lookup((1,)) == ((1, "ada2"),), "the new name")
        redis_client.delete(redis_prefix + "c:2")
        wait_until(lambda: handle.lookup((2,)) == (), "the deleted key")
        redis_client.hset(redis_prefix + "c:3", mapping={"name": "cy"})
        redis_client.hset(redis_prefix + "x:9", mapping={"name": "not ours"})
        redis_client.pexpire(redis_prefix + "c:1", 1)
        wait_until(lambda: handle.lookup((1,)) == (), "the expired key")
        metrics = handle.metrics
        assert metrics.num_keys_invalidated >= 3
        # Only changed keys were read again: the lookups of key 1 and 2 after each change.
        assert metrics.load_count - loads <= 6


def test_a_killed_subscription_is_made_up_for_by_a_flush(
        redis_url: str, redis_prefix: str, redis_client: Any, keyspace_events: None) -> None:
    template = redis_prefix + "c:{id}"
    redis_client.hset(redis_prefix + "c:1", mapping={"name": "ada"})
    feed = RedisKeyspaceChanges(redis_url, template, SCHEMA, min_interval=0,
                                health_check_interval=1)
    function = RedisLookupFunction(redis_url, template, SCHEMA, "id")
    provider = PartialCachingLookupProvider.of(
        function, DefaultLookupCache.new_builder().maximum_size(100).build(), changes=feed)
    with open_lookup(provider) as handle:
        assert handle.lookup((1,)) == ((1, "ada"),)
        # Kill every pub/sub client, then change the key while nobody listens.
        redis_client.client_kill_filter(_type="pubsub")
        redis_client.hset(redis_prefix + "c:1", "name", "ada2")
        wait_until(lambda: handle.metrics.num_reconnect_flushes >= 1, "the flush")
        assert handle.lookup((1,)) == ((1, "ada2"),)
        wait_until(lambda: redis_client.pubsub_numpat() >= 1, "the new subscription")
        redis_client.hset(redis_prefix + "c:1", "name", "ada3")  # heard again
        wait_until(lambda: handle.lookup((1,)) == ((1, "ada3"),), "the newest name")


# --- parts holding the separator; whole-database commands (issue 40, defect 5) --------


def test_a_redis_key_reads_back_as_every_key_it_can_be() -> None:
    feed = RedisKeyspaceChanges("redis://127.0.0.1:6379", "ns:{a}:{b}",
                                "a STRING, b STRING", check=False)
    assert sorted(feed.keys_of(["ns:x:y:z"]) or []) == [("x", "y:z"), ("x:y", "z")]
    assert feed.keys_of(["ns:x:z", "other"]) == [("x", "z")]
    # More readings than a notification carries: everything may have changed.
    assert feed.keys_of(["ns:" + ":" * 100]) is None
    escaped = RedisKeyspaceChanges("redis://127.0.0.1:6379", "ns:{a}:{b}",
                                   "a STRING, b STRING", escape=True, check=False)
    assert escaped.keys_of(["ns:x%3Ay:z"]) == [("x:y", "z")]


def _separator_provider(mode: str, redis_url: str, template: str, feed: Any) -> Any:
    from datetime import timedelta

    from lookup import FullCachingLookupProvider
    from scan import RedisScanSource
    from triggers import PeriodicCacheReloadTrigger

    schema = "a STRING, b STRING, name STRING"
    function = RedisLookupFunction(redis_url, template, schema, ["a", "b"])
    if mode == "partial":
        return PartialCachingLookupProvider.of(
            function, DefaultLookupCache.new_builder().maximum_size(100).build(), changes=feed)
    source = RedisScanSource(redis_url, schema=schema, key_template=template,
                             key_columns=["a", "b"])
    return FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["a", "b"], changes=feed,
        change_lookup=function, share_across_workers=False)


@pytest.mark.parametrize("mode", ["partial", "full"])
def test_a_key_part_holding_the_separator_is_followed(
        redis_url: str, redis_prefix: str, redis_client: Any, keyspace_events: None,
        mode: str) -> None:
    """("x:y", "z") under ns:{a}:{b} without escape is a legal key (the hash holds a and
    b, which confirm it): its change is heard, not read back as no key."""
    template = redis_prefix + "ns:{a}:{b}"
    redis_client.hset(redis_prefix + "ns:x:y:z", mapping={"a": "x:y", "b": "z", "name": "v1"})
    feed = RedisKeyspaceChanges(redis_url, template, "a STRING, b STRING", min_interval=0)
    with open_lookup(_separator_provider(mode, redis_url, template, feed)) as handle:
        assert handle.lookup(("x:y", "z")) == (("x:y", "z", "v1"),)
        redis_client.hset(redis_prefix + "ns:x:y:z", "name", "v2")
        wait_until(lambda: handle.lookup(("x:y", "z")) == (("x:y", "z", "v2"),),
                   "the new name of a key whose part holds the separator")
        assert handle.lookup(("x", "y:z")) == ()  # the other reading has no row


@pytest.fixture
def spare_databases(redis_url: str) -> Iterator[tuple[str, Any]]:
    """Database 14 of the test server (15 its swap partner), empty, and a client of it:
    FLUSHDB and SWAPDB act on whole databases, which no other test uses."""
    import redis
    from redis.connection import parse_url

    base = redis_url.rsplit("/", 1)[0] if parse_url(redis_url).get("db") is not None \
        else redis_url.rstrip("/")
    url = f"{base}/14"
    client = redis.Redis.from_url(url)
    client.flushdb()
    redis.Redis.from_url(f"{base}/15").flushdb()
    try:
        yield url, client
    finally:
        client.flushdb()
        redis.Redis.from_url(f"{base}/15").flushdb()
        client.close()


@pytest.mark.parametrize("command", ["flushdb", "swapdb"])
def test_a_whole_database_emptied_or_swapped_is_noticed(
        spare_databases: tuple[str, Any], keyspace_events: None, command: str) -> None:
    """FLUSHDB and SWAPDB publish no keyspace event: the feed counts them and reports
    that everything may have changed, so a partial cache drops what it holds."""
    url, client = spare_databases
    client.hset("c:1", mapping={"name": "ada"})
    feed = RedisKeyspaceChanges(url, "c:{id}", SCHEMA, min_interval=0,
                                flush_check_interval=0.1)
    function = RedisLookupFunction(url, "c:{id}", SCHEMA, "id")
    provider = PartialCachingLookupProvider.of(
        function, DefaultLookupCache.new_builder().maximum_size(100).build(), changes=feed)
    with open_lookup(provider) as handle:
        assert handle.lookup((1,)) == ((1, "ada"),)
        if command == "flushdb":
            client.flushdb()
        else:
            client.swapdb(14, 15)
        wait_until(lambda: handle.lookup((1,)) == (), f"the key gone by {command.upper()}")
