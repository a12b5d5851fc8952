"""What happens to a stored value that cannot be read as its column's type.

Spark's file readers have a ``mode``; so do our connectors. A bad value is data (a row
someone wrote wrong), not an outage: it is handled by the policy, counted, and the first
few are logged with their table, key and column. It is never retried.
"""

from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

from spark_lookup.errors import BadValueError, ConfigError
from spark_lookup.shown import shown

__all__ = ["BadValue", "BadValuePolicy", "BadValueStats", "CountsBadValues"]

log = logging.getLogger("connectors")

_LOGGED_PER_TABLE = 5
"""Bad values logged in full per connector and process; the rest are only counted."""


class BadValuePolicy(enum.Enum):
    """The ``mode`` of a connector, as in Spark's readers (option key ``mode``).

    - ``PERMISSIVE`` (the default, as in Spark): the bad value reads as NULL and the row
      is kept. In a column declared NOT NULL the row cannot hold a NULL, so it is
      dropped instead.
    - ``DROPMALFORMED``: the row holding a bad value is dropped.
    - ``FAILFAST``: the read fails with [`BadValueError`][] naming
      the table, key, column, value and target type; a full load fails at once, never
      retried.

    Why PERMISSIVE by default: a lookup join enriches a stream; one malformed dimension
    row should cost that row's value, not the whole dimension table (with FAILFAST one
    bad row makes a full cache unloadable). The count in the metrics
    (``num_bad_values``) and the log make it visible.
    """

    PERMISSIVE = "PERMISSIVE"
    DROPMALFORMED = "DROPMALFORMED"
    FAILFAST = "FAILFAST"

    @classmethod
    def parse(cls, value: object, what: str = "mode") -> BadValuePolicy:
        """A policy from itself or its name (any case).

        Raises
        ------
        ConfigError
            For anything else, naming ``what``.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        raise ConfigError(f"{what} must be one of {[p.value for p in cls]}, got {shown(value, 60)}")


@dataclass(frozen=True)
class BadValue:
    """One value that could not be read: where it is and what it is."""

    table: str
    key: str
    """The row's key as text (the lookup key, or the key columns of a scanned row)."""
    column: str
    value: str
    """The stored value as text, shortened."""
    target: str
    """The Spark type it should have been read as."""
    reason: str = ""

    def message(self) -> str:
        """A one-line description naming table, key, column, value and target type."""
        why = f": {self.reason}" if self.reason else ""
        return (
            f"table {self.table!r}, key {self.key}, column {self.column!r}: cannot read "
            f"{self.value} as {self.target}{why}"
        )

    def error(self) -> BadValueError:
        """The ``FAILFAST`` error of this value."""
        return BadValueError(self.message() + " (mode FAILFAST)")


class BadValueStats:
    """The bad values one connector met in this process: a count, and a log of the first
    few. Thread-safe; not pickled (a connector builds a fresh one where it runs)."""

    def __init__(self, table: str) -> None:
        self._table = table
        self._lock = threading.Lock()
        self._count = 0

    @property
    def count(self) -> int:
        """Bad values met so far."""
        return self._count

    def record(self, values: list[BadValue], policy: BadValuePolicy) -> None:
        """Count ``values`` and log the first few of this connector."""
        if not values:
            return
        with self._lock:
            before = self._count
            self._count += len(values)
        for offset, value in enumerate(values[: max(0, _LOGGED_PER_TABLE - before)]):
            log.warning(
                "bad value %d of %s (mode %s): %s", before + offset + 1, self._table,
                policy.value, value.message(),
            )
        if before < _LOGGED_PER_TABLE <= before + len(values):
            log.warning("further bad values of %s are counted (metric num_bad_values), not logged",
                        self._table)


class CountsBadValues:
    """Reports the bad values met in this process by the connector table it reads
    through (held in the attribute `_COUNTED_BY` names)."""

    _COUNTED_BY: ClassVar[str]

    @property
    def bad_value_count(self) -> int:
        """Stored values this process could not read as their column's type."""
        table: Any = getattr(self, self._COUNTED_BY)
        return int(table.bad_value_count)

    @property
    def bad_value_mode(self) -> BadValuePolicy:
        """The policy of the table it reads through (also what bad version history of
        a point-in-time lookup follows)."""
        mode: BadValuePolicy = getattr(self, self._COUNTED_BY).mode
        return mode
