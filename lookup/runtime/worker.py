"""Per-Python-worker state of Spark lookup joins and SQL functions.

Spark reuses a Python worker process across tasks (and micro-batches) and keeps its
module globals, so a worker pins the runtime of each provider it used in the process's
registry (`lookup.runtime.registry.REGISTRY`): the cache stays warm and a full cache loads
once per worker, not once per task. The pins are released when the process exits.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import socket
import time
import uuid

from lookup.providers import LookupProvider
from lookup.runtime.base import LookupRuntime
from lookup.runtime.registry import REGISTRY

__all__ = ["WORKER_ID", "metrics_report", "worker_runtime"]

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
"""Identifies this Python worker process in metrics reports."""

_sequence = itertools.count(1)


def worker_runtime(provider: LookupProvider) -> LookupRuntime:
    """This worker's runtime of ``provider``: opened on first use, kept until exit."""
    return REGISTRY.acquire(provider, pin=True)


def metrics_report(provider: LookupProvider) -> str | None:
    """This process's cumulative metrics of ``provider`` as one JSON text, or None when
    no runtime of it is open here.

    The report holds the provider id (``p``), this worker's id (``w``), a sequence
    number (``s``, increasing within the worker, so the driver keeps each worker's
    latest report whatever order reports arrive in), the wall-clock time in epoch
    milliseconds (``t``, which orders the reports of different workers) and every
    metric of [`cache.CacheMetrics.snapshot`][] by name (``m``). Runs in executors'
    Python workers; `lookup.metrics` reads it on the driver.
    """
    runtime = REGISTRY.runtime(provider.provider_id)
    if runtime is None:
        return None
    return json.dumps(
        {
            "p": provider.provider_id,
            "w": WORKER_ID,
            "s": next(_sequence),
            "t": int(time.time() * 1000),
            "m": runtime.metrics.snapshot(),
        },
        separators=(",", ":"),
    )


atexit.register(REGISTRY.unpin_all)
_reset_for_tests = REGISTRY.unpin_all  # tests that need a cold worker in the driver
