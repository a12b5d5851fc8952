"""A Flink ``CREATE TABLE`` statement as a provider: Flink's types as Spark's, the primary
key, what a lookup cannot serve refused with the line and why, every option key checked
(in ``from_dict`` too), and a bare-number duration under a second warned about. Providers
over SQLite files and a Parquet directory equal those of ``from_dict`` with the same
options and schema (the server-backed connectors: test_flink_ddl_services.py)."""

from __future__ import annotations

import logging
import sqlite3
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import types as T

from lookup import LookupOptions, open_lookup
from lookup._flink_ddl import read_create_table
from scan import CollectionSource
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError, ConfigWarning
from spark_lookup.schema import parse_schema
from tests.lookup.functions import DictLookup


def ddl(columns: str, options: str = "'connector' = 'kafka'", head: str = "CREATE TABLE t"
        ) -> str:
    return f"{head} (\n{columns}\n) WITH (\n{options}\n)"


# --- Flink's types as Spark's ------------------------------------------------------------


@pytest.mark.parametrize(("flink", "spark_type"), [
    ("STRING", "string"), ("VARCHAR", "string"), ("VARCHAR(20)", "string"),
    ("CHAR", "string"), ("CHAR(3)", "string"), ("CHARACTER VARYING(8)", "string"),
    ("BOOLEAN", "boolean"), ("BINARY", "binary"), ("BINARY(16)", "binary"),
    ("VARBINARY(10)", "binary"), ("BYTES", "binary"),
    ("DECIMAL", "decimal(10,0)"), ("DECIMAL(10, 2)", "decimal(10,2)"), ("DEC(5)", "decimal(5,0)"),
    ("NUMERIC(38,38)", "decimal(38,38)"),
    ("TINYINT", "tinyint"), ("SMALLINT", "smallint"), ("INT", "int"), ("INTEGER", "int"),
    ("BIGINT", "bigint"), ("FLOAT", "float"), ("REAL", "float"), ("DOUBLE", "double"),
    ("DOUBLE PRECISION", "double"), ("DATE", "date"),
    # The connectors read a database's TIME as its text (docs/types.md).
    ("TIME", "string"), ("TIME(3)", "string"), ("TIME(0) WITHOUT TIME ZONE", "string"),
    ("TIMESTAMP", "timestamp_ntz"), ("TIMESTAMP(3)", "timestamp_ntz"),
    ("TIMESTAMP(9) WITHOUT TIME ZONE", "timestamp_ntz"),
    ("TIMESTAMP_LTZ", "timestamp"), ("TIMESTAMP_LTZ(3)", "timestamp"),
    ("TIMESTAMP(3) WITH LOCAL TIME ZONE", "timestamp"),
    ("ARRAY<INT>", "array<int>"), ("INT ARRAY", "array<int>"),
    ("MAP<STRING, BIGINT>", "map<string,bigint>"),
    ("ROW<a INT, b STRING>", "struct<a:int,b:string>"),
    ("ROW(a INT, `b c` ARRAY<ROW<d DATE>>)", "struct<a:int,b c:array<struct<d:date>>>"),
    ("ROW<>", "struct<>"),
    ("timestamp_ltz(6)", "timestamp"),
    ("Map<String, Row<x Double>>", "map<string,struct<x:double>>"),
])
def test_flink_types_map_to_spark_types(flink: str, spark_type: str) -> None:
    table = read_create_table(ddl(f"c {flink}"))
    assert table.schema.simpleString() == f"struct<c:{spark_type}>"
    assert table.schema["c"].nullable


