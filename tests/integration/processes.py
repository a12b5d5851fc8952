"""Real processes sharing a snapshot store, and the sources, clocks and triggers they use.

Worker processes are forked from a multiprocessing fork server that imported this
module once (fast, and never a fork of the threaded pytest process). Each one opens a
:class:`FullCachingRuntime` on a store directory and obeys commands sent over a pipe,
so a test decides exactly when each process fires, looks up or dies.

Scans are counted where they happen: :class:`CountingSqlSource` appends a line to a
counter file each time a full scan starts (one enumerator per scan), from any process.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import signal
import sqlite3
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from cache.full.store import SnapshotStore
from lookup import FullCachingLookupProvider, LookupFunction, RetryPolicy
from lookup.runtime.full import FullCachingRuntime
from scan import SqlTableSource
from triggers import CacheReloadTrigger, ReloadContext

SCHEMA = "id BIGINT, name STRING, tier STRING"
TIMEOUT = 60.0


# --- what the processes load


class CountingSqlSource(SqlTableSource):
    """A SQLite table that appends one line to ``counter`` whenever a full scan starts
    (in whichever process), then waits ``delay`` seconds, or until the file ``gate``
    exists (to hold a load open exactly as long as a test needs)."""

    def __init__(self, db: Path, counter: Path, delay: float = 0.0,
                 gate: Path | None = None) -> None:
        super().__init__(functools.partial(sqlite3.connect, str(db)), "customers",
                         schema=SCHEMA, chunk_size=50)
        self.counter = str(counter)
        self.delay = delay
        self.gate = None if gate is None else str(gate)

    def create_enumerator(self, context: Any) -> Any:
        append_line(self.counter, f"{os.getpid()}\n")
        if self.delay:
            time.sleep(self.delay)
        deadline = time.monotonic() + TIMEOUT
        while self.gate is not None and not os.path.exists(self.gate):
            assert time.monotonic() < deadline, "the test never opened the gate"
            time.sleep(0.005)
        return super().create_enumerator(context)


def append_line(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def make_db(path: Path, rows: int = 200, tier: str = "v1") -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, tier TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                         [(i, f"n{i}", tier) for i in range(rows)])
    return path


def set_tier(db: Path, tier: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE customers SET tier = ?", (tier,))


class FileClock:
    """``time.time()`` plus an offset read from a file: one clock the test moves for
    every process at once (picklable)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __call__(self) -> float:
        try:
            offset = float(Path(self.path).read_text() or 0)
        except FileNotFoundError:
            offset = 0.0
        return time.time() + offset

    def advance(self, seconds: float) -> None:
        current = float(Path(self.path).read_text() or 0) if Path(self.path).exists() else 0.0
        Path(self.path).write_text(repr(current + seconds))


class ManualTrigger(CacheReloadTrigger):
    """Fires only when told (``runtime.trigger_reload()``); due ``interval`` after a load."""

    def __init__(self, interval: float = 3600.0) -> None:
        self.interval = timedelta(seconds=interval)

    def open(self, context: ReloadContext) -> None:
        pass

    def close(self) -> None:
        pass

    def next_reload_after(self, loaded_at: datetime) -> datetime:
        return loaded_at + self.interval


def provider(db: Path, counter: Path, *, delay: float = 0.0, gate: Path | None = None,
             trigger: Any = None, **kw: Any) -> FullCachingLookupProvider:
    kw.setdefault("retry_policy", RetryPolicy(max_retries=0))
    kw.setdefault("share_across_workers", True)
    return FullCachingLookupProvider.of(
        CountingSqlSource(db, counter, delay, gate), trigger or ManualTrigger(), ["id"],
        parallelism=2, **kw)


def store_for(p: FullCachingLookupProvider, directory: Path, **kw: Any) -> SnapshotStore:
    return SnapshotStore(directory, fingerprint=p.snapshot_fingerprint(), **kw)


