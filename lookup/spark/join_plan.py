"""Planning a lookup join on the driver: ``on``, ``how``, ``columns`` and ``prefix``
checked against the stream's schema and the provider's, before any task runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import types as T

from lookup.providers import LookupProvider
from lookup.spark.assemble import JoinShape, PointInTime
from lookup.versions import comparable
from spark_lookup.errors import ConfigError
from spark_lookup.schema import to_arrow_type
from spark_lookup.shown import shown
from spark_lookup.type_families import EQUALITY_FAMILIES

__all__ = ["JoinPlan", "keys_compatible", "plan_join"]

def _family(data_type: T.DataType) -> int | None:
    for number, family in enumerate(EQUALITY_FAMILIES):
        if isinstance(data_type, family):
            return number
    return None


def keys_compatible(stream_type: T.DataType, dim_type: T.DataType) -> bool:
    """Whether stream key values of ``stream_type`` can equal dimension keys of
    ``dim_type`` without a cast: the same family (integers, floating point, strings,
    decimals, ...), as an equi-join in SQL would compare them."""
    family = _family(stream_type)
    return family is not None and family == _family(dim_type)


def _normalize_on(on: object, provider: LookupProvider, stream_columns: Sequence[str]
                  ) -> list[tuple[str, str]]:
    """``on`` as (stream column, dimension key column) pairs in the provider's key order.

    Each side is checked against its own columns, so the error names the side that lacks
    a column and lists that side's columns.
    """
    if isinstance(on, str):
        pairs = [(on, on)]
    elif isinstance(on, Mapping):
        pairs = [(str(s), str(d)) for s, d in on.items()]
    elif isinstance(on, Sequence) and all(isinstance(c, str) for c in on):
        pairs = [(c, c) for c in on]
    else:
        raise ConfigError("on must be a column name, a list of names, or a dict "
                          f"{{stream_column: dimension_key_column}}, got {shown(on)}")
    if not pairs:
        raise ConfigError("on is empty: name the key columns")
    absent = [s for s, _ in pairs if s not in stream_columns]
    if absent:
        raise ConfigError(
            f"on: {_not_a('column', absent)} of the stream DataFrame {list(stream_columns)}"
        )
    dim_names = [d for _, d in pairs]
    keys = list(provider.key_columns)
    schema_names = provider.schema.fieldNames()
    unknown = [d for d in dim_names if d not in schema_names]
    not_keys = [d for d in dim_names if d in schema_names and d not in keys]
    repeated = sorted({d for d in dim_names if dim_names.count(d) > 1})
    unnamed = [k for k in keys if k not in dim_names]
    problems = []
    if unknown:
        problems.append(f"{_not_a('column', unknown)} of the provider's schema {schema_names}")
    if not_keys:
        problems.append(f"{_not_a('key column', not_keys)} of the provider")
    if repeated:
        problems.append(f"{_names(repeated)} {_be(repeated)} named more than once")
    if unnamed and not (unknown or not_keys):
        problems.append(f"key column {_names(unnamed)} {_be(unnamed)} not named")
    if problems:
        hint = ""
        if (unknown or not_keys) and not isinstance(on, Mapping):
            hint = (" A string or list names columns of the same name on both sides; join a "
                    f"stream column of another name with "
                    f"on={{stream_column: {(unnamed or keys)[0]!r}}}")
        raise ConfigError(
            f"on={on!r}: {'; '.join(problems)}; the provider is keyed by {keys}.{hint}"
        )
    by_dim = {d: s for s, d in pairs}
    return [(by_dim[d], d) for d in keys]  # in the provider's key order


def _names(names: Sequence[str]) -> str:
    return repr(names[0]) if len(names) == 1 else repr(list(names))


def _be(names: Sequence[str]) -> str:
    return "is" if len(names) == 1 else "are"


def _not_a(what: str, names: Sequence[str]) -> str:
    """``'x' is not a {what}`` or ``['x', 'y'] are not {what}s``."""
    return (f"{names[0]!r} is not a {what}" if len(names) == 1
            else f"{list(names)!r} are not {what}s")


_JOIN_KINDS = {"left": "left", "leftouter": "left", "left_outer": "left", "inner": "inner"}


def _join_kind(how: object) -> str:
    """``"left"`` or ``"inner"`` from Spark's names for them, case-insensitive."""
    kind = _JOIN_KINDS.get(how.lower()) if isinstance(how, str) else None
    if kind is None:
        raise ConfigError(
            f"how must be a left or an inner join ({', '.join(map(repr, _JOIN_KINDS))}, any "
            f"case), got {how!r}"
        )
    return kind


