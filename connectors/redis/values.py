"""Redis values to wire columns: hashes and strings hold text, JSON documents hold JSON.

Each schema column becomes a wire column of text (``string``; raw ``binary`` for BINARY
columns), which `connectors.convert` casts to the column's type exactly as it casts
SQLite's and PostgreSQL's text: the same rules for every backend. A value of the wrong
kind (invalid UTF-8, a JSON string where a number belongs, bad base64) is flagged and
handled by the bad-value policy.

JSON: a string is its text; a number its exact digits (``1.10`` stays ``1.10``, so a
DECIMAL reads it exactly); as in Spark's JSON reader a DECIMAL also reads a string of
digits, and FLOAT/DOUBLE the strings ``NaN`` and ``Infinity``; ``true``/``false`` suit
BOOLEAN only; dates and timestamps
are ISO 8601 strings; BINARY is base64; arrays, objects (maps, with text keys) and
nested objects (structs) suit ARRAY, MAP and STRUCT columns, leaf by leaf. A STRING
column takes any JSON value: a non-string as its JSON text (``{"a": 1}``, numbers as
written). A value nested deeper than `MAX_DEPTH` arrays and objects is a bad
value of its column, as any unreadable one (reading it would recurse past Python's
limit, an error that says nothing about Redis and would be retried).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from spark_lookup.type_families import DATETIME_TYPES, FLOAT_TYPES, NUMBER_TYPES, STRING_TYPES

__all__ = ["MAX_DEPTH", "json_text", "json_wire", "parse_json", "text_wire"]

MAX_DEPTH = 128
"""The deepest nesting of arrays and objects a JSON member's value may have."""

_SPECIAL_FLOATS = frozenset({"NaN", "Infinity", "+Infinity", "-Infinity"})


def parse_json(raw: bytes | str) -> Any:
    """A JSON document with exact numbers (``Decimal``, ``int``).

    Raises
    ------
    ValueError
        For text that is not JSON (or nests too deep).
    """
    try:
        return json.loads(raw, parse_float=Decimal)
    except RecursionError as exc:
        raise ValueError("JSON nested too deep") from exc


