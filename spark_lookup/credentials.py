"""Credentials kept out of what is shown: the one redaction of every URL that may hold a
password (JDBC, Redis, libpq), for reprs, logs and error messages."""

from __future__ import annotations

import re

__all__ = ["HIDDEN", "redact_credentials"]

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