class KillingStore(SnapshotStore):
    """A store whose writer is SIGKILLed after writing ``kill_after`` record batches of
    a version numbered at least ``from_version``."""

    def __init__(self, directory: Path, *, kill_after: int, from_version: int = 1,
                 **kw: Any) -> None:
        super().__init__(directory, **kw)
        self.kill_after = kill_after
        self.from_version = from_version
        self._publishing = 0

    def publish(self, table: Any, *, version: int, loaded_at: float, unique: bool,
                **kw: Any) -> Any:
        self._publishing = version
        return super().publish(table, version=version, loaded_at=loaded_at, unique=unique, **kw)

    def _wrote_batch(self, path: Path, batches: int) -> None:
        if self._publishing >= self.from_version and batches >= self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)


# --- worker processes


def _serve(conn: Connection, p: FullCachingLookupProvider, directory: Path, clock: Path,
           check_interval: float, kill_after: int | None, open_fires: bool) -> None:
    if kill_after is None:
        store = store_for(p, directory)
    else:
        store = KillingStore(directory, fingerprint=p.snapshot_fingerprint(),
                             kill_after=kill_after, from_version=2, batch_rows=20)
    runtime = FullCachingRuntime(p, store=store)
    runtime.cache.clock = FileClock(clock)
    runtime.cache.check_interval = check_interval  # type: ignore[attr-defined]
    runtime.open()
    if open_fires:  # the trigger's open-time firing, made synchronous
        runtime.trigger_reload().result(TIMEOUT)
    conn.send(("ready", os.getpid()))
    pending: Future[None] | None = None
    while True:
        command, argument = conn.recv()
        try:
            result: Any = None
            if command == "lookup":
                found = runtime.lookup_batch(argument)
                result = (found, runtime.cache.snapshot().version)
            elif command == "fire":
                runtime.trigger_reload().result(TIMEOUT)
                result = runtime.cache.snapshot().version
            elif command == "fire_async":
                pending = runtime.trigger_reload()
            elif command == "wait":
                assert pending is not None
                pending.result(TIMEOUT)
                result = runtime.cache.snapshot().version
            elif command == "metrics":
                result = runtime.metrics.as_dict()
            elif command == "close":
                runtime.close()
                conn.send(("ok", None))
                return
            conn.send(("ok", result))
        except Exception as exc:
            conn.send(("error", repr(exc)))


def _context() -> Any:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.integration.processes"])
    return context


class Worker:
    """A Python process with its own full caching runtime on a shared store directory."""

    def __init__(self, p: FullCachingLookupProvider, directory: Path, clock: Path, *,
                 check_interval: float = 0.0, kill_after: int | None = None,
                 open_fires: bool = True) -> None:
        context = _context()
        self._conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(child, p, directory, clock, check_interval, kill_after, open_fires),
            daemon=True,
        )
        self.process.start()
        child.close()
        self.pid: int | None = None

    def ready(self) -> Worker:
        """Wait until the runtime is open (and its open-time firing done)."""
        status, self.pid = self._receive()
        assert status == "ready"
        return self

    def send(self, command: str, argument: Any = None) -> None:
        self._conn.send((command, argument))

    def receive(self) -> Any:
        status, result = self._receive()
        if status != "ok":
            raise AssertionError(f"worker {self.pid}: {result}")
        return result

    def call(self, command: str, argument: Any = None) -> Any:
        self.send(command, argument)
        return self.receive()

    def lookup(self, ids: Sequence[int]) -> tuple[dict[tuple[Any, ...], Any], int]:
        found, version = self.call("lookup", [(i,) for i in ids])
        return found, version

    def tiers(self, ids: Sequence[int]) -> tuple[set[str], int]:
        found, version = self.lookup(ids)
        return {rows[0][2] for rows in found.values() if rows}, version

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(EOFError, OSError):  # it died meanwhile
                self.call("close")
        self.process.join(TIMEOUT)
        if self.process.is_alive():  # pragma: no cover - a hung worker fails the test
            self.process.kill()
            self.process.join(TIMEOUT)

    def _receive(self) -> Any:
        if not self._conn.poll(TIMEOUT):
            raise AssertionError(f"worker {self.pid} did not answer within {TIMEOUT} s")
        return self._conn.recv()


