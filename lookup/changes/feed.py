"""Change feeds: the keys of a dimension table that changed, delivered to the caches of
every Python worker that looks it up, so that caches stay fresh without reloading.

A feed is configuration ([`ChangeFeed`][]), built on the driver and pickled into the
provider that takes it (``changes=``). Where a runtime of that provider opens, the
feed's listener starts: one daemon thread per feed and process, shared by every runtime
using it (``lookup.changes.listener``), that holds one `ChangeConnection` and hands
what it receives (`Change`) to the runtimes. A partial cache drops exactly the
changed keys; a full cache reloads soon after (debounced by ``min_interval``). A lookup
never touches the feed.

Nothing is lost: a connection that drops cannot say what it missed, so once the
listener has connected again (listening first, so that nothing falls between), every
runtime is told that everything may have changed: partial caches are flushed, full
caches reload. A feed backend only implements [`ChangeFeed.connect`][] (the tests' in-process feed,
``tests/lookup/changes/in_process_changes.py``, is the smallest one).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from spark_lookup.errors import ConfigError
from spark_lookup.identifiers import validate_identifier
from spark_lookup.options import as_timedelta

__all__ = ["Change", "ChangeConnection", "ChangeFeed"]

Key = tuple[Any, ...]

DEFAULT_MIN_INTERVAL = timedelta(seconds=1)
DEFAULT_CONNECT_TIMEOUT = timedelta(seconds=10)


@dataclass(frozen=True)
class Change:
    """One notification of a feed: the ``keys`` that changed, each a tuple of JSON values
    (numbers, text, booleans; see `connectors.json_keys`) in the order of the feed's
    ``key_columns``, or ``everything`` that may have changed (a ``TRUNCATE``, a statement
    changing more keys than a notification carries), with its ``reason``."""

    keys: tuple[Key, ...] = ()
    everything: bool = False
    reason: str = ""


class ChangeConnection(ABC):
    """One live connection of a feed, used by its listener thread only."""

    @abstractmethod
    def receive(self, timeout: float) -> list[Change]:
        """The changes that arrived, waiting at most ``timeout`` seconds for the first
        (an empty list when none did).

        Raises
        ------
        Exception
            Any error, when the connection is lost: the listener then reconnects and
            tells every cache that everything may have changed.
        """

    def interrupt(self) -> None:  # noqa: B027  # optional hook
        """Make a `receive` running in another thread return soon (the listener
        is stopping). Thread-safe. By default ``receive`` returns at its timeout."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection (called once, on the listener thread)."""


class ChangeFeed(ABC):
    """Where a table's changes come from: what a provider's ``changes=`` takes.

    Built on the driver and pickled to the workers as its configuration (what to
    connect to; never a connection). Every copy keeps the ``feed_id`` of the original,
    so the runtimes of one process that use copies of one feed share one listener. A
    backend implements [`connect`][]; the listener thread, reconnection with backoff,
    the flush after a lost connection and the delivery to caches are the same for all.

    Parameters
    ----------
    key_columns
        The columns whose values a change carries, in the order of a `Change`'s
        keys; a provider that takes the feed must look up by exactly these columns (in
        any order).
    min_interval
        A full cache fed by this feed reloads at most once per ``min_interval`` for
        changes (a ``timedelta`` or seconds; default 1 s); its trigger's schedule is
        unchanged and still bounds staleness when no notification comes.
    connect_timeout
        How long a runtime opening waits for the listener's first connection (default
        10 s), so that its first loads are covered; past it the runtime opens anyway,
        serving with its TTL or schedule as the only bound until the listener connects
        (then the partial cache is flushed and a full cache reloads).

    Raises
    ------
    ConfigError
        For empty or invalid key columns or durations.
    """

    def __init__(self, key_columns: Sequence[str] | str, *,
                 min_interval: timedelta | float = DEFAULT_MIN_INTERVAL,
                 connect_timeout: timedelta | float = DEFAULT_CONNECT_TIMEOUT) -> None:
        self.key_columns = _key_columns(key_columns)
        self.min_interval = as_timedelta(min_interval, "min_interval", allow_zero=True)
        self.connect_timeout = as_timedelta(connect_timeout, "connect_timeout", allow_zero=True)
        self.feed_id = uuid.uuid4().hex

    @abstractmethod
    def connect(self) -> ChangeConnection:
        """Open a connection that delivers every change committed from the moment this
        returns (a ``LISTEN`` done, a subscription confirmed). Runs on the listener
        thread of each process that uses the feed.

        Raises
        ------
        Exception
            When it cannot connect; the listener tries again with backoff.
        """

    def describe(self) -> str:
        """A one-line description for logs and error messages."""
        return f"{type(self).__name__}(key_columns={list(self.key_columns)})"

    def check_provider_keys(self, key_columns: Sequence[str], what: str) -> None:
        """Refuse a provider (``what``) that looks up by other columns than the feed's.

        Raises
        ------
        ConfigError
            Naming both lists.
        """
        if sorted(key_columns) != sorted(self.key_columns) or len(set(key_columns)) != len(
                key_columns):
            raise ConfigError(
                f"{self.describe()} carries the key columns {list(self.key_columns)}; "
                f"{what} looks up by {list(key_columns)}: a change feed must carry exactly "
                "the columns the provider looks up by"
            )


def _key_columns(value: Sequence[str] | str) -> tuple[str, ...]:
    columns = (value,) if isinstance(value, str) else tuple(value)
    if not columns:
        raise ConfigError("key_columns must name at least one column")
    for name in columns:
        validate_identifier(name, "key column")
    if len(set(columns)) != len(columns):
        raise ConfigError(f"key_columns names a column twice: {list(columns)}")
    return columns
