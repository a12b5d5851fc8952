"""DeltaSource(history=True) on real Delta tables with their change data feed: the
versions it builds read, at every commit's time, as the table did then; changes of one
key in one commit, composite keys and clocks going back; a reload reads only the
commits since the last and builds what a build from scratch does; refusals."""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from connectors.predicates import Predicate
from lookup import FullCachingLookupProvider, RetryPolicy, Validity, open_lookup
from lookup.runtime.full import FullCachingRuntime
from scan import DeltaSource, read_arrow
from spark_lookup.errors import ConfigError, ConnectorError
from triggers import PeriodicCacheReloadTrigger

FEED = {"delta.enableChangeDataFeed": "true"}
UTC = dt.timezone.utc


def rows(ids: list[int], values: list[str], regions: list[str] | None = None) -> pa.Table:
    columns: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "v": pa.array(values)}
    if regions is not None:
        columns = {"region": pa.array(regions), **columns}
    return pa.table(columns)


def settle() -> None:
    # Commit timestamps are in milliseconds: commits a few apart have their own instants.
    time.sleep(0.003)


def create(path: str, data: pa.Table, feed: bool = True) -> None:
    write_deltalake(path, data, configuration=FEED if feed else None)
    settle()


def append(path: str, data: pa.Table, mode: str = "append") -> None:
    write_deltalake(path, data, mode=mode)  # type: ignore[call-overload]
    settle()


def update(path: str, value: str, predicate: str) -> None:
    DeltaTable(path).update(updates={"v": f"'{value}'"}, predicate=predicate)
    settle()


def delete(path: str, predicate: str) -> None:
    DeltaTable(path).delete(predicate)
    settle()


def stamps(path: str) -> dict[int, dt.datetime]:
    """Each commit's timestamp, by version."""
    return {int(h["version"]): dt.datetime.fromtimestamp(h["timestamp"] / 1000, UTC)
            for h in DeltaTable(path).history()}


def versions(source: DeltaSource) -> list[dict[str, Any]]:
    return read_arrow(source).to_pylist()


def history(path: str, keys: tuple[str, ...] = ("id",), **kw: Any) -> DeltaSource:
    return DeltaSource(path, history=True, key_columns=list(keys), **kw)


def as_of(table: pa.Table, at: dt.datetime, keys: list[str]) -> pa.Table:
    """The versions valid at ``at``, as the table's rows."""
    instant = pa.scalar(at, pa.timestamp("us", "UTC"))
    valid = pc.and_(pc.less_equal(table.column("_valid_from"), instant),
                    pc.or_kleene(pc.is_null(table.column("_valid_to")),
                                 pc.less(instant, table.column("_valid_to"))))
    return table.filter(valid).drop_columns(["_valid_from", "_valid_to"]).sort_by(
        [(k, "ascending") for k in keys])


def snapshot(path: str, version: int, schema: pa.Schema, keys: list[str]) -> pa.Table:
    table = DeltaTable(path, version=version).to_pyarrow_table()
    return table.select(schema.names).cast(schema).sort_by([(k, "ascending") for k in keys])


def assert_reads_as_every_version(path: str, source: DeltaSource, keys: list[str]) -> None:
    """At each commit's timestamp, and just before the next, the versions valid are
    the table's rows at that commit."""
    built = read_arrow(source)
    schema = built.drop_columns(["_valid_from", "_valid_to"]).schema
    at = stamps(path)
    for version, stamp in at.items():
        want = snapshot(path, version, schema, keys)
        assert as_of(built, stamp, keys).equals(want), version
        if version + 1 in at:
            before_next = at[version + 1] - timedelta(microseconds=1)
            assert as_of(built, before_next, keys).equals(want), version
    assert as_of(built, min(at.values()) - timedelta(microseconds=1), keys).num_rows == 0


def test_inserts_updates_and_deletes_become_versions(tmp_path: Path) -> None:
    path = str(tmp_path / "dim")
    create(path, rows([1, 2, 3], ["a", "b", "c"]))
    update(path, "B", "id = 2")
    delete(path, "id = 3")
    append(path, rows([3], ["c2"]))  # inserted again after its delete
    at = stamps(path)
    source = history(path)
    assert source.schema.simpleString() == (
        "struct<id:bigint,v:string,_valid_from:timestamp,_valid_to:timestamp>")
    assert source.history_validity == Validity("_valid_from", "_valid_to")
    assert versions(source) == [
        {"id": 1, "v": "a", "_valid_from": at[0], "_valid_to": None},
        {"id": 2, "v": "b", "_valid_from": at[0], "_valid_to": at[1]},
        {"id": 2, "v": "B", "_valid_from": at[1], "_valid_to": None},
        {"id": 3, "v": "c", "_valid_from": at[0], "_valid_to": at[2]},
        {"id": 3, "v": "c2", "_valid_from": at[3], "_valid_to": None},
    ]
    assert source.history_reads == ((0, 3),)
    assert_reads_as_every_version(path, source, ["id"])


