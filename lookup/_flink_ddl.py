"""A Flink ``CREATE TABLE`` statement read into what [`from_ddl`][lookup.LookupOptions.from_ddl]
builds from: the ``WITH (...)`` options (each with where it is written), the columns as a
Spark schema, and the ``PRIMARY KEY``.

Flink's syntax, as its SQL client takes it: ``CREATE [TEMPORARY] TABLE [IF NOT EXISTS]
[catalog.][db.]name (columns, constraints) [COMMENT '...'] [DISTRIBUTED ...]
[PARTITIONED BY (...)] [WITH (...)]``; names plain or in backticks (```` `a``b` ````),
strings in single quotes (``''`` for a quote), ``--`` and ``/* */`` comments, one
statement with an optional ``;``. Flink's types map to Spark's as ``from_dict`` plus
``schema=`` reads them (docs/flink-table-options.md has the table): text of any length
is STRING, ``TIMESTAMP(p)`` is TIMESTAMP_NTZ, ``TIMESTAMP_LTZ(p)`` TIMESTAMP, ``TIME(p)``
STRING (as the connectors read a database's TIME), ``NOT NULL`` and ``COMMENT`` kept.
What a lookup cannot serve is refused, naming the column and why: MULTISET, INTERVAL, RAW,
computed columns (Flink SQL expressions), metadata columns, ``PARTITIONED BY``, ``LIKE``,
``AS SELECT``. A ``WATERMARK`` is ignored (it orders a stream; a lookup reads the table
as it is when a key is looked up), and so is a computed ``AS PROCTIME()`` column (a
lookup join is always at processing time). Every error is a
[`ConfigError`][spark_lookup.ConfigError] naming the line and column.

Hand-written, not sqlglot: sqlglot (30.30, measured on Flink's own DDL examples) has no
Flink dialect, and none of its dialects reads them. None parses ``ROW<a INT>``,
``ROW(a INT)``, ``ARRAY<INT NOT NULL>``, ``MULTISET<T>`` or a ``METADATA`` column; only
RisingWave's parses ``WATERMARK FOR``, and it refuses backtick names; only Hive's and
Spark's parse ``PARTITIONED BY``, and they read ``'it''s'`` as ``CONCAT('it', 's')``
(a password silently losing its quote), and Spark's reads ``TIMESTAMP(3)`` as a time-zoned
timestamp; MySQL's and PostgreSQL's read ``FLOAT`` as DOUBLE. A dialect of our own would
override sqlglot's private parser methods, which change between its major releases. The
grammar needed is one statement of a few clauses.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import types as T

from spark_lookup.errors import ConfigError

__all__ = ["FlinkTable", "read_create_table"]


@dataclass(frozen=True)
class FlinkTable:
    """What a ``CREATE TABLE`` statement declares for a lookup."""

    name: str
    """The table's name as written (``catalog.db.table``); Flink derives no connector
    option from it."""
    schema: T.StructType
    """The physical columns, in order, as Spark types."""
    primary_key: tuple[str, ...] | None
    """``PRIMARY KEY (...) NOT ENFORCED``'s columns (NOT NULL, as in Flink)."""
    options: Mapping[str, str]
    """``WITH (...)``, in order."""
    option_places: Mapping[str, tuple[int, int]]
    """Where each option key is written: line and column, from 1."""
    ignored: tuple[str, ...]
    """What was read and not applied (a watermark, ``COMMENT``...), each with why."""

    def where(self, message: str) -> str:
        """`` (line L, column C of the DDL)`` for the option key ``message`` names first
        (the subject of an option error), or ``""`` when it names none."""
        named = [(message.find(repr(key)), key) for key in self.options
                 if repr(key) in message]
        if not named:
            return ""
        line, column = self.option_places[min(named)[1]]
        return f" (line {line}, column {column} of the DDL)"


