"""The type table as data: each row is a Spark type, the values it must read as, and how
every backend stores them. The README's "Types" table says the same in prose, and
``test_readme_lists_every_case`` keeps them together.

Rows 1 and 2 hold values (edge values included: NaN, infinities, the extremes of each
integer width, BIGINT beyond 2**53, decimals at full precision, unicode, empty text and
bytes); row 3 holds nulls; key 4 has no row.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

UTC = dt.timezone.utc


@dataclass(frozen=True)
class Case:
    """One column of the contract table."""

    name: str
    spark: str
    """Its Spark type (DDL)."""
    values: tuple[Any, Any]
    """What rows 1 and 2 read as, in every backend and mode."""
    postgres: tuple[str, str, str] | None = None
    """Column type and the SQL literals of rows 1 and 2 (None: not on PostgreSQL)."""
    sqlite: tuple[str, Any, Any] | None = None
    """Declared type and the stored values of rows 1 and 2."""
    redis_text: tuple[bytes, bytes] | None = None
    """The hash field's text of rows 1 and 2."""
    redis_json: tuple[Any, Any] | None = field(default=None)
    """The JSON member's value of rows 1 and 2 (decoded JSON)."""
    mysql: tuple[str, str, str] | None = None
    """Column type and the SQL literals of rows 1 and 2 on MySQL/MariaDB (inserted with
    the session's time zone at +02:00, sql_mode empty)."""


def _ts(*args: int, offset: int = 0) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.timezone(dt.timedelta(hours=offset))).astimezone(UTC)


