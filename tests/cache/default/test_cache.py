"""DefaultLookupCache: Flink's DefaultLookupCacheTest cases, ported, plus concurrency
and property-based tests. Time comes from a fake timer; nothing sleeps."""

from __future__ import annotations

import pickle
import random
import threading
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cache import CacheMetrics, DefaultLookupCache, LookupCache
from spark_lookup.errors import ConfigError
from tests.cache.contract import Binding, LookupCacheContract
from tests.clock import FakeTimer


def build(timer: FakeTimer | None = None, **limits: Any) -> DefaultLookupCache:
    builder = DefaultLookupCache.new_builder()
    for name, value in limits.items():
        getattr(builder, name)(value)
    if timer is not None:
        builder.timer(timer)
    cache = builder.build()
    cache.open()
    return cache


class TestContract(LookupCacheContract):
    @pytest.fixture
    def make_cache(self) -> Any:
        def make(metrics: CacheMetrics | None = None, bind: Binding | None = None
                 ) -> LookupCache:
            cache = DefaultLookupCache.new_builder().maximum_size(100).build()
            if bind is not None:
                cache.bind(*bind)
            cache.open(metrics)
            return cache

        return make


def test_basic_read_write_in_cache() -> None:
    cache = build(maximum_size=1000)
    entries = {(i, f"k{i}"): [(i, f"k{i}", f"v{j}") for j in range(i % 3)] for i in range(100)}
    cache.put_all(entries)
    assert cache.size() == 100
    for key, rows in entries.items():
        assert cache.get_if_present(key) == tuple(rows)
    assert cache.get_if_present((1000, "k1000")) is None


def test_expire_after_access_renews_on_read() -> None:
    timer = FakeTimer()
    cache = build(timer, expire_after_access=timedelta(seconds=100))
    cache.put((1,), [(1, "a")])
    timer.tick(99)
    assert cache.get_if_present((1,)) == ((1, "a"),)  # read at 99 s renews to 199 s
    timer.tick(99)
    assert cache.get_if_present((1,)) == ((1, "a"),)
    timer.tick(100)
    assert cache.get_if_present((1,)) is None
    assert cache.size() == 0


def test_expire_after_access_also_counts_from_write() -> None:
    timer = FakeTimer()
    cache = build(timer, expire_after_access=10)
    cache.put((1,), [(1,)])
    timer.tick(10)
    assert cache.get_if_present((1,)) is None


def test_expire_after_write_is_not_renewed_by_reads() -> None:
    timer = FakeTimer()
    cache = build(timer, expire_after_write=timedelta(seconds=100))
    cache.put((1,), [(1, "a")])
    for _ in range(9):
        timer.tick(10)
        assert cache.get_if_present((1,)) == ((1, "a"),)
    timer.tick(10)  # 100 s after the write
    assert cache.get_if_present((1,)) is None
    cache.put((1,), [(1, "b")])  # a new write starts a new lifetime
    timer.tick(99)
    assert cache.get_if_present((1,)) == ((1, "b"),)


def test_write_and_access_limits_combine_whichever_comes_first() -> None:
    timer = FakeTimer()
    cache = build(timer, expire_after_write=100, expire_after_access=30)
    cache.put((1,), [(1,)])
    cache.put((2,), [(2,)])
    for _ in range(3):
        timer.tick(25)
        assert cache.get_if_present((1,)) is not None  # kept alive by reads up to 100 s
    assert cache.get_if_present((2,)) is None  # idle for 75 s > 30 s
    timer.tick(24.5)
    assert cache.get_if_present((1,)) is not None
    timer.tick(0.5)
    assert cache.get_if_present((1,)) is None  # 100 s after its write


def test_size_based_eviction_is_least_recently_used() -> None:
    cache = build(maximum_size=3)
    for i in range(3):
        cache.put((i,), [(i,)])
    cache.get_if_present((0,))  # 1 is now the least recently used
    cache.put((3,), [(3,)])
    assert cache.size() == 3
    assert cache.get_if_present((1,)) is None
    assert all(cache.get_if_present((i,)) is not None for i in (0, 2, 3))