@dataclass(frozen=True)
class _Token:
    kind: str  # word, name (a backtick-quoted name), string, number, symbol, end
    text: str  # a word as written, a name or string unquoted
    line: int
    column: int

    def shown(self) -> str:
        return "the end of the statement" if self.kind == "end" else repr(self.text)


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n]*|/\*.*?\*/)
  | (?P<string>'(?:[^']|'')*')
  | (?P<name>`(?:[^`]|``)+`)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<number>[0-9]+)
  | (?P<symbol>.)
""", re.VERBOSE | re.DOTALL)


def _tokens(sql: str) -> list[_Token]:
    tokens = []
    line, line_start = 1, 0
    for match in _TOKEN.finditer(sql):
        kind, text = match.lastgroup or "symbol", match.group()
        column = match.start() - line_start + 1
        if kind == "symbol" and (text in _UNCLOSED or sql.startswith("/*", match.start())):
            raise _error(_Token(kind, text, line, column),
                         _UNCLOSED.get(text, "an unclosed /* comment"))
        if kind == "string":
            tokens.append(_Token(kind, text[1:-1].replace("''", "'"), line, column))
        elif kind == "name":
            tokens.append(_Token(kind, text[1:-1].replace("``", "`"), line, column))
        elif kind not in ("space", "comment"):
            tokens.append(_Token(kind, text, line, column))
        newlines = text.count("\n")
        if newlines:
            line += newlines
            line_start = match.start() + text.rindex("\n") + 1
    tokens.append(_Token("end", "", line, len(sql) - line_start + 1))
    return tokens


_UNCLOSED = {"'": "an unclosed string ('...', with '' for a quote inside)",
             "`": "an unclosed name (`...`, with `` for a backtick inside)",
             '"': "a double quote: Flink quotes names with backticks (`name`) and strings "
                  "with single quotes ('text')"}


def _error(token: _Token, message: str) -> ConfigError:
    return ConfigError(f"Flink DDL, line {token.line}, column {token.column}: {message}")


# --- Flink types -> Spark types

_TEXT = T.StringType()
_SCALARS: Mapping[str, T.DataType] = {
    "STRING": _TEXT,
    "BOOLEAN": T.BooleanType(),
    "BYTES": T.BinaryType(),
    "TINYINT": T.ByteType(),
    "SMALLINT": T.ShortType(),
    "INT": T.IntegerType(),
    "INTEGER": T.IntegerType(),
    "BIGINT": T.LongType(),
    "FLOAT": T.FloatType(),
    "REAL": T.FloatType(),
    "DOUBLE": T.DoubleType(),
    "DATE": T.DateType(),
}
_SIZED_TEXT = ("CHAR", "CHARACTER", "VARCHAR")
_SIZED_BINARY = ("BINARY", "VARBINARY")
_DECIMALS = ("DECIMAL", "DEC", "NUMERIC")
_REFUSED = {
    "MULTISET": "a bag of values, which Spark has no type for",
    "INTERVAL": "Spark's interval types are not read by the library's connectors",
    "RAW": "a Java object in Flink's serialization, which Spark cannot read",
    "NULL": "the type of the NULL literal only",
    "VARIANT": "semi-structured values, which the library's connectors do not read",
    "DESCRIPTOR": "a Flink table function argument, not a column type",
}
_TYPE_NAMES = sorted({*_SCALARS, *_SIZED_TEXT, *_SIZED_BINARY, *_DECIMALS, "DOUBLE PRECISION",
                      "TIME", "TIMESTAMP", "TIMESTAMP_LTZ", "ARRAY", "MAP", "ROW"})


@dataclass(frozen=True)
class _Type:
    spark: T.DataType
    nullable: bool = True


# --- the statement

# Reserved words in Flink: a column of one of these names is written in backticks.
_ELEMENT_WORDS = ("WATERMARK", "PRIMARY", "CONSTRAINT", "UNIQUE")


