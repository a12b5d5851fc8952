"""Credentials kept out of what is shown: the one redaction of every URL that may hold a
password (JDBC, Redis, libpq), for reprs, logs and error messages, and the `Secret` a
password is held in."""

from __future__ import annotations

import hmac
import re
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["HIDDEN", "Secret", "redact_credentials"]

HIDDEN = "***"
"""What a secret looks like wherever it is shown."""

# "jdbc:mysql://", "redis://", "jdbc:mysql:" (a URL missing its "//"): what precedes the
# authority, which is hidden up to its last "@".
_HEAD = re.compile(r"(?i)^\s*(?:jdbc:)?[a-z][a-z0-9+.\-]*:(?://)?")
_PASSWORD_VALUE = re.compile(r"(?i)(password=)[^&#]*")


def redact_credentials(url: str, *, strict: bool = False) -> str:
    """``url`` with everything that may be a credential replaced by ``***``: all between
    the scheme (``scheme://`` or ``scheme:``) and the last ``@`` (a password holding an
    unencoded ``@``, ``/``, ``?`` or ``#`` makes the URL's parts other than they look,
    so all of it), and every ``password=`` value up to the next ``&`` or ``#``. Textual:
    it serves URLs that do not parse as well. ``strict`` (for a URL refused, whose parts
    may not be what they look: a password holding an unencoded ``/`` or ``?`` reads as
    a path or a query) shows its scheme only; the message names what is wrong.

    >>> redact_credentials("jdbc:mysql://app:p@SECRET@h/shop?password=x;y&sslMode=DISABLED")
    'jdbc:mysql://***@h/shop?password=***&sslMode=DISABLED'
    >>> redact_credentials("redis://:pa/ss@h:6379/0")
    'redis://***@h:6379/0'
    >>> redact_credentials("jdbc:mysql://app:pa/ss/shop", strict=True)
    'jdbc:mysql://***'
    """
    match = _HEAD.match(url)
    start = match.end() if match else 0
    head, rest = url[:start], url[start:]
    at = rest.rfind("@")
    if strict:
        return head + HIDDEN
    if at >= 0:
        rest = HIDDEN + rest[at:]
    return head + _PASSWORD_VALUE.sub(rf"\g<1>{HIDDEN}", rest)


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