def test_size_eviction_with_expiry_drops_expired_entries_first() -> None:
    timer = FakeTimer()
    cache = build(timer, maximum_size=2, expire_after_write=10)
    cache.put((1,), [(1,)])
    timer.tick(5)
    cache.put((2,), [(2,)])
    cache.get_if_present((1,))  # 2 becomes LRU, but 1 expires first
    timer.tick(6)  # 1 expired at 10 s; 2 is alive until 15 s
    cache.put((3,), [(3,)])
    assert cache.get_if_present((2,)) == ((2,),)
    assert cache.get_if_present((3,)) == ((3,),)


@pytest.mark.parametrize("cache_missing_key", [True, False])
def test_cache_missing_key(cache_missing_key: bool) -> None:
    cache = build(maximum_size=10, cache_missing_key=cache_missing_key)
    cache.put((1,), [])
    assert cache.get_if_present((1,)) == (() if cache_missing_key else None)
    assert cache.size() == (1 if cache_missing_key else 0)


# --- expire_missing_after: a missing key's own life (issue 44, item 5) ---------------------


def test_a_missing_key_expires_after_its_own_life_while_rows_keep_theirs() -> None:
    timer = FakeTimer()
    cache = build(timer, expire_after_write=timedelta(minutes=10),
                  expire_missing_after=timedelta(seconds=30))
    cache.put_all({(1,): [(1, "a")], (2,): []})  # one batch: a row and a miss
    timer.tick(29.5)
    assert cache.get_all([(1,), (2,)]) == {(1,): ((1, "a"),), (2,): ()}
    timer.tick(0.5)  # 30 s after the put: the miss is gone, the row stays
    assert cache.get_if_present((2,)) is None
    assert cache.get_if_present((1,)) == ((1, "a"),)
    assert cache.size() == 1
    cache.put((2,), [(2, "late")])  # the row arrived meanwhile: a row's life from now
    timer.tick(60)
    assert cache.get_if_present((2,)) == ((2, "late"),)
    timer.tick(510)  # 10 min after the first put, 9.5 min after the late row's
    assert cache.get_if_present((1,)) is None
    assert cache.get_if_present((2,)) == ((2, "late"),)


def test_a_missing_life_alone_bounds_only_misses() -> None:
    # With no general TTL, rows never expire; misses do.
    timer = FakeTimer()
    cache = build(timer, maximum_size=10, expire_missing_after=5)
    cache.put_all({(1,): [(1,)], (2,): []})
    timer.tick(5)
    assert cache.get_all([(1,), (2,)]) == {(1,): ((1,),)}
    timer.tick(10**6)
    assert cache.get_if_present((1,)) == ((1,),)


def test_reads_do_not_renew_a_miss_past_its_own_life() -> None:
    timer = FakeTimer()
    cache = build(timer, expire_after_access=timedelta(seconds=10), expire_missing_after=25)
    cache.put_all({(1,): [(1,)], (2,): []})
    for _ in range(4):
        timer.tick(6)  # read every 6 s: both stay alive by access ...
        assert cache.get_all([(1,), (2,)]) == {(1,): ((1,),), (2,): ()}
    timer.tick(1)  # ... until 25 s after the miss was put
    assert cache.get_all([(1,), (2,)]) == {(1,): ((1,),)}
    timer.tick(10)  # and an idle row still expires by access
    assert cache.get_if_present((1,)) is None


def test_a_miss_replaced_by_rows_and_rows_replaced_by_a_miss() -> None:
    timer = FakeTimer()
    cache = build(timer, expire_after_write=100, expire_missing_after=10)
    cache.put((1,), [])
    cache.put((1,), [(1, "row")])  # a row now: a row's life
    cache.put((2,), [(2, "row")])
    cache.put((2,), [])  # gone from the dimension: a miss's life
    timer.tick(10)
    assert cache.get_all([(1,), (2,)]) == {(1,): ((1, "row"),)}


