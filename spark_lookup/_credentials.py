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
_PASSWORD_TO_END = re.compile(r"(?i)(password=).*", re.DOTALL)


def redact_credentials(url: str, *, to_end: bool = False) -> str:
    """``url`` with everything that may be a credential replaced by ``***``: all between
    the scheme (``scheme://`` or ``scheme:``) and the last ``@`` (a password holding an
    unencoded ``@``, ``/``, ``?`` or ``#`` makes the URL's parts other than they look,
    so all of it), and every ``password=`` value up to the next ``&`` or ``#`` (with
    ``to_end``: to the end of the URL, when what follows may be part of it). Textual:
    it serves URLs that do not parse as well.

    >>> redact_credentials("jdbc:mysql://app:p@SECRET@h/shop?password=x;y&sslMode=DISABLED")
    'jdbc:mysql://***@h/shop?password=***&sslMode=DISABLED'
    >>> redact_credentials("redis://:pa/ss@h:6379/0")
    'redis://***@h:6379/0'
    """
    match = _HEAD.match(url)
    start = match.end() if match else 0
    head, rest = url[:start], url[start:]
    at = rest.rfind("@")
    if at >= 0:
        rest = HIDDEN + rest[at:]
    pattern = _PASSWORD_TO_END if to_end else _PASSWORD_VALUE
    return head + pattern.sub(rf"\g<1>{HIDDEN}", rest)