def workers(*items: Worker) -> Iterator[Worker]:
    """Wait for each worker to be ready, in order."""
    for item in items:
        yield item.ready()


def _publish_in_child(directory: Path, fingerprint: str, rows: int, kill_after: int) -> None:
    import pyarrow as pa

    store = KillingStore(directory, fingerprint=fingerprint, kill_after=kill_after,
                         batch_rows=10)
    table = pa.table({"id": list(range(rows)), "name": [f"x{i}" for i in range(rows)],
                      "tier": ["v2"] * rows})
    with store.try_lock() as locked:
        assert locked
        store.publish(table, version=2, loaded_at=time.time(), unique=True)


def publish_and_get_killed(directory: Path, fingerprint: str, rows: int,
                           kill_after: int) -> int:
    """Run a writer in a child process that is SIGKILLed mid-write; its exit code."""
    context = _context()
    process = context.Process(target=_publish_in_child,
                              args=(directory, fingerprint, rows, kill_after))
    process.start()
    process.join(TIMEOUT)
    return int(process.exitcode if process.exitcode is not None else 0)


def _hold_lock(directory: Path, fingerprint: str, conn: Connection) -> None:
    import pyarrow as pa

    store = SnapshotStore(directory, fingerprint=fingerprint)
    with store.try_lock() as locked:
        conn.send(locked)
        order = conn.recv()  # hold the lock until told; maybe publish first
        if order is not None:
            version, loaded_at, tier, rows = order
            table = pa.table({"id": pa.array(range(rows), pa.int64()),
                              "name": [f"n{i}" for i in range(rows)], "tier": [tier] * rows})
            store.publish(table, version=version, loaded_at=loaded_at, unique=True)


class LockHolder:
    """Another process holding a store's lock until :meth:`release`."""

    def __init__(self, directory: Path, fingerprint: str) -> None:
        context = _context()
        self._conn, child = context.Pipe()
        self.process = context.Process(target=_hold_lock, args=(directory, fingerprint, child),
                                       daemon=True)
        self.process.start()
        child.close()
        assert self._conn.poll(TIMEOUT)
        self.locked: bool = self._conn.recv()

    def release(self, publish: tuple[int, float, str, int] | None = None) -> None:
        """Release the lock, after publishing ``(version, loaded_at, tier, rows)`` if
        given (as a process that loaded would)."""
        self._conn.send(publish)
        self.process.join(TIMEOUT)


# --- partial caches: a lookup function that counts its loads across processes


class CountingLookup(LookupFunction):
    """``id -> (id, "n<id>")`` for ids below 1000; appends one line per loaded key to
    ``counter``."""

    schema = "id BIGINT, name STRING"
    key_columns = ["id"]

    def __init__(self, counter: Path) -> None:
        self.counter = str(counter)

    def lookup(self, key: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.lookup_batch([key])[key]

    def lookup_batch(
        self, keys: Sequence[tuple[Any, ...]]
    ) -> dict[tuple[Any, ...], list[tuple[Any, ...]]]:
        append_line(self.counter, "".join(f"{key[0]}\n" for key in keys))
        return {key: [(key[0], f"n{key[0]}")] if key[0] < 1000 else [] for key in keys}


def _partial_lookups(p: Any, ids: list[int], conn: Connection) -> None:
    from lookup import open_lookup

    with open_lookup(p) as handle:
        found = handle.lookup_batch([(i,) for i in ids])
        conn.send((found, handle.metrics.as_dict()))


def partial_lookups_in_new_process(p: Any, ids: list[int]) -> tuple[dict[Any, Any], Any]:
    """Look ``ids`` up through a fresh process's own runtime of ``p``."""
    context = _context()
    receiver, child = context.Pipe()
    process = context.Process(target=_partial_lookups, args=(p, ids, child))
    process.start()
    child.close()
    assert receiver.poll(TIMEOUT), "the lookup process did not answer"
    result: tuple[dict[Any, Any], Any] = receiver.recv()
    process.join(TIMEOUT)
    return result
