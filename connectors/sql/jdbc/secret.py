"""A password kept out of every repr, log line and error message."""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import quote, quote_plus

from spark_lookup.credentials import HIDDEN

__all__ = ["HIDDEN", "Secret"]



class Secret:
    """A secret string, shown as ``***``; `reveal` is the one way to read it.

    It pickles with its value, since it travels to executors inside a connection
    factory; nothing else about it prints the value.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself: only for handing it to a driver."""
        return self._value

    def scrub(self, text: str) -> str:
        """``text`` with the secret replaced by ``***``, as written and as URLs encode it
        (a driver's error may quote the DSN it was given)."""
        if not self._value:
            return text
        # Longest first: an encoded form may contain the plain one.
        for form in sorted({self._value, quote(self._value, safe=""), quote_plus(self._value)},
                           key=len, reverse=True):
            text = text.replace(form, HIDDEN)
        return text

    def __repr__(self) -> str:
        return HIDDEN

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (self._value,))
