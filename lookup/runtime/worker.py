"""Per-Python-worker state of Spark lookup joins and SQL functions.

Spark reuses a Python worker process across tasks (and micro-batches) and keeps its
module globals, so a worker pins the runtime of each provider it used in the process's
registry (`lookup.runtime.registry.REGISTRY`): the cache stays warm and a full cache loads
once per worker, not once per task. The pins are released when the process exits.
"""

from __future__ import annotations

import atexit
import os
import socket
import uuid

from lookup.providers import LookupProvider
from lookup.runtime.base import LookupRuntime
from lookup.runtime.registry import REGISTRY

__all__ = ["WORKER_ID", "worker_runtime"]

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
"""Identifies this Python worker process in metrics reports."""

def worker_runtime(provider: LookupProvider) -> LookupRuntime:
    """This worker's runtime of ``provider``: opened on first use, kept until exit."""
    return REGISTRY.acquire(provider, pin=True)


atexit.register(REGISTRY.unpin_all)
_reset_for_tests = REGISTRY.unpin_all  # tests that need a cold worker in the driver