def test_composite_keys_through_merges_overwrites_and_deletes(tmp_path: Path) -> None:
    path = str(tmp_path / "dim")
    keys = ["region", "id"]
    create(path, rows([1, 1, 2, 3], ["a", "b", "c", "d"], ["eu", "us", "eu", "eu"]))
    update(path, "A", "region = 'eu' AND id = 1")  # the key (us, 1) is another key
    (DeltaTable(path).merge(rows([2, 4], ["C", "e"], ["eu", "us"]),
                            "t.region = s.region AND t.id = s.id", "s", "t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    settle()
    delete(path, "region = 'us'")
    append(path, rows([1, 5], ["b2", "f"], ["us", "eu"]))
    # An overwrite: every row deleted from the old files, the new ones inserted.
    append(path, rows([1, 2, 9], ["A", "C2", "g"], ["eu", "eu", "us"]), mode="overwrite")
    update(path, "A", "region = 'eu' AND id = 1")  # the same value: a version all the same
    source = history(path, ("region", "id"))
    assert_reads_as_every_version(path, source, keys)
    got = read_arrow(source)
    eu_1 = got.filter(pc.and_(pc.equal(got.column("region"), "eu"), pc.equal(got.column("id"), 1)))
    assert eu_1.column("v").to_pylist() == ["a", "A", "A", "A"]


def test_several_changes_of_a_key_in_one_commit_keep_the_last(tmp_path: Path) -> None:
    path = str(tmp_path / "dim")
    create(path, rows([1, 2], ["a", "b"]))
    # One commit inserting key 1 three times: the feed lists them in the file's order.
    append(path, rows([1, 3, 1, 1], ["x", "c", "y", "z"]))
    # An overwrite deletes key 2 and inserts it again in one commit: it stays.
    append(path, rows([2], ["b"]), mode="overwrite")
    at = stamps(path)
    assert versions(history(path)) == [
        {"id": 1, "v": "a", "_valid_from": at[0], "_valid_to": at[1]},
        {"id": 1, "v": "z", "_valid_from": at[1], "_valid_to": at[2]},
        {"id": 2, "v": "b", "_valid_from": at[0], "_valid_to": at[2]},
        {"id": 2, "v": "b", "_valid_from": at[2], "_valid_to": None},
        {"id": 3, "v": "c", "_valid_from": at[1], "_valid_to": at[2]},
    ]


def _restamp(path: str, version: int, millis: int) -> None:
    """Rewrites the timestamp of commit ``version`` in the log (a writer's clock)."""
    log = Path(path) / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line]
    for action in actions:
        if "commitInfo" in action:
            action["commitInfo"]["timestamp"] = millis
    log.write_text("".join(json.dumps(action) + "\n" for action in actions))


def test_a_commit_stamped_before_the_one_before_starts_with_it(tmp_path: Path) -> None:
    path = str(tmp_path / "dim")
    create(path, rows([1], ["a"]))
    update(path, "b", "id = 1")
    update(path, "c", "id = 1")
    at = stamps(path)
    earlier = at[0] - timedelta(seconds=5)
    _restamp(path, 1, int(earlier.timestamp() * 1000))
    # Commit 1 takes commit 0's time: "a" holds for no time and is left out.
    assert versions(history(path)) == [
        {"id": 1, "v": "b", "_valid_from": at[0], "_valid_to": at[2]},
        {"id": 1, "v": "c", "_valid_from": at[2], "_valid_to": None},
    ]


def test_null_keys_are_left_out_and_key_filters_apply(tmp_path: Path) -> None:
    path = str(tmp_path / "dim")
    create(path, pa.table({"id": pa.array([1, None, 3], pa.int64()), "v": ["a", "n", "c"]}))
    update(path, "C", "id = 3")
    assert [r["v"] for r in versions(history(path))] == ["a", "c", "C"]
    kept = history(path, filters=[Predicate("id", "=", 3)], schema="id INT, v STRING")
    got = read_arrow(kept)
    assert got.schema.field("id").type == pa.int32()
    assert got.column("v").to_pylist() == ["c", "C"]


@pytest.fixture
def growing(tmp_path: Path) -> str:
    path = str(tmp_path / "dim")
    create(path, rows(list(range(20)), [f"v0-{i}" for i in range(20)]))
    update(path, "u1", "id < 5")
    return path


def test_a_reload_after_one_commit_reads_only_that_commit(growing: str) -> None:
    source = history(growing)
    first = read_arrow(source)
    assert source.history_reads == ((0, 1),)
    assert read_arrow(source).equals(first)  # the table has not moved: nothing read
    assert source.history_reads == ((0, 1),)
    delete(growing, "id = 3")
    incremental = read_arrow(source)
    assert source.history_reads == ((0, 1), (2, 2))
    update(growing, "u3", "id > 15")
    append(growing, rows([3, 40], ["back", "new"]))
    read_arrow(source)
    read_arrow(source)
    assert source.history_reads == ((0, 1), (2, 2), (3, 4))
    assert incremental.num_rows == first.num_rows  # 3's version closed, none opened


def test_versions_built_incrementally_equal_those_built_from_scratch(growing: str) -> None:
    source = history(growing)
    steps = [
        lambda: delete(growing, "id = 3"),
        lambda: append(growing, rows([3, 40], ["back", "x"])),
        lambda: update(growing, "u2", "id % 2 = 0"),
        lambda: append(growing, rows([1, 2, 50], ["o1", "o2", "o3"]), mode="overwrite"),
        lambda: delete(growing, "id = 50"),
    ]
    for step in steps:
        read_arrow(source)
        step()
        fresh = history(growing)
        assert read_arrow(source).equals(read_arrow(fresh))
        assert len(fresh.history_reads) == 1
    assert [last - first for first, last in source.history_reads[1:]] == [0] * len(steps)
    assert_reads_as_every_version(growing, source, ["id"])


def test_a_full_cache_reload_reads_only_the_new_commit(growing: str) -> None:
    source = history(growing)
    provider = FullCachingLookupProvider.of(
        source, PeriodicCacheReloadTrigger(timedelta(hours=1)), ["id"],
        retry_policy=RetryPolicy(max_retries=0))
    with open_lookup(provider) as handle:
        assert values_of(handle, 1) == ["v0-1", "u1"]
        update(growing, "u2", "id = 1")
        runtime = handle.runtime
        assert isinstance(runtime, FullCachingRuntime)
        runtime.trigger_reload().result(timeout=60)
        assert values_of(handle, 1) == ["v0-1", "u1", "u2"]
        reads = _runtime_source(runtime).history_reads
        assert reads == ((0, 1), (2, 2))


def values_of(handle: Any, key: int) -> list[str]:
    """The values of ``key``'s versions, by their start (the cache holds them unordered)."""
    return [row[1] for row in sorted(handle.lookup((key,)), key=lambda row: row[2])]


def _runtime_source(runtime: FullCachingRuntime) -> DeltaSource:
    found = [value for value in _walk(runtime) if isinstance(value, DeltaSource)]
    assert found
    return found[0]


def _walk(obj: Any, depth: int = 3) -> Iterator[Any]:
    yield obj
    if depth and hasattr(obj, "__dict__"):
        for value in vars(obj).values():
            yield from _walk(value, depth - 1)


def test_a_vacuumed_log_is_a_permanent_error_naming_table_and_version(tmp_path: Path) -> None:
    path = str(tmp_path / "dim")
    create(path, rows([1], ["a"]))
    append(path, rows([2], ["b"]))
    DeltaTable(path).create_checkpoint()
    for version in (0, 1):
        os.remove(Path(path) / "_delta_log" / f"{version:020d}.json")
    with pytest.raises(ConnectorError, match=r"'.*dim'.*versions 0 to 1") as caught:
        read_arrow(history(path))
    assert type(caught.value) is ConnectorError  # permanent, not retried


def test_a_feed_turned_off_later_is_refused_at_the_next_load(tmp_path: Path) -> None:
    path = str(tmp_path / "dim")
    create(path, rows([1], ["a"]))
    source = history(path)
    read_arrow(source)
    DeltaTable(path).alter.set_table_properties({"delta.enableChangeDataFeed": "false"})
    with pytest.raises(ConnectorError, match=r"version 1 does not have its change data feed"):
        read_arrow(source)


def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    plain = str(tmp_path / "plain")
    create(plain, rows([1], ["a"]), feed=False)
    with pytest.raises(ConfigError, match="does not have its change data feed enabled"):
        history(plain)
    path = str(tmp_path / "dim")
    create(path, rows([1], ["a"]))
    with pytest.raises(ConfigError, match="needs key_columns"):
        DeltaSource(path, history=True)
    with pytest.raises(ConfigError, match="key_columns chain the changes of history=True"):
        DeltaSource(path, key_columns=["id"])
    with pytest.raises(ConfigError, match=r"key column\(s\) \['id'\] are not among"):
        history(path, columns=["v"])
    with pytest.raises(ConfigError, match="filters may name key columns only"):
        history(path, filters=[Predicate("v", "=", "a")])
    with pytest.raises(ConfigError, match="history must be True or False"):
        DeltaSource(path, history="yes", key_columns=["id"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="has no validity columns"):
        DeltaSource(path).history_validity  # noqa: B018
    scd2 = str(tmp_path / "scd2")
    create(scd2, rows([1], ["a"]).append_column("_valid_to", pa.array([None], pa.timestamp("us"))))
    with pytest.raises(ConfigError, match=r"already has column\(s\) \['_valid_to'\]"):
        history(scd2)


def test_it_ships_as_configuration(growing: str) -> None:
    source = history(growing)
    read_arrow(source)
    copy = pickle.loads(pickle.dumps(source))
    assert repr(copy) == f"DeltaSource({growing!r}, history=True, key_columns=['id'])"
    assert copy.history_reads == ()  # the versions built stay in the process that built them
    assert read_arrow(copy).equals(read_arrow(source))
