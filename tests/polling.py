"""Waiting, in a test, for what another thread or process does: one helper for the suite."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_FIRST_POLL = 0.001
_LONGEST_POLL = 0.1


def wait_until(condition: Callable[[], T], what: str = "", timeout: float = 10.0) -> T:
    """Poll ``condition`` until it returns something truthy, and return that; after
    ``timeout`` seconds fail with an AssertionError naming ``what``.

    The polls start 1 ms apart (a condition met soon is seen soon) and back off to 0.1 s
    (a condition that asks Spark or a server is not asked hundreds of times a second).
    """
    deadline = time.monotonic() + timeout
    pause = _FIRST_POLL
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition}")
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_POLL)
