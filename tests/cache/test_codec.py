"""The safe, type-preserving encodings of cache keys and rows (cache._codec)."""

from __future__ import annotations

import math
import pickle
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache._codec import FORMAT_PREFIX, CodecError, decode_rows, encode_key, encode_rows


def same(a: Any, b: Any) -> bool:
    """Equal in type and value, element by element (NaN equals NaN, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                      math.copysign(1, b))
    if isinstance(a, Decimal):
        return str(a) == str(b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, (datetime, time)):
        # Same wall time and offset: a zone comes back as its fixed offset, and Python
        # calls fold-dependent times in different zones unequal even at the same instant.
        return (a.replace(tzinfo=None) == b.replace(tzinfo=None)
                and a.utcoffset() == b.utcoffset()
                and (a.tzinfo is None) == (b.tzinfo is None))
    return bool(a == b)


_FIXED_ZONES = st.builds(
    lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(-23 * 60, 23 * 60)
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None, exclude_categories=())),  # with surrogates
    st.binary(),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.dates(),
    st.datetimes(timezones=st.one_of(st.none(), _FIXED_ZONES, st.timezones())),
    st.times(timezones=st.one_of(st.none(), _FIXED_ZONES)),
    st.timedeltas(),
)
HASHABLE = st.recursive(SCALARS.filter(lambda v: not (isinstance(v, Decimal) and v.is_snan())),
                        lambda inner: st.tuples(inner, inner), max_leaves=4)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(HASHABLE, inner, max_size=3),
    ),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.lists(VALUES, max_size=3).map(tuple), max_size=3))
def test_rows_round_trip_with_their_types(rows: list[tuple[Any, ...]]) -> None:
    decoded = decode_rows(encode_rows(rows))
    assert type(decoded) is tuple
    assert same(list(decoded), rows)


INTERESTING = st.sampled_from([
    1, 1.0, True, "1", b"1", Decimal("1"), Decimal("1.0"), 0, 0.0, -0.0, False, "", None,
    "null", "true", date(2020, 1, 1), "2020-01-01", datetime(2020, 1, 1), math.inf, "inf",
    (1,), ("1",), (1, 2), timedelta(0), time(0),
])


@settings(max_examples=150, deadline=None)
@given(a=st.lists(INTERESTING | HASHABLE, max_size=3).map(tuple),
       b=st.lists(INTERESTING | HASHABLE, max_size=3).map(tuple))
def test_key_texts_are_equal_exactly_when_types_and_values_are(
    a: tuple[Any, ...], b: tuple[Any, ...]
) -> None:
    assert (encode_key(a) == encode_key(b)) == same(a, b)
    assert encode_key(a) == encode_key(tuple(a))  # stable
    assert encode_key(a).isascii()


def test_keys_that_python_calls_equal_stay_distinct_by_type() -> None:
    keys = [(1,), ("1",), (1.0,), (True,), (Decimal(1),), (b"1",), ((1,),), (None,), ("null",)]
    assert len({encode_key(k) for k in keys}) == len(keys)
    assert encode_key((1, "a")) != encode_key(("1", "a")) != encode_key((1, ("a",)))


def test_a_pickle_is_never_unpickled() -> None:
    class Boom:
        def __reduce__(self) -> Any:
            return (print, ("unpickled!",))

    for payload in (pickle.dumps(Boom()), FORMAT_PREFIX + pickle.dumps(Boom())):
        with pytest.raises(CodecError):
            decode_rows(payload)


@pytest.mark.parametrize(
    "data",
    [
        b"", b"sl1:", b"sl1:{}", b"sl1:[1]", b"sl1:[[{\"x\": 1}]]", b"sl1:[[{\"b\": \"!!\"}]]",
        b"sl1:[[{\"f\": \"1e5\"}]]", b"sl1:[[{\"d\": \"2020-13-01\"}]]", b"sl1:[[NaN]]",
        b"sl1:[[{\"td\": [1, 2]}]]", b"sl1:[[{\"m\": [[1]]}]]", b"sl1:[[{\"m\": [[[1], 2]]}]]",
        b"sl1:[[\xff]]", b"sl1:" + b"[" * 100_000, b"sl1:[[{\"n\": \"x\"}]]",
        b"sl1:[[{\"tu\": [" * 40 + b"]}" * 40 + b"]]",
        b"sl1:[[" + b"9" * 5000 + b"]]",
    ],
)
def test_malformed_values_are_codec_errors(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_rows(data)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_codec_error(data: bytes) -> None:
    for candidate in (data, FORMAT_PREFIX + data):
        try:
            rows = decode_rows(candidate)
        except CodecError:
            continue
        assert isinstance(rows, tuple)


def test_values_without_a_safe_encoding_are_refused() -> None:
    nested: Any = 1
    for _ in range(40):
        nested = [nested]
    for value in (object(), {1, 2}, frozenset(), 1j, nested):
        with pytest.raises(CodecError):
            encode_rows([(value,)])
    with pytest.raises(CodecError):
        encode_key((object(),))
    with pytest.raises(CodecError):
        encode_rows([(10**5000,)])


def test_subclasses_encode_as_their_base_type() -> None:
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        pass

    ((level, name),) = decode_rows(encode_rows([(Level.HIGH, Name("x"))]))
    assert (type(level), level, type(name), name) == (int, 3, str, "x")