CASES: tuple[Case, ...] = (
    Case("b", "BOOLEAN", (True, False),
         postgres=("boolean", "true", "false"),
         sqlite=("BOOLEAN", 1, 0),
         redis_text=(b"true", b"0"),
         redis_json=(True, False),
         mysql=("BOOLEAN", "TRUE", "FALSE")),
    Case("i16", "SMALLINT", (-32768, 32767),
         postgres=("smallint", "-32768", "32767"),
         sqlite=("INTEGER", -32768, 32767),
         redis_text=(b"-32768", b"32767"),
         redis_json=(-32768, 32767),
         mysql=("SMALLINT", "-32768", "32767")),
    Case("i32", "INT", (-2147483648, 2147483647),
         postgres=("integer", "-2147483648", "2147483647"),
         sqlite=("INTEGER", -2147483648, 2147483647),
         redis_text=(b"-2147483648", b"2147483647"),
         redis_json=(-2147483648, 2147483647),
         mysql=("INT", "-2147483648", "2147483647")),
    Case("i64", "BIGINT", (9007199254740993, -9223372036854775808),
         postgres=("bigint", "9007199254740993", "-9223372036854775808"),
         sqlite=("BIGINT", 9007199254740993, -9223372036854775808),
         redis_text=(b"9007199254740993", b"-9223372036854775808"),
         redis_json=(9007199254740993, -9223372036854775808),
         mysql=("BIGINT", "9007199254740993", "-9223372036854775808")),
    Case("f32", "FLOAT", (1.5, -math.inf),
         postgres=("real", "1.5", "'-Infinity'"),
         sqlite=("REAL", 1.5, -math.inf),
         redis_text=(b"1.5", b"-inf"),
         redis_json=(Decimal("1.5"), "-Infinity")),
    Case("f64", "DOUBLE", (0.1, math.inf),
         postgres=("double precision", "0.1", "'Infinity'"),
         sqlite=("DOUBLE", 0.1, math.inf),
         redis_text=(b"0.1", b"Infinity"),
         redis_json=(Decimal("0.1"), "Infinity")),
    # NaN: SQLite stores a NaN as NULL, so this row is for the others.
    Case("nan", "DOUBLE", (math.nan, -0.0),
         postgres=("double precision", "'NaN'", "'-0'"),
         redis_text=(b"NaN", b"-0.0"),
         redis_json=("NaN", Decimal("-0.0"))),
    Case("dec", "DECIMAL(10,2)", (Decimal("12345678.90"), Decimal("-0.01")),
         postgres=("numeric(10,2)", "12345678.90", "-0.01"),
         sqlite=("DECIMAL(10,2)", "12345678.90", "-0.01"),
         redis_text=(b"12345678.90", b"-0.01"),
         redis_json=(Decimal("12345678.90"), "-0.01"),
         mysql=("DECIMAL(10,2)", "12345678.90", "-0.01")),
    Case("dec38", "DECIMAL(38,18)",
         (Decimal("12345678901234567890.123456789012345678"), Decimal("0E-18")),
         postgres=("numeric", "12345678901234567890.123456789012345678", "0"),
         sqlite=("TEXT", "12345678901234567890.123456789012345678", "0"),
         redis_text=(b"12345678901234567890.123456789012345678", b"0"),
         redis_json=(Decimal("12345678901234567890.123456789012345678"), 0),
         mysql=("DECIMAL(38,18)", "12345678901234567890.123456789012345678", "0")),
    Case("s", "STRING", ("h\u00e9llo \U0001f600", ""),
         postgres=("text", "'h\u00e9llo \U0001f600'", "''"),
         sqlite=("TEXT", "h\u00e9llo \U0001f600", ""),
         redis_text=("h\u00e9llo \U0001f600".encode(), b""),
         redis_json=("h\u00e9llo \U0001f600", ""),
         mysql=("VARCHAR(64)", "'h\u00e9llo \U0001f600'", "''")),
    Case("js", "STRING", ('{"a": 1, "bb": [true, null]}', "[]"),
         postgres=("jsonb", """'{"bb": [true, null], "a": 1}'""", "'[]'"),
         sqlite=("JSON", '{"a": 1, "bb": [true, null]}', "[]"),
         redis_text=(b'{"a": 1, "bb": [true, null]}', b"[]"),
         redis_json=({"a": 1, "bb": [True, None]}, []),
         mysql=("JSON", """'{"a": 1, "bb": [true, null]}'""", "'[]'")),
    Case("u", "STRING", ("0f9d1c8e-6a4b-4e52-9a8d-2c3b4a5d6e7f",
                         "00000000-0000-0000-0000-000000000000"),
         postgres=("uuid", "'0F9D1C8E-6A4B-4E52-9A8D-2C3B4A5D6E7F'",
                   "'00000000-0000-0000-0000-000000000000'"),
         sqlite=("UUID", "0f9d1c8e-6a4b-4e52-9a8d-2c3b4a5d6e7f",
                 "00000000-0000-0000-0000-000000000000"),
         redis_text=(b"0f9d1c8e-6a4b-4e52-9a8d-2c3b4a5d6e7f",
                     b"00000000-0000-0000-0000-000000000000"),
         redis_json=("0f9d1c8e-6a4b-4e52-9a8d-2c3b4a5d6e7f",
                     "00000000-0000-0000-0000-000000000000"),
         mysql=("CHAR(36)", "'0f9d1c8e-6a4b-4e52-9a8d-2c3b4a5d6e7f'",
                "'00000000-0000-0000-0000-000000000000'")),
    Case("bin", "BINARY", (b"\x00\xff\x10", b""),
         postgres=("bytea", "'\\x00ff10'", "''"),
         sqlite=("BLOB", b"\x00\xff\x10", b""),
         redis_text=(b"\x00\xff\x10", b""),
         redis_json=(base64.b64encode(b"\x00\xff\x10").decode(), ""),
         mysql=("VARBINARY(8)", "X'00FF10'", "X''")),
    Case("d", "DATE", (dt.date(2024, 2, 29), dt.date(1970, 1, 1)),
         postgres=("date", "'2024-02-29'", "'1970-01-01'"),
         sqlite=("DATE", "2024-02-29", "1970-01-01"),
         redis_text=(b"2024-02-29", b"1970-01-01"),
         redis_json=("2024-02-29", "1970-01-01"),
         mysql=("DATE", "'2024-02-29'", "'1970-01-01'")),
    Case("ts", "TIMESTAMP",
         (_ts(2024, 2, 29, 12, 0, 0, 123456, offset=2), _ts(1969, 12, 31, 23, 59, 59)),
         postgres=("timestamptz", "'2024-02-29 12:00:00.123456+02'",
                   "'1969-12-31 23:59:59+00'"),
         sqlite=("TIMESTAMP WITH TIME ZONE", "2024-02-29 12:00:00.123456+02:00",
                 "1969-12-31T23:59:59Z"),
         redis_text=(b"2024-02-29T12:00:00.123456+02:00", b"1969-12-31 23:59:59"),
         redis_json=("2024-02-29T12:00:00.123456+02:00", "1969-12-31T23:59:59Z")),
    Case("ntz", "TIMESTAMP_NTZ",
         (dt.datetime(2024, 2, 29, 12, 0, 0, 123456), dt.datetime(2000, 1, 1)),
         postgres=("timestamp", "'2024-02-29 12:00:00.123456'", "'2000-01-01 00:00:00'"),
         sqlite=("TIMESTAMP", "2024-02-29 12:00:00.123456", "2000-01-01 00:00:00"),
         redis_text=(b"2024-02-29T12:00:00.123456", b"2000-01-01 00:00:00"),
         redis_json=("2024-02-29T12:00:00.123456", "2000-01-01 00:00:00"),
         mysql=("DATETIME(6)", "'2024-02-29 12:00:00.123456'", "'2000-01-01 00:00:00'")),
    Case("arr", "ARRAY<STRING>", (["a", "b c", None], []),
         postgres=("text[]", "ARRAY['a', 'b c', NULL]", "'{}'"),
         redis_json=(["a", "b c", None], [])),
    Case("arr_i", "ARRAY<BIGINT>", ([1, -(2**63)], []),
         postgres=("bigint[]", "ARRAY[1, -9223372036854775808]", "'{}'"),
         redis_json=([1, -(2**63)], [])),
    Case("m", "MAP<STRING, BIGINT>", ({"x": 1, "y": None}, {}),
         redis_json=({"x": 1, "y": None}, {})),
    Case("st", "STRUCT<w: INT, h: DECIMAL(5,1)>",
         ({"w": 2, "h": Decimal("3.5")}, {"w": None, "h": None}),
         redis_json=({"w": 2, "h": Decimal("3.5")}, {})),
    # MySQL/MariaDB's own types (the other backends have none of them).
    Case("i8", "TINYINT", (-128, 127), mysql=("TINYINT", "-128", "127")),
    Case("u32", "BIGINT", (0, 4294967295), mysql=("INT UNSIGNED", "0", "4294967295")),
    Case("u64", "DECIMAL(20,0)", (Decimal("18446744073709551615"), Decimal("9223372036854775808")),
         mysql=("BIGINT UNSIGNED", "18446744073709551615", "9223372036854775808")),
    Case("fm", "FLOAT", (1.5, -0.25), mysql=("FLOAT", "1.5", "-0.25")),
    Case("dm", "DOUBLE", (0.1, -1.5e300), mysql=("DOUBLE", "0.1", "-1.5e300")),
    Case("tsm", "TIMESTAMP",
         (_ts(2024, 2, 29, 12, 0, 0, 123456, offset=2), _ts(2038, 1, 19, 3, 14, 7)),
         mysql=("TIMESTAMP(6) NULL", "'2024-02-29 12:00:00.123456'", "'2038-01-19 05:14:07'")),
    Case("yr", "INT", (2024, 1901), mysql=("YEAR", "2024", "1901")),
    Case("tm", "STRING", ("-838:59:59.000000", "12:34:56.500000"),
         mysql=("TIME(6)", "'-838:59:59'", "'12:34:56.5'")),
    Case("en", "STRING", ("b", "a"), mysql=("ENUM('a', 'b')", "'b'", "'a'")),
    Case("se", "STRING", ("x,y", ""), mysql=("SET('x', 'y')", "'y,x'", "''")),
    Case("bt", "BIGINT", (5, 1023), mysql=("BIT(10)", "b'101'", "b'1111111111'")),
    Case("bt1", "BOOLEAN", (True, False), mysql=("BIT(1)", "b'1'", "b'0'")),
    Case("tx", "STRING", ("a\nb", " padded "), mysql=("TEXT", "'a\\nb'", "' padded '")),
    Case("ch", "STRING", ("ab", ""), mysql=("CHAR(4)", "'ab'", "''")),
    Case("blob", "BINARY", (b"\x00\x01", b""), mysql=("BLOB", "X'0001'", "X''")),
)



