"""Bad input at the runtime level, without Spark (open_lookup and the executor-side
join of one Arrow batch): null and NaN keys, wrong key types, empty batches, 1 MB
strings, unicode, and values in Redis that someone tampered with.

Each case ends in the correct rows or in one of our errors with a message that names
the key, column or Redis key, and nothing stored in Redis is ever executed.
"""

from __future__ import annotations

import math
import pickle
import re
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from cache import DefaultLookupCache, RedisLookupCache, TieredLookupCache
from cache._codec import FORMAT_PREFIX, decode_rows, encode_key
from lookup import (
    FullCachingLookupProvider,
    LookupFunctionProvider,
    PartialCachingLookupProvider,
    RedisLookupFunction,
    SqlLookupFunction,
    open_lookup,
)
from lookup.spark.assemble import join_batch
from lookup.spark.join import plan_join
from scan import CollectionSource, SqlTableSource, read_arrow
from spark_lookup.errors import ConfigError, KeyKindError, LookupLoadError
from tests.connectors.conftest import PgFactory
from tests.integration.reliability import dimensions as dims
from tests.integration.reliability.helpers import Sentinel, json_bomb
from tests.lookup.functions import DictLookup
from triggers import PeriodicCacheReloadTrigger

HOUR = PeriodicCacheReloadTrigger(timedelta(hours=1))  # loads once, at open


def small_cache() -> DefaultLookupCache:
    return DefaultLookupCache.new_builder().maximum_size(1000).build()


@pytest.fixture
def tables(pg: PgFactory) -> PgFactory:
    dims.create_tables(pg)
    return pg


def sent_values(pg: PgFactory) -> list[Any]:
    """Every key value bound to a lookup statement so far (PostgreSQL lookups bind one
    array per key column)."""
    return [
        value
        for _, params in pg.lookups()
        for bound in (params or ())
        for value in (bound if isinstance(bound, list) else [bound])
    ]


# --- null and NaN keys ------------------------------------------------------------------

FLOAT_KEYS: list[Any] = [
    math.nan, float("nan"), np.float64("nan"), None, pd.NA, 1.5, -0.0, 0.0, math.inf,
    -math.inf, 2.0, np.float64(1.5),
]


@pytest.mark.postgres
def test_null_and_nan_keys_never_match_and_are_never_sent(tables: PgFactory) -> None:
    fn = SqlLookupFunction(tables, "measures", "x", schema="x DOUBLE, label STRING")
    keys = [(value,) for value in FLOAT_KEYS]
    with open_lookup(PartialCachingLookupProvider.of(fn, small_cache(), max_retries=0)) as h:
        tables.statements.clear()
        result = h.lookup_batch(keys)
        for key in keys:
            assert result[key] == dims.measure_rows(key[0]), key
        assert len(tables.lookups()) == 1  # one statement for the whole batch
        sent = sent_values(tables)
        assert all(v is not None and not (isinstance(v, float) and math.isnan(v)) for v in sent)
        assert sorted(sent) == [-math.inf, -0.0, 1.5, 2.0, math.inf]  # 0.0 is -0.0's twin


@pytest.mark.postgres
@pytest.mark.timeout(60)
@pytest.mark.parametrize("chunk_size", [1, 2, 8192])
def test_a_float_key_column_holding_nan_loads_whole(tables: PgFactory, chunk_size: int) -> None:
    """PostgreSQL sorts NaN above every number (and finds it equal to itself): chunking
    a table by such a column must end on it (it planned empty chunks forever)."""
    source = SqlTableSource(tables, "measures", schema="x DOUBLE, label STRING",
                            chunk_size=chunk_size)
    table = read_arrow(source, 2)
    got = sorted(table.to_pylist(), key=lambda r: r["label"])
    assert [r["label"] for r in got] == sorted(label for _, label in dims.MEASURES)
    assert math.isnan(next(r["x"] for r in got if r["label"] == "not a number"))