def test_not_null_and_comments_are_kept_at_every_depth() -> None:
    table = read_create_table(ddl(
        "a INT NOT NULL COMMENT 'the key',\n"
        "b ARRAY<BIGINT NOT NULL>,\n"
        "c BIGINT NOT NULL ARRAY NOT NULL,\n"
        "d MAP<STRING, DOUBLE NOT NULL>,\n"
        "e ROW<x INT NOT NULL 'an x', y STRING> NULL"))
    assert table.schema == T.StructType([
        T.StructField("a", T.IntegerType(), False, {"comment": "the key"}),
        T.StructField("b", T.ArrayType(T.LongType(), False)),
        T.StructField("c", T.ArrayType(T.LongType(), False), False),
        T.StructField("d", T.MapType(T.StringType(), T.DoubleType(), False)),
        T.StructField("e", T.StructType([
            T.StructField("x", T.IntegerType(), False, {"comment": "an x"}),
            T.StructField("y", T.StringType())])),
    ])
    # The same schema as the Spark DDL string from_dict's schema= takes.
    assert table.schema == parse_schema(
        "a INT NOT NULL COMMENT 'the key', b ARRAY<BIGINT>, c ARRAY<BIGINT> NOT NULL, "
        "d MAP<STRING, DOUBLE>, e STRUCT<x: INT NOT NULL COMMENT 'an x', y: STRING>"
    ).fromJson(table.schema.jsonValue())


@pytest.mark.parametrize(("column", "message"), [
    ("ms MULTISET<STRING>", "column 'ms': type MULTISET is not supported: a bag of values"),
    ("ms STRING MULTISET", "column 'ms': type MULTISET is not supported"),
    ("iv INTERVAL DAY", "column 'iv': type INTERVAL is not supported"),
    ("r RAW('java.lang.String', 'AA==')", "column 'r': type RAW is not supported"),
    ("n ROW<inner MULTISET<INT>>", "column 'n.inner': type MULTISET is not supported"),
    ("s STIRNG", "column 's': unknown type STIRNG; did you mean STRING?"),
    ("s VARCHR(3)", "unknown type VARCHR; did you mean VARCHAR?"),
    ("t TIMESTAMP(3) WITH TIME ZONE", "TIMESTAMP WITH TIME ZONE is not a Flink type"),
    ("d DECIMAL(40, 2)", "DECIMAL(40, 2): the precision must be 1 to 38"),
    ("d DECIMAL(5, 6)", "the scale 0 to the precision"),
    ("t TIMESTAMP(12)", "TIMESTAMP(12): the length must be 0 to 9"),
    ("v VARCHAR(0)", "VARCHAR(0): the length must be 1"),
    ("a ARRAY<INT, b INT", "expected '>' closing ARRAY<...>, found ','"),
])
def test_types_without_a_spark_counterpart_are_refused_naming_the_column(
        column: str, message: str) -> None:
    with pytest.raises(ConfigError, match="Flink DDL, line 2, column ") as caught:
        read_create_table(ddl(column))
    assert message in str(caught.value)


# --- the statement -----------------------------------------------------------------------


def test_quoting_comments_and_qualified_names() -> None:
    table = read_create_table("""
        -- a lookup table
        CREATE TEMPORARY TABLE IF NOT EXISTS `my cat`.db.`Dim``s` (
          `id` BIGINT,            /* the key */
          `select` STRING,        -- a reserved word, quoted
          name STRING COMMENT 'it''s a name -- not a comment'
        ) WITH (
          'connector' = 'kafka',  -- the value's quote: ''
          'password' = 'it''s /* no comment */'
        );
        -- done""")
    assert table.name == "my cat.db.Dim`s"
    assert table.schema.names == ["id", "select", "name"]
    assert table.schema["name"].metadata == {"comment": "it's a name -- not a comment"}
    assert dict(table.options) == {"connector": "kafka", "password": "it's /* no comment */"}
    assert table.option_places["password"] == (9, 11)


