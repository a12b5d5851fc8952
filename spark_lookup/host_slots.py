"""Slots shared by the processes of a host: at most N held at once, across processes.

A slot is a file ``slot-<i>`` of a directory, held by an exclusive ``flock`` on an
open descriptor of it: the kernel releases it when the descriptor closes, however the
holder ends (a process killed with SIGKILL included), so no slot leaks. Waiters queue
in the directory's ``queue/``: a ticket file per waiter, named by when it started
waiting and locked by it while it waits. A waiter takes a free
slot only when fewer than N live tickets are older than its own, and a newcomer joins
the queue when anyone waits: a process that gives a slot back and asks again at once
does not overtake the processes that were waiting (`flock` has no queue of its own).
A ticket whose lock is free belongs to a dead waiter and is removed by whoever finds it.

Every process using the directory holds a shared ``flock`` on its users file from
`HostSlots` until `HostSlots.close` or its end. `sweep` deletes the sibling directories
that nobody uses: it takes that file exclusively and every slot file, without waiting,
and renames the directory away while it holds them, so a process arriving meanwhile
finds the directory gone and makes a new one, never a half-deleted one.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from spark_lookup.errors import ConfigError, SourceBusyError
from spark_lookup.host_dirs import sweep_directories, trash_path, try_flock

__all__ = ["DEFAULT_UNUSED_FOR", "HostSlots", "Slot", "sweep"]

log = logging.getLogger("spark_lookup")

DEFAULT_UNUSED_FOR = timedelta(hours=1)
"""How long a directory nobody uses is kept before a sweep deletes it: a provider whose
workers come and go (Spark reaps idle Python workers) keeps its files meanwhile."""

_QUEUE = "queue"
# Named for this module alone: a sweep deletes only directories that hold it.
_USERS = "host-slots-users"
_TRASH_PREFIX = ".trash-host-slots-"
_ATTACH_ATTEMPTS = 5
_FIRST_PAUSE = 0.005
_MAX_PAUSE = 0.1
"""A waiter looks again after 5 ms, doubling to 100 ms (jittered): a slot given back is
taken within about that."""


class Slot:
    """One slot held by this process (an open, ``flock``ed descriptor); `release` gives
    it back, once (again: nothing)."""

    def __init__(self, fd: int, index: int) -> None:
        self.index = index
        self._fd: int | None = fd
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        """Whether the slot is still held."""
        return self._fd is not None

    def release(self) -> None:
        """Give the slot back."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock

    def __repr__(self) -> str:
        return f"Slot({self.index}, held={self.held})"


