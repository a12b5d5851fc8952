"""A Delta table's history as versions, from its change data feed (``DeltaSource(...,
history=True)``): each insert and update post-image opens a version of its key valid
from its commit's timestamp, the key's next change closes it (a delete closes without
opening). Built vectorized (numpy sorts and shifts, Arrow takes), never a Python object
per row, and kept per process so a reload reads only the commits since the last."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_lookup.errors import ConnectorError, SparkLookupError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = ["VALID_FROM", "VALID_TO", "ChangeHistory", "chain_versions"]

# The validity columns a history source appends to the table's. Leading underscores, as
# the feed's own `_commit_timestamp`; a table that has them is refused, never shadowed.
VALID_FROM = "_valid_from"
VALID_TO = "_valid_to"

_CHANGE_TYPE = "_change_type"
_COMMIT_VERSION = "_commit_version"
_COMMIT_TIMESTAMP = "_commit_timestamp"
_FEED_COLUMNS = (_CHANGE_TYPE, _COMMIT_VERSION, _COMMIT_TIMESTAMP)
# The feed's order of a key's changes in one commit (the lower first, the last one
# wins): a rewrite of a file (an overwrite, or a commit of a table that wrote no change
# files) lists a row as deleted from the old file and inserted into the new one, and
# the row exists after the commit.
_DELETE_RANK, _OPEN_RANK = 0, 1
# Carried open versions come before every change read.
_CARRIED = -1
# Ranges of the feed kept per process for `ChangeHistory.reads`.
_READS_KEPT = 64


def _timestamp_type() -> pa.DataType:
    import pyarrow as pa

    return pa.timestamp("us", "UTC")


def _key_codes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """One int per row, equal for equal keys (grouping only: codes are not ordered as
    the values)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_floating(array.type):
        # -0.0 and 0.0 are one key (as `KeyCodec` has it); adding 0.0 makes -0.0 0.0.
        array = pc.add(array, pa.scalar(0.0, array.type))
    codes: np.ndarray = pc.dictionary_encode(array).indices.to_numpy(zero_copy_only=False)
    return codes


def chain_versions(data: pa.Table, sequence: np.ndarray, rank: np.ndarray,
                   micros: np.ndarray, opens: np.ndarray,
                   key_columns: Sequence[str]) -> pa.Table:
    """The versions that a key's events make: ``data``'s rows (no null key) are events
    at ``micros`` (epoch microseconds, non-decreasing in ``sequence``), of commit
    ``sequence``, ordered within a commit by ``rank`` then by position; per key and
    commit the last wins. An event that ``opens`` starts a version lasting until the
    key's next event (``VALID_TO`` NULL: none yet); one that does not only ends the one
    before. Versions valid for no time (two commits at one timestamp) are left out:
    the later one holds from then."""
    import numpy as np
    import pyarrow as pa

    rows = data.num_rows
    codes = [_key_codes(data.column(name)) for name in key_columns]
    order = np.lexsort((np.arange(rows), rank, sequence, *reversed(codes)))
    same_key = np.ones(max(rows - 1, 0), dtype=bool)
    for code in codes:
        ordered = code[order]
        same_key &= ordered[1:] == ordered[:-1]
    ordered_sequence = sequence[order]
    last_of_commit = np.ones(rows, dtype=bool)
    last_of_commit[:-1] = ~(same_key & (ordered_sequence[1:] == ordered_sequence[:-1]))
    group = np.concatenate([[0], np.cumsum(~same_key)]) if rows else np.zeros(0, np.int64)
    kept = order[last_of_commit]
    kept_group = group[last_of_commit]
    has_next = np.zeros(len(kept), dtype=bool)
    has_next[:-1] = kept_group[1:] == kept_group[:-1]
    start = micros[kept]
    end = np.zeros(len(kept), dtype=np.int64)
    end[:-1] = start[1:]
    version = opens[kept] & (~has_next | (end > start))
    taken = data.take(pa.array(kept[version]))
    timestamp = _timestamp_type()
    return taken.append_column(
        VALID_FROM, pa.array(start[version], timestamp)
    ).append_column(
        VALID_TO, pa.array(end[version], timestamp, mask=~has_next[version]))


@dataclass(frozen=True)
class _Built:
    """The versions up to ``version`` of the table ``table_id``; ``last_micros`` is
    the timestamp given to the last commit read (later ones never go before it; None:
    no change read yet)."""

    table_id: str
    version: int
    last_micros: int | None
    versions: pa.Table