@pytest.mark.parametrize(("text", "line", "column", "message"), [
    ("CREATE TABLE t (a INT) WITH ('connector' = 'x'", 1, 47,
     "expected ')' or ',' between options, found the end of the statement"),
    ("CREATE TABLE t (a INT) WITH ('a' = 'x', 'a' = 'y')", 1, 41,
     "option 'a' is given twice (first at line 1, column 30)"),
    ("CREATE TABLE t (a INT) WITH ('port' = 7001)", 1, 39,
     "expected the value of option 'port' as a quoted string (quote it: '7001')"),
    ("CREATE TABLE t (a INT)\nWITH (port = '7001')", 2, 7,
     "expected an option key as a quoted string (quote it: 'port')"),
    ("CREATE TABLE t (a INT) /* x", 1, 24, "an unclosed /* comment"),
    ("CREATE TABLE t (a STRING COMMENT 'x)", 1, 34, "an unclosed string"),
    ('CREATE TABLE t ("a" INT)', 1, 17, "Flink quotes names with backticks"),
    ("CREATE TABLE t (a INT); CREATE TABLE u (b INT)", 1, 25, "a second statement begins"),
    ("CREATE VIEW v AS SELECT 1", 1, 8, "only a CREATE TABLE statement declares"),
    ("INSERT INTO t VALUES (1)", 1, 1, "expected CREATE"),
    ("CREATE TABLE t (a INT) LIKE s", 1, 24, "CREATE TABLE ... LIKE copies a table"),
    ("CREATE TABLE t WITH ('connector' = 'x') AS SELECT 1", 1, 16, "expected '(' and the "
                                                                   "columns"),
    ("CREATE TABLE t (a INT) WITH ('connector' = 'x') AS SELECT 1", 1, 49,
     "AS SELECT writes a table"),
    ("CREATE TABLE t (\n  a INT,\n  PRIMARY KEY (a)\n)", 3, 3,
     "Flink takes a PRIMARY KEY only as NOT ENFORCED"),
    ("CREATE TABLE t (a INT, PRIMARY KEY (b) NOT ENFORCED)", 1, 37,
     "PRIMARY KEY column 'b' is not a column of the table; columns: ['a']"),
    ("CREATE TABLE t (user_id INT, PRIMARY KEY (userid) NOT ENFORCED)", 1, 43,
     "did you mean 'user_id'?"),
    ("CREATE TABLE t (a INT PRIMARY KEY NOT ENFORCED, PRIMARY KEY (a) NOT ENFORCED)", 1, 49,
     "a second PRIMARY KEY"),
    ("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a, a) NOT ENFORCED)", 1, 31,
     "PRIMARY KEY repeats a column"),
    ("CREATE TABLE t (a INT, UNIQUE (a))", 1, 24, "Flink has no UNIQUE constraint"),
    ("CREATE TABLE t (a INT, a STRING)", 1, 24, "column 'a' is declared twice"),
    ("CREATE TABLE t (\n  a INT,\n  cost AS price * 2\n)", 3, 3,
     "column 'cost' is computed (AS ...): its expression is Flink SQL"),
    ("CREATE TABLE t (a INT, `file.path` STRING NOT NULL METADATA)", 1, 24,
     "column 'file.path' is a metadata column (METADATA)"),
    ("CREATE TABLE t (a INT, ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL)", 1, 24,
     "is a metadata column"),
    ("CREATE TABLE t (a INT, dt STRING) PARTITIONED BY (dt) WITH ('connector' = 'x')", 1, 35,
     "PARTITIONED BY: partition values are read from directory names"),
    ("CREATE TABLE t (proc AS PROCTIME())", 1, 16, "the table declares no column"),
])
def test_what_a_lookup_cannot_serve_is_refused_naming_where(
        text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        read_create_table(text)
    assert str(caught.value).startswith(f"Flink DDL, line {line}, column {column}: "), (
        str(caught.value))
    assert message in str(caught.value)


def test_a_watermark_proctime_comment_and_distribution_are_read_and_not_applied(
        caplog: pytest.LogCaptureFixture) -> None:
    text = """CREATE TABLE orders_dim (
      id BIGINT,
      log_ts TIMESTAMP(3),
      proc AS PROCTIME() COMMENT 'when the join runs',
      WATERMARK FOR log_ts AS log_ts - INTERVAL '5' SECOND,
      CONSTRAINT pk PRIMARY KEY (id) NOT ENFORCED
    ) COMMENT 'orders' DISTRIBUTED BY HASH(id) INTO 4 BUCKETS
    WITH ('connector' = 'kafka', 'lookup.cache' = 'PARTIAL',
          'lookup.partial-cache.max-rows' = '10')"""
    with caplog.at_level(logging.INFO, logger="lookup"):
        options = LookupOptions.from_ddl(text)
    assert options.schema is not None
    assert options.schema.simpleString() == "struct<id:bigint,log_ts:timestamp_ntz>"
    assert options.key_columns == ("id",)
    for what in ("WATERMARK FOR log_ts (line 5)", "column 'proc' AS PROCTIME() (line 4)",
                 "the table's COMMENT (line 7)", "DISTRIBUTED (line 7)"):
        assert what in caplog.text


def test_primary_key_columns_are_not_null_as_in_flink() -> None:
    for columns in ("id BIGINT, b STRING, PRIMARY KEY (id) NOT ENFORCED",
                    "id BIGINT PRIMARY KEY NOT ENFORCED, b STRING",
                    "id BIGINT CONSTRAINT k PRIMARY KEY NOT ENFORCED, b STRING"):
        table = read_create_table(ddl(columns))
        assert table.primary_key == ("id",)
        assert [f.nullable for f in table.schema] == [False, True]
    composite = read_create_table(ddl("a INT, b STRING, c INT, PRIMARY KEY (c, a) NOT ENFORCED"))
    assert composite.primary_key == ("c", "a")


def test_a_ddl_is_a_string() -> None:
    with pytest.raises(ConfigError, match="the DDL must be a string, got dict"):
        LookupOptions.from_ddl({"connector": "jdbc"})  # type: ignore[arg-type]


# --- option keys: every one is checked, from a DDL and from a dict ------------------------


def test_an_unknown_key_of_a_ddl_is_named_with_its_line() -> None:
    text = ddl("id BIGINT", "'conector' = 'jdbc',\n'url' = 'jdbc:sqlite:/x.db'")
    with pytest.raises(ConfigError) as caught:
        LookupOptions.from_ddl(text)
    assert str(caught.value) == (
        "unknown option 'conector'; did you mean 'connector'? (line 4, column 1 of the DDL)")
    with pytest.raises(ConfigError, match=r"unknown option 'tabel-name' of connector 'jdbc'; "
                                          r"did you mean 'table-name'\? \(line 6, column 3 "):
        LookupOptions.from_ddl(ddl("id BIGINT", "'connector' = 'jdbc',\n"
                                   "  'url' = 'jdbc:sqlite:/x.db',\n  'tabel-name' = 't'"))
    with pytest.raises(ConfigError, match=r"option 'lookup.max-retries': expected an integer, "
                                          r"got 'three' \(line 5, column 1 of the DDL\)"):
        LookupOptions.from_ddl(ddl("id BIGINT", "'connector' = 'jdbc',\n"
                                   "'lookup.max-retries' = 'three'"))


@pytest.mark.parametrize(("given", "message"), [
    ({"conector": "jdbc", "url": "jdbc:sqlite:/x.db"},
     "unknown option 'conector'; did you mean 'connector'?"),
    ({"Connector": "jdbc"}, "unknown option 'Connector'; did you mean 'connector'?"),
    ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "9", "table-name": "t"},
     "option 'table-name' is an option of connector 'jdbc': give 'connector' too"),
    ({"url": "redis://h"}, "option 'url' is an option of connector 'jdbc' or 'redis'"),
    ({"lookup.cache": "NONE", "cache": "PARTIAL"}, "unknown option 'cache'"),
    ({"connector": "redis", "host": "127.0.0.1", "port": "6379"},
     "unknown option 'host' of connector 'redis': this connector reads the server from "
     "'url' = 'redis://[:password@]host[:port][/db]'"),
    ({"connector": "redis", "command": "hget"},
     "unknown option 'command' of connector 'redis': 'key-template'"),
])
def test_every_unknown_key_is_named_by_from_dict(given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LookupOptions.from_dict(given)
    assert message in str(caught.value)


def test_a_misspelled_connector_is_named_where_it_would_build() -> None:
    options = LookupOptions.from_dict({"connector": "jbdc", "lookup.cache": "PARTIAL",
                                       "lookup.partial-cache.max-rows": "9"})
    with pytest.raises(ConfigError, match=r"connector 'jbdc' cannot build a provider here "
                                          r"\(supported: jdbc, filesystem, delta, redis\); did "
                                          r"you mean 'jdbc'\?"):
        options.provider()
    # A connector of its own name still takes its function (its keys left alone).
    assert options.provider(DictLookup([(1, "Ada")])).kind == "PARTIAL"


# --- bare-number durations -----------------------------------------------------------------


def test_a_bare_number_under_a_second_warns_naming_the_key_and_the_units() -> None:
    with pytest.warns(ConfigWarning) as caught:
        assert opts.parse_duration("600", "lookup.x") == timedelta(milliseconds=600)
    assert str(caught[0].message) == (
        "option 'lookup.x': '600' is a bare number, which Flink reads as milliseconds "
        "(600 ms); write the unit: '600 ms', or '600 s' if seconds are meant")
    assert caught[0].filename == __file__  # the caller's line, not the library's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for text in ("1000", "86400000", "600 ms", "0 s", "PT0.5S", "1 s"):
            opts.parse_duration(text, "lookup.x")


def test_from_dict_warns_once_and_keeps_the_unit() -> None:
    given = {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10",
             "lookup.partial-cache.expire-after-write": "600"}
    with pytest.warns(ConfigWarning, match="option 'lookup.partial-cache.expire-after-write': "
                                           "'600' is a bare number") as caught:
        options = LookupOptions.from_dict(given)
    assert [w.filename for w in caught if w.category is ConfigWarning] == [__file__]
    assert options.options["lookup.partial-cache.expire-after-write"] == "600 ms"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read again: no second warning
        provider = options.provider(DictLookup([(1, "Ada")]))
    assert provider.cache._expire_after_write == timedelta(milliseconds=600)  # type: ignore[attr-defined]


def test_a_ddl_warns_for_each_bare_number_under_a_second_and_a_legacy_key() -> None:
    # The Redis connector README's dimension table: 'lookup.cache.ttl' meant seconds there.
    text = ddl("id BIGINT", "'connector' = 'redis',\n'lookup.cache.max-rows' = '10',\n"
                            "'lookup.cache.ttl' = '10',\n'socket-timeout' = '500',\n"
                            "'lookup.async.timeout' = '2000'")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options = LookupOptions.from_ddl(text)
    shown = sorted((w.category.__name__, str(w.message).split(" is ")[0]) for w in caught)
    assert shown == [
        ("ConfigWarning", "option 'lookup.partial-cache.expire-after-write': '10'"),
        ("ConfigWarning", "option 'socket-timeout': '500'"),
        ("FutureWarning", "option 'lookup.cache.max-rows'"),
        ("FutureWarning", "option 'lookup.cache.ttl'"),
    ]
    assert {w.filename for w in caught} == {__file__}
    assert options.table.socket_timeout == timedelta(milliseconds=500)  # type: ignore[union-attr]
    assert options.options["lookup.async.timeout"] == "2000 ms"


# --- providers: the same as from_dict's with the same options and schema ------------------


SQLITE_DDL = """
CREATE TABLE customers (
  id BIGINT,
  name STRING,
  tier STRING,
  PRIMARY KEY (id) NOT ENFORCED
) WITH (
  'connector' = 'jdbc',
  'url' = 'jdbc:sqlite:{path}',
  'table-name' = 'customers',
  'lookup.cache' = '{cache}',
  {more}
  'lookup.max-retries' = '1'
)"""
SQLITE_OPTIONS = {"PARTIAL": "'lookup.partial-cache.max-rows' = '100',",
                  "FULL": "'lookup.full-cache.periodic-reload.interval' = '1 h',", "NONE": ""}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "dim.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, tier TEXT, "
                     "note TEXT)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?, 'x')",
                         [(i, f"n{i}", "gold" if i % 2 else "silver") for i in range(1, 21)])
        conn.execute("CREATE TABLE events (at TEXT, what TEXT)")
        conn.execute("INSERT INTO events VALUES ('2024-05-20', 'launch')")
    return path