@pytest.mark.postgres
@pytest.mark.timeout(60)
def test_a_full_cache_answers_null_and_nan_keys_the_same(tables: PgFactory) -> None:
    source = SqlTableSource(tables, "measures", schema="x DOUBLE, label STRING", chunk_size=2)
    provider = FullCachingLookupProvider.of(source, HOUR, ["x"], share_across_workers=False,
                                            initial_load_timeout=30)
    keys = [(value,) for value in FLOAT_KEYS]
    with open_lookup(provider) as h:
        result = h.lookup_batch(keys)
        for key in keys:
            assert result[key] == dims.measure_rows(key[0]), key
        assert h.metrics.num_cached_records == 4  # the NaN row can never match: dropped


# --- wrong key types --------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize(("value", "kind"), [
    ("1", "str"), (b"1", "bytes"), (True, "bool"), (date(2020, 1, 1), "date"),
])
def test_a_key_of_the_wrong_type_is_a_config_error_naming_key_and_column(
    tables: PgFactory, value: Any, kind: str
) -> None:
    fn = SqlLookupFunction(tables, "customers", "id", schema="id BIGINT, name STRING")
    with open_lookup(PartialCachingLookupProvider.of(fn, small_cache(), max_retries=3)) as h:
        tables.statements.clear()
        with pytest.raises(ConfigError, match=(
            rf"key {re.escape(repr((value,)))} for table 'customers', column 'id': a {kind} "
            r"value .* can never equal a value of a bigint column")):
            h.lookup_batch([(2,), (value,)])  # the whole batch fails, before any SQL
        assert tables.lookups() == []
        # Refused before any load: nothing was loaded, so no load failed or was retried.
        assert (h.metrics.num_retries, h.metrics.num_load_failures) == (0, 0)
        assert h.lookup((1,)) == ((1, "c1"),)  # and the next batch works


@pytest.mark.postgres
def test_keys_that_can_never_match_are_empty_and_malformed_keys_are_type_errors(
    tables: PgFactory
) -> None:
    fn = SqlLookupFunction(tables, "customers", "id", schema="id BIGINT, name STRING")
    with open_lookup(PartialCachingLookupProvider.of(fn, small_cache(), max_retries=0)) as h:
        tables.statements.clear()
        assert h.lookup_batch([(1.5,), (2.0,)]) == {(1.5,): (), (2.0,): ((2, "c2"),)}
        assert sent_values(tables) == [2]  # 2.0 normalized; the hopeless 1.5 not sent
        for key in [(2**63,), (-(2**70),)]:  # beyond BIGINT: an error, at once, not retried
            with pytest.raises(ConfigError, match="out of the range of bigint"):
                h.lookup_batch([key])
        assert h.metrics.num_retries == 0
        assert sent_values(tables) == [2]
        for key in (1, [1], (1, 2), (), "1"):
            with pytest.raises(TypeError, match=r"a lookup key is a tuple of 1 value\(s\) \(id\)"):
                h.lookup(key)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="lookup keys must be hashable tuples of scalars"):
            h.lookup_batch([([1],)])


def test_a_full_cache_refuses_a_key_of_another_type() -> None:
    """A full cache checks keys as the other modes do: a key of another kind ("1", b"1",
    True for a BIGINT) raises KeyKindError naming the column, 1.5 equals no BIGINT and
    answers no rows, and 1.0 is the BIGINT 1 in every mode (one value, one answer)."""
    source = CollectionSource(dims.CUSTOMERS, schema="id BIGINT, name STRING")
    provider = FullCachingLookupProvider.of(source, HOUR, ["id"], share_across_workers=False,
                                            initial_load_timeout=30)
    with open_lookup(provider) as h:
        for value in ("1", b"1", True):
            with pytest.raises(KeyKindError, match="column 'id'"):
                h.lookup((value,))
        assert h.lookup((1.5,)) == ()
        for value in (np.int32(1), 1.0, np.float64(1.0)):
            assert h.lookup((value,)) == h.lookup((1,)) == ((1, "c1"),), value
        assert h.metrics.num_load_failures == 0
        with pytest.raises(TypeError, match=r"a lookup key is a tuple of 1 value\(s\) \(id\)"):
            h.lookup(1)  # type: ignore[arg-type]