def json_text(value: Any) -> str:
    """The JSON text of a decoded value (numbers as written, ``", "`` and ``": "``
    between items as PostgreSQL prints jsonb)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(
            f"{json.dumps(str(k), ensure_ascii=False)}: {json_text(v)}" for k, v in value.items()
        ) + "}"
    return json.dumps(value, ensure_ascii=False)


def text_wire(
    values: Sequence[bytes | None], target: T.DataType
) -> tuple[pa.Array, list[str | None] | None]:
    """Hash fields or string values (bytes) as a wire column for ``target``, with the
    flags of values that are not text (invalid UTF-8)."""
    if isinstance(target, T.BinaryType):
        return pa.array(values, pa.binary()), None
    try:
        return pa.array(values, pa.binary()).cast(pa.string()), None
    except pa.ArrowInvalid:
        pass
    texts: list[str | None] = []
    flags: list[str | None] = []
    for value in values:
        if value is None:
            texts.append(None)
            flags.append(None)
            continue
        try:
            texts.append(value.decode("utf-8"))
            flags.append(None)
        except UnicodeDecodeError:
            texts.append(None)
            flags.append(repr(value)[:80] + " (not UTF-8)")
    return pa.array(texts, pa.string()), flags


def json_wire(
    values: Sequence[Any], target: T.DataType
) -> tuple[pa.Array, list[str | None] | None]:
    """Decoded JSON values (None: null or missing) as a wire column for ``target``,
    with the flags of values of the wrong kind (their JSON text)."""
    flags: list[str | None] = [None] * len(values)
    if any(isinstance(v, (list, dict)) for v in values):
        values = list(values)
        for row, value in enumerate(values):
            if _too_deep(value):
                values[row] = None
                flags[row] = f"a JSON value nested deeper than {MAX_DEPTH} levels"
    array = _wire(values, target, flags)
    return array, flags if any(f is not None for f in flags) else None


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests arrays and objects deeper than `MAX_DEPTH` (found
    without recursion, so any depth can be measured)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > MAX_DEPTH:
                return True
            members = item.values() if isinstance(item, dict) else item
            stack.extend((member, depth + 1) for member in members
                         if isinstance(member, (list, dict)))
    return False


def _members(owner: Sequence[int], values: Sequence[Any], flags: list[str | None],
             container: type[list[Any]] | type[dict[Any, Any]],
             kind: str) -> tuple[pa.Array, pa.Array, list[Any], list[int]]:
    """The offsets, null mask, members (items of an object) and members' rows of JSON
    arrays or objects; a value of another kind is flagged and read as null."""
    offsets, nulls, rows = [0], [], []
    members: list[Any] = []
    for row, value in zip(owner, values, strict=True):
        if isinstance(value, container):
            members.extend(value.items() if isinstance(value, dict) else value)
            rows.extend([row] * len(value))
        elif value is not None:
            _flag(flags, row, value, f"expected a JSON {kind}")
        nulls.append(not isinstance(value, container))
        offsets.append(len(members))
    return pa.array(offsets, pa.int32()), pa.array(nulls, pa.bool_()), members, rows


def _flag(flags: list[str | None], row: int, value: Any, why: str) -> None:
    if flags[row] is None:
        flags[row] = f"{json_text(value)[:60]} ({why})"


def _wire(values: Sequence[Any], target: T.DataType, flags: list[str | None],
          rows: Sequence[int] | None = None) -> pa.Array:
    """``rows[i]`` is the top-level row of ``values[i]`` (for flags of nested values)."""
    owner = rows if rows is not None else range(len(values))
    if isinstance(target, STRING_TYPES):
        return pa.array(
            [v if isinstance(v, str) or v is None else json_text(v) for v in values], pa.string()
        )
    if isinstance(target, T.BinaryType):
        out: list[bytes | None] = []
        for row, value in zip(owner, values, strict=True):
            if value is None:
                out.append(None)
                continue
            try:
                if not isinstance(value, str):
                    raise ValueError
                out.append(base64.b64decode(value.encode("ascii"), validate=True))
            except (ValueError, binascii.Error, UnicodeEncodeError):
                out.append(None)
                _flag(flags, row, value, "expected a base64 string")
        return pa.array(out, pa.binary())
    if isinstance(target, T.ArrayType):
        offsets, mask, children, rows = _members(owner, values, flags, list, "array")
        child = _wire(children, target.elementType, flags, rows)
        return pa.ListArray.from_arrays(offsets, child, mask=mask)
    if isinstance(target, T.MapType):
        offsets, mask, pairs, rows = _members(owner, values, flags, dict, "object")
        key_array = pa.array([str(key) for key, _ in pairs], pa.string())
        item_array = _wire([item for _, item in pairs], target.valueType, flags, rows)
        return pa.MapArray.from_arrays(offsets, key_array, item_array, mask=mask)
    if isinstance(target, T.StructType):
        nulls = []
        for row, value in zip(owner, values, strict=True):
            if value is not None and not isinstance(value, dict):
                _flag(flags, row, value, "expected a JSON object")
            nulls.append(not isinstance(value, dict))
        fields = [
            _wire([v.get(f.name) if isinstance(v, dict) else None for v in values],
                  f.dataType, flags, list(owner))
            for f in target.fields
        ]
        return pa.StructArray.from_arrays(
            fields, names=[f.name for f in target.fields], mask=pa.array(nulls, pa.bool_())
        )
    # Scalars: the JSON kind must suit the type; the text then casts like any text.
    texts: list[str | None] = []
    for row, value in zip(owner, values, strict=True):
        if value is None:
            texts.append(None)
        elif isinstance(target, T.BooleanType):
            if isinstance(value, bool):
                texts.append("true" if value else "false")
            else:
                texts.append(None)
                _flag(flags, row, value, "expected true or false")
        elif isinstance(target, NUMBER_TYPES):
            if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
                texts.append(str(value))
            elif isinstance(value, str) and (
                isinstance(target, T.DecimalType)
                or (isinstance(target, FLOAT_TYPES) and value in _SPECIAL_FLOATS)
            ):
                # As Spark's JSON reader: decimals may be strings (exact digits kept), and
                # floats the strings NaN and Infinity, which JSON numbers cannot be.
                texts.append(value)
            else:
                texts.append(None)
                _flag(flags, row, value, "expected a JSON number")
        elif isinstance(target, DATETIME_TYPES):
            if isinstance(value, str):
                texts.append(value)
            else:
                texts.append(None)
                _flag(flags, row, value, "expected an ISO 8601 string")
        else:  # pragma: no cover - every Spark type of a schema is handled above
            texts.append(None)
            _flag(flags, row, value, f"no JSON form of {target.simpleString()}")
    return pa.array(texts, pa.string())