def same_lookups(ddl_provider: Any, dict_provider: Any, keys: list[tuple[Any, ...]]
                 ) -> dict[tuple[Any, ...], Any]:
    """The answers of both providers to ``keys``, checked equal, and their schemas."""
    assert ddl_provider.schema == dict_provider.schema
    assert ddl_provider.key_columns == dict_provider.key_columns
    assert ddl_provider.kind == dict_provider.kind
    with open_lookup(ddl_provider) as a, open_lookup(dict_provider) as b:
        answers = a.lookup_batch(keys)
        assert answers == b.lookup_batch(keys)
    return answers


@pytest.mark.parametrize("cache", ["NONE", "PARTIAL", "FULL"])
def test_a_sqlite_ddl_gives_the_provider_of_its_options_and_columns(db: Path,
                                                                    cache: str) -> None:
    # The DDL leaves a column of the table out.
    options = LookupOptions.from_ddl(SQLITE_DDL.format(path=db, cache=cache,
                                                       more=SQLITE_OPTIONS[cache]))
    provider = options.provider()
    assert provider.schema == T.StructType([
        T.StructField("id", T.LongType(), False), T.StructField("name", T.StringType()),
        T.StructField("tier", T.StringType())])
    given = {"connector": "jdbc", "url": f"jdbc:sqlite:{db}", "table-name": "customers",
             "lookup.cache": cache, "lookup.max-retries": "1",
             **({"lookup.partial-cache.max-rows": "100"} if cache == "PARTIAL" else {}),
             **({"lookup.full-cache.periodic-reload.interval": "1 h"} if cache == "FULL"
                else {})}
    equivalent = LookupOptions.from_dict(given).provider(
        key_columns=["id"], schema="id BIGINT NOT NULL, name STRING, tier STRING")
    assert same_lookups(provider, equivalent, [(3,), (4,), (99,)]) == {
        (3,): ((3, "n3", "gold"),), (4,): ((4, "n4", "silver"),), (99,): ()}


