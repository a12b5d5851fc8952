"""Redis values to rows: hashes and strings hold text, JSON documents hold JSON.

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

`reply_rows` reads a batch of replies into wire columns, and `conform_rows` makes them
rows of the table's schema: cast, checked against the key they were read for, filtered.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from connectors.convert import Conformer
from connectors.policy import BadValue, BadValuePolicy, BadValueStats
from connectors.predicates import Predicate, predicates_mask
from connectors.redis.template import KeyTemplate
from spark_lookup.type_families import DATETIME_TYPES, FLOAT_TYPES, NUMBER_TYPES, STRING_TYPES

__all__ = [
    "MAX_DEPTH", "conform_rows", "json_text", "json_wire", "parse_json", "reply_rows",
    "text_wire",
]

MAX_DEPTH = 128
"""The deepest nesting of arrays and objects a JSON member's value may have."""

_SPECIAL_FLOATS = frozenset({"NaN", "Infinity", "+Infinity", "-Infinity"})


class _Table(Protocol):
    """What reading rows needs of a `RedisTable` (a protocol: the table imports this
    module, so this module may not import the table)."""

    name: str
    value_type: str
    schema: T.StructType
    arrow_schema: pa.Schema
    stored: list[str]
    value_column: str | None
    key_field: str | None
    key_columns: tuple[str, ...]
    template: KeyTemplate | None
    filters: tuple[Predicate, ...]
    mode: BadValuePolicy
    stats: BadValueStats
    conformer: Conformer


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


def reply_rows(
    table: _Table, replies: Sequence[Any]
) -> tuple[list[int], dict[str, pa.Array], dict[str, list[str | None] | None],
           dict[int, str]]:
    """Rows of the replies: the reply each row came from, the wire column of each
    stored column, their flags, and the replies whose document was malformed (with
    why)."""
    owners: list[int] = []
    malformed: dict[int, str] = {}
    if table.value_type == "hash":
        # HMGET answers every field; a hash holding none of them is no row.
        columns: list[list[Any]] = [[] for _ in table.stored]
        for i, reply in enumerate(replies):
            if reply is None or all(v is None for v in reply):
                continue
            owners.append(i)
            for column, value in zip(columns, reply, strict=True):
                column.append(value)
        wires, flags = {}, {}
        for name, values in zip(table.stored, columns, strict=True):
            wires[name], flags[name] = text_wire(values, table.schema[name].dataType)
        return owners, wires, flags, malformed
    if table.value_type == "string":
        assert table.value_column is not None
        values = []
        for i, reply in enumerate(replies):
            if reply is not None:
                owners.append(i)
                values.append(reply)
        wire, flag = text_wire(values, table.schema[table.value_column].dataType)
        wires = {table.value_column: wire}
        flags = {table.value_column: flag}
        for name in table.stored:
            if name != table.value_column:
                wires[name] = pa.nulls(len(values), pa.string())
                flags[name] = None
        return owners, wires, flags, malformed
    objects: list[dict[str, Any]] = []
    for i, reply in enumerate(replies):
        if reply is None:
            continue
        try:
            document = parse_json(reply)
            why = "not a JSON object or array of objects"
        except ValueError as exc:
            document, why = None, f"not JSON ({exc})"
        items = document if isinstance(document, list) else [document]
        if document is None or not all(isinstance(item, dict) for item in items):
            malformed[i] = f"{bytes(reply)[:60]!r}: {why}"
            owners.append(i)
            objects.append({})
            continue
        for item in items:
            owners.append(i)
            objects.append(item)
    wires, flags = {}, {}
    for name in table.stored:
        wires[name], flags[name] = json_wire(
            [o.get(name) for o in objects], table.schema[name].dataType
        )
    return owners, wires, flags, malformed