@dataclass(frozen=True)
class BadCase:
    """A stored value that reads as no value of its column's type in any backend or
    mode: a bad value (null and counted under PERMISSIVE), where Arrow's own casts
    would read another value (hexadecimal wrapped into the type, an infinity)."""

    name: str
    spark: str
    readme: str
    """What the README's "Types" section says about it (a phrase it must contain)."""
    postgres: tuple[str, str] | None = None
    """Column type and the SQL literal stored."""
    sqlite: tuple[str, Any] | None = None
    """Declared type and the value stored."""
    redis_text: bytes | None = None
    """The hash field's text."""
    redis_json: str | None = None
    """The JSON member's text, as written (exact numbers, any depth)."""
    mysql: tuple[str, str] | None = None
    """Column type and the SQL literal stored (sql_mode empty: zero dates kept)."""


BAD_CASES: tuple[BadCase, ...] = (
    BadCase("hex_tiny", "TINYINT", "hexadecimal",
            postgres=("text", "'0xff'"), sqlite=("TEXT", "0xff"), redis_text=b"0xff",
            mysql=("TEXT", "'0xff'")),
    BadCase("hex_big", "BIGINT", "hexadecimal",
            postgres=("text", "'0xffffffffffffffff'"), sqlite=("TEXT", "0xffffffffffffffff"),
            redis_text=b"0xffffffffffffffff", mysql=("TEXT", "'0xffffffffffffffff'")),
    BadCase("hex", "BIGINT", "hexadecimal",
            postgres=("text", "'0x10'"), sqlite=("TEXT", "0x10"), redis_text=b"0x10",
            mysql=("TEXT", "'0x10'")),
    BadCase("f32_range", "FLOAT", "beyond the range",
            postgres=("double precision", "1e39"), sqlite=("REAL", 1e39), redis_text=b"1e39",
            redis_json="1e39", mysql=("DOUBLE", "1e39")),
    BadCase("f64_range", "DOUBLE", "beyond the range",
            postgres=("text", "'1e400'"), sqlite=("TEXT", "1e400"), redis_text=b"-1e400",
            redis_json="1E+400", mysql=("TEXT", "'1e400'")),
    BadCase("u64_range", "BIGINT", "beyond the range",
            mysql=("BIGINT UNSIGNED", "18446744073709551615")),
    BadCase("zero_date", "DATE", "zero date", mysql=("DATE", "'0000-00-00'")),
    BadCase("zero_datetime", "TIMESTAMP_NTZ", "zero date",
            mysql=("DATETIME", "'0000-00-00 00:00:00'")),
    BadCase("zero_month", "DATE", "zero date", mysql=("DATE", "'2024-00-10'")),
    # Deep enough to exceed Python's recursion limit when read (much deeper, the parser
    # itself refuses it): no value of any type, and the lookup goes on.
    BadCase("deep", "STRING", "nested deeper",
            redis_json="[" * 900 + "]" * 900),
)

