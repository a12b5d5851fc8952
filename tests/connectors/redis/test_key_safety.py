"""Two different lookup keys never read each other's Redis value (issue 13, item 5)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# --- escape=True: one key per parts tuple, read back as written (issue 26, items 4, 5)

# Separator characters of every class: ASCII punctuation before '%' ('#' is 0x23, so its
# code holds '2' and '3') and after it, hex digits (which occur inside escape codes),
# other letters, characters above U+00FF (escaped as several UTF-8 bytes), glob and
# regex characters, and template braces.
_SEPARATOR_CHARS = st.sampled_from(
    ["#", "!", "$", " ", "\n", ":", "|", "/", "~", "_", "3", "2", "5", "0", "a", "A", "F", "f",
     "x", "G", "é", "\u00ff", "→", "\u2028", "\U0001f600", "*", "?", "[", "]", "\\", "{", "}"]
)
_SEPARATORS = st.text(_SEPARATOR_CHARS, min_size=1, max_size=3)
# Parts: arbitrary text, and text made of what escaping and separators are made of.
_PARTS = st.one_of(
    st.text(),
    st.lists(st.one_of(_SEPARATOR_CHARS, st.sampled_from(["%", "%2", "%25", "%E2", "B", "9"])),
             max_size=8).map("".join),
)


def _literal(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


@st.composite
def _escaped_templates(draw: st.DrawFn) -> tuple[KeyTemplate, list[str]]:
    fields = ["a", "b", "c"][: draw(st.integers(1, 3))]
    texts = [draw(st.text(_SEPARATOR_CHARS, max_size=3))]  # before the first placeholder
    texts += [draw(_SEPARATORS) for _ in fields[1:]]
    texts.append(draw(st.text(_SEPARATOR_CHARS, max_size=3)))  # after the last
    template = _literal(texts[0]) + "".join(
        "{" + field + "}" + _literal(text) for field, text in zip(fields, texts[1:], strict=False)
    )
    return KeyTemplate(template, fields, escape=True), fields


@settings(max_examples=400, deadline=None)
@given(_escaped_templates(), st.lists(_PARTS, min_size=3, max_size=3))
def test_escaped_keys_parse_back_into_the_parts_that_made_them(
    made: tuple[KeyTemplate, list[str]], parts: list[str]
) -> None:
    template, fields = made
    values = dict(zip(fields, parts, strict=False))
    key, ambiguous = template.format(values)
    assert not ambiguous
    assert template.parse(key) == values


@settings(max_examples=400, deadline=None)
@given(_escaped_templates(), st.lists(_PARTS, min_size=6, max_size=6))
def test_different_parts_never_make_one_escaped_key(
    made: tuple[KeyTemplate, list[str]], parts: list[str]
) -> None:
    template, fields = made
    first = dict(zip(fields, parts[:3], strict=False))
    # The second tuple moves text across a boundary, the way a collision would.
    second = dict(zip(fields, parts[3:], strict=False))
    if len(fields) > 1:
        second = {**first, "a": first["a"] + template.separators[0], "b": parts[3]}
    assert (template.format(first)[0] == template.format(second)[0]) == (first == second)


@settings(max_examples=400, deadline=None)
@given(_escaped_templates(), st.lists(
    st.one_of(_SEPARATOR_CHARS, st.sampled_from(["%", "E2", "86", "92", "C3", "%23"])),
    max_size=12).map("".join))
def test_a_parsed_key_is_the_key_its_parts_make(
    made: tuple[KeyTemplate, list[str]], key: str
) -> None:
    # A key someone else wrote is read as parts only if those parts name exactly it: a
    # full cache never files a row under a key that a lookup would not read.
    template, _ = made
    parsed = template.parse(key)
    if parsed is not None:
        assert template.format(parsed)[0] == key


def test_escaping_is_one_pass_and_never_escapes_a_code_again() -> None:
    template = KeyTemplate("t#{t}#{id}", ["t", "id"], escape=True)
    # '#' (0x23) sorts before '%': escaping it char by char made '#' -> '%23' -> '%2523',
    # the escape of the part '%23' too.
    assert template.format({"t": "#", "id": "1"})[0] == "t#%23#1"
    assert template.format({"t": "%23", "id": "1"})[0] == "t#%2523#1"
    arrow = KeyTemplate("{a}→{b}", ["a", "b"], escape=True)
    assert arrow.format({"a": "x→y", "b": "z"})[0] == "x%E2%86%92y→z"
    assert arrow.parse("x%E2%86%92y→z") == {"a": "x→y", "b": "z"}
    assert arrow.parse("x%41→z") is None  # not how "xA" is written
    digit = KeyTemplate("{a}3{b}", ["a", "b"], escape=True)
    key = digit.format({"a": "3", "b": "#3"})[0]
    assert key == "%333#%33"  # the separator '3' is inside the codes, read as code
    assert digit.parse(key) == {"a": "3", "b": "#3"}
    with pytest.raises(ConfigError, match="may not contain '%'"):
        KeyTemplate("{a}%{b}", ["a", "b"], escape=True)
    assert KeyTemplate("{a}%{b}", ["a", "b"]).separators == ("%",)  # unescaped: allowed


@pytest.mark.redis
@pytest.mark.parametrize("separator", ["#", ":", "3", "a", "→", "::", "3→a"])
def test_a_scan_reads_escaped_keys_back_as_the_keys_that_wrote_them(
    redis_url: str, redis_prefix: str, redis_client: Any, separator: str
) -> None:
    template = redis_prefix + "t[x]{t}" + separator + "{id}"
    columns = "t STRING, id STRING, n INT"
    fn = RedisLookupFunction(redis_url, template, columns, ["t", "id"], "string", escape=True)
    keys = [("#", "1"), ("%23", "1"), ("x→y", "3"), ("a3a", "→"), ("*?[]\\", "%"),
            ("", separator), (separator, "")]
    for number, key in enumerate(keys):
        redis_client.set(fn.redis_key(key), str(number))
    redis_client.set(redis_prefix + "t[x]%41" + separator + "1", "99")  # "A", not canonical
    # No UTF-8: read with replacement characters, it would be the key ("\ufffd", "1").
    redis_client.set(f"{redis_prefix}t[x]".encode() + b"\xff" + f"{separator}1".encode(), "98")
    source = RedisScanSource(redis_url, value_type="string", schema=columns,
                             key_template=template, key_columns=["t", "id"], escape=True)
    rows = sorted(run_all(source, 2), key=lambda row: row[2])
    assert rows == [(*key, number) for number, key in enumerate(keys)]
    found = fn.lookup_batch(keys)
    assert all(found[key] == [(*key, number)] for number, key in enumerate(keys))