def conform_rows(
    table: _Table, names: Sequence[str | bytes], owners: list[int], wires: dict[str, pa.Array],
    flags: dict[str, list[str | None] | None], key_values: Mapping[str, pa.Array],
    key_present: Sequence[bool], malformed: dict[int, str], by_format: Sequence[int] = (),
) -> tuple[pa.RecordBatch, pa.BooleanArray | None]:
    """Conform the rows; ``key_values`` (aligned with the rows) fill or check the key
    columns; rows whose stored key differs from theirs, or that cannot be checked
    when the key is ambiguous (``key_present`` False), are dropped. The rows
    ``by_format`` (of a Redis key that reads as several keys) keep their stored key
    where it formats back to their Redis key, and are dropped otherwise."""
    count = len(owners)

    def describe(row: int) -> str:
        name = names[owners[row]]
        return repr(name.decode("utf-8", "replace") if isinstance(name, bytes) else name)

    if malformed:
        bad = [
            BadValue(table.name, describe(owners.index(i)), "(document)", text,
                     "a JSON object or array of objects")
            for i, text in malformed.items()
        ]
        if table.mode is BadValuePolicy.FAILFAST:
            table.stats.record(bad[:1], table.mode)
            raise bad[0].error()
        table.stats.record(bad, table.mode)
    ordered_wires: list[pa.Array] = []
    ordered_flags: list[pa.Array | None] = []
    for field in table.schema.fields:
        name = field.name
        if name == table.key_field:
            text = [names[i] for i in owners]
            if isinstance(field.dataType, T.BinaryType):
                ordered_wires.append(pa.array(
                    [t if isinstance(t, bytes) else t.encode() for t in text], pa.binary()))
            else:
                ordered_wires.append(pa.array(
                    [t.decode("utf-8", "replace") if isinstance(t, bytes) else t
                     for t in text], pa.string()))
            ordered_flags.append(None)
            continue
        ordered_wires.append(wires[name])
        flag = flags.get(name)
        ordered_flags.append(None if flag is None else pa.array(flag, pa.string()))
    columns, keep = table.conformer.conform(
        ordered_wires, describe,
        ordered_flags if any(f is not None for f in ordered_flags) else None,
    )
    key_ok = pa.repeat(True, count)
    names_list = table.schema.fieldNames()
    for name, expected in key_values.items():
        index = names_list.index(name)
        stored = columns[index]
        present = pc.is_valid(stored)
        # A stored key part must be the looked-up (or parsed) one, compared as values of
        # the column's type; where nothing is stored, the key fills it, unless the key
        # is ambiguous (and so cannot be checked).
        same = pc.fill_null(pc.equal(stored, expected), False)
        verified = pc.if_else(present, same, pa.array(key_present, pa.bool_()))
        key_ok = pc.and_(key_ok, verified)
        columns[index] = pc.if_else(present, stored, expected)
    if by_format:
        key_ok = _confirm_by_format(table, names, owners, columns, key_ok, by_format)
    keep_mask = key_ok if keep is None else pc.and_(keep, key_ok)
    batch = pa.RecordBatch.from_arrays(columns, schema=table.arrow_schema)
    if table.filters:
        keep_mask = pc.and_(keep_mask, predicates_mask(batch, table.filters))
    if pc.all(keep_mask).as_py():
        return batch, None
    return batch.filter(keep_mask), keep_mask

def _confirm_by_format(table: _Table, names: Sequence[str | bytes], owners: list[int],
                       columns: list[pa.Array], key_ok: pa.Array,
                       rows: Sequence[int]) -> pa.Array:
    """``key_ok`` with ``rows`` confirmed exactly where their stored key formats
    back to their Redis key (only such rows: a Python value each)."""
    assert table.template is not None
    names_list = table.schema.fieldNames()
    confirmed = key_ok.to_pylist()
    for row in rows:
        values = {name: columns[names_list.index(name)][row].as_py()
                  for name in table.key_columns}
        name = names[owners[row]]
        text = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
        confirmed[row] = (None not in values.values()
                          and table.template.format(values)[0] == text)
    return pa.array(confirmed, pa.bool_())


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
