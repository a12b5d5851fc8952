"""`Validity`: which columns of a dimension table say when each of its versions holds
(a slowly changing dimension of type 2), for point-in-time lookups."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from spark_lookup.errors import ConfigError

__all__ = ["Validity"]


@dataclass(frozen=True)
class Validity:
    """A version is valid from ``valid_from`` (inclusive) to ``valid_to`` (exclusive;
    NULL: still valid); without ``valid_to``, until the next version of its key by
    ``valid_from``. ``retention`` drops versions that ended longer ago than it at load.

    Examples
    --------
    >>> Validity("valid_from", "valid_to")
    Validity('valid_from', 'valid_to')
    >>> Validity("changed_at", retention=timedelta(days=90))
    Validity('changed_at', retention=datetime.timedelta(days=90))
    """

    valid_from: str
    valid_to: str | None = None
    retention: timedelta | None = None

    def __post_init__(self) -> None:
        for name, value in (("valid_from", self.valid_from), ("valid_to", self.valid_to)):
            if value is None and name == "valid_to":
                continue
            if not isinstance(value, str) or not value:
                raise ConfigError(f"Validity: {name} must be a column name, got {value!r}")
        if self.valid_to == self.valid_from:
            raise ConfigError(
                f"Validity: valid_from and valid_to name the same column {self.valid_from!r}")
        retention = self.retention
        if retention is not None and (
                not isinstance(retention, timedelta) or retention <= timedelta(0)):
            raise ConfigError(
                f"Validity: retention must be a positive timedelta, got {retention!r}")

    @property
    def columns(self) -> tuple[str, ...]:
        """The version columns, ``valid_from`` first."""
        return (self.valid_from,) if self.valid_to is None else (
            self.valid_from, self.valid_to)

    def __repr__(self) -> str:
        parts = [repr(self.valid_from)]
        if self.valid_to is not None:
            parts.append(repr(self.valid_to))
        if self.retention is not None:
            parts.append(f"retention={self.retention!r}")
        return f"Validity({', '.join(parts)})"