BAD_FIELDS = {
    "sqlite": "sqlite",
    "postgres": "postgres",
    "redis-hash": "redis_text",
    "redis-json": "redis_json",
    "mysql": "mysql",
}


def bad_cases_for(backend: str) -> list[BadCase]:
    """The bad values a backend stores."""
    attribute = BAD_FIELDS[backend]
    return [case for case in BAD_CASES if getattr(case, attribute) is not None]


@dataclass(frozen=True)
class KeyCase:
    """A key no stored key equals, asked after one that finds its row: it finds nothing,
    in every mode (a cache never answers it with the row of the key it resembles)."""

    name: str
    table: str
    """``dim`` (keyed by ``id BIGINT``) or ``days`` (keyed by ``d DATE``)."""
    found: Any
    """A key value that finds a row."""
    probe: Any
    """A key value that finds nothing."""
    refusable: bool = False
    """The probe is of a kind its column never holds: it may also be refused
    (``KeyKindError``, as a str for a BIGINT is), never answered with a row."""


DAYS_SCHEMA = "d DATE, n BIGINT"
"""The table of DATE keys: one row, 2024-01-01 (n = 1)."""

KEY_CASES: tuple[KeyCase, ...] = (
    KeyCase("fractional", "dim", 1, 1.5),
    KeyCase("datetime", "days", dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 23, 59),
            refusable=True),
)

