"""``'connector' = 'filesystem'`` and ``'connector' = 'delta'``: the options of tables
read only whole, through a full cache (a `FileSource` or a `DeltaSource`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

from connectors.files.delta import DeltaSource
from connectors.files.delta_history import VALID_FROM, VALID_TO
from connectors.files.source import FileSource
from lookup.table_options import TableOptions, non_empty_text, one_of
from lookup.validity import Validity
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError
from spark_lookup.options import ConfigOption
from spark_lookup.schema import SchemaLike, parse_schema

__all__ = ["DeltaTableOptions", "FileTableOptions"]


def _local_path(value: object, key: str) -> str:
    path = non_empty_text(value, key)
    parts = urlsplit(path)
    if parts.scheme == "file":
        path = unquote(parts.path)
    elif "://" in path:
        raise ConfigError(f"option {key!r}: {path!r}: only local paths (or file:// URIs) are "
                          "read by the filesystem connector; use 'delta' for object stores")
    # Resolved here, on the driver: executors have working directories of their own.
    return os.path.abspath(path)


FILE_PATH: ConfigOption[str] = ConfigOption(
    "path", _local_path, None, "a Parquet or CSV file or directory: a local path or file:// URI")
FILE_FORMAT: ConfigOption[str] = ConfigOption(
    "format", one_of("parquet", "csv"), None, "parquet or csv (with a header row)")


@dataclass(frozen=True)
class FileTableOptions(TableOptions):
    """``'connector' = 'filesystem'``: Parquet or CSV files read by ``scan.FileSource``,
    through a full cache."""

    connector: ClassVar[str] = "filesystem"
    OPTIONS: ClassVar[tuple[ConfigOption[Any], ...]] = (FILE_PATH, FILE_FORMAT)
    IGNORED: ClassVar[Mapping[str, str]] = {
        "sink.": "a lookup table is only read",
        "source.monitor-interval": "each load lists the files present then",
    }

    path: str | None
    format: str | None

    def source(self, key_columns: list[str], schema: SchemaLike | None) -> FileSource:
        return FileSource(self.required(self.path, FILE_PATH),
                          self.required(self.format, FILE_FORMAT), schema=schema)


DELTA_PATH: ConfigOption[str] = ConfigOption(
    "table-path", non_empty_text, None, "the Delta table's directory or URI (s3://, abfss://...)")
DELTA_VERSION: ConfigOption[int] = ConfigOption(
    "versionAsOf", opts.non_negative_int, None,
    "a table version to pin (default: the latest at each load)")
DELTA_HISTORY: ConfigOption[bool] = ConfigOption(
    "history", opts.parse_bool, False,
    "true: every version of each row from the change data feed, valid from its commit "
    "(point-in-time lookups; keyed by the PRIMARY KEY)")


@dataclass(frozen=True)
class DeltaTableOptions(TableOptions):
    """``'connector' = 'delta'``: a Delta Lake table read by ``scan.DeltaSource``,
    through a full cache."""

    connector: ClassVar[str] = "delta"
    OPTIONS: ClassVar[tuple[ConfigOption[Any], ...]] = (DELTA_PATH, DELTA_VERSION,
                                                        DELTA_HISTORY)

    table_path: str | None
    version: int | None
    history: bool

    def source(self, key_columns: list[str], schema: SchemaLike | None) -> DeltaSource:
        path = self.required(self.table_path, DELTA_PATH)
        if not self.history:
            return DeltaSource(path, version=self.version, schema=schema)
        if schema is not None:
            # A DDL may declare the version columns history adds (so that SQL over the
            # table names them); the table itself has none.
            declared = parse_schema(schema, "the table's columns")
            schema = type(declared)([f for f in declared.fields
                                     if f.name not in (VALID_FROM, VALID_TO)])
        return DeltaSource(path, version=self.version, schema=schema, history=True,
                           key_columns=key_columns)

    def validity(self) -> Validity | None:
        return Validity(VALID_FROM, VALID_TO) if self.history else None