def test_a_malformed_key_holding_a_huge_int_is_still_our_type_error() -> None:
    with open_lookup(LookupFunctionProvider.of(DictLookup(dims.CUSTOMERS))) as h, \
            pytest.raises(TypeError, match="a lookup key is a tuple of 1 value"):
        h.lookup((10**5000, 1))


# --- empty input ------------------------------------------------------------------------


STREAM = T.StructType([T.StructField("id", T.LongType()), T.StructField("n", T.StringType())])


@pytest.mark.parametrize("kind", ["partial", "full"])
def test_empty_batches(kind: str) -> None:
    if kind == "partial":
        fn = DictLookup(dims.CUSTOMERS)
        provider: Any = PartialCachingLookupProvider.of(fn, small_cache())
    else:
        fn = None
        provider = FullCachingLookupProvider.of(
            CollectionSource(dims.CUSTOMERS, schema="id BIGINT, name STRING"), HOUR, ["id"],
            share_across_workers=False, initial_load_timeout=30)
    plan = plan_join(STREAM, provider, "id", prefix="c_")
    empty = pa.RecordBatch.from_arrays(
        [pa.array([], pa.int64()), pa.array([], pa.string())], names=["id", "n"])
    with open_lookup(provider) as h:
        assert h.lookup_batch([]) == {}
        for how in ("left", "inner"):
            shape = plan_join(STREAM, provider, "id", how=how, prefix="c_").shape
            out = join_batch(empty, shape, h.runtime, provider.describe())
            assert out.num_rows == 0
            assert out.schema.names == ["id", "n", "c_name"]
            assert out.schema.field("c_name").type == pa.string()
        assert plan.schema.names == ["id", "n", "c_name"]
        if fn is not None:
            assert fn.batch_calls == []  # nothing was asked of the source


# --- huge strings and unicode -------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.redis
def test_huge_and_unicode_strings_through_sql_and_a_redis_tier(
    tables: PgFactory, redis_url: str, redis_prefix: str
) -> None:
    """1 MB keys and values, emoji, zero-width joiners, right-to-left text, combining
    marks, NUL and lone surrogates: loaded from PostgreSQL, cached in a tiered cache,
    then served to "another executor" from Redis alone."""
    namespace = redis_prefix.rstrip(":")

    def provider() -> PartialCachingLookupProvider:
        fn = SqlLookupFunction(tables, "words", "w", schema="w STRING, meaning STRING")
        tier = TieredLookupCache(small_cache(), RedisLookupCache(redis_url, namespace, ttl=60))
        return PartialCachingLookupProvider.of(fn, tier, max_retries=0)

    words = [w for w, _ in dims.WORDS] + [*dims.UNMATCHED_WORDS, "\ud800"]
    keys = [(w,) for w in words]
    expected = {(w,): dims.word_rows(w) for w in words}
    with open_lookup(provider()) as first:
        tables.statements.clear()
        assert first.lookup_batch(keys) == expected
        assert first.lookup((dims.BIG_KEY,))[0][1] == "a 1 MB key"
        assert first.lookup(("big value",))[0][1] == dims.BIG_VALUE
        sent = sent_values(tables)
        assert "a\x00b" not in sent
        assert "\ud800" not in sent  # no store holds a lone surrogate
        assert dims.BIG_KEY in sent
        assert first.metrics.num_cache_errors == 0
    statements = len(tables.lookups())
    with open_lookup(provider()) as other:  # an empty L1: Redis answers everything
        assert other.lookup_batch(keys) == expected
        assert len(tables.lookups()) == statements
        assert other.metrics.num_cache_errors == 0


