"""Directories the processes of a host share through ``flock``: taking a file's lock
without waiting, and the sweep that deletes the directories nobody uses any more (the
full cache's snapshot stores, the connection budgets' slots)."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["sweep_directories", "sweep_once", "trash_path", "try_flock"]

_HELD = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)

_swept: set[tuple[str, str]] = set()
_swept_lock = threading.Lock()


def try_flock(fd: int, *, shared: bool = False) -> bool:
    """Take ``fd``'s lock (exclusive, or ``shared``) without waiting: False when another
    process holds it; any other failure raises."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in _HELD:
            raise
        return False
    return True


def trash_path(path: Path, prefix: str) -> Path:
    """A fresh name beside ``path`` for setting it aside before it is deleted."""
    return path.parent / f"{prefix}{uuid.uuid4().hex[:12]}"


def sweep_directories(root: str | os.PathLike[str], set_aside: Callable[[Path], Path | None],
                      *, trash_prefix: str, considered: Callable[[Path], bool],
                      log: logging.Logger, what: str, unused_for: object) -> list[Path]:
    """Delete the directories under ``root`` that ``set_aside`` renamed away (it returns
    the new name while it holds their locks, or None to keep one), and what a sweep that
    died midway left (``trash_prefix``); only directories ``considered`` are looked at.
    Returns the paths deleted."""
    removed: list[Path] = []
    for entry in os.scandir(root):
        path = Path(entry.path)
        if not entry.is_dir(follow_symlinks=False) or not considered(path):
            continue
        if entry.name.startswith(trash_prefix):
            shutil.rmtree(path, ignore_errors=True)  # a sweep that died midway
            continue
        trash = set_aside(path)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
            removed.append(path)
            log.info("deleted %s %s (unused for more than %s)", what, path, unused_for)
    return removed


def sweep_once(root: Path, sweep: Callable[[], object], *, log: logging.Logger,
               what: str) -> None:
    """Run ``sweep`` of ``root``'s ``what`` the first time this process asks (later
    asks: nothing); a sweep is housekeeping, so its failure is logged, never raised."""
    with _swept_lock:
        if (what, str(root)) in _swept:
            return
        _swept.add((what, str(root)))
    try:
        sweep()
    except OSError as exc:
        log.warning("sweeping unused %s in %s failed: %s", what, root, exc)
