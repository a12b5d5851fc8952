"""Fuzzed lookup keys (wrong types, NaN, huge and unicode text) and their expected rows,
shared by the SQL connector tests of every database."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import strategies as st

from lookup import LookupFunction
from spark_lookup.errors import ConfigError

TEXTS = ["a", "é", "\U0001f600", "A"]
FUZZ_ROWS = [(n, s, f"{n}/{s}") for n in range(5) for s in TEXTS]
"""Rows of a table ``f (n integer, s text, v text)`` keyed by ``(n, s)``."""

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.integers(min_value=-3, max_value=6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1.0, 2.0, 3.5, -0.0]),
    st.text(max_size=40),
    st.builds(lambda c, n: c * n, st.characters(codec="utf-8"), st.integers(5_000, 50_000)),
    st.sampled_from([*TEXTS, "ü\u0301", "\ud800", "a\x00b", "a ", "e\u0301"]),
    st.binary(max_size=10),
    st.decimals(allow_nan=True).filter(lambda d: not d.is_snan()),  # sNaN is unhashable
)
FUZZ_KEYS = st.lists(st.tuples(_VALUES, _VALUES), min_size=1, max_size=6)


def expected_rows(n: Any, s: Any, bits: int = 64) -> list[tuple[Any, ...]] | type[ConfigError]:
    """The rows of key ``(n, s)`` (``n`` an integer column of ``bits`` bits, ``s`` a
    STRING column), or ConfigError for a value of the wrong kind or one ``n`` cannot
    hold."""
    if n is None or s is None:
        return []  # never sent, so never type-checked either
    if isinstance(n, bool) or not isinstance(n, (int, float, Decimal)):
        return ConfigError
    if not isinstance(s, str):
        return ConfigError
    if isinstance(n, (float, Decimal)) and n != n:  # NaN
        return []
    if isinstance(n, float) and math.isinf(n):
        return ConfigError
    digits = len(str(2 ** (bits - 1)))
    if isinstance(n, Decimal) and (n.is_infinite() or n.adjusted() >= digits):
        return ConfigError
    if n != int(n):
        return []
    if int(n) not in range(-(2 ** (bits - 1)), 2 ** (bits - 1)):
        return ConfigError
    if not 0 <= int(n) < 5 or s not in TEXTS:
        return []
    return [(int(n), s, f"{int(n)}/{s}")]


def check_fuzzed_keys(fn: LookupFunction, keys: list[tuple[Any, Any]]) -> None:
    """``fn.lookup_batch(keys)`` gives the expected rows, or a clear ConfigError."""
    bits = 32 if fn.struct["n"].dataType.simpleString() == "int" else 64
    expected = {key: expected_rows(*key, bits=bits) for key in keys}
    if any(value is ConfigError for value in expected.values()):
        with pytest.raises(ConfigError, match="can never equal|out of the range"):
            fn.lookup_batch(keys)
        return
    result = fn.lookup_batch(keys)
    for key in keys:
        assert list(result[key]) == expected[key], key