class ChangeHistory:
    """Per process and source: the versions built so far, and the feed's ranges read.

    The state lives here, with the source's per-process reading state, rather than in
    the split plan: the plan is made on the coordinator and would have to carry the
    whole versions table to the reader, and a cache keyed by path alone would mix
    sources of one table reading other columns or keys. A full cache loads in one
    process per reload, so its next reload finds the state there; a process that has
    none (a new worker, a refreshed view's executor) builds from version 0. The cost is
    one copy of the versions in the process besides the cache's snapshot.
    """

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None,
                 table_schema: pa.Schema, key_columns: Sequence[str]) -> None:
        self._uri = uri
        self._options = storage_options
        self._schema = table_schema  # the columns read, in the table's types
        self._keys = tuple(key_columns)
        self._lock = threading.Lock()
        self._built: _Built | None = None
        self._reads: deque[tuple[int, int]] = deque(maxlen=_READS_KEPT)

    @property
    def reads(self) -> tuple[tuple[int, int], ...]:
        """The ranges of commit versions read from the feed (first, last; the latest
        64, oldest first): a reload after one commit reads ``(v, v)``."""
        with self._lock:
            return tuple(self._reads)

    def versions(self, table: Any, version: int) -> pa.Table:
        """The versions of the table up to ``version`` (``table``: the ``DeltaTable``
        opened at it), sorted by key then ``VALID_FROM``: from those built before when
        they are of this table and not later, reading the feed of the commits since."""
        table_id = str(table.metadata().id)
        with self._lock:
            built = self._built
            if built is not None and (built.table_id != table_id or built.version > version):
                built = None
            if built is not None and built.version == version:
                return built.versions
            first = 0 if built is None else built.version + 1
            changes = self._read_feed(table, first, version)
            self._reads.append((first, version))
            built = self._merge(built, table_id, version, changes)
            self._built = built
            return built.versions

    def _read_feed(self, table: Any, first: int, last: int) -> pa.Table:
        import pyarrow as pa

        from connectors.files.batches import lake_error

        try:
            reader = table.load_cdf(starting_version=first, ending_version=last,
                                    columns=[*self._schema.names, *_FEED_COLUMNS])
            read = pa.table(reader)
        except SparkLookupError:
            raise
        except Exception as exc:
            raise lake_error(
                f"Delta table {self._uri!r}: cannot read the change data feed of versions "
                f"{first} to {last} ({type(exc).__name__}: {exc}); a feed cleaned up by "
                "VACUUM or log retention, or written while the feed was disabled, is not "
                "read again: history needs every commit's changes from version 0", exc
            ) from exc
        return self._as_table_types(read, first, last)

    def _as_table_types(self, read: pa.Table, first: int, last: int) -> pa.Table:
        """The feed's rows with the columns read in the table's types (delta-rs reads
        strings as views), then the feed's columns."""
        import pyarrow as pa

        columns = []
        for field in self._schema:
            index = read.schema.get_field_index(field.name)
            if index < 0:
                raise ConnectorError(
                    f"Delta table {self._uri!r}: the change data feed of versions {first} to "
                    f"{last} has no column {field.name!r}")
            column = read.column(index)
            if column.type != field.type:
                try:
                    column = column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise ConnectorError(
                        f"Delta table {self._uri!r}: column {field.name!r} of the change data "
                        f"feed of versions {first} to {last} holds {column.type} values, not "
                        f"the table's {field.type}") from exc
            columns.append(column)
        columns.append(read.column(_CHANGE_TYPE).cast(pa.string()))  # views take nothing
        columns += [read.column(_COMMIT_VERSION), read.column(_COMMIT_TIMESTAMP)]
        return pa.table(columns, names=[*self._schema.names, *_FEED_COLUMNS])

    def _merge(self, built: _Built | None, table_id: str, version: int,
               changes: pa.Table) -> _Built:
        """``built`` (None: nothing yet) with ``changes`` applied: the open versions of
        the keys changed are chained again with the changes; closed versions stay."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        names = self._schema.names
        keep = pc.not_equal(changes.column(_CHANGE_TYPE), "update_preimage")
        for key in self._keys:
            keep = pc.and_(keep, pc.is_valid(changes.column(key)))  # a null key matches nothing
        changes = changes.filter(keep)
        commits = changes.column(_COMMIT_VERSION).to_numpy().astype(np.int64)
        stamps = changes.column(_COMMIT_TIMESTAMP).cast(pa.timestamp("us")).cast(
            pa.int64()).to_numpy()
        previous = None if built is None else built.last_micros
        micros, last_micros = _monotonic(commits, stamps, previous)
        deletes = pc.equal(changes.column(_CHANGE_TYPE), "delete").to_numpy(
            zero_copy_only=False)
        if built is None:
            closed, carried = None, changes.slice(0, 0).select(names)
            carried_from = np.zeros(0, np.int64)
        else:
            ended = pc.is_valid(built.versions.column(VALID_TO))
            closed = built.versions.filter(ended)
            still = built.versions.filter(pc.invert(ended))
            carried = still.select(names)
            carried_from = still.column(VALID_FROM).cast(pa.int64()).to_numpy()
        data = pa.concat_tables([carried, changes.select(names)])
        carried_rows = carried.num_rows
        sequence = np.concatenate([np.full(carried_rows, _CARRIED, np.int64), commits])
        rank = np.concatenate([np.full(carried_rows, _OPEN_RANK, np.int8),
                               np.where(deletes, _DELETE_RANK, _OPEN_RANK).astype(np.int8)])
        opens = np.concatenate([np.ones(carried_rows, bool), ~deletes])
        chained = chain_versions(data, sequence, rank,
                                 np.concatenate([carried_from, micros]), opens, self._keys)
        versions = chained if closed is None else pa.concat_tables([closed, chained])
        versions = versions.sort_by([*((key, "ascending") for key in self._keys),
                                     (VALID_FROM, "ascending")]).combine_chunks()
        return _Built(table_id, version, last_micros, versions)


def _monotonic(commits: np.ndarray, stamps: np.ndarray, previous: int | None
               ) -> tuple[np.ndarray, int | None]:
    """Each row's commit timestamp, made non-decreasing in commit order (a commit
    stamped before an earlier one, by a writer's clock, takes the earlier one's, so no
    version ends before it starts), and the last commit's (None: no rows)."""
    import numpy as np

    if len(commits) == 0:
        return np.zeros(0, np.int64), previous
    versions, first_rows = np.unique(commits, return_index=True)
    per_commit = stamps[first_rows]
    if previous is not None:
        per_commit = np.maximum(per_commit, previous)
    per_commit = np.maximum.accumulate(per_commit)
    return per_commit[np.searchsorted(versions, commits)], int(per_commit[-1])
