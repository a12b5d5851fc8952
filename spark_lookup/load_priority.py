"""Loads first: while a cache load runs in this process, lookup threads take turns.

CPython hands the GIL to a waiting thread only when the holder waits or after the
switch interval (5 ms). A load (a scan, a snapshot build, the scheduler's threads that
start it) waits often, for I/O and for its own threads, and needs the GIL back after
every wait; a lookup thread that is CPU-bound gives it up only every switch interval.
So N busy lookup threads left a load about 1/(N+1) of the interpreter, and a reload
that takes 20 ms idle took seconds, or never ended in a test's time (the convoy effect).

While a load runs (`loading`), lookups (`lookup_turn`) run one at a time
and hand the GIL over after each; the others wait on a lock, which costs no GIL. Lookups
are bound by the GIL anyway, so taking turns costs them little throughput, and a load
keeps about half of the interpreter (``benchmarks/reload_punctuality.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["loading", "loads_running", "lookup_turn"]

_count_lock = threading.Lock()
_loads = 0
# Re-entrant: a runtime's lookup takes a turn, and the cache it calls takes it again.
_turns = threading.RLock()


@contextmanager
def loading() -> Iterator[None]:
    """Mark a load running in this process for the block's duration (nestable)."""
    global _loads
    with _count_lock:
        _loads += 1
    try:
        yield
    finally:
        with _count_lock:
            _loads -= 1


def loads_running() -> bool:
    """Whether a load is running in this process."""
    return _loads > 0


@contextmanager
def lookup_turn(soon: bool = False) -> Iterator[None]:
    """Around one lookup: free running, unless a load runs (or ``soon``, a load is
    about to start); then one lookup at a time, handing the GIL over after it."""
    if not (soon or _loads):
        yield
        return
    with _turns:
        yield
    time.sleep(0)  # releases the GIL: a waiting loader thread takes it
