"""Versioned serializers for splits, enumerator state and checkpoints.

Serialized state is JSON, never pickle: a checkpoint is data read back from storage, and
unpickling data can run arbitrary code. Values JSON cannot hold (bytes, decimals, dates,
timestamps, UUIDs, tuples) are written as one-key tagged objects (``{"$date": "..."}``),
so split bounds of any SQL key type survive a round trip exactly.

Every serialized form carries a version; a reader refuses a version newer than it knows,
with a message that says so, instead of misreading it.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from abc import ABC, abstractmethod
from decimal import Decimal
from typing import Any, Generic, TypeVar

from spark_lookup.errors import SourceError
from spark_lookup.shown import shown

__all__ = [
    "JsonVersionedSerializer",
    "SimpleVersionedSerializer",
    "check_version",
    "decode_value",
    "encode_value",
]

T = TypeVar("T")


class SimpleVersionedSerializer(ABC, Generic[T]):
    """Turns values into bytes and back, tagged with a format version (Flink's
    ``SimpleVersionedSerializer``).

    ``deserialize(version, data)`` must read every version up to `version` (old
    checkpoints stay readable after an upgrade) and refuse newer ones.
    """

    @property
    @abstractmethod
    def version(self) -> int:
        """The version `serialize` writes (a positive int)."""

    @abstractmethod
    def serialize(self, obj: T) -> bytes:
        """``obj`` as bytes in format `version`."""

    @abstractmethod
    def deserialize(self, version: int, data: bytes) -> T:
        """Read bytes written in format ``version``.

        Raises
        ------
        SourceError
            For a version newer than `version` (written by a newer release) or
            data that is not in the expected format.
        """


def check_version(serializer: SimpleVersionedSerializer[Any], version: int, what: str) -> None:
    """Refuse a ``version`` this ``serializer`` cannot read, naming ``what`` it was for.

    Raises
    ------
    SourceError
        If ``version`` is newer than ``serializer.version`` or not positive.
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SourceError(f"{what}: invalid serialization version {version!r}")
    if version > serializer.version:
        raise SourceError(
            f"{what} was written in format version {version}, but this version of "
            f"spark-lookup reads formats up to {serializer.version}; upgrade spark-lookup "
            "to read it"
        )


class JsonVersionedSerializer(SimpleVersionedSerializer[T]):
    """A versioned serializer that writes JSON (with tagged values, see the module).

    Subclasses set `VERSION` and `WHAT` and implement `to_json` and
    `from_json`; versions and malformed input are checked here.
    """

    VERSION: int = 1
    WHAT: str = "serialized state"

    @property
    def version(self) -> int:
        return self.VERSION

    @abstractmethod
    def to_json(self, obj: T) -> Any:
        """``obj`` as JSON-like values (tagged scalars allowed anywhere)."""

    @abstractmethod
    def from_json(self, version: int, value: Any) -> T:
        """Rebuild the object from what `to_json` wrote in format ``version``."""

    def serialize(self, obj: T) -> bytes:
        return json.dumps(encode_value(self.to_json(obj)), separators=(",", ":")).encode()

    def deserialize(self, version: int, data: bytes) -> T:
        check_version(self, version, self.WHAT)
        try:
            value = decode_value(json.loads(bytes(data).decode("utf-8")))
            return self.from_json(version, value)
        except SourceError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise SourceError(f"{self.WHAT} is malformed: {exc}") from exc


_TAGS = ("$bytes", "$decimal", "$date", "$datetime", "$time", "$uuid", "$tuple", "$dict")


def encode_value(value: Any) -> Any:
    """``value`` as JSON-compatible data; non-JSON scalars become tagged objects.

    Raises
    ------
    TypeError
        For a value of a type with no JSON form here (it names the type).
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [encode_value(v) for v in value]}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("only dicts with string keys can be serialized")
        encoded = {k: encode_value(v) for k, v in value.items()}
        # A user dict that looks like a tag is wrapped, so decoding cannot mistake it.
        if len(encoded) == 1 and next(iter(encoded)) in _TAGS:
            return {"$dict": encoded}
        return encoded
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    # datetime before date: a datetime is a date.
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    raise TypeError(f"cannot serialize a value of type {type(value).__name__}: {shown(value)}")


def decode_value(value: Any) -> Any:
    """The inverse of `encode_value`."""
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "$dict":
            return {k: decode_value(v) for k, v in inner.items()}
        if tag == "$tuple":
            return tuple(decode_value(v) for v in inner)
        if tag == "$bytes":
            return base64.b64decode(inner, validate=True)
        if tag == "$decimal":
            return Decimal(inner)
        if tag == "$datetime":
            return dt.datetime.fromisoformat(inner)
        if tag == "$date":
            return dt.date.fromisoformat(inner)
        if tag == "$time":
            return dt.time.fromisoformat(inner)
        if tag == "$uuid":
            return uuid.UUID(inner)
    return {k: decode_value(v) for k, v in value.items()}


def pack_versioned(serializer: SimpleVersionedSerializer[T], obj: T) -> dict[str, Any]:
    """``obj`` serialized and wrapped with its version, for nesting inside JSON state."""
    return {
        "version": serializer.version,
        "data": base64.b64encode(serializer.serialize(obj)).decode("ascii"),
    }


def unpack_versioned(serializer: SimpleVersionedSerializer[T], packed: Any, what: str) -> T:
    """Read what `pack_versioned` wrote.

    Raises
    ------
    SourceError
        If ``packed`` is malformed or its version is too new.
    """
    if not isinstance(packed, dict) or "version" not in packed or "data" not in packed:
        raise SourceError(f"{what} is malformed: expected a versioned entry")
    version = packed["version"]
    check_version(serializer, version, what)
    try:
        data = base64.b64decode(packed["data"], validate=True)
    except (ValueError, TypeError) as exc:
        raise SourceError(f"{what} is malformed: {exc}") from exc
    return serializer.deserialize(version, data)
