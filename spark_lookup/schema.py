"""Dimension schemas: Spark DDL strings or ``StructType``, parsed without a JVM.

PySpark's own ``DataType.fromDDL`` asks the JVM, but caches, scans and triggers must work
(and be tested) without one, and executors' Python workers have no SparkContext. So the
DDL subset that dimension tables use is parsed here, into PySpark's pure-Python
``StructType``; the Arrow schema is derived from it with PySpark's own mapping.

Supported: ``name TYPE [NOT NULL] [COMMENT '...']`` fields separated by commas, names
plain or in backticks, ``name: TYPE`` also accepted; types BOOLEAN, TINYINT/BYTE,
SMALLINT/SHORT, INT/INTEGER, BIGINT/LONG, FLOAT/REAL, DOUBLE, DECIMAL(p, s)/DEC/NUMERIC,
STRING, VARCHAR(n), CHAR(n), BINARY, DATE, TIMESTAMP, TIMESTAMP_LTZ, TIMESTAMP_NTZ,
ARRAY<T>, MAP<K, V>, STRUCT<name: T, ...>.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from spark_lookup.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SchemaLike", "parse_schema", "to_arrow_schema", "to_arrow_type"]

SchemaLike = Any
"""A Spark DDL string (``"id BIGINT, name STRING"``) or a ``pyspark.sql.types.StructType``."""

_SIMPLE: dict[str, T.DataType] = {name: data_type for names, data_type in (
    (("boolean", "bool"), T.BooleanType()),
    (("tinyint", "byte"), T.ByteType()),
    (("smallint", "short"), T.ShortType()),
    (("int", "integer"), T.IntegerType()),
    (("bigint", "long"), T.LongType()),
    (("float", "real"), T.FloatType()),
    (("double",), T.DoubleType()),
    (("string", "text"), T.StringType()),
    (("binary",), T.BinaryType()),
    (("date",), T.DateType()),
    (("timestamp", "timestamp_ltz"), T.TimestampType()),
    (("timestamp_ntz",), T.TimestampNTZType()),
) for name in names}

_TOKEN = re.compile(
    r"\s*(?:(`(?:[^`]|``)+`)|('(?:[^'\\]|\\.)*')|([A-Za-z_][A-Za-z0-9_]*)|([0-9]+)|(.))",
    re.DOTALL,
)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        for match in _TOKEN.finditer(text):
            token = next((g for g in match.groups() if g is not None), None)
            if token is not None and not token.isspace():
                self.tokens.append(token)
        self.pos = 0

    def error(self, message: str) -> ConfigError:
        near = " ".join(self.tokens[self.pos : self.pos + 3]) or "end of input"
        return ConfigError(f"invalid schema {self.text!r}: {message} near {near!r}")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise self.error("unexpected end")
        self.pos += 1
        return token

    def expect(self, wanted: str) -> None:
        token = self.take()
        if token.lower() != wanted.lower():
            self.pos -= 1
            raise self.error(f"expected {wanted!r}")

    def accept(self, wanted: str) -> bool:
        token = self.peek()
        if token is not None and token.lower() == wanted.lower():
            self.pos += 1
            return True
        return False

    def name(self) -> str:
        token = self.take()
        if token.startswith("`"):
            return token[1:-1].replace("``", "`")
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
            return token
        self.pos -= 1
        raise self.error("expected a field name")

    def integer(self) -> int:
        token = self.take()
        if not token.isdigit():
            self.pos -= 1
            raise self.error("expected a number")
        return int(token)

    def data_type(self) -> T.DataType:
        word = self.take().lower()
        if word in _SIMPLE:
            return _SIMPLE[word]
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.accept("("):
                precision = self.integer()
                if self.accept(","):
                    scale = self.integer()
                self.expect(")")
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                raise self.error(f"invalid decimal({precision}, {scale})")
            return T.DecimalType(precision, scale)
        if word in ("varchar", "char"):
            self.expect("(")
            length = self.integer()
            self.expect(")")
            return T.VarcharType(length) if word == "varchar" else T.CharType(length)
        if word == "array":
            self.expect("<")
            element = self.data_type()
            self.expect(">")
            return T.ArrayType(element)
        if word == "map":
            self.expect("<")
            key = self.data_type()
            self.expect(",")
            value = self.data_type()
            self.expect(">")
            return T.MapType(key, value)
        if word == "struct":
            self.expect("<")
            fields = [] if self.peek() == ">" else self.fields(nested=True)
            self.expect(">")
            return T.StructType(fields)
        self.pos -= 1
        raise self.error(f"unknown type {word!r}")

    def fields(self, nested: bool) -> list[T.StructField]:
        fields = []
        while True:
            name = self.name()
            self.accept(":")
            data_type = self.data_type()
            nullable = True
            metadata: dict[str, Any] = {}
            while True:
                if self.accept("not"):
                    self.expect("null")
                    nullable = False
                elif self.accept("comment"):
                    token = self.take()
                    if not token.startswith("'"):
                        self.pos -= 1
                        raise self.error("expected a quoted comment")
                    metadata["comment"] = token[1:-1]
                else:
                    break
            fields.append(T.StructField(name, data_type, nullable, metadata or None))
            if not self.accept(","):
                return fields
            if nested and self.peek() == ">":
                return fields


def parse_schema(schema: SchemaLike, what: str = "schema") -> T.StructType:
    """Parse a Spark DDL string (or pass through a ``StructType``) into a ``StructType``.

    Runs anywhere (no SparkContext needed).

    Raises
    ------
    ConfigError
        (a ``ValueError``) for an unparsable string, duplicate or empty field names, or
        a value that is neither a string nor a ``StructType``; it names ``what``.
    """
    if isinstance(schema, T.StructType):
        struct = schema
    elif isinstance(schema, str):
        parser = _Parser(schema)
        if parser.peek() is None:
            raise ConfigError(f"{what} must not be empty")
        if (parser.peek() or "").lower() == "struct":
            data_type = parser.data_type()
            assert isinstance(data_type, T.StructType)
            struct = data_type
        else:
            struct = T.StructType(parser.fields(nested=False))
        if parser.peek() is not None:
            raise parser.error("unexpected trailing text")
    else:
        raise ConfigError(f"{what} must be a Spark DDL string or a pyspark StructType, "
                          f"got {type(schema).__name__}")
    names = [f.name for f in struct.fields]
    if not names:
        raise ConfigError(f"{what} has no fields")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{what} has duplicate field names: {duplicates}")
    return struct


def to_arrow_type(data_type: T.DataType) -> pa.DataType:
    """The Arrow type Spark uses for ``data_type`` in ``mapInArrow`` and Python data
    sources: PySpark's own mapping (``pyspark.sql.pandas.types.to_arrow_type``), with
    timestamps as UTC instants in microseconds and CHAR/VARCHAR as strings (Spark reads
    them as STRING in Python).

    Raises
    ------
    ConfigError
        For a type PySpark has no Arrow mapping for (intervals, variants...).
    """
    from pyspark.errors import PySparkException

    from spark_lookup.compat import spark_to_arrow_type

    try:
        return spark_to_arrow_type(_plain_strings(data_type))
    except (PySparkException, TypeError) as exc:
        raise ConfigError(f"type {data_type.simpleString()} has no Arrow mapping: {exc}") from exc


def _plain_strings(data_type: T.DataType) -> T.DataType:
    """``data_type`` with CHAR(n) and VARCHAR(n) (at any depth) as STRING."""
    if isinstance(data_type, (T.VarcharType, T.CharType)):
        return T.StringType()
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(_plain_strings(data_type.elementType), data_type.containsNull)
    if isinstance(data_type, T.MapType):
        return T.MapType(_plain_strings(data_type.keyType), _plain_strings(data_type.valueType),
                         data_type.valueContainsNull)
    if isinstance(data_type, T.StructType):
        return T.StructType(
            [T.StructField(f.name, _plain_strings(f.dataType), f.nullable) for f in data_type]
        )
    return data_type


def to_arrow_schema(schema: SchemaLike) -> pa.Schema:
    """The Arrow schema matching a Spark schema (a DDL string or ``StructType``)."""
    if isinstance(schema, (str, T.StructType)):
        return _arrow_schema(schema)
    return _convert_schema(schema)  # not a schema: parse_schema says so


def _convert_schema(schema: SchemaLike) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field(f.name, to_arrow_type(f.dataType), nullable=f.nullable)
                      for f in parse_schema(schema)])


# A load converts its source's schema several times (runner, readers, conversion): 37 us
# each through PySpark's mapping, against 5 us to hash a StructType (by its text).
# Arrow schemas are immutable, so one is shared.
_arrow_schema = functools.lru_cache(maxsize=256)(_convert_schema)
