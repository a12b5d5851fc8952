"""`Validity`: which columns of a dimension table say when each of its versions holds
(a slowly changing dimension of type 2), for point-in-time lookups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import types as T

from spark_lookup.errors import ConfigError
from spark_lookup.type_families import DATETIME_TYPES

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

    def check(self, schema: T.StructType, key_columns: Sequence[str], what: str) -> None:
        """Refuse version columns ``schema`` lacks, that are no TIMESTAMP,
        TIMESTAMP_NTZ or DATE, or that are key columns of ``what``.

        Runs on the driver, where a provider is built and its schema known.

        Raises
        ------
        ConfigError
            Naming the column and what is wrong with it.
        """
        names = schema.fieldNames()
        for role, column in zip(("valid_from", "valid_to"), self.columns, strict=False):
            if column not in names:
                raise ConfigError(
                    f"Validity: {role} {column!r} is not a column of {what}'s schema {names}")
            if column in key_columns:
                raise ConfigError(
                    f"Validity: {role} {column!r} is a key column of {what}; a key's "
                    "versions share its key and differ in their validity columns")
            data_type = schema[column].dataType
            if not isinstance(data_type, DATETIME_TYPES):
                raise ConfigError(
                    f"Validity: {role} {column!r} of {what} is {data_type.simpleString()}; "
                    # Not numbers or text: their unit, format or zone would be guesses.
                    "version columns are TIMESTAMP, TIMESTAMP_NTZ or DATE")

    def __repr__(self) -> str:
        parts = [repr(self.valid_from)]
        if self.valid_to is not None:
            parts.append(repr(self.valid_to))
        if self.retention is not None:
            parts.append(f"retention={self.retention!r}")
        return f"Validity({', '.join(parts)})"
