"""The LookupCache interface (Flink's ``LookupCache``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cache.metrics import CacheMetrics

__all__ = ["Key", "LookupCache", "Row", "Rows"]

Key = tuple[Any, ...]
"""A lookup key: a tuple of scalars in the order of the key columns."""
Row = tuple[Any, ...]
"""A dimension row: a tuple in the order of the dimension schema."""
Rows = Sequence[Row]
"""The rows stored for one key: empty (a cached miss), one, or many."""


class LookupCache(ABC):
    """A cache of lookup results, keyed by lookup key; implementations are thread-safe.

    Built on the driver, pickled to executors as its configuration (never its contents),
    and opened where it runs. One opened instance is shared by all tasks of a Python
    worker, so every method may be called from several threads at once.
    """

    @abstractmethod
    def open(self, metrics: CacheMetrics | None = None) -> None:
        """Prepare for use on the worker and report into ``metrics`` (a new one if None)."""

    @property
    @abstractmethod
    def metrics(self) -> CacheMetrics:
        """The metrics this cache reports into."""

    @abstractmethod
    def get_if_present(self, key: Key) -> Rows | None:
        """The cached rows of ``key`` (possibly empty: a cached miss), or None if absent."""

    @abstractmethod
    def put(self, key: Key, rows: Rows) -> None:
        """Cache ``rows`` for ``key``; an empty ``rows`` is kept only if the cache keeps
        missing keys."""

    @abstractmethod
    def invalidate(self, key: Key) -> None:
        """Remove ``key`` if present."""

    @abstractmethod
    def size(self) -> int:
        """Number of cached keys."""

    def close(self) -> None:  # noqa: B027  # optional hook
        """Release resources; the cache is not used afterwards."""

    def get_all(self, keys: Iterable[Key]) -> dict[Key, Rows]:
        """The cached rows of each key in ``keys`` that is present (absent keys omitted)."""
        found: dict[Key, Rows] = {}
        for key in keys:
            rows = self.get_if_present(key)
            if rows is not None:
                found[key] = rows
        return found

    def put_all(self, entries: Mapping[Key, Rows]) -> None:
        """:meth:`put` every entry of ``entries``."""
        for key, rows in entries.items():
            self.put(key, rows)

    def __enter__(self) -> LookupCache:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_key(key: object) -> Key:
    """Validate a key argument: a tuple, so a scalar is never mistaken for a 1-tuple."""
    if not isinstance(key, tuple):
        raise TypeError(f"a lookup key must be a tuple, got {type(key).__name__}: {key!r:.80}")
    return key


def freeze_rows(key: Key, rows: object) -> tuple[Row, ...]:
    """Validate ``rows`` for ``key`` and return them as an immutable tuple of tuples."""
    frozen: tuple[Any, ...]
    if type(rows) is tuple:
        frozen = rows
    elif type(rows) is list:
        frozen = tuple(rows)
    elif rows is None:
        raise TypeError(f"rows for key {key!r:.80} must be a sequence of tuples, got None")
    elif isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
        raise TypeError(
            f"rows for key {key!r:.80} must be a sequence of tuples, got {type(rows).__name__}"
        )
    else:
        frozen = tuple(rows)
    for row in frozen:
        if type(row) is not tuple:
            raise TypeError(
                f"each row for key {key!r:.80} must be a tuple, got {type(row).__name__}"
            )
    return frozen
