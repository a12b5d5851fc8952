"""Two different lookup keys never read each other's Redis value (issue 13, item 5)."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.redis import KeyTemplate
from lookup import RedisLookupFunction
from scan import RedisScanSource
from spark_lookup.errors import ConfigError
from tests.scan.helpers import run_all


def test_a_template_knows_its_separators_and_refuses_what_cannot_be_told_apart() -> None:
    template = KeyTemplate("tenant:{t}:{id}", ["t", "id"])
    assert template.separators == (":",)
    assert template.glob == "tenant:*:*"
    assert template.format({"t": "a", "id": 7}) == ("tenant:a:7", False)
    assert template.format({"t": "a:b", "id": "c"}) == ("tenant:a:b:c", True)
    assert template.format({"t": "a", "id": "b:c"}) == ("tenant:a:b:c", True)
    assert template.parse("tenant:a:7") == {"t": "a", "id": "7"}
    assert template.parse("tenant:a:b:c") is None  # could be split two ways
    assert template.parse("other:a") is None
    with pytest.raises(ConfigError, match="literal text between them"):
        KeyTemplate("{t}{id}", ["t", "id"])
    single = KeyTemplate("user:{id}", ["id"])  # one part: its content is never ambiguous
    assert single.format({"id": "x:y"}) == ("user:x:y", False)
    assert single.parse("user:x:y") == {"id": "x:y"}


def test_a_key_with_a_trailing_newline_is_not_read_as_the_key_without_it() -> None:
    # '$' matches before a final newline: "rate:EUR:USD\n" was parsed as ("EUR", "USD").
    pair = KeyTemplate("rate:{a}:{b}", ["a", "b"])
    assert pair.parse("rate:EUR:USD\n") == {"a": "EUR", "b": "USD\n"}
    assert KeyTemplate("user:{id}:profile", ["id"]).parse("user:1:profile\n") is None
    assert KeyTemplate("user:{id}:profile", ["id"]).parse("user:1:profile") == {"id": "1"}


def test_escaping_makes_every_key_its_own() -> None:
    template = KeyTemplate("tenant:{t}:{id}", ["t", "id"], escape=True)
    first, unsure = template.format({"t": "a:b", "id": "c"})
    second, _ = template.format({"t": "a", "id": "b:c"})
    assert (first, second, unsure) == ("tenant:a%3Ab:c", "tenant:a:b%3Ac", False)
    assert template.parse(first) == {"t": "a:b", "id": "c"}
    assert template.parse(second) == {"t": "a", "id": "b:c"}
    assert template.format({"t": "100%", "id": "x"})[0] == "tenant:100%25:x"
    assert template.parse("tenant:100%25:x") == {"t": "100%", "id": "x"}


@pytest.mark.redis
def test_one_tenants_lookup_never_returns_another_tenants_row(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    # Tenant "a" has user "b:c"; tenant "a:b" has user "c": both plain keys are
    # tenant:a:b:c. The hash says whose row it is, so each key gets only its own.
    redis_client.hset(f"{redis_prefix}tenant:a:b:c", mapping={"t": "a:b", "id": "c", "n": "1"})
    for value_type in ("hash", "json"):
        if value_type == "json":
            redis_client.delete(f"{redis_prefix}tenant:a:b:c")
            redis_client.set(f"{redis_prefix}tenant:a:b:c", '{"t": "a:b", "id": "c", "n": 1}')
        fn = RedisLookupFunction(redis_url, redis_prefix + "tenant:{t}:{id}",
                                 "t STRING, id STRING, n INT", ["t", "id"], value_type)
        found = fn.lookup_batch([("a:b", "c"), ("a", "b:c")])
        assert found[("a:b", "c")] == [("a:b", "c", 1)], value_type
        assert found[("a", "b:c")] == [], value_type
    # A value without the key columns cannot say whose it is: an ambiguous key then reads
    # nothing rather than someone else's row, and a plain key is filled from the key.
    redis_client.set(f"{redis_prefix}tenant:a:b:c", '{"n": 1}')
    redis_client.set(f"{redis_prefix}tenant:x:y", '{"n": 2}')
    fn = RedisLookupFunction(redis_url, redis_prefix + "tenant:{t}:{id}",
                             "t STRING, id STRING, n INT", ["t", "id"], "json")
    found = fn.lookup_batch([("a:b", "c"), ("a", "b:c"), ("x", "y")])
    assert found == {("a:b", "c"): [], ("a", "b:c"): [], ("x", "y"): [("x", "y", 2)]}


@pytest.mark.redis
def test_string_values_cannot_confirm_a_key_so_ambiguous_parts_are_refused(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    fn = RedisLookupFunction(redis_url, redis_prefix + "rate:{a}:{b}",
                             "a STRING, b STRING, r DOUBLE", ["a", "b"], "string")
    redis_client.set(f"{redis_prefix}rate:EUR:USD", "1.1")
    assert fn.lookup(("EUR", "USD")) == [("EUR", "USD", 1.1)]
    with pytest.raises(ConfigError, match="separator.*escape=True"):
        fn.lookup(("EUR:X", "USD"))
    escaped = RedisLookupFunction(redis_url, redis_prefix + "rate:{a}:{b}",
                                  "a STRING, b STRING, r DOUBLE", ["a", "b"], "string",
                                  escape=True)
    key = escaped.redis_key(("EUR:X", "USD"))
    assert key == f"{redis_prefix}rate:EUR%3AX:USD"
    redis_client.set(key, "2.5")
    assert escaped.lookup(("EUR:X", "USD")) == [("EUR:X", "USD", 2.5)]
    assert escaped.lookup(("EUR", "X:USD")) == []


@pytest.mark.redis
def test_a_scan_parses_key_columns_from_keys_and_skips_ambiguous_ones(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    redis_client.set(f"{redis_prefix}rate:EUR:USD", "1.1")
    redis_client.set(f"{redis_prefix}rate:GBP:EUR", "0.9")
    redis_client.set(f"{redis_prefix}rate:A:B:C", "7")  # which pair? nobody can tell
    source = RedisScanSource(redis_url, value_type="string", schema="a STRING, b STRING, r DOUBLE",
                             key_template=redis_prefix + "rate:{a}:{b}", key_columns=["a", "b"])
    assert source.match == f"{redis_prefix}rate:*:*"
    assert sorted(run_all(source, 2)) == [("EUR", "USD", 1.1), ("GBP", "EUR", 0.9)]


@pytest.mark.redis
def test_a_scan_keeps_a_key_with_a_trailing_newline_apart(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    redis_client.set(f"{redis_prefix}rate:EUR:USD", "1.1")
    redis_client.set(f"{redis_prefix}rate:EUR:USD\n", "9.9")
    source = RedisScanSource(redis_url, value_type="string", schema="a STRING, b STRING, r DOUBLE",
                             key_template=redis_prefix + "rate:{a}:{b}", key_columns=["a", "b"])
    assert sorted(run_all(source, 1)) == [("EUR", "USD", 1.1), ("EUR", "USD\n", 9.9)]


def test_keys_beyond_their_columns_range_are_refused_at_once() -> None:
    fn = RedisLookupFunction("redis://127.0.0.1:1/0", "u:{id}", "id INT, n STRING", ["id"])
    from decimal import Decimal

    for key in [(2**31,), (Decimal("1E+1000000"),), (10**400,)]:
        with pytest.raises(ConfigError, match="out of the range of int"):
            fn.lookup(key)  # no connection is ever tried