def _point_in_time(stream_schema: T.StructType, provider: LookupProvider,
                   as_of: object, time_zone: str) -> PointInTime | None:
    """How rows pick their version, checked: None for a provider without validity."""
    validity = provider.validity
    if as_of is not None and not isinstance(as_of, str):
        raise ConfigError(f"as_of must be a column name, got {shown(as_of)}")
    if validity is None:
        if as_of is not None:
            raise ConfigError(
                f"as_of={as_of!r}: {provider.describe()} has no validity, so its keys have "
                "one version each; give the provider validity=lookup.Validity(...)")
        return None
    version_types = [provider.schema[name].dataType for name in validity.columns]
    wall = not isinstance(version_types[0], T.TimestampType)
    zone = time_zone if wall else None
    retention = (None if validity.retention is None
                 else validity.retention // timedelta(microseconds=1))
    if as_of is None:
        return PointInTime(None, zone, retention)
    names = stream_schema.fieldNames()
    if as_of not in names:
        raise ConfigError(f"as_of: {as_of!r} is not a column of the stream DataFrame {names}")
    as_of_type = stream_schema[as_of].dataType
    for name, version_type in zip(validity.columns, version_types, strict=True):
        if not comparable(as_of_type, version_type):
            raise ConfigError(
                f"as_of: stream column {as_of!r} is {as_of_type.simpleString()} but the "
                f"version column {name!r} is {version_type.simpleString()}: they compare "
                "only through a time zone. TIMESTAMP goes with TIMESTAMP; TIMESTAMP_NTZ and "
                "DATE with each other; cast one side in the zone you mean")
    return PointInTime(as_of, zone, retention)


@dataclass(frozen=True)
class JoinPlan:
    """A validated lookup join: what executors do and the output schema."""

    shape: JoinShape
    schema: T.StructType


def plan_join(
    stream_schema: T.StructType,
    provider: LookupProvider,
    on: object,
    how: str = "left",
    columns: Sequence[str] | str | None = None,
    prefix: str | None = None,
    as_of: str | None = None,
    time_zone: str = "UTC",
) -> JoinPlan:
    """Validate a lookup join on the driver, before any task runs.

    ``as_of`` names the stream column whose time picks each row's version of a provider
    with a validity; without it such a provider answers the version valid when the
    batch is joined, on the wall clock of ``time_zone`` (the session's) for
    TIMESTAMP_NTZ and DATE versions (and a retention's "now" is read there too).

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an unknown column on either side, key types that cannot
        match, a bad ``how``, ``columns`` or ``prefix``, or an output name clash; for an
        ``as_of`` the stream lacks, of a type its versions' cannot be compared with
        without a time zone, or given for a provider without validity.
    """
    if not isinstance(provider, LookupProvider):
        raise ConfigError(f"provider must be a lookup provider, got {type(provider).__name__}")
    how = _join_kind(how)
    if prefix is not None and (not isinstance(prefix, str) or not prefix):
        raise ConfigError(f"prefix must be a non-empty string, got {prefix!r}")
    stream_fields = {f.name: f for f in stream_schema.fields}
    pairs = _normalize_on(on, provider, list(stream_fields))
    stream_of = {d: s for s, d in pairs}
    dim_schema = provider.schema
    for stream_column, dim_column in pairs:
        field = stream_fields[stream_column]
        dim_type = dim_schema[dim_column].dataType
        if not keys_compatible(field.dataType, dim_type):
            raise ConfigError(
                f"on: stream column {stream_column!r} is {field.dataType.simpleString()} but "
                f"dimension key {dim_column!r} is {dim_type.simpleString()}; cast one side "
                f"(e.g. F.col({stream_column!r}).cast({dim_type.simpleString()!r}))"
            )
    keys = set(provider.key_columns)
    value_columns = [f.name for f in dim_schema.fields if f.name not in keys]
    if columns is None:
        chosen = value_columns
    else:
        chosen_list = [columns] if isinstance(columns, str) else list(columns)
        for name in chosen_list:
            if name in keys:
                raise ConfigError(
                    f"columns: {name!r} is a key column; its values equal the stream's "
                    f"{stream_of[name]!r}"
                )
            if name not in value_columns:
                raise ConfigError(
                    f"columns: {name!r} is not a column of the dimension {value_columns}"
                )
        if len(set(chosen_list)) != len(chosen_list):
            raise ConfigError(f"columns repeats a name: {chosen_list}")
        chosen_set = set(chosen_list)
        chosen = [name for name in value_columns if name in chosen_set]  # schema order
    out_names = [f"{prefix}{name}" if prefix else name for name in chosen]
    clashes = [name for name in out_names if name in stream_fields]
    if clashes:
        hint = "choose another prefix" if prefix else "pass prefix= (or columns=)"
        raise ConfigError(f"output column(s) {clashes} exist in the stream DataFrame too; {hint}")
    out_fields = list(stream_schema.fields)
    for name, out_name in zip(chosen, out_names, strict=True):
        field = dim_schema[name]
        nullable = True if how == "left" else field.nullable
        out_fields.append(T.StructField(out_name, field.dataType, nullable, field.metadata))
    shape = JoinShape(stream_keys=tuple(s for s, _ in pairs), dim_columns=tuple(chosen),
                      out_names=tuple(out_names),
                      dim_types=tuple(to_arrow_type(dim_schema[n].dataType) for n in chosen),
                      how=how,
                      point_in_time=_point_in_time(stream_schema, provider, as_of, time_zone))
    return JoinPlan(shape, T.StructType(out_fields))
