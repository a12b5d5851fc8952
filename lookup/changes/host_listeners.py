"""Which processes of a host listen to a shared full cache's changes, so that a worker
whose listener just connected need not reload what another has been covering.

A listener that connects cannot know what changed before; alone, it must reload. But
if another process of the host has listened without a break since before the snapshot
served was loaded, every change since reached that process, which reloads the host's
snapshot for it: nothing was missed. Each listening full cache of a shared store marks
this in the store's directory: a file ``.listening-<pid>-<random>`` holding when it
started listening, locked (``flock``) for as long as it listens, so a mark whose
process died is known by its free lock (and removed). A process that closes with a
change not yet reloaded for leaves its time in ``.changes-pending``, as does a process
that applies changes by key to its own overlay (those changes reach no snapshot); a
mark covers only a snapshot loaded after that.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import uuid
from pathlib import Path

__all__ = ["HostListeners"]

log = logging.getLogger("lookup")

_PREFIX = ".listening-"
_PENDING = ".changes-pending"


class HostListeners:
    """The listening marks of one shared store (its ``directory``), for one process's
    full cache. Not thread-safe: its runtime's change subscriber calls it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None
        self._path: Path | None = None

    def listening(self, since: float) -> None:
        """Mark this cache as listening without a break since ``since``."""
        self.stopped()
        name = f"{_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        temporary = self.directory / f".tmp{name}"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:  # no mark: the others reload for themselves, as without one
            log.debug("no listening mark in %s: %s", self.directory, exc)
            return
        try:
            # Locked before it has its name: a mark seen unlocked is a dead one.
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, repr(since).encode())
            os.rename(temporary, self.directory / name)
        except OSError as exc:
            log.debug("no listening mark in %s: %s", self.directory, exc)
            os.close(fd)
            with contextlib.suppress(OSError):
                temporary.unlink()
            return
        self._fd, self._path = fd, self.directory / name

    def stopped(self) -> None:
        """Remove this cache's mark (its listener lost its connection, or it closes)."""
        fd, path = self._fd, self._path
        self._fd = self._path = None
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
        if fd is not None:
            os.close(fd)

    def leave_pending(self, since: float) -> None:
        """A change seen at ``since`` is in no snapshot of the host yet: this cache
        closes before reloading for it, or holds it in its overlay of changes."""
        path = self.directory / _PENDING
        try:
            since = max(since, self._pending())
            temporary = self.directory / f".tmp{_PENDING}-{uuid.uuid4().hex[:8]}"
            temporary.write_text(repr(since))
            os.replace(temporary, path)
        except OSError as exc:
            log.warning("could not record a pending change in %s: %s", self.directory, exc)

    def _pending(self) -> float:
        try:
            return float((self.directory / _PENDING).read_text())
        except (OSError, ValueError):
            return float("-inf")

    def covered(self, loaded_at: float) -> bool:
        """Whether another live process of the host has listened without a break since
        before ``loaded_at`` (and no process left a change after it pending)."""
        if self._pending() > loaded_at:
            return False
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return False
        found = False
        for entry in entries:
            if not entry.name.startswith(_PREFIX) or Path(entry.path) == self._path:
                continue
            since = _live_mark(Path(entry.path))
            found |= since is not None and since <= loaded_at
        return found


def _live_mark(path: Path) -> float | None:
    """When the mark's process started listening, if it still does (None: it does not,
    and a dead process's mark is removed)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return float(os.pread(fd, 64, 0).decode())
            except (OSError, ValueError):
                return None
        with contextlib.suppress(OSError):  # its process is gone
            path.unlink()
        return None
    finally:
        os.close(fd)