def _f32(value: float) -> float:
    """The FLOAT nearest ``value``, as the Python float (double) of its exact value."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


@dataclass(frozen=True)
class KeyTypeCase:
    """A table keyed by a column of one type (``k``, indexed, not unique; ``id`` numbers
    the rows from 1): the keys asked and the rows each finds, the same in every mode.

    The rows found are ``(k, id)`` with ``k`` as its Spark type reads the stored value,
    so a stored key the database compares otherwise than its Spark value (a ``TINYINT(1)``
    holding 2, a FLOAT widened to double, a decimal beyond a double's digits) is asked
    of the database, of a partial cache and of a full cache alike."""

    name: str
    spark: str
    """The key column's Spark type (DDL)."""
    reads: tuple[Any, ...]
    """What each stored key reads as (row ``i + 1`` holds the ``i``-th)."""
    asked: tuple[tuple[Any, tuple[int, ...]], ...]
    """A key value, and the ids of the rows it finds."""
    mysql: tuple[str, tuple[str, ...]] | None = None
    """Column type, and the SQL literal of each stored key."""

    @property
    def table(self) -> str:
        return f"key_{self.name}"

    @property
    def schema(self) -> str:
        return f"k {self.spark}, id BIGINT"

    def expected(self, ids: Sequence[int]) -> list[tuple[Any, int]]:
        """The rows of ``ids``, in id order."""
        return [(self.reads[i - 1], i) for i in sorted(ids)]


_BIG = Decimal("12345678901234567890.123456789012345678")
"""Beyond a double's 17 digits: its neighbours differ only in the last digit."""
_NEXT = Decimal("12345678901234567890.123456789012345677")
_ABOVE = Decimal("12345678901234567890.123456789012345679")

KEY_TYPE_CASES: tuple[KeyTypeCase, ...] = (
    # Read as BOOLEAN, non-zero is true: true finds every non-zero value, not only 1.
    KeyTypeCase("bool", "BOOLEAN", (False, True, True, True, None),
                ((True, (2, 3, 4)), (False, (1,))),
                mysql=("TINYINT(1)", ("0", "1", "2", "-1", "NULL"))),
    KeyTypeCase("bool_int", "BOOLEAN", (False, True, True),
                ((True, (2, 3)), (False, (1,))),
                mysql=("INT", ("0", "5", "-70000"))),
    KeyTypeCase("bool_bit", "BOOLEAN", (False, True), ((True, (2,)), (False, (1,))),
                mysql=("BIT(1)", ("b'0'", "b'1'"))),
    # FLOAT keys are single-precision values: 1.1 is the FLOAT nearest 1.1, and a
    # stored value is its exact single-precision value, not the six digits MySQL prints.
    KeyTypeCase(
        "float", "FLOAT",
        (_f32(1.1), _f32(0.1), _f32(3.4e38), 0.0, _f32(1.0000001), 16777216.0,
         -_f32(3.4028234663852886e38), _f32(1e-45), _f32(123456.7)),
        ((1.1, (1,)), (_f32(1.1), (1,)), (0.1, (2,)), (3.4e38, (3,)), (0.0, (4,)),
         (-0.0, (4,)), (_f32(1.0000001), (5,)), (1.0, ()), (16777217.0, (6,)),
         (16777200.0, ()), (-3.4028234663852886e38, (7,)), (1e-45, (8,)),
         (123456.703125, (9,)), (123457.0, ()), (math.nan, ()), (math.inf, ()),
         (-math.inf, ())),
        mysql=("FLOAT", ("1.1", "0.1", "3.4e38", "0", "1.0000001", "16777217",
                         "-3.4028234663852886e38", "1e-45", "123456.7"))),
    KeyTypeCase(
        "double", "DOUBLE",
        (0.1, 0.30000000000000004, 5e-324, 1.7976931348623157e308, 0.0, -1.5e300,
         9007199254740992.0),
        ((0.1, (1,)), (0.30000000000000004, (2,)), (0.3, ()), (5e-324, (3,)),
         (1.7976931348623157e308, (4,)), (0.0, (5,)), (-0.0, (5,)), (-1.5e300, (6,)),
         (9007199254740992.0, (7,)), (math.nan, ()), (math.inf, ())),
        mysql=("DOUBLE", ("0.1", "0.30000000000000004e0", "5e-324",
                          "1.7976931348623157e308", "0", "-1.5e300", "9007199254740993"))),
    # A FLOAT column read as DOUBLE: its exact value, widened.
    KeyTypeCase("float_double", "DOUBLE", (_f32(1.1), _f32(0.1)),
                ((_f32(1.1), (1,)), (1.1, ()), (_f32(0.1), (2,))),
                mysql=("FLOAT", ("1.1", "0.1"))),
    KeyTypeCase(
        "decimal", "DECIMAL(38,18)",
        (Decimal("1.100000000000000000"), Decimal("-0.010000000000000000"),
         Decimal("0E-18"), _BIG, _NEXT),
        ((Decimal("1.1"), (1,)), (Decimal("1.10"), (1,)), (1.1, (1,)),
         (Decimal("1.105"), ()), (Decimal("-0.01"), (2,)), (Decimal("0"), (3,)),
         (Decimal("-0"), (3,)), (_BIG, (4,)), (_NEXT, (5,)),
         (_ABOVE, ())),
        mysql=("DECIMAL(38,18)", ("1.10", "-0.01", "0", str(_BIG), str(_NEXT)))),
    # BIGINT UNSIGNED reads as DECIMAL(20,0): beyond 2**63, and beyond a double's digits.
    KeyTypeCase(
        "u64", "DECIMAL(20,0)",
        (Decimal(2**64 - 1), Decimal(2**64 - 2), Decimal(2**63), Decimal(0)),
        ((Decimal(2**64 - 1), (1,)), (2**64 - 1, (1,)), (Decimal(2**64 - 2), (2,)),
         (Decimal(2**64 - 3), ()), (Decimal(2**63), (3,)), (2**63 + 1, ()), (0, (4,))),
        mysql=("BIGINT UNSIGNED", (str(2**64 - 1), str(2**64 - 2), str(2**63), "0"))),
)


@dataclass(frozen=True)
class NullKeyCase:
    """A table ``nk_<name>`` (``k`` of one type, ``s STRING``, ``id BIGINT``) whose keys
    repeat and hold nulls, stored as these rows (``a < b < c`` of the type)::

        (a, 'x', 1) (a, 'x', 2) (b, 'x', 3) (NULL, 'x', 4) (c, 'y', 5) (NULL, 'y', 6)
        (c, NULL, 7)

    Keyed by ``k``: a finds rows 1 and 2, b row 3, c rows 5 and 7, and no key finds
    a row whose ``k`` is NULL (a sort puts nulls beside the largest key). Keyed by
    ``(k, s)``: (a, 'x') finds 1 and 2, (b, 'x') 3, (c, 'y') 5, (c, 'x') nothing."""

    name: str
    spark: str
    values: tuple[Any, Any, Any]
    """What a, b and c read as."""
    sqlite: tuple[str, tuple[Any, Any, Any]] | None = None
    """Declared type and the values stored."""
    postgres: tuple[str, tuple[str, str, str]] | None = None
    """Column type and the SQL literals."""
    mysql: tuple[str, tuple[str, str, str]] | None = None
    """Column type and the SQL literals."""

    @property
    def table(self) -> str:
        return f"nk_{self.name}"

    @property
    def schema(self) -> str:
        return f"k {self.spark}, s STRING, id BIGINT"

    @staticmethod
    def layout(a: Any, b: Any, c: Any) -> list[tuple[Any, Any, int]]:
        """The rows ``(k, s, id)`` with ``a``, ``b``, ``c`` (values, or a backend's
        literals) as the keys."""
        return [(a, "x", 1), (a, "x", 2), (b, "x", 3), (None, "x", 4), (c, "y", 5),
                (None, "y", 6), (c, None, 7)]


NULL_KEY_CASES: tuple[NullKeyCase, ...] = (
    NullKeyCase("bigint", "BIGINT", (-(2**63), 9007199254740993, 2**63 - 1),
                sqlite=("BIGINT", (-(2**63), 9007199254740993, 2**63 - 1)),
                postgres=("bigint", ("-9223372036854775808", "9007199254740993",
                                     "9223372036854775807")),
                mysql=("BIGINT", ("-9223372036854775808", "9007199254740993",
                                  "9223372036854775807"))),
    NullKeyCase("double", "DOUBLE", (-1.5, 0.0, 2.25),
                sqlite=("DOUBLE", (-1.5, 0.0, 2.25)),
                postgres=("double precision", ("-1.5", "0", "2.25")),
                mysql=("DOUBLE", ("-1.5", "0", "2.25"))),
    NullKeyCase("float", "FLOAT", (-1.5, 0.5, _f32(3.0e38)),
                postgres=("real", ("-1.5", "0.5", "3.0e38")),
                mysql=("FLOAT", ("-1.5", "0.5", "3.0e38"))),
    NullKeyCase("string", "STRING", ("", "a", "\u00e9"),
                sqlite=("TEXT", ("", "a", "\u00e9")),
                postgres=("text", ("''", "'a'", "'\u00e9'")),
                mysql=("VARCHAR(8)", ("''", "'a'", "'\u00e9'"))),
    NullKeyCase("date", "DATE", (dt.date(1969, 12, 31), dt.date(2024, 2, 29),
                                 dt.date(9999, 12, 31)),
                sqlite=("DATE", ("1969-12-31", "2024-02-29", "9999-12-31")),
                postgres=("date", ("'1969-12-31'", "'2024-02-29'", "'9999-12-31'")),
                mysql=("DATE", ("'1969-12-31'", "'2024-02-29'", "'9999-12-31'"))),
    NullKeyCase("decimal", "DECIMAL(10,2)", (Decimal("-0.01"), Decimal("0.00"),
                                             Decimal("12345678.90")),
                sqlite=("DECIMAL(10,2)", ("-0.01", "0.00", "12345678.90")),
                postgres=("numeric(10,2)", ("-0.01", "0", "12345678.90")),
                mysql=("DECIMAL(10,2)", ("-0.01", "0", "12345678.90"))),
)


def null_key_cases_for(backend: str) -> list[NullKeyCase]:
    """The null-key tables a backend stores."""
    attribute = BACKEND_FIELDS[backend]
    return [case for case in NULL_KEY_CASES if getattr(case, attribute, None) is not None]


def key_type_cases_for(backend: str) -> list[KeyTypeCase]:
    """The key types a backend stores."""
    attribute = BACKEND_FIELDS[backend]
    return [case for case in KEY_TYPE_CASES if getattr(case, attribute, None) is not None]


BACKEND_FIELDS = {
    "sqlite": "sqlite",
    "postgres": "postgres",
    "redis-hash": "redis_text",
    "redis-json": "redis_json",
    "mysql": "mysql",
}


def cases_for(backend: str) -> list[Case]:
    """The cases a backend stores (each backend's own types)."""
    attribute = BACKEND_FIELDS[backend]
    return [case for case in CASES if getattr(case, attribute) is not None]


def schema_of(cases: Sequence[Case | BadCase]) -> str:
    """The dimension schema: ``id BIGINT`` and one column per case."""
    return ", ".join(["id BIGINT", *(f"`{c.name}` {c.spark}" for c in cases)])


def expected_rows(cases: list[Case]) -> dict[int, list[tuple[Any, ...]]]:
    """The rows of keys 1..4 in every mode."""
    return {
        1: [(1, *(c.values[0] for c in cases))],
        2: [(2, *(c.values[1] for c in cases))],
        3: [(3, *(None for _ in cases))],
        4: [],
    }


def json_dumps(value: Any) -> str:
    """JSON with exact decimals (as written) for the Redis JSON backend."""

    class _Exact(json.JSONEncoder):
        def default(self, o: Any) -> Any:  # pragma: no cover - replaced below
            return super().default(o)

    def encode(v: Any) -> str:
        if isinstance(v, Decimal):
            return str(v)
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)}: {encode(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(encode(x) for x in v) + "]"
        return json.dumps(v, ensure_ascii=False)

    return encode(value)


def same(a: Any, b: Any) -> bool:
    """Values equal as Spark values: same Python type family, NaN equal to NaN, -0.0
    distinct from 0.0, datetimes equal as instants (aware) or wall clocks (naive)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return (a.tzinfo is None) == (b.tzinfo is None) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return isinstance(a, Decimal) and isinstance(b, Decimal) and a == b and (
            a.as_tuple().exponent == b.as_tuple().exponent
        )
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return type(a) is type(b) and a == b
