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
import json
import os
import socket
import threading
import time
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


def metrics_report(provider: LookupProvider) -> str | None:
    """This worker's cumulative metrics of ``provider`` as one JSON text, or None when
    the worker has not opened it.

    The report holds the provider id (``p``), this worker's id (``w``), a sequence
    number (``s``, increasing within the worker, so the driver keeps each worker's
    latest report whatever order reports arrive in), the wall-clock time in epoch
    milliseconds (``t``, which orders the reports of different workers) and every
    metric of :meth:`cache.CacheMetrics.snapshot` by name (``m``). Runs in executors'
    Python workers; :mod:`lookup.metrics` reads it on the driver.
    """
    handle = _handles.get(provider.provider_id)
    if handle is None:
        return None
    return json.dumps(
        {
            "p": provider.provider_id,
            "w": WORKER_ID,
            "s": next(_sequence),
            "t": int(time.time() * 1000),
            "m": handle.metrics.snapshot(),
        },
        separators=(",", ":"),
    )


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