@pytest.mark.parametrize("cache", ["NONE", "PARTIAL", "FULL"])
def test_a_sqlite_ddls_connection_budget_reaches_its_provider(db: Path, cache: str) -> None:
    more = SQLITE_OPTIONS[cache] + "'spark.lookup.max-source-connections' = '2',"
    if cache != "FULL":  # a full cache waits up to its initial_load_timeout instead
        more += "'spark.lookup.load-timeout' = '30 s',"
    provider = LookupOptions.from_ddl(SQLITE_DDL.format(path=db, cache=cache,
                                                        more=more)).provider()
    budget = provider.connection_budget()
    assert budget is not None
    assert budget.limit == 2
    assert budget.timeout == (300 if cache == "FULL" else 30)
    with open_lookup(provider) as handle:
        assert handle.lookup((3,)) == ((3, "n3", "gold"),)


def test_the_ddls_key_serves_a_table_without_a_primary_key(db: Path) -> None:
    options = LookupOptions.from_ddl(ddl(
        "`at` STRING, what STRING, PRIMARY KEY (`at`) NOT ENFORCED",
        f"'connector' = 'jdbc', 'url' = 'jdbc:sqlite:{db}', 'table-name' = 'events'"))
    provider = options.provider()
    assert provider.key_columns == ("at",)
    with open_lookup(provider) as handle:
        assert handle.lookup(("2024-05-20",)) == (("2024-05-20", "launch"),)