class HostSlots:
    """``count`` slots in ``directory`` (created, mode 0700, owned by this user).

    Thread-safe; any number of processes and threads may use one directory, as long as
    they agree on ``count``. Until `close` (or the process's end) no `sweep` deletes it.

    Raises
    ------
    ConfigError
        When the directory is not this user's, or ``count`` is below 1.
    """

    def __init__(self, directory: str | os.PathLike[str], count: int) -> None:
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError(f"a host needs at least one slot, got {count!r}")
        self.directory = Path(directory)
        self.count = count
        self._queue = self.directory / _QUEUE
        self._users_fd: int | None = None
        for _ in range(_ATTACH_ATTEMPTS):
            try:
                self._queue.mkdir(mode=0o700, parents=True, exist_ok=True)
                owners = [(path, path.lstat().st_uid) for path in (self.directory, self._queue)]
            except (FileExistsError, FileNotFoundError):
                continue  # a sweep set the directory aside meanwhile: make it again
            for path, owner in owners:
                if owner != os.getuid() or path.is_symlink():
                    raise ConfigError(
                        f"the slot directory {path} belongs to user {owner}, not to this "
                        "one (or is a symbolic link): give it another name")
            if self._attach():
                break
        else:  # pragma: no cover - needs a sweep racing us five times
            raise OSError(f"could not use {self.directory}: it keeps being swept")

    def _attach(self) -> bool:
        """Hold the shared ``users`` lock of the directory now at our path; False when a
        sweep took that directory away meanwhile (make it again)."""
        users = self.directory / _USERS
        try:
            fd = os.open(users, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            return False
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a sweep decides
        try:
            same = os.fstat(fd).st_ino == os.stat(users).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return False
        os.utime(fd)  # "last used", what a sweep measures age from
        self._users_fd = fd
        return True

    def close(self) -> None:
        """Stop using the directory, once every slot taken here is released (a sweep may
        then delete it). Idempotent; call no other method afterwards."""
        fd, self._users_fd = self._users_fd, None
        if fd is not None:
            os.close(fd)

    def __repr__(self) -> str:
        return f"HostSlots({str(self.directory)!r}, count={self.count})"

    # --- taking

    def try_take(self, limit: int | None = None) -> Slot | None:
        """A free slot now among the first ``limit`` (default: all), or None (whoever
        waits)."""
        count = self.count if limit is None else max(1, min(limit, self.count))
        start = random.randrange(count)  # noqa: S311  # spreads takers over the files
        for step in range(count):
            index = (start + step) % count
            fd = os.open(self.directory / f"slot-{index}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                free = try_flock(fd)
            except OSError:
                os.close(fd)
                raise
            if free:
                return Slot(fd, index)
            os.close(fd)
        return None

    def take(self, timeout: float, on_wait: Callable[[float], object] | None = None,
             what: str = "the source", limit: Callable[[], int] | None = None) -> Slot:
        """A slot, waiting in the host's queue up to ``timeout`` seconds; a wait is
        reported to ``on_wait`` with its seconds (taken at once: not called). With
        ``limit``, only the first ``limit()`` slots are taken, asked again at each look
        (the host's adaptive limit, `spark_lookup.adaptive_concurrency`).

        Raises
        ------
        SourceBusyError
            When no slot came free in time.
        """
        if not self.contended():
            slot = self.try_take(None if limit is None else limit())
            if slot is not None:
                return slot
        started = time.monotonic()
        deadline = started + timeout
        ticket, fd = self._enqueue()
        try:
            pause = _FIRST_PAUSE
            while True:
                usable = self.count if limit is None else max(1, min(limit(), self.count))
                if self._ahead(ticket) < usable:
                    slot = self.try_take(usable)
                    if slot is not None:
                        break
                left = deadline - time.monotonic()
                if left <= 0:
                    held = str(usable) if usable == self.count else (
                        f"{usable} (of {self.count}, lowered while the source was slow)")
                    raise SourceBusyError(
                        f"no connection to {what} came free within {timeout:g} s: all "
                        f"{held} of the host's (max_source_connections) stayed in use")
                time.sleep(min(left, random.uniform(pause / 2, pause)))  # noqa: S311
                pause = min(pause * 2, _MAX_PAUSE)
        finally:
            with contextlib.suppress(OSError):
                ticket.unlink()
            os.close(fd)
        if on_wait is not None:
            on_wait(time.monotonic() - started)
        return slot

    def wait_queued(self, seconds: float) -> None:
        """Sleep ``seconds`` with a ticket in the queue, so that the holders' idle
        connections close meanwhile: the source refused this process a connection for
        being over a limit of its own, which the host's idle connections count against."""
        ticket, fd = self._enqueue()
        try:
            time.sleep(seconds)
        finally:
            with contextlib.suppress(OSError):
                ticket.unlink()
            os.close(fd)

    # --- the queue

    def contended(self) -> bool:
        """Whether a process or thread of the host waits for a slot now."""
        return any(self._alive(path) for path in self._tickets())

    def _tickets(self) -> list[Path]:
        try:
            names = sorted(e.name for e in os.scandir(self._queue) if not e.name.startswith("."))
        except OSError:
            return []
        return [self._queue / name for name in names]

    def _enqueue(self) -> tuple[Path, int]:
        """A ticket of this waiter, locked before it has its name (a ticket seen
        unlocked is a dead waiter's)."""
        name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        temporary = self._queue / f".{name}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(temporary, self._queue / name)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        return self._queue / name, fd

    def _ahead(self, ticket: Path) -> int:
        """How many live waiters have waited longer than ``ticket``'s."""
        return sum(1 for path in self._tickets() if path.name < ticket.name and self._alive(path))

    @staticmethod
    def _alive(path: Path) -> bool:
        """Whether the ticket's waiter still waits (its lock is held); a dead waiter's
        ticket is removed."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False  # gone: its waiter is done
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        return False


def sweep(root: str | os.PathLike[str], *, unused_for: timedelta = DEFAULT_UNUSED_FOR,
          now: float | None = None) -> list[Path]:
    """Delete the slot directories under ``root`` that no process uses and none started
    using for ``unused_for``; return their paths. Only directories holding the users
    file of `HostSlots` are considered: nothing else under ``root`` is deleted.

    A directory is unused when the lock of its users file and each slot file's can be
    taken exclusively at once (a waiter is a user too); it is renamed away while they
    are held, then deleted.
    """
    now = time.time() if now is None else now
    return sweep_directories(
        root, lambda path: _set_aside(path, unused_for.total_seconds(), now),
        trash_prefix=_TRASH_PREFIX, considered=lambda path: True, log=log,
        what="the connection slots", unused_for=unused_for)


def _set_aside(path: Path, unused_for: float, now: float) -> Path | None:
    """``path`` renamed to a trash name beside it when nobody uses it, else None."""
    users = path / _USERS
    try:
        fd = os.open(users, os.O_RDWR)
    except OSError:
        return None  # being made, or not slots of ours
    held = [fd]
    try:
        if not try_flock(fd):
            return None
        # Another sweep may have set this directory aside after we opened its file, and
        # a newcomer made a new one at the path: that one is not ours to judge.
        if os.fstat(fd).st_ino != os.stat(users).st_ino:
            return None
        if now - os.fstat(fd).st_mtime < unused_for:
            return None
        for slot in path.glob("slot-*"):
            held.append(os.open(slot, os.O_RDWR))
            if not try_flock(held[-1]):
                return None  # held by a process that closed its HostSlots too early
        trash = trash_path(path, _TRASH_PREFIX)
        os.rename(path, trash)
        return trash
    except FileNotFoundError:
        return None  # set aside by another sweep meanwhile
    finally:
        for each in held:
            os.close(each)
