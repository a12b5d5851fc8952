"""Per-Python-worker state of Spark lookup joins: one open runtime per provider.

Spark reuses a Python worker process across tasks (and micro-batches) and keeps its
module globals, so the handles here outlive a task: the cache stays warm and a full
cache loads once per worker, not once per task. A handle is released when the worker
process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import socket
import threading
import uuid
from typing import Any

from lookup.providers import LookupProvider
from lookup.runtime import LookupHandle, open_lookup

__all__ = ["WORKER_ID", "metrics_report", "worker_handle"]

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
"""Identifies this Python worker process in metrics reports."""

_lock = threading.Lock()
_handles: dict[str, LookupHandle] = {}
_sequence = itertools.count(1)


def worker_handle(provider: LookupProvider) -> LookupHandle:
    """The handle this worker process keeps open for ``provider`` (opened on first use)."""
    handle = _handles.get(provider.provider_id)
    if handle is not None:
        return handle
    with _lock:
        handle = _handles.get(provider.provider_id)
        if handle is None:
            handle = open_lookup(provider)
            _handles[provider.provider_id] = handle
        return handle


def metrics_report(provider: LookupProvider) -> dict[str, tuple[int, dict[str, int]]]:
    """This worker's cumulative metrics of ``provider``, stamped with a sequence number
    so the driver keeps the latest report of each worker."""
    handle = _handles.get(provider.provider_id)
    if handle is None:
        return {}
    return {WORKER_ID: (next(_sequence), handle.metrics.snapshot())}


@atexit.register
def _close_all() -> None:
    with _lock:
        handles = list(_handles.values())
        _handles.clear()
    for handle in handles:
        with contextlib.suppress(Exception):  # the process is exiting; no one to tell
            handle.close()


def _reset_for_tests() -> Any:
    """Close every handle (tests that need a cold worker state in the driver process)."""
    _close_all()
