"""The checkpoint format of [`LocalSourceRunner`][].

``b"SLSCAN"``, a big-endian uint16 format version, then UTF-8 JSON:

    {"source": "<module>.<class>", "checkpoint_id": n,
     "enumerator": {"version": v, "data": "<base64 of the enumerator state>"},
     "readers": [[{"version": v, "data": "<base64 of a split>"}, ...], ...]}

The enumerator state and each split are written by the source's own versioned
serializers; nothing is pickled, so reading a checkpoint back cannot run code. A
checkpoint naming a built-in source by the path it had before the sources moved to
``connectors`` (``scan.sources.sql.SqlTableSource``) reads as naming its current path.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from spark_lookup.errors import SourceError

__all__ = [
    "CHECKPOINT_VERSION",
    "CheckpointData",
    "decode_checkpoint",
    "encode_checkpoint",
    "spread_splits",
]

T = TypeVar("T")

_MAGIC = b"SLSCAN"
_HEADER = struct.Struct(">6sH")
CHECKPOINT_VERSION = 1

_FORMER_NAMES: Mapping[str, str] = {
    "scan.sources.sql.SqlTableSource": "connectors.sql.source.SqlTableSource",
    "scan.sources.files.FileSource": "connectors.files.source.FileSource",
    "scan.sources.delta.DeltaSource": "connectors.files.delta.DeltaSource",
    "scan.sources.iceberg.IcebergSource": "connectors.files.iceberg.IcebergSource",
    "scan.sources.redis_scan.RedisScanSource": "connectors.redis.source.RedisScanSource",
    "scan.sources.collection.CollectionSource": "scan.collection.CollectionSource",
}
"""The built-in sources by the names checkpoints gave them before issue 43's layout
moved them, each to its current name: the format did not change, only the path."""


@dataclass(frozen=True)
class CheckpointData:
    """A decoded checkpoint: packed (versioned, base64) enumerator state and splits."""

    source: str
    checkpoint_id: int
    enumerator: dict[str, Any]
    readers: list[list[dict[str, Any]]]


def encode_checkpoint(data: CheckpointData) -> bytes:
    """The bytes of ``data`` in the current format."""
    payload = {
        "source": data.source,
        "checkpoint_id": data.checkpoint_id,
        "enumerator": data.enumerator,
        "readers": data.readers,
    }
    body = json.dumps(payload, separators=(",", ":")).encode()
    return _HEADER.pack(_MAGIC, CHECKPOINT_VERSION) + body


def decode_checkpoint(blob: bytes) -> CheckpointData:
    """Read checkpoint bytes.

    Raises
    ------
    SourceError
        If ``blob`` is not a checkpoint of this runner, is malformed, or was written in a
        newer format than this version reads.
    """
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise SourceError(f"a checkpoint is bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < _HEADER.size or blob[: len(_MAGIC)] != _MAGIC:
        raise SourceError("not a spark-lookup scan checkpoint (bad header)")
    _, version = _HEADER.unpack_from(blob)
    if version > CHECKPOINT_VERSION:
        raise SourceError(
            f"the checkpoint was written in format version {version}, but this version of "
            f"spark-lookup reads formats up to {CHECKPOINT_VERSION}; upgrade spark-lookup "
            "to restore it"
        )
    try:
        payload = json.loads(blob[_HEADER.size :].decode("utf-8"))
        source = str(payload["source"])
        data = CheckpointData(source=_FORMER_NAMES.get(source, source),
                              checkpoint_id=int(payload["checkpoint_id"]),
                              enumerator=dict(payload["enumerator"]),
                              readers=[list(splits) for splits in payload["readers"]])
    except (ValueError, TypeError, KeyError) as exc:
        raise SourceError(f"the checkpoint is malformed: {exc}") from exc
    return data


def spread_splits(saved: list[list[T]], parallelism: int) -> list[list[T]]:
    """The splits each checkpointed reader held, for ``parallelism`` readers: each
    reader's own at the same parallelism, else interleaved, so that the splits of a
    reader that had several spread out."""
    if len(saved) == parallelism:
        return saved
    flat: list[T] = []
    for rank in range(max(map(len, saved), default=0)):
        flat.extend(splits[rank] for splits in saved if rank < len(splits))
    return [flat[i::parallelism] for i in range(parallelism)]
