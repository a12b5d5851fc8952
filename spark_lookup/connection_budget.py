"""A provider's budget of connections to its source on each host (``max_source_connections``).

The budget is configuration, built with the provider and shipped with it; where a
connector opens a connection it takes a slot of the host (`spark_lookup.host_slots`)
first and gives it back when the connection closes, so at most ``limit`` connections
of the provider are open at once on a host, idle ones included. The slots of a budget
are one `HostSlots` per process, whose waits are reported to the runtimes watching it.
An ``adaptive`` budget uses fewer of them while the source is slow or failing (one
`AdaptiveLimit` per process, `spark_lookup.adaptive_concurrency`).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spark_lookup.adaptive_concurrency import AdaptiveLimit, SharedLimit
from spark_lookup.host_dirs import sweep_once
from spark_lookup.host_slots import HostSlots, Slot, sweep

__all__ = ["DEFAULT_MAX_SOURCE_CONNECTIONS", "ConnectionBudget", "default_slots_root",
           "record_setup", "setup_seconds"]

DEFAULT_MAX_SOURCE_CONNECTIONS = 4
"""Connections a provider opens to its source at once per host, by default: a few per
host, so that a cluster stays far below a database's usual ``max_connections`` (100)."""

log = logging.getLogger("spark_lookup")

_registry_lock = threading.Lock()
_slots: dict[str, HostSlots] = {}
_watchers: dict[str, list[Callable[[float], object]]] = {}
_limits: dict[str, AdaptiveLimit] = {}
_setup = threading.local()


def setup_seconds() -> float:
    """Seconds this thread has spent getting connections of any budget (waiting for a
    slot, connecting), ever: a load's latency without them is the source's answer alone,
    which a lower limit does not make longer, so it cannot feed on itself."""
    return getattr(_setup, "seconds", 0.0)


def record_setup(seconds: float) -> None:
    """Count ``seconds`` this thread spent opening a connection (see `setup_seconds`)."""
    _setup.seconds = setup_seconds() + seconds


def default_slots_root() -> Path:
    """``<system temp dir>/spark-lookup-slots-<uid>``: where budgets keep their slots."""
    return Path(tempfile.gettempdir()) / f"spark-lookup-slots-{os.getuid()}"


@dataclass(frozen=True)
class ConnectionBudget:
    """At most ``limit`` connections open at once on a host, across its processes,
    each waited for up to ``timeout`` seconds; the slots live in ``directory``. With
    ``adaptive``, fewer while the source is slow or failing (`concurrency`)."""

    directory: str
    limit: int
    timeout: float
    what: str = "the source"
    adaptive: bool = True

    def slots(self) -> HostSlots:
        """This process's slots of the budget (made at first use, when the process's
        first budget in the same parent directory also deletes the directories there
        that nobody uses: `spark_lookup.host_slots.sweep`)."""
        with _registry_lock:
            slots = _slots.get(self.directory)
            if slots is None:
                slots = _slots[self.directory] = HostSlots(self.directory, self.limit)
        root = slots.directory.parent
        sweep_once(root, lambda: sweep(root), log=log, what="connection slots")
        return slots

    def concurrency(self) -> AdaptiveLimit | None:
        """This process's view of the host's adaptive limit (None: not ``adaptive``)."""
        if not self.adaptive:
            return None
        limit = _limits.get(self.directory)
        if limit is None:
            self.slots()  # the directory, made and in use
            with _registry_lock:
                limit = _limits.get(self.directory)
                if limit is None:
                    limit = _limits[self.directory] = AdaptiveLimit(
                        SharedLimit(self.directory, self.limit))
        return limit

    def take(self) -> Slot:
        """A slot for one connection (among the adaptive limit's, if ``adaptive``),
        waited for in the host's queue; a wait is reported to the watchers.

        Raises
        ------
        SourceBusyError
            When none came free within ``timeout``.
        """
        concurrency = self.concurrency()
        return self.slots().take(self.timeout, self._waited, self.what,
                                 None if concurrency is None else concurrency.limit)

    def admits(self, slot: Slot | None) -> bool:
        """Whether a connection holding ``slot`` may serve another read: not when the
        adaptive limit went below its slot (it closes; a connection pool would
        otherwise keep the old number of connections busy)."""
        concurrency = self.concurrency()
        return slot is None or concurrency is None or slot.index < concurrency.limit()

    def wait_queued(self, seconds: float) -> None:
        """Wait ``seconds`` for a source over its own connection limit, asking the host's
        idle connections of the budget to close meanwhile (`HostSlots.wait_queued`)."""
        self.slots().wait_queued(seconds)

    def contended(self) -> bool:
        """Whether someone on the host waits for a slot: an idle connection should close."""
        return self.slots().contended()

    def watch(self, on_wait: Callable[[float], object]) -> Callable[[], None]:
        """Report this process's waits to ``on_wait`` (seconds); returns the undo."""
        with _registry_lock:
            _watchers.setdefault(self.directory, []).append(on_wait)

        def unwatch() -> None:
            with _registry_lock:
                watchers = _watchers.get(self.directory, [])
                if on_wait in watchers:
                    watchers.remove(on_wait)

        return unwatch

    def _waited(self, seconds: float) -> None:
        record_setup(seconds)
        with _registry_lock:
            watchers = list(_watchers.get(self.directory, ()))
        for watcher in watchers:
            watcher(seconds)