class _DdlReader:
    """A recursive-descent parser of one CREATE TABLE statement, a method per grammar rule.

    One job, so one class over 400 lines: the type rules (``data_type`` to ``row``) share
    the token cursor and the error positions with the statement rules that call them.
    """

    def __init__(self, sql: str) -> None:
        self.tokens = _tokens(sql)
        self.pos = 0
        self.ignored: list[str] = []

    # tokens

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def take(self) -> _Token:
        token = self.peek()
        if token.kind != "end":
            self.pos += 1
        return token

    def at(self, *words: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind == "word" and token.text.upper() in words

    def accept(self, *words: str) -> bool:
        if all(self.at(word, ahead=i) for i, word in enumerate(words)):
            self.pos += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        for word in words:
            if not self.accept(word):
                raise self.error(f"expected {word}, found {self.peek().shown()}")

    def at_symbol(self, symbol: str) -> bool:
        token = self.peek()
        return token.kind == "symbol" and token.text == symbol

    def accept_symbol(self, symbol: str) -> bool:
        if self.at_symbol(symbol):
            self.pos += 1
            return True
        return False

    def expect_symbol(self, symbol: str, what: str = "") -> _Token:
        token = self.peek()
        if not self.accept_symbol(symbol):
            raise self.error(f"expected {symbol!r}{what}, found {token.shown()}")
        return token

    def error(self, message: str, token: _Token | None = None) -> ConfigError:
        return _error(token or self.peek(), message)

    def name(self, what: str) -> str:
        token = self.peek()
        if token.kind not in ("word", "name"):
            raise self.error(f"expected {what}, found {token.shown()}")
        return self.take().text

    def string(self, what: str) -> str:
        token = self.peek()
        if token.kind != "string":
            hint = f" (quote it: '{token.text}')" if token.kind in ("word", "number") else ""
            raise self.error(f"expected {what} as a quoted string{hint}, found "
                             f"{token.shown()}")
        return self.take().text

    def number(self, what: str) -> int:
        token = self.peek()
        if token.kind != "number":
            raise self.error(f"expected {what}, found {token.shown()}")
        return int(self.take().text)

    def skip_expression(self) -> list[_Token]:
        """The tokens of an expression, up to a ``,`` or ``)`` outside its parentheses
        or a ``COMMENT``."""
        taken: list[_Token] = []
        depth = 0
        while True:
            token = self.peek()
            if token.kind == "end":
                raise self.error("the expression is not closed")
            if depth == 0 and ((token.kind == "symbol" and token.text in ",)")
                               or self.at("COMMENT")):
                if not taken:
                    raise self.error(f"expected an expression, found {token.shown()}")
                return taken
            if token.kind == "symbol":
                depth += {"(": 1, ")": -1}.get(token.text, 0)
            taken.append(self.take())

    # the statement

    def statement(self) -> FlinkTable:
        self.expect("CREATE")
        if self.accept("OR"):
            raise self.error("CREATE OR REPLACE TABLE ... AS SELECT writes a table; give the "
                             "CREATE TABLE statement of the table to look up")
        self.accept("TEMPORARY")
        if not self.accept("TABLE"):
            raise self.error(f"expected TABLE, found {self.peek().shown()}: only a CREATE "
                             "TABLE statement declares a lookup table")
        if self.accept("IF"):
            self.expect("NOT", "EXISTS")
        name = self.qualified_name()
        if not self.at_symbol("("):
            raise self.error(f"expected '(' and the columns, found {self.peek().shown()}"
                             + self.refused_clause())
        fields, primary_key = self.elements()
        self.table_clauses()
        options, places = self.with_clause()
        if not self.at_symbol(";") and self.peek().kind != "end":
            raise self.error(f"unexpected {self.peek().shown()} after the statement"
                             + self.refused_clause())
        self.accept_symbol(";")
        if self.peek().kind != "end":
            raise self.error(f"a second statement begins here ({self.peek().shown()}): give "
                             "one CREATE TABLE statement")
        return FlinkTable(name, T.StructType(fields), primary_key, options, places,
                          tuple(self.ignored))

    def refused_clause(self) -> str:
        if self.at("LIKE"):
            return (": CREATE TABLE ... LIKE copies a table this statement does not hold; "
                    "write out its columns and options")
        if self.at("AS"):
            return ": CREATE TABLE ... AS SELECT writes a table; give the table to look up"
        return ""

    def qualified_name(self) -> str:
        parts = [self.name("the table's name")]
        while self.accept_symbol("."):
            parts.append(self.name("a name after '.'"))
        return ".".join(parts)

    def names(self, what: str) -> list[tuple[str, _Token]]:
        self.expect_symbol("(", f" before the {what}")
        names = []
        while True:
            token = self.peek()
            names.append((self.name(f"a column name of the {what}"), token))
            if not self.accept_symbol(","):
                self.expect_symbol(")", f" closing the {what}")
                return names

    def elements(self) -> tuple[list[T.StructField], tuple[str, ...] | None]:
        opening = self.expect_symbol("(")
        fields: list[T.StructField] = []
        keys: list[tuple[str, _Token]] | None = None
        key_token: _Token | None = None
        while True:
            start = self.peek()
            if self.at(*_ELEMENT_WORDS):
                declared = self.constraint_or_watermark()
                if declared is not None:
                    if keys is not None:
                        raise self.error("a second PRIMARY KEY: a table has one", start)
                    keys, key_token = declared, start
            else:
                column = self.column()
                if column is not None:
                    field, column_key = column
                    if column_key:
                        if keys is not None:
                            raise self.error("a second PRIMARY KEY: a table has one", start)
                        keys, key_token = [(field.name, start)], start
                    if field.name in {f.name for f in fields}:
                        raise self.error(f"column {field.name!r} is declared twice", start)
                    fields.append(field)
            if not self.accept_symbol(","):
                self.expect_symbol(")", " or ',' between columns")
                break
        if not fields:
            raise self.error("the table declares no column", opening)
        names = [f.name for f in fields]
        if keys is None:
            return fields, None
        for key, token in keys:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; columns: {names}"
                raise self.error(f"PRIMARY KEY column {key!r} is not a column of the "
                                 f"table{hint}", token)
        key_names = [key for key, _ in keys]
        if len(set(key_names)) != len(key_names):
            raise self.error(f"PRIMARY KEY repeats a column: {key_names}", key_token)
        # As in Flink, a primary key's columns are NOT NULL.
        fields = [T.StructField(f.name, f.dataType, f.nullable and f.name not in key_names,
                                f.metadata) for f in fields]
        return fields, tuple(key_names)

    def constraint_or_watermark(self) -> list[tuple[str, _Token]] | None:
        start = self.peek()
        if self.accept("WATERMARK"):
            self.expect("FOR")
            column = self.name("the rowtime column")
            self.expect("AS")
            self.skip_expression()
            self.ignored.append(f"WATERMARK FOR {column} (line {start.line}): it orders a "
                                "stream; a lookup reads the table as it is at the lookup")
            return None
        if self.accept("CONSTRAINT"):
            self.name("the constraint's name")
        if self.accept("UNIQUE"):
            raise self.error("Flink has no UNIQUE constraint: declare PRIMARY KEY (...) NOT "
                             "ENFORCED", start)
        if not self.accept("PRIMARY"):
            raise self.error(f"expected PRIMARY KEY after CONSTRAINT, found "
                             f"{self.peek().shown()}")
        self.expect("KEY")
        keys = self.names("PRIMARY KEY")
        self.not_enforced(start)
        return keys

    def not_enforced(self, start: _Token) -> None:
        if not self.accept("NOT", "ENFORCED"):
            raise self.error("Flink takes a PRIMARY KEY only as NOT ENFORCED (it does not "
                             "check the data): write PRIMARY KEY ... NOT ENFORCED", start)

    def column(self) -> tuple[T.StructField, bool] | None:
        """A physical column and whether it is declared the primary key; None for a
        column that is ignored (``AS PROCTIME()``)."""
        start = self.peek()
        name = self.name("a column name")
        if self.accept("AS"):
            expression = self.skip_expression()
            self.accept_comment()
            if [t.text.upper() for t in expression] == ["PROCTIME", "(", ")"]:
                self.ignored.append(f"column {name!r} AS PROCTIME() (line {start.line}): a "
                                    "lookup join is always at processing time")
                return None
            raise self.error(f"column {name!r} is computed (AS ...): its expression is Flink "
                             "SQL, which a lookup does not evaluate; drop it and compute it "
                             "in Spark after the join (withColumn)", start)
        declared = self.data_type(name)
        is_key = False
        comment = None
        while True:
            here = self.peek()
            if self.at("CONSTRAINT", "PRIMARY"):
                if self.accept("CONSTRAINT"):
                    self.name("the constraint's name")
                self.expect("PRIMARY", "KEY")
                self.not_enforced(here)
                is_key = True
            elif self.at("METADATA"):
                raise self.error(f"column {name!r} is a metadata column (METADATA): the "
                                 "library's connectors read no connector metadata; drop it",
                                 start)
            elif self.at("COMMENT"):
                comment = self.accept_comment()
            else:
                break
        metadata = {"comment": comment} if comment is not None else None
        return T.StructField(name, declared.spark, declared.nullable, metadata), is_key

    def accept_comment(self) -> str | None:
        if self.accept("COMMENT"):
            return self.string("the comment")
        return None

    def table_clauses(self) -> None:
        while True:
            start = self.peek()
            if self.at("COMMENT"):
                self.accept_comment()
                self.ignored.append(f"the table's COMMENT (line {start.line})")
            elif self.accept("PARTITIONED"):
                raise self.error(
                    "PARTITIONED BY: partition values are read from directory names "
                    "(dt=2024-05-20/...), which the filesystem connector here does not do "
                    "(it reads the files directly in 'path'): point 'path' at one "
                    "partition's directory and drop PARTITIONED BY and its columns", start)
            elif self.accept("DISTRIBUTED"):
                # DISTRIBUTED BY [HASH|RANGE|...](cols) [INTO n BUCKETS] | INTO n BUCKETS
                while not self.at("WITH", "COMMENT", "PARTITIONED") and not self.at_symbol(
                        ";") and self.peek().kind != "end":
                    if self.accept_symbol("("):
                        self.skip_expression()
                        self.expect_symbol(")")
                    else:
                        self.take()
                self.ignored.append(f"DISTRIBUTED (line {start.line}): it says how the "
                                    "table is written, and a lookup only reads")
            else:
                return

    def with_clause(self) -> tuple[dict[str, str], dict[str, tuple[int, int]]]:
        options: dict[str, str] = {}
        places: dict[str, tuple[int, int]] = {}
        if not self.accept("WITH"):
            return options, places
        self.expect_symbol("(", " after WITH")
        if self.accept_symbol(")"):
            return options, places
        while True:
            token = self.peek()
            key = self.string("an option key")
            if key in places:
                line, column = places[key]
                raise self.error(f"option {key!r} is given twice (first at line {line}, "
                                 f"column {column})", token)
            self.expect_symbol("=", f" after option key {key!r}")
            options[key] = self.string(f"the value of option {key!r}")
            places[key] = (token.line, token.column)
            if not self.accept_symbol(","):
                self.expect_symbol(")", " or ',' between options")
                return options, places

    # types

    def data_type(self, column: str) -> _Type:
        declared = self.base_type(column)
        declared = self.nullability(declared)
        while self.at("ARRAY", "MULTISET"):  # SQL's postfix form: INT ARRAY
            token = self.take()
            if token.text.upper() == "MULTISET":
                raise self.refused(column, "MULTISET", token)
            declared = self.nullability(_Type(T.ArrayType(declared.spark, declared.nullable)))
        return declared

    def nullability(self, declared: _Type) -> _Type:
        if self.accept("NOT", "NULL"):
            return _Type(declared.spark, False)
        self.accept("NULL")
        return declared

    def refused(self, column: str, kind: str, token: _Token) -> ConfigError:
        return _error(token, f"column {column!r}: type {kind} is not supported: "
                             f"{_REFUSED[kind]}; drop the column or declare it another type")

    def base_type(self, column: str) -> _Type:
        token = self.peek()
        if token.kind != "word":
            raise self.error(f"column {column!r}: expected a type, found {token.shown()}")
        self.take()
        word = token.text.upper()
        if word in _REFUSED:
            raise self.refused(column, word, token)
        if word == "DOUBLE":
            self.accept("PRECISION")
            return _Type(_SCALARS["DOUBLE"])
        if word in _SCALARS:
            return _Type(_SCALARS[word])
        if word in _SIZED_TEXT:
            if word == "CHARACTER":
                self.accept("VARYING")
            self.size(column, word, 1, 2147483647)
            return _Type(_TEXT)
        if word in _SIZED_BINARY:
            self.size(column, word, 1, 2147483647)
            return _Type(T.BinaryType())
        if word in _DECIMALS:
            return _Type(self.decimal(column, word))
        if word in ("TIME", "TIMESTAMP", "TIMESTAMP_LTZ"):
            return _Type(self.time_type(column, word, token))
        if word in _NESTED:
            return _Type(_NESTED[word](self, column))
        close = difflib.get_close_matches(word, _TYPE_NAMES, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise self.error(f"column {column!r}: unknown type {token.text}{hint}", token)

    def size(self, column: str, word: str, low: int, high: int) -> int | None:
        if not self.accept_symbol("("):
            return None
        token = self.peek()
        size = self.number(f"the length of {word}")
        self.expect_symbol(")")
        if not low <= size <= high:
            raise self.error(f"column {column!r}: {word}({size}): the length must be "
                             f"{low} to {high}", token)
        return size

    def decimal(self, column: str, word: str) -> T.DecimalType:
        precision, scale = 10, 0  # Flink's default, as Spark's
        token = self.peek()
        if self.accept_symbol("("):
            precision = self.number(f"the precision of {word}")
            if self.accept_symbol(","):
                scale = self.number(f"the scale of {word}")
            self.expect_symbol(")")
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise self.error(f"column {column!r}: {word}({precision}, {scale}): the precision "
                             "must be 1 to 38 and the scale 0 to the precision", token)
        return T.DecimalType(precision, scale)

    def time_type(self, column: str, word: str, token: _Token) -> T.DataType:
        self.size(column, word, 0, 9)
        if word == "TIME":
            self.accept("WITHOUT", "TIME", "ZONE")
            # The connectors read a database's TIME as its text (docs/types.md).
            return _TEXT
        if word == "TIMESTAMP_LTZ" or self.accept("WITH", "LOCAL", "TIME", "ZONE"):
            return T.TimestampType()
        if self.at("WITH"):
            raise self.error(f"column {column!r}: TIMESTAMP WITH TIME ZONE is not a Flink "
                             "type: TIMESTAMP_LTZ (an instant) or TIMESTAMP (a wall-clock "
                             "time)", token)
        self.accept("WITHOUT", "TIME", "ZONE")
        return T.TimestampNTZType()

    def array(self, column: str) -> T.DataType:
        self.expect_symbol("<", " after ARRAY")
        element = self.data_type(column)
        self.close_angle("ARRAY")
        return T.ArrayType(element.spark, element.nullable)

    def map(self, column: str) -> T.DataType:
        self.expect_symbol("<", " after MAP")
        key = self.data_type(column)
        self.expect_symbol(",", " between MAP's key and value types")
        value = self.data_type(column)
        self.close_angle("MAP")
        return T.MapType(key.spark, value.spark, value.nullable)

    def row(self, column: str) -> T.DataType:
        closing = ">" if self.accept_symbol("<") else ")" if self.accept_symbol("(") else None
        if closing is None:
            raise self.error(f"expected '<' or '(' after ROW, found {self.peek().shown()}")
        fields: list[T.StructField] = []
        while not self.at_symbol(closing):
            name = self.name("a field name of ROW")
            declared = self.data_type(f"{column}.{name}")
            description = self.string("a field description") if self.peek().kind == (
                "string") else None
            fields.append(T.StructField(name, declared.spark, declared.nullable,
                                        {"comment": description} if description else None))
            if not self.accept_symbol(","):
                break
        if closing == ">":
            self.close_angle("ROW")
        else:
            self.expect_symbol(")", " closing ROW(...)")
        return T.StructType(fields)

    def close_angle(self, word: str) -> None:
        token = self.peek()
        if token.kind == "symbol" and token.text == ">":
            self.pos += 1
            return
        raise self.error(f"expected '>' closing {word}<...>, found {token.shown()}")


_NESTED: Mapping[str, Callable[[_DdlReader, str], T.DataType]] = {
    "ARRAY": _DdlReader.array, "MAP": _DdlReader.map, "ROW": _DdlReader.row,
}


def read_create_table(sql: object) -> FlinkTable:
    """Read one Flink ``CREATE TABLE`` statement.

    Raises
    ------
    ConfigError
        For anything else, a syntax error, or what a lookup cannot serve (a type
        without a Spark counterpart, a computed or metadata column, ``PARTITIONED BY``,
        ``LIKE``); the message names the line, column and the column of the table.
    """
    if not isinstance(sql, str):
        raise ConfigError(f"the DDL must be a string, got {type(sql).__name__}")
    return _DdlReader(sql).statement()