def test_the_missing_life_is_shipped_with_the_configuration() -> None:
    timer = FakeTimer()
    cache = build(timer, maximum_size=5, expire_missing_after=timedelta(seconds=3))
    assert cache.expire_missing_after == timedelta(seconds=3)
    assert repr(cache).endswith("cache_missing_key=True, expire_missing_after=0:00:03)")
    copy = pickle.loads(pickle.dumps(cache))
    assert repr(copy) == repr(cache)
    copy.open()
    copy.put((1,), [])
    copy._timer.tick(3)  # type: ignore[attr-defined]  # the copy's own fake clock
    assert copy.get_if_present((1,)) is None
    assert build(maximum_size=1).expire_missing_after is None


def test_expire_missing_after_from_options() -> None:
    cache = DefaultLookupCache.from_options({
        "lookup.cache": "PARTIAL",
        "lookup.partial-cache.expire-after-write": "1 h",
        "spark.lookup.partial-cache.expire-missing-after": "30 s",
    })
    assert cache.expire_missing_after == timedelta(seconds=30)
    assert "expire_missing_after=0:00:30" in repr(cache)


@pytest.mark.parametrize(("options", "message"), [
    ({"spark.lookup.partial-cache.expire-missing-after": "0 s"},
     r"'spark.lookup.partial-cache.expire-missing-after': must be a positive duration"),
    ({"spark.lookup.partial-cache.expire-missing-after": "-PT5S"},
     r"'spark.lookup.partial-cache.expire-missing-after': must be a positive duration"),
    ({"spark.lookup.partial-cache.expire-missing-after": "soon"},
     r"'spark.lookup.partial-cache.expire-missing-after': cannot parse duration"),
    ({"spark.lookup.partial-cache.expire-missing-after": "30 s",
      "lookup.partial-cache.cache-missing-key": "false"},
     r"option 'spark.lookup.partial-cache.expire-missing-after' \(0:00:30\) is given while "
     r"'lookup.partial-cache.cache-missing-key' is false"),
    ({"spark.lookup.partial-cache.expire-missing-after": "2 h"},
     r"option 'spark.lookup.partial-cache.expire-missing-after' \(2:00:00\) is longer than "
     r"'lookup.partial-cache.expire-after-write' \(1:00:00\)"),
    ({"spark.lookup.partial-cache.expire-missing-afer": "30 s"},
     r"unknown option 'spark.lookup.partial-cache.expire-missing-afer'; did you mean "
     r"'spark.lookup.partial-cache.expire-missing-after'"),
])
def test_bad_expire_missing_after_options_name_the_key(options: dict[str, str],
                                                       message: str) -> None:
    given = {"lookup.cache": "PARTIAL", "lookup.partial-cache.expire-after-write": "1 h",
             **options}
    with pytest.raises(ConfigError, match=message):
        DefaultLookupCache.from_options(given)


@pytest.mark.parametrize(("value", "message"), [
    (0, "expire_missing_after must be positive, got 0: to cache no missing key, set "
        "cache_missing_key=False instead"),
    (timedelta(0), "expire_missing_after must be positive.*cache_missing_key=False"),
    (-1, "expire_missing_after must be positive"),
    ("30 s", "expire_missing_after must be a datetime.timedelta or a number of seconds"),
    (True, "expire_missing_after must be a datetime.timedelta or a number of seconds"),
    (float("nan"), "expire_missing_after must be a number of seconds, got NaN"),
])
def test_a_bad_missing_life_is_refused_by_the_builder_and_the_constructor(
        value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DefaultLookupCache.new_builder().expire_missing_after(value)
    with pytest.raises(ConfigError, match=message):
        DefaultLookupCache(maximum_size=1, expire_missing_after=value)


def test_a_missing_life_that_could_never_apply_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"expire_missing_after \(0:00:05\) is given while "
                                          r"cache_missing_key is false"):
        (DefaultLookupCache.new_builder().maximum_size(1).cache_missing_key(False)
         .expire_missing_after(5).build())
    with pytest.raises(ConfigError, match=r"expire_missing_after \(0:01:00\) is longer than "
                                          r"expire_after_write \(0:00:30\)"):
        DefaultLookupCache(expire_after_write=timedelta(seconds=30),
                           expire_missing_after=timedelta(minutes=1))
    # As long as the write TTL is allowed (it changes nothing, and says so harmlessly);
    # with an access TTL alone it caps what reads renew.
    DefaultLookupCache(expire_after_write=timedelta(seconds=30),
                       expire_missing_after=timedelta(seconds=30))
    DefaultLookupCache(expire_after_access=timedelta(seconds=30),
                       expire_missing_after=timedelta(hours=1))