def test_key_columns_given_choose_another_lookup_key_than_the_primary_key(db: Path) -> None:
    options = LookupOptions.from_ddl(SQLITE_DDL.format(path=db, cache="NONE", more=""))
    provider = options.provider(key_columns=["name"])
    assert provider.key_columns == ("name",)
    with open_lookup(provider) as handle:
        assert handle.lookup(("n5",)) == ((5, "n5", "gold"),)
    with pytest.raises(ConfigError, match="schema= is given and the DDL declares the table's "
                                          "columns"):
        options.provider(schema="id BIGINT")


# Flink's filesystem connector page: "A filesystem table can be defined as" (its
# PARTITIONED BY dropped: see the next test), the path a local Parquet directory.
FILESYSTEM_DDL = """CREATE TABLE MyUserTable (
  column_name1 INT,
  column_name2 STRING,
  part_name1 INT,
  part_name2 STRING,
  PRIMARY KEY (column_name1) NOT ENFORCED
) WITH (
  'connector' = 'filesystem',           -- required: specify the connector
  'path' = 'file://{path}',  -- required: path to a directory
  'format' = 'parquet',                 -- required: file system connector requires a format
  'partition.default-name' = '...',     -- optional: default partition name
  'sink.shuffle-by-partition.enable' = 'false'
)"""