@pytest.mark.redis
def test_huge_and_unicode_strings_with_redis_as_the_source(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    """Redis keys are binary-safe: NUL is a character like any other there."""
    stored = [*dims.WORDS, ("a\x00b", "NUL inside"), ("\x00", "only NUL")]
    for word, meaning in stored:
        redis_client.set(f"{redis_prefix}w:{word}".encode(), meaning.encode())
    fn = RedisLookupFunction(redis_url, redis_prefix + "w:{w}", "w STRING, meaning STRING",
                             ["w"], value_type="string")
    words = [w for w, _ in stored] + [dims.ABSENT_BIG_KEY, "A", "\ud800"]
    with open_lookup(PartialCachingLookupProvider.of(fn, small_cache(), max_retries=0)) as h:
        assert h.lookup_batch([(w,) for w in words]) == {
            (w,): tuple(row for row in stored if row[0] == w) for w in words}


# --- tampered values in Redis ----------------------------------------------------------------


def tamper(redis_client: Any, namespace: str, marker: Path) -> dict[int, bytes | None]:
    """Overwrite the cache entries of customers 1..7 with what an attacker (or a
    confused writer) might store; returns what was written (None: a hash)."""
    payload = pickle.dumps(Sentinel(marker))
    pickle.loads(payload)  # the payload does work ...
    assert marker.exists()
    marker.unlink()
    values: dict[int, bytes | None] = {
        1: b"garbage \xff\xfe\x00",
        2: payload,
        3: FORMAT_PREFIX + payload,
        4: FORMAT_PREFIX + b"[" + json_bomb(200_000) + b"]",  # deeper than any recursion limit
        5: FORMAT_PREFIX + b"[[" + json_bomb(40) + b"]]",  # deeper than the codec allows
        6: FORMAT_PREFIX + b"[[6]]",  # well encoded, but not a row of (id, name)
        7: None,  # another Redis type at the key
    }
    for key, value in values.items():
        name = f"{namespace}:{encode_key((key,))}"
        if value is None:
            redis_client.hset(name, "rows", "not a string")
        else:
            redis_client.set(name, value)
    return values


@pytest.mark.postgres
@pytest.mark.redis
def test_tampered_cache_values_are_counted_misses_reloaded_and_never_executed(
    tables: PgFactory, redis_url: str, redis_prefix: str, redis_client: Any, tmp_path: Path
) -> None:
    namespace = redis_prefix.rstrip(":")
    marker = tmp_path / "unpickled"
    tamper(redis_client, namespace, marker)
    fn = SqlLookupFunction(tables, "customers", "id", schema="id BIGINT, name STRING")
    cache = RedisLookupCache(redis_url, namespace, ttl=60)
    keys = [(i,) for i in range(1, 11)]
    expected = {(i,): ((i, f"c{i}"),) for i in range(1, 11)}
    with open_lookup(PartialCachingLookupProvider.of(fn, cache, max_retries=0)) as h:
        tables.statements.clear()
        assert h.lookup_batch(keys) == expected
        assert sorted(sent_values(tables)) == list(range(1, 11))  # every key reloaded
        # Five undecodable values (the codec) and one of the wrong shape (the runtime);
        # the hash reads as absent.
        assert h.metrics.num_cache_errors == 6
        assert h.lookup_batch(keys) == expected  # now from the repaired cache
        assert len(tables.lookups()) == 1
    assert not marker.exists()  # nothing was unpickled
    for key in range(1, 8):  # the reload overwrote every tampered entry
        stored = redis_client.get(f"{namespace}:{encode_key((key,))}")
        assert decode_rows(stored) == ((key, f"c{key}"),)


@pytest.mark.redis
def test_tampered_values_in_a_redis_source_are_our_errors_naming_the_key(
    redis_url: str, redis_prefix: str, redis_client: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "unpickled"
    redis_client.set(f"{redis_prefix}u:1", json_bomb(200_000))
    redis_client.set(f"{redis_prefix}u:2", pickle.dumps(Sentinel(marker)))
    redis_client.set(f"{redis_prefix}u:3", b'{"name": "Ada", "tier": "gold"}')
    redis_client.set(f"{redis_prefix}u:4", b'[{"name": "Bob", "tier": 2}, "not an object"]')
    redis_client.set(f"{redis_prefix}u:5", b'{"name": "Eve", "tier": 5}')
    schema = "id BIGINT, name STRING, tier INT"
    fn = RedisLookupFunction(redis_url, redis_prefix + "u:{id}", schema, ["id"],
                             value_type="json", mode="FAILFAST")
    errors = {
        1: "document.*not JSON \\(JSON nested too deep\\)",
        2: "document.*not JSON",
        3: r"column 'tier': cannot read \"gold\" \(expected a JSON number\) as int",
        4: "document.*not a JSON object or array of objects",
    }
    # Three attempts allowed: a bad value is not retried (FAILFAST reports it at once).
    with open_lookup(PartialCachingLookupProvider.of(fn, small_cache(), max_retries=2)) as h:
        for key, error in errors.items():
            with pytest.raises(LookupLoadError, match=(
                rf"lookup of 1 key\(s\) \[\({key},\)\] failed after 1 attempt\(s\): "
                rf"BadValueError: .*key '{redis_prefix}u:{key}'.*{error}")):
                h.lookup((key,))
        assert h.lookup((5,)) == ((5, "Eve", 5),)
        assert h.metrics.num_retries == 0
        assert h.metrics.num_bad_values == 4
    # PERMISSIVE: the row is kept with the bad value (or the whole document) as nulls.
    lenient = RedisLookupFunction(redis_url, redis_prefix + "u:{id}", schema, ["id"],
                                  value_type="json")
    with open_lookup(PartialCachingLookupProvider.of(lenient, small_cache())) as h:
        assert h.lookup((1,)) == ((1, None, None),)
        assert h.lookup((2,)) == ((2, None, None),)
        assert h.lookup((3,)) == ((3, "Ada", None),)
        assert h.metrics.num_bad_values >= 3
    assert not marker.exists()


@pytest.mark.redis
def test_hash_values_that_do_not_convert_name_the_key_and_field(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    redis_client.hset(f"{redis_prefix}h:1", mapping={"name": "Ada", "born": "yesterday"})
    redis_client.hset(f"{redis_prefix}h:2", mapping={"name": b"\xff\xfe", "born": "2000-01-02"})
    fn = RedisLookupFunction(redis_url, redis_prefix + "h:{id}",
                             "id BIGINT, name STRING, born DATE", ["id"], mode="FAILFAST")
    with open_lookup(LookupFunctionProvider.of(fn, max_retries=0)) as h:
        with pytest.raises(LookupLoadError, match=rf"key '{redis_prefix}h:1', column 'born'"):
            h.lookup((1,))
        with pytest.raises(LookupLoadError, match=rf"key '{redis_prefix}h:2', column 'name'"):
            h.lookup((2,))


def test_values_in_messages_never_hide_the_error() -> None:
    """An integer past Python's digit limit has no repr; messages show its size instead,
    inside keys and rows too, and normal values as their repr."""
    from spark_lookup.shown import shown

    huge = 10**5000
    assert shown((huge, 1)) == f"(<an integer of {huge.bit_length()} bits>, 1)"
    assert shown([huge]) == f"[<an integer of {huge.bit_length()} bits>]"
    assert shown((huge,)) == f"(<an integer of {huge.bit_length()} bits>,)"
    assert shown((1, "a")) == "(1, 'a')"
    assert shown("x" * 100, 20) == repr("x" * 100)[:17] + "..."


def test_a_sql_key_holding_a_huge_int_is_refused_with_our_error(tmp_path: Any) -> None:
    import functools
    import sqlite3

    from lookup import SqlLookupFunction
    from spark_lookup.errors import ConfigError

    fn = SqlLookupFunction(functools.partial(sqlite3.connect, str(tmp_path / "d.db")), "t",
                           key_columns=["id"], schema="id BIGINT, name STRING")
    with pytest.raises(ConfigError, match="an integer of 16610 bits"):
        fn.lookup_batch([(10**5000,)])