def test_a_missing_life_is_no_bound_of_its_own() -> None:
    # Rows would still grow without limit: the cache needs one of the four limits.
    with pytest.raises(ConfigError, match="at least one of"):
        DefaultLookupCache.new_builder().expire_missing_after(5).build()


def test_empty_result_replaces_stale_rows_even_when_not_cached() -> None:
    cache = build(maximum_size=10, cache_missing_key=False)
    cache.put((1,), [(1, "old")])
    cache.put((1,), [])
    assert cache.get_if_present((1,)) is None


def test_cache_metrics() -> None:
    timer = FakeTimer()
    metrics = CacheMetrics()
    cache = DefaultLookupCache.new_builder().expire_after_write(10).timer(timer).build()
    cache.open(metrics)
    assert metrics.num_cached_records == 0
    assert metrics.num_cached_bytes == 0
    cache.put_all({(i,): [(i, "x" * i)] for i in range(5)})
    for i in range(10):
        cache.get_if_present((i,))
    assert metrics.hit_count == 5
    assert metrics.miss_count == 5
    assert metrics.num_cached_records == 5
    # Exact from the buffers: the rows' Arrow buffers plus per-key arrays and buckets.
    rows = pa.table({"f0": pa.array(range(5)), "f1": pa.array(["x" * i for i in range(5)])})
    held = metrics.num_cached_bytes
    assert rows.get_total_buffer_size() < held <= rows.get_total_buffer_size() + 16 * 64
    cache.invalidate((0,))
    cache.put((1,), [(1, "replaced")])
    assert metrics.num_cached_records == 4
    assert metrics.num_cached_bytes > held  # the replaced row stays until compaction
    timer.tick(10)
    assert metrics.num_cached_records == 0
    assert metrics.num_cached_bytes == 0


def test_serialization_ships_configuration_not_contents() -> None:
    timer = FakeTimer()
    cache = build(
        timer,
        maximum_size=7,
        expire_after_write=timedelta(minutes=1),
        expire_after_access=timedelta(seconds=30),
        cache_missing_key=False,
    )
    cache.put((1,), [(1, "a")])
    copy = pickle.loads(pickle.dumps(cache))
    assert repr(copy) == repr(cache)
    assert copy.get_if_present((1,)) is None  # contents stay behind
    copy.open()
    copy.put((1,), [])
    assert copy.get_if_present((1,)) is None  # cache_missing_key=False survived
    copy.put((2,), [(2,)])
    assert copy.get_if_present((2,)) == ((2,),)


def test_concurrent_access_keeps_size_bound_and_raises_nothing() -> None:
    cache = build(maximum_size=100, expire_after_access=60)
    errors: list[BaseException] = []
    over_bound: list[int] = []
    stop = threading.Event()

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(2000):  # 16,000 racing operations: the races, not the count
                key = (rng.randrange(300),)
                op = rng.random()
                if op < 0.5:
                    rows = cache.get_if_present(key)
                    assert rows in (None, (), ((key[0], "v"),))
                elif op < 0.9:
                    cache.put(key, [(key[0], "v")])
                elif op < 0.95:
                    cache.put_all({(rng.randrange(300),): [] for _ in range(5)})
                else:
                    cache.invalidate(key)
                size = cache.size()
                if size > 100:
                    over_bound.append(size)
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert over_bound == []
    assert cache.size() <= 100
    metrics = cache.metrics
    assert metrics.hit_count + metrics.miss_count > 0