def test_flinks_filesystem_ddl_over_a_parquet_directory(tmp_path: Path) -> None:
    directory = tmp_path / "users"
    directory.mkdir()
    for name, rows in (("part-0.parquet", [(1, "a", 10, "x"), (2, "b", 20, "y")]),
                       ("part-1.parquet", [(3, "c", 30, None)])):
        columns = list(zip(*rows, strict=True))
        pq.write_table(pa.table({
            "column_name1": pa.array(columns[0], pa.int32()), "column_name2": columns[1],
            "part_name1": pa.array(columns[2], pa.int32()), "part_name2": columns[3],
            "extra": [0] * len(rows)}), directory / name)
    text = FILESYSTEM_DDL.format(path=directory)
    with pytest.raises(ConfigError, match=r"unknown option 'partition.default-name' of "
                                          r"connector 'filesystem' \(line 11, column 3 of"):
        LookupOptions.from_ddl(text)
    text = text.replace("  'partition.default-name' = '...',     -- optional: default "
                        "partition name\n", "")
    provider = LookupOptions.from_ddl(text).provider()  # FULL, reloaded hourly: Flink's
    equivalent = LookupOptions.from_dict({
        "connector": "filesystem", "path": f"file://{directory}", "format": "parquet",
        "sink.shuffle-by-partition.enable": "false"}).provider(
        key_columns=["column_name1"], schema="column_name1 INT NOT NULL, column_name2 STRING, "
                                             "part_name1 INT, part_name2 STRING")
    assert same_lookups(provider, equivalent, [(1,), (3,), (4,)]) == {
        (1,): ((1, "a", 10, "x"),), (3,): ((3, "c", 30, None),), (4,): ()}
    assert provider.schema.simpleString() == (
        "struct<column_name1:int,column_name2:string,part_name1:int,part_name2:string>")


def test_flinks_partitioned_and_metadata_filesystem_tables_are_refused() -> None:
    # The same page's partitioned table and its table with a metadata column.
    with pytest.raises(ConfigError, match="line 6, column 3: PARTITIONED BY"):
        LookupOptions.from_ddl("""CREATE TABLE MyUserTable (
  column_name1 INT,
  column_name2 STRING,
  part_name1 INT,
  part_name2 STRING
) PARTITIONED BY (part_name1, part_name2) WITH (
  'connector' = 'filesystem',
  'path' = 'file:///path/to/whatever',
  'format' = 'parquet'
)""")
    with pytest.raises(ConfigError, match="line 4, column 3: column 'file.path' is a metadata"):
        LookupOptions.from_ddl("""CREATE TABLE MyUserTableWithFilepath (
  column_name1 INT,
  column_name2 STRING,
  `file.path` STRING NOT NULL METADATA
) WITH (
  'connector' = 'filesystem',
  'path' = 'file:///path/to/whatever',
  'format' = 'json'
)""")


# --- a target of one's own ---------------------------------------------------------------


def test_a_target_must_have_the_ddls_columns_and_a_source_takes_its_key() -> None:
    rows = [(1, "Ada"), (2, "Bob")]
    partial = LookupOptions.from_ddl(ddl(
        "id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED",
        "'connector' = 'kafka', 'lookup.cache' = 'PARTIAL', "
        "'lookup.partial-cache.max-rows' = '10'"))
    assert partial.provider(DictLookup(rows)).key_columns == ("id",)
    full = LookupOptions.from_ddl(ddl(
        "id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED",
        "'lookup.cache' = 'FULL', 'lookup.full-cache.periodic-reload.interval' = '1 h'"))
    # Nullability and comments aside: the DDL's key is NOT NULL, the source's is not.
    provider = full.provider(CollectionSource(rows, schema="id BIGINT, name STRING"))
    assert provider.key_columns == ("id",)  # the DDL's key: a source has none
    with open_lookup(provider) as handle:
        assert handle.lookup((2,)) == ((2, "Bob"),)
    wrong = LookupOptions.from_ddl(ddl("id INT, name STRING, tier STRING",
                                       "'lookup.cache' = 'NONE'"))
    with pytest.raises(ConfigError, match=r"the DDL's columns differ from DictLookup's schema: "
                                          r"id int \(the target's: bigint\), tier string "
                                          r"\(the target's: none\)"):
        wrong.provider(DictLookup(rows))
