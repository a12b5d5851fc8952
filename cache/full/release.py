"""Freed memory handed back to the operating system, between the steps of a load.

Arrow's allocator (mimalloc or jemalloc) and the C library's keep freed pages for
reuse; a load that frees a table's worth of chunks while it builds the next copy would
otherwise hold both in its resident set, though only one is alive. A load calls
`give_back` after each step that freed much.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

import pyarrow as pa

__all__ = ["give_back"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim  # glibc only
    except (OSError, AttributeError, TypeError):
        return None
    return trim


def give_back() -> None:
    """Return the free pages of Arrow's pool and of the C heap (numpy's) to the system."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