def test_build_from_config() -> None:
    cache = DefaultLookupCache.from_options(
        {
            "lookup.cache": "PARTIAL",
            "lookup.partial-cache.max-rows": "100",
            "lookup.partial-cache.expire-after-write": "10 min",
            "lookup.partial-cache.expire-after-access": "PT30S",
            "lookup.partial-cache.cache-missing-key": "false",
            "connector": "jdbc",  # a connector's own keys are not the cache's business
        }
    )
    assert repr(cache) == (
        "DefaultLookupCache(maximum_size=100, expire_after_write=0:10:00, "
        "expire_after_access=0:00:30, cache_missing_key=False)"
    )


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"lookup.cache": "FULL", "lookup.partial-cache.max-rows": "1"}, "lookup.cache"),
        ({"lookup.partial-cache.max-rows": "1"}, "lookup.cache"),
        ({"lookup.cache": "PARTIAL"}, "lookup.partial-cache.max-rows"),
        ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "0"},
         "lookup.partial-cache.max-rows"),
        ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "ten"},
         "lookup.partial-cache.max-rows"),
        ({"lookup.cache": "PARTIAL", "lookup.partial-cache.expire-after-write": "10 parsecs"},
         "lookup.partial-cache.expire-after-write"),
        ({"lookup.cache": "PARTIAL", "lookup.partial-cache.expire-after-access": "0 s"},
         "lookup.partial-cache.expire-after-access"),
        ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "1",
          "lookup.partial-cache.cache-missing-key": "maybe"},
         "lookup.partial-cache.cache-missing-key"),
        ({"lookup.cache": "PARTIAL", "lookup.partial-cache.max-row": "1"},
         "lookup.partial-cache.max-row"),
        ({"lookup.cache": "SOMETIMES"}, "lookup.cache"),
    ],
)
def test_invalid_options_name_the_key(options: dict[str, str], key: str) -> None:
    with pytest.raises(ValueError, match=f"'{key}'"):
        DefaultLookupCache.from_options(options)


