"""The on-disk format of a snapshot store, which its reader and its writer share: the
pointer record (`StoredSnapshot`), the names of the files both touch, and a file's checksum.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path

__all__ = [
    "CHECKSUM_CHUNK",
    "CURRENT",
    "DAMAGED_PREFIX",
    "FORMAT_VERSION",
    "META_KEY",
    "VERSION_FILE",
    "StoredSnapshot",
    "as_embedded",
    "checksum",
]

FORMAT_VERSION = 3
"""Version of the pointer record and file layout; a newer one is refused, never guessed.
Version 2 (no key index, no source version) is still read (its readers index the table
themselves, and its source version is unknown); version 1, without a checksum, is
ignored: the next load replaces it."""

CURRENT = "CURRENT"
"""The pointer: the record of the published version."""
DAMAGED_PREFIX = ".damaged-"
"""Before the name of a version file whose checksum failed: set aside, never read."""
VERSION_FILE = re.compile(r"^v\d{10}-\d+\.(arrow|index)$")
"""The name of a version's data or key index file."""
META_KEY = b"spark_lookup.snapshot"
"""The schema metadata key under which a data file carries its own record."""
CHECKSUM_CHUNK = 1 << 20
"""Bytes read at once to checksum or copy a file (not mapped: the pages stay the page
cache's, not this process's)."""


@dataclass(frozen=True)
class StoredSnapshot:
    """The record of one published version: what ``CURRENT`` holds (JSON, versioned).

    Attributes
    ----------
    version : int
        Increases with every version published in the store.
    loaded_at : float
        Epoch seconds when the load that produced it started, or when a later reload
        found the source still at ``source_version`` (`SnapshotStore.confirm`).
    file : str
        The data file's name in the store directory.
    num_rows : int
        Rows in the table.
    unique : bool
        Whether every key has exactly one row (readers skip a pass when it does).
    fingerprint : str
        What the table is (key columns and schema), as its writer saw it; a reader with
        another fingerprint ignores the version.
    checksum : str
        CRC-32 of the data file (hex), checked before the file is mapped; empty in the
        copy of the record the file itself carries.
    source_version : str
        The ``repr`` of the source's version the table was loaded at; empty when the
        source cannot tell (see ``scan.Source.current_version``).
    index : str
        The key index file's name in the store directory; empty when the version has
        none (written by format 2: readers index the table themselves).
    index_checksum : str
        CRC-32 of the key index file (hex), checked before it is mapped.
    """

    version: int
    loaded_at: float
    file: str
    num_rows: int
    unique: bool
    fingerprint: str
    checksum: str = ""
    source_version: str = ""
    index: str = ""
    index_checksum: str = ""

    def to_json(self) -> bytes:
        """The record as JSON, with the format version."""
        return json.dumps({"format": FORMAT_VERSION, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> StoredSnapshot:
        """Parse a record written by `to_json`.

        Raises
        ------
        ValueError
            For anything but a record of a known format with fields of the right types.
        """
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a snapshot record: {exc}") from None
        if not isinstance(raw, dict):
            raise ValueError("not a snapshot record: not a JSON object")
        fmt = raw.pop("format", None)
        if not isinstance(fmt, int) or fmt > FORMAT_VERSION:
            raise ValueError(f"snapshot record format {fmt!r} is newer than the supported "
                             f"{FORMAT_VERSION}: a newer spark-lookup wrote it")
        if fmt < 2:
            raise ValueError(f"snapshot record format {fmt} carries no checksum")
        types: dict[str, type | tuple[type, ...]] = {
            "version": int, "loaded_at": (int, float), "file": str, "num_rows": int,
            "unique": bool, "fingerprint": str, "checksum": str, "source_version": str,
        }
        if fmt == 2:  # before source versions and key indexes: unknown, none
            raw.setdefault("source_version", "")
        if fmt >= 3:
            types.update(index=str, index_checksum=str)
        if set(raw) != set(types):
            raise ValueError(f"snapshot record fields {sorted(raw)} != {sorted(types)}")
        for name, kind in types.items():
            if not isinstance(raw[name], kind) or (kind is int and isinstance(raw[name], bool)):
                raise ValueError(f"snapshot record field {name!r} is {raw[name]!r}")
        if not VERSION_FILE.fullmatch(raw["file"]) or not raw["file"].endswith(".arrow"):
            raise ValueError(f"snapshot record names no version file: {raw['file']!r}")
        index = raw.get("index", "")
        if index and (not VERSION_FILE.fullmatch(index) or not index.endswith(".index")):
            raise ValueError(f"snapshot record names no index file: {index!r}")
        raw["loaded_at"] = float(raw["loaded_at"])
        return cls(**raw)


def checksum(path: Path) -> str:
    """CRC-32 of a whole file, read in chunks into one buffer (not mapped: the pages
    stay the page cache's, not this process's)."""
    crc = 0
    chunk = bytearray(CHECKSUM_CHUNK)
    view = memoryview(chunk)
    with open(path, "rb", buffering=0) as file:
        while size := file.readinto(chunk):
            crc = zlib.crc32(view[:size], crc)
    return f"{crc:08x}"


def as_embedded(record: StoredSnapshot) -> StoredSnapshot:
    """The copy of a record its data file carries (written before the checksums are
    known)."""
    return replace(record, checksum="", index_checksum="")
