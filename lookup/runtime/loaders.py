"""Loaders: one interface over synchronous and asynchronous lookup functions.

A loader answers a list of distinct, null-free keys with a mapping of key to rows. A
load that fails for some keys only raises `PartialLoad` carrying the answered
keys, so the runtime retries just the failed ones.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from cache.base import Key, Row
from lookup.function import AsyncLookupFunction, LookupFunction
from lookup.providers import AsyncLookupFunctionProvider, LookupFunctionProvider

__all__ = ["AsyncLoader", "Loader", "PartialLoad", "SyncLoader", "loader_for"]


class PartialLoad(Exception):
    """Some keys of a load were answered, others failed with ``error``."""

    def __init__(self, results: Mapping[Key, Sequence[Row]], failed: list[Key], error: BaseException
                 ) -> None:
        super().__init__(f"{len(failed)} key(s) failed: {error!r}")
        self.results = results
        self.failed = failed
        self.error = error


class Loader(Protocol):
    def open(self) -> None: ...

    def close(self) -> None: ...

    def load(self, keys: list[Key]) -> Mapping[Key, Sequence[Row]]: ...


class SyncLoader:
    """Calls ``LookupFunction.lookup_batch`` once per load."""

    def __init__(self, function: LookupFunction) -> None:
        self._function = function

    def open(self) -> None:
        self._function.open()

    def close(self) -> None:
        self._function.close()

    def load(self, keys: list[Key]) -> Mapping[Key, Sequence[Row]]:
        return self._function.lookup_batch(keys)


class AsyncLoader:
    """Runs an ``AsyncLookupFunction`` on an event loop of its own thread, with at most
    ``capacity`` lookups in flight, each bounded by ``timeout`` seconds."""

    def __init__(self, function: AsyncLookupFunction, capacity: int, timeout: float) -> None:
        self._function = function
        self._capacity = capacity
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="lookup-async-loop", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            self._function.open()
        except BaseException:
            self._stop()
            raise

    def close(self) -> None:
        try:
            self._function.close()
        finally:
            self._stop()

    def _stop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()

    def load(self, keys: list[Key]) -> Mapping[Key, Sequence[Row]]:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the async lookup runtime is not open")
        future = asyncio.run_coroutine_threadsafe(self._load(keys), loop)
        # The per-key timeouts bound the whole load; the margin covers queueing.
        waves = -(-len(keys) // self._capacity)
        try:
            return future.result(timeout=self._timeout * (waves + 1) + 5)
        except TimeoutError:
            future.cancel()
            raise

    async def _load(self, keys: list[Key]) -> Mapping[Key, Sequence[Row]]:
        function = self._function
        if function.has_batch:
            return await asyncio.wait_for(function.async_lookup_batch(keys), self._timeout)
        gate = asyncio.Semaphore(self._capacity)

        async def one(key: Key) -> Sequence[Row]:
            async with gate:
                return await asyncio.wait_for(function.async_lookup(key), self._timeout)

        outcomes: list[Any] = await asyncio.gather(
            *(one(key) for key in keys), return_exceptions=True
        )
        answers = dict(zip(keys, outcomes, strict=True))
        results = {k: rows for k, rows in answers.items() if not isinstance(rows, BaseException)}
        if len(results) == len(keys):
            return results
        failed = [key for key in keys if key not in results]
        error = answers[failed[0]]
        if isinstance(error, asyncio.TimeoutError):
            error = TimeoutError(f"async lookup timed out after {self._timeout} s")
        raise PartialLoad(results, failed, error)


def loader_for(provider: LookupFunctionProvider | AsyncLookupFunctionProvider) -> Loader:
    """The loader of a function-backed provider."""
    if isinstance(provider, AsyncLookupFunctionProvider):
        return AsyncLoader(provider.function, provider.capacity, provider.timeout.total_seconds())
    return SyncLoader(provider.function)