def test_typo_gets_a_suggestion() -> None:
    with pytest.raises(ConfigError, match="did you mean 'lookup.partial-cache.max-rows'"):
        DefaultLookupCache.from_options(
            {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-row": "1"}
        )


def test_builder_without_limits_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one of"):
        DefaultLookupCache.new_builder().build()
    with pytest.raises(ValueError, match="at least one of"):
        DefaultLookupCache.new_builder().cache_missing_key(False).build()


@pytest.mark.parametrize(
    ("method", "value"),
    [
        ("maximum_size", 0),
        ("maximum_size", -1),
        ("maximum_size", 1.5),
        ("maximum_size", True),
        ("expire_after_write", 0),
        ("expire_after_write", -5),
        ("expire_after_write", timedelta(0)),
        ("expire_after_write", "10 s"),
        ("expire_after_access", float("nan")),
        ("cache_missing_key", "yes"),
        ("timer", 42),
    ],
)
def test_builder_rejects_bad_arguments(method: str, value: Any) -> None:
    with pytest.raises(ValueError, match=method):
        getattr(DefaultLookupCache.new_builder(), method)(value)


def test_builder_accepts_seconds() -> None:
    timer = FakeTimer()
    cache = build(timer, expire_after_write=2.5)
    cache.put((1,), [(1,)])
    timer.tick(2.4)
    assert cache.get_if_present((1,)) is not None
    timer.tick(0.1)
    assert cache.get_if_present((1,)) is None


def test_returned_rows_are_immutable_snapshots() -> None:
    cache = build(maximum_size=10)
    rows = [(1, "a")]
    cache.put((1,), rows)
    rows.append((1, "b"))  # the caller's list is not the cache's
    assert cache.get_if_present((1,)) == ((1, "a"),)


def test_close_empties_the_cache() -> None:
    cache = build(maximum_size=10)
    cache.put((1,), [(1,)])
    cache.close()
    assert cache.size() == 0
    assert cache.metrics.num_cached_bytes == 0


# --- property-based: the cache never answers for a key that was not put or has expired

KEYS = st.tuples(st.integers(0, 7))


class CacheModel(RuleBasedStateMachine):
    """Checks every answer against a model of writes, reads and the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.timer = FakeTimer()
        self.write_ttl = 10.0
        self.access_ttl = 4.0
        self.cache = build(
            self.timer, maximum_size=5, expire_after_write=self.write_ttl,
            expire_after_access=self.access_ttl,
        )
        # key -> (rows, written_at, last_access)
        self.model: dict[tuple[int], tuple[tuple[tuple[int, int], ...], float, float]] = {}
        self.version = 0

    def expired(self, key: tuple[int]) -> bool:
        _, written, accessed = self.model[key]
        now = self.timer.now
        return now >= written + self.write_ttl or now >= accessed + self.access_ttl

    @rule(key=KEYS, n=st.integers(0, 2))
    def put(self, key: tuple[int], n: int) -> None:
        self.version += 1
        rows = tuple((key[0], self.version) for _ in range(n))
        self.cache.put(key, rows)
        self.model[key] = (rows, self.timer.now, self.timer.now)

    @rule(key=KEYS)
    def get(self, key: tuple[int]) -> None:
        got = self.cache.get_if_present(key)
        if key not in self.model or self.expired(key):
            assert got is None, f"{key} answered {got} but was never put or has expired"
            self.model.pop(key, None)
            return
        rows, written, _ = self.model[key]
        if got is None:
            del self.model[key]  # evicted by size: allowed
            return
        assert got == rows, f"{key} answered {got}, the latest put was {rows}"
        self.model[key] = (rows, written, self.timer.now)

    @rule(key=KEYS)
    def invalidate(self, key: tuple[int]) -> None:
        self.cache.invalidate(key)
        self.model.pop(key, None)

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0, 4.0, 6.0]))
    def tick(self, seconds: float) -> None:
        self.timer.tick(seconds)

    @precondition(lambda self: bool(self.model))
    @rule()
    def get_all(self) -> None:
        keys = list(self.model)
        found = self.cache.get_all(keys)
        for key in keys:
            if self.expired(key):
                assert key not in found
                del self.model[key]
            elif key in found:
                assert found[key] == self.model[key][0]
                rows, written, _ = self.model[key]
                self.model[key] = (rows, written, self.timer.now)
            else:
                del self.model[key]

    @invariant()
    def bounded_and_bytes_accounted(self) -> None:
        size = self.cache.size()
        assert size <= 5
        assert (self.cache.metrics.num_cached_bytes > 0) == (size > 0)


class WriteOnlyCacheModel(CacheModel):
    """The same checks with expire-after-write only (one deadline array, no write times)."""

    def __init__(self) -> None:
        super().__init__()
        self.access_ttl = float("inf")
        self.cache = build(self.timer, maximum_size=5, expire_after_write=self.write_ttl)


TestCacheModel = CacheModel.TestCase
TestCacheModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestWriteOnlyCacheModel = WriteOnlyCacheModel.TestCase
TestWriteOnlyCacheModel.settings = TestCacheModel.settings


def test_invalidate_arrow_counts_the_live_entries_it_removed() -> None:
    cache = build(maximum_size=1000)
    cache.bind(pa.schema([("id", pa.string()), ("n", pa.int64()), ("v", pa.string())]),
               ["id", "n"])
    cache.put_all({("a", 1): [("a", 1, "x")], ("b", 2): [("b", 2, "y")], ("c", 3): []})
    keys = [pa.array(["a", "c", "a", "zz"]), pa.array([1, 3, 1, 9], pa.int64())]
    assert cache.invalidate_arrow(keys) == 2  # a repeat and an absent key count nothing
    assert cache.invalidate_arrow(keys) == 0
    assert cache.get_all([("a", 1), ("b", 2), ("c", 3)]) == {("b", 2): (("b", 2, "y"),)}
    assert cache.invalidate_arrow([pa.array(["b"]), pa.array([3], pa.int64())]) == 0


def test_invalidated_entries_are_compacted_away() -> None:
    cache = build(maximum_size=100_000)
    cache.put_all({(i,): [(i, "v")] for i in range(5000)})
    held = cache.metrics.num_cached_bytes
    assert cache.invalidate_arrow([pa.array(range(4000), pa.int64())]) == 4000
    assert cache.size() == 1000
    assert cache.metrics.num_cached_bytes < held / 2


def _versions(key: int, count: int) -> list[tuple[int, int]]:
    return [(key, version) for version in range(count)]


def _rows_held(cache: DefaultLookupCache, keys: range) -> int:
    held = (cache.get_if_present((k,)) for k in keys)
    return sum(max(len(rows), 1) for rows in held if rows is not None)


def test_counting_rows_bounds_versions_not_keys() -> None:
    cache = build(maximum_size=25)
    cache.count_rows()
    for key in range(6):
        cache.put((key,), _versions(key, 10))
        assert _rows_held(cache, range(6)) <= 25
    # Whole keys go, least recently used first: the two last put stay.
    assert cache.size() == 2
    assert cache.get_if_present((4,)) == tuple(_versions(4, 10))
    assert cache.get_if_present((5,)) == tuple(_versions(5, 10))


def test_counting_rows_evicts_the_least_recently_used_and_counts_a_miss_as_one() -> None:
    cache = build(maximum_size=10)
    cache.count_rows()
    cache.put((1,), _versions(1, 4))
    cache.put((2,), [])  # a missing key: one
    cache.put((3,), _versions(3, 4))
    assert cache.size() == 3  # 9 rows
    cache.get_if_present((1,))  # 2, then 3, are now the least recently used
    cache.put((4,), _versions(4, 2))  # 11 rows: the miss goes, and it is enough
    assert cache.get_if_present((2,)) is None
    assert [cache.get_if_present((k,)) is not None for k in (1, 3, 4)] == [True] * 3
    cache.put((5,), _versions(5, 3))  # 13 rows: 1 (read just above, before 3) goes
    assert cache.get_if_present((1,)) is None
    assert _rows_held(cache, range(6)) == 9


def test_counting_rows_with_replacement_invalidation_and_expiry() -> None:
    timer = FakeTimer()
    cache = build(timer, maximum_size=10, expire_after_write=10)
    cache.count_rows()
    cache.put((1,), _versions(1, 5))
    cache.put((1,), _versions(1, 3))  # replaced: 3 rows, not 8
    cache.put((2,), _versions(2, 7))
    assert cache.size() == 2
    cache.invalidate((2,))
    cache.put((3,), _versions(3, 7))  # 2's rows no longer count
    assert cache.size() == 2
    timer.tick(11)
    cache.put((4,), _versions(4, 10))  # the expired go first: 4 alone fits
    assert cache.get_if_present((4,)) == tuple(_versions(4, 10))
    assert cache.size() == 1


def test_a_key_with_more_versions_than_the_bound_is_not_kept() -> None:
    cache = build(maximum_size=5)
    cache.count_rows()
    cache.put((1,), _versions(1, 3))
    cache.put((2,), _versions(2, 6))
    assert cache.size() == 0 or cache.get_if_present((2,)) is None
    assert _rows_held(cache, range(3)) <= 5


def test_without_counting_rows_the_bound_counts_keys() -> None:
    cache = build(maximum_size=3)
    for key in range(3):
        cache.put((key,), _versions(key, 10))
    assert cache.size() == 3
    assert _rows_held(cache, range(3)) == 30
    cache.put((3,), _versions(3, 10))
    assert cache.size() == 3
    assert cache.get_if_present((0,)) is None


def test_counting_rows_is_not_shipped() -> None:
    cache = build(maximum_size=2)
    cache.count_rows()
    copy = pickle.loads(pickle.dumps(cache))
    copy.open()
    copy.put((1,), _versions(1, 5))
    assert copy.size() == 1
