"""PostgresChanges: a PostgreSQL table's changed keys, by ``LISTEN``/``NOTIFY``.

Triggers on the table ([`PostgresChanges.install`][], or the SQL of
[`install_sql`][lookup.PostgresChanges.install_sql] run by a DBA) send the keys of every changed row
with ``pg_notify`` when the transaction commits; each Python worker that looks the table
up listens on a connection of its own (psycopg 3: ADBC has no ``LISTEN``).

Payloads (PostgreSQL refuses one of 8,000 bytes or more) are JSON, versioned:

    {"v":1,"k":[[1],[2]]}          the keys (in key_columns order) of one statement,
                                   in as many notifications as their size needs
    {"v":1,"all":"TRUNCATE"}       everything may have changed (a TRUNCATE, or a
                                   statement changing more than max_rows rows)

The triggers are per statement, with transition tables: a statement's keys are
collected once and sent in notifications of at most about 7,800 bytes (one row trigger
would send one notification per row). ``json_build_array`` writes each key value as
``to_json`` does: integers and numerics as exact numbers, timestamps in ISO 8601 with
their offset, ``bytea`` as ``\\x`` hex, whatever the connection's settings.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import select
import socket
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any

from connectors.errors import translate
from lookup.changes.feed import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MIN_INTERVAL,
    Change,
    ChangeConnection,
    ChangeFeed,
)
from spark_lookup.errors import ConfigError, ConnectorError, raise_from
from spark_lookup.identifiers import qualified_name, validate_identifier
from spark_lookup.options import as_timedelta, check_int

__all__ = ["PostgresChanges"]

log = logging.getLogger("lookup")

PAYLOAD_VERSION = 1
_CHUNK_BYTES = 3900
"""Key text per notification before a new one starts; a notification then holds at
most twice this (the last key may straddle), under PostgreSQL's 8,000-byte limit."""
_SUFFIXES = {"function": "_notify", "insert": "_ins", "update": "_upd", "delete": "_del",
             "truncate": "_trunc"}
_MAX_CHANNEL = 63 - max(len(s) for s in _SUFFIXES.values())


def _default_channel(table: str, key_columns: Sequence[str]) -> str:
    digest = hashlib.sha256(json.dumps([table, list(key_columns)]).encode()).hexdigest()[:8]
    return f"sl_{table.split('.')[-1][:36]}_{digest}"


class PostgresChanges(ChangeFeed):
    """The changed keys of a PostgreSQL table, by ``LISTEN``/``NOTIFY``.

    Built on the driver; pickled into the providers that take it (``changes=``). Each
    Python worker that opens such a provider listens on one dedicated connection of its
    own, shared by all the providers there; [`install`][] (on the driver, once)
    creates the triggers that notify.

    Parameters
    ----------
    connect
        A zero-argument callable returning a new psycopg 3 connection (any picklable
        callable, e.g. ``functools.partial(psycopg.connect, dsn)``), or a libpq
        connection string. Used by [`install`][] and by every listener.
    table
        ``table`` or ``schema.table``; each part a plain identifier, matched
        case-sensitively.
    channel
        The ``NOTIFY`` channel (an identifier of at most 56 characters), also the prefix
        of the trigger and function names. Default: ``sl_<table>_<digest of the table
        and key columns>``, the same for every feed of this table and key.
    key_columns
        The columns a notification carries, in order; default: the table's primary key
        (read from the catalog here, on the driver).
    max_rows
        A statement changing more rows than this notifies "everything" (one
        notification: partial caches flush) instead of every key (default 10,000).
    heartbeat
        A listener that heard nothing for this long checks its connection with a
        ``SELECT 1`` answered within the same time (default 10 s), so that a connection
        lost silently is noticed, reconnected and the caches flushed.
    min_interval, connect_timeout
        As [`ChangeFeed`][].

    Raises
    ------
    ConfigError
        For an invalid name or option, or (``key_columns`` omitted) a table without a
        primary key.
    ConnectorError
        When ``key_columns`` is omitted and the catalog cannot be read.

    Examples
    --------
    >>> changes = PostgresChanges("dbname=shop", "customers", key_columns=["id"])
    >>> changes.channel
    'sl_customers_3e3b8f2a'
    >>> print(changes.uninstall_sql().splitlines()[-1])
    DROP FUNCTION IF EXISTS "sl_customers_3e3b8f2a_notify"();
    """

    def __init__(
        self,
        connect: Callable[[], Any] | str,
        table: str,
        channel: str | None = None,
        *,
        key_columns: Sequence[str] | str | None = None,
        max_rows: int = 10_000,
        heartbeat: timedelta | float = timedelta(seconds=10),
        min_interval: timedelta | float = DEFAULT_MIN_INTERVAL,
        connect_timeout: timedelta | float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        if not (isinstance(connect, str) or callable(connect)):
            raise ConfigError(
                f"connect must be a callable returning a psycopg connection or a connection "
                f"string, got {type(connect).__name__}")
        self._connect = connect
        self.table = table
        self._table_sql = qualified_name(table)
        if len(table.split(".")) > 2:
            raise ConfigError(f"invalid table name {table!r}: at most schema.table")
        if key_columns is None:
            key_columns = self._primary_key()
        super().__init__(key_columns, min_interval=min_interval,
                         connect_timeout=connect_timeout)
        if channel is None:
            channel = _default_channel(table, self.key_columns)
        validate_identifier(channel, "channel")
        if len(channel) > _MAX_CHANNEL:
            raise ConfigError(f"channel {channel!r} is longer than {_MAX_CHANNEL} characters "
                              "(trigger names are made from it)")
        self.channel = channel
        self.max_rows = check_int(max_rows, "max_rows")
        self.heartbeat = as_timedelta(heartbeat, "heartbeat")

    def describe(self) -> str:
        return f"PostgresChanges(table={self.table!r}, channel={self.channel!r})"

    def __repr__(self) -> str:
        return (f"PostgresChanges(table={self.table!r}, channel={self.channel!r}, "
                f"key_columns={list(self.key_columns)})")

    # --- connections

    def _open(self, what: str) -> Any:
        """A new psycopg 3 connection in autocommit mode."""
        try:
            if isinstance(self._connect, str):
                import psycopg

                raw = psycopg.connect(self._connect)
            else:
                raw = self._connect()
        except Exception as exc:
            raise_from(translate(exc, f"{what} for table {self.table!r}"), exc)
        if not type(raw).__module__.startswith("psycopg") or not hasattr(raw, "pgconn"):
            with contextlib.suppress(Exception):
                raw.close()
            raise ConfigError(
                f"PostgresChanges of table {self.table!r} listens with psycopg 3 (ADBC and "
                f"psycopg2 cannot LISTEN here); connect returned a {type(raw).__module__}."
                f"{type(raw).__name__}"
            )
        raw.autocommit = True
        return raw

    def _primary_key(self) -> list[str]:
        raw = self._open("reading the primary key")
        try:
            rows = raw.execute(_PRIMARY_KEY, (self._table_sql,)).fetchall()
            exists = raw.execute("SELECT pg_catalog.to_regclass(%s) IS NOT NULL",
                                 (self._table_sql,)).fetchone()
        except Exception as exc:
            raise_from(translate(exc, f"reading the primary key of table {self.table!r}"), exc)
        finally:
            raw.close()
        if not exists or not exists[0]:
            raise ConnectorError(f"table {self.table!r} does not exist")
        if not rows:
            raise ConfigError(f"table {self.table!r} has no primary key: pass key_columns=")
        return [str(row[0]) for row in rows]

    def connect(self) -> ChangeConnection:
        """Connect and ``LISTEN`` (on the listener thread of a worker)."""
        raw = self._open("listening to changes")
        try:
            raw.execute(f"LISTEN {_quote(self.channel)}")
            listening = _Listening(raw, self, self.heartbeat.total_seconds())
            listening.check()  # what the triggers cover, from now on
        except Exception as exc:
            with contextlib.suppress(Exception):
                raw.close()
            raise_from(translate(exc, f"listening to changes of table {self.table!r}"), exc)
        return listening

    # --- the triggers

    def _names(self) -> list[str]:
        """The function's and the four triggers' names (unquoted)."""
        return [self.channel + suffix for suffix in _SUFFIXES.values()]

    def _function_sql(self) -> str:
        parts = self.table.split(".")
        prefix = "".join(_quote(part) + "." for part in parts[:-1])
        return prefix + _quote(self.channel + _SUFFIXES["function"])

    def install_sql(self) -> str:
        """The SQL [`install`][] runs (one transaction), for a DBA to read or run by
        hand: the notifying function, and the four statement triggers that call it."""
        columns = list(self.key_columns)

        def keys_of(alias: str, rows: str) -> str:
            values = ", ".join(f"{alias}.{_quote(c)}" for c in columns)
            return f"SELECT json_build_array({values})::text FROM {rows} AS {alias}"

        channel = f"'{self.channel}'"  # an identifier: no quote can be in it

        def at_most_max_rows(operation: str, rows: str) -> str:
            # A statement of more rows flushes the caches: its keys would be a flood.
            reason = f"{operation} of more than {self.max_rows} rows"
            return f"""IF (SELECT count(*) FROM {rows}) > {self.max_rows} THEN
            PERFORM pg_notify({channel}, '{{"v":{PAYLOAD_VERSION},"all":"{reason}"}}');
            RETURN NULL;
        END IF;"""

        function = self._function_sql()
        names = self._names()
        table = self._table_sql
        return f"""CREATE OR REPLACE FUNCTION {function}() RETURNS trigger
LANGUAGE plpgsql AS $spark_lookup$
DECLARE
    keys text[];
    payload text;
BEGIN
    -- spark-lookup change notifications, payload version {PAYLOAD_VERSION}
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify({channel}, '{{"v":{PAYLOAD_VERSION},"all":"TRUNCATE"}}');
        RETURN NULL;
    ELSIF TG_OP = 'INSERT' THEN
        {at_most_max_rows("INSERT", "new_rows")}
        keys := ARRAY(SELECT DISTINCT k FROM ({keys_of("n", "new_rows")}) AS c(k));
    ELSIF TG_OP = 'DELETE' THEN
        {at_most_max_rows("DELETE", "old_rows")}
        keys := ARRAY(SELECT DISTINCT k FROM ({keys_of("o", "old_rows")}) AS c(k));
    ELSE
        {at_most_max_rows("UPDATE", "old_rows")}
        -- A key that changed is gone under its old value and new under the new one.
        keys := ARRAY(SELECT DISTINCT k FROM ({keys_of("o", "old_rows")}
                                               UNION ALL {keys_of("n", "new_rows")}) AS c(k));
    END IF;
    IF cardinality(keys) = 0 THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT FROM unnest(keys) AS u(k) WHERE octet_length(k) > {_CHUNK_BYTES}) THEN
        PERFORM pg_notify({channel}, '{{"v":{PAYLOAD_VERSION},"all":"a key too long to notify"}}');
        RETURN NULL;
    END IF;
    FOR payload IN
        SELECT '{{"v":{PAYLOAD_VERSION},"k":[' || string_agg(k, ',' ORDER BY i) || ']}}'
        FROM (SELECT k, i, sum(octet_length(k) + 1) OVER (ORDER BY i) AS upto
              FROM unnest(keys) WITH ORDINALITY AS u(k, i)) AS s
        GROUP BY (upto - 1) / {_CHUNK_BYTES}
    LOOP
        PERFORM pg_notify({channel}, payload);
    END LOOP;
    RETURN NULL;
END
$spark_lookup$;
-- The table and every partition and inheritance child (a statement fires the statement
-- triggers of the table it names only; their transition tables hold the rows of every
-- partition it changed). Partitions made later are not covered until this runs again:
-- listeners notice them and flush (see PostgresChanges).
DO $spark_lookup$
DECLARE
    member regclass;
BEGIN
    FOR member IN {_tree_members(table)} LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', {_literal(names[1])}, member);
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS '
                       'new_rows FOR EACH STATEMENT EXECUTE FUNCTION %s()',
                       {_literal(names[1])}, member, {_literal(function)});
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', {_literal(names[2])}, member);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING OLD TABLE AS '
                       'old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE '
                       'FUNCTION %s()', {_literal(names[2])}, member, {_literal(function)});
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', {_literal(names[3])}, member);
        EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS '
                       'old_rows FOR EACH STATEMENT EXECUTE FUNCTION %s()',
                       {_literal(names[3])}, member, {_literal(function)});
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', {_literal(names[4])}, member);
        EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %s FOR EACH STATEMENT '
                       'EXECUTE FUNCTION %s()', {_literal(names[4])}, member,
                       {_literal(function)});
    END LOOP;
END
$spark_lookup$;
"""

    def uninstall_sql(self) -> str:
        """The SQL [`uninstall`][] runs: the four triggers dropped from the table and
        its partitions and inheritance children, and the function dropped."""
        drops = "\n".join(
            f"        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', {_literal(name)}, "
            "member);" for name in self._names()[1:])
        return f"""DO $spark_lookup$
DECLARE
    member regclass;
BEGIN
    FOR member IN {_tree_members(self._table_sql)} LOOP
{drops}
    END LOOP;
END
$spark_lookup$;
DROP FUNCTION IF EXISTS {self._function_sql()}();
"""

    def install(self) -> None:
        """Create (or replace) the notifying function and triggers, in one transaction.
        Idempotent. Runs where it is called (the driver), as a user allowed to create
        triggers on the table.

        Raises
        ------
        ConnectorError
            If the database refuses (no such table, no privilege), naming the table.
        """
        self._run(self.install_sql(), "installing the change triggers")

    def uninstall(self) -> None:
        """Drop the triggers and the function (idempotent).

        Raises
        ------
        ConnectorError
            If the database refuses, naming the table.
        """
        self._run(self.uninstall_sql(), "removing the change triggers")

    def _run(self, script: str, what: str) -> None:
        raw = self._open(what)
        try:
            with raw.transaction():
                raw.execute(script)
        except Exception as exc:
            raise_from(translate(exc, f"{what} of table {self.table!r}"), exc)
        finally:
            raw.close()


def _quote(name: str) -> str:
    return '"' + validate_identifier(name) + '"'


_PRIMARY_KEY = """
SELECT a.attname FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = pg_catalog.to_regclass(%s) AND i.indisprimary
ORDER BY pg_catalog.array_position(i.indkey::int2[], a.attnum)
"""

def _literal(text: str) -> str:
    """A SQL string literal of an identifier or a quoted name (no quote to escape but
    the doubled ones of a quoted identifier)."""
    return "'" + text.replace("'", "''") + "'"


def _tree_members(table_sql: str) -> str:
    """A query of the table and its partitions and inheritance children, at any depth
    (foreign tables left out: they take no transition tables)."""
    return f"""(WITH RECURSIVE tree(relid) AS (
            SELECT {_literal(table_sql)}::regclass::oid
            UNION ALL
            SELECT i.inhrelid FROM pg_catalog.pg_inherits AS i
            JOIN tree ON i.inhparent = tree.relid)
        SELECT tree.relid::regclass FROM tree
        JOIN pg_catalog.pg_class AS c ON c.oid = tree.relid WHERE c.relkind <> 'f')"""


# Each member of the table's tree (itself, partitions and inheritance children at any
# depth) and how many of the feed's four triggers it has.
_COVERAGE = b"""
WITH RECURSIVE tree(relid) AS (
    SELECT pg_catalog.to_regclass($1)::oid
    UNION ALL
    SELECT i.inhrelid FROM pg_catalog.pg_inherits AS i JOIN tree ON i.inhparent = tree.relid)
SELECT tree.relid::regclass::text,
       (SELECT count(*) FROM pg_catalog.pg_trigger AS g
        WHERE g.tgrelid = tree.relid AND g.tgname = ANY($2::text[]))
FROM tree WHERE tree.relid IS NOT NULL ORDER BY 1
"""


def _array_text(names: Sequence[str]) -> bytes:
    """A text[] literal of identifiers (no character needing escape but quotes)."""
    return ("{" + ",".join('"' + name.replace('"', '\\"') + '"' for name in names)
            + "}").encode()


def parse_payload(payload: str, arity: int) -> Change:
    """One notification's payload as a `Change`; "everything" (with a warning)
    for a payload this version cannot read, since which keys it meant is unknown."""
    try:
        data = json.loads(payload, parse_float=Decimal)
        version = data.get("v") if isinstance(data, dict) else None
        if version != PAYLOAD_VERSION:
            raise ValueError(f"payload version {version!r}, expected {PAYLOAD_VERSION}")
        if "all" in data:
            return Change(everything=True, reason=str(data["all"]))
        keys = data["k"]
        if not isinstance(keys, list) or not all(
                isinstance(key, list) and len(key) == arity for key in keys):
            raise ValueError(f"keys of {arity} value(s) expected")
        return Change(tuple(map(tuple, keys)))
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("unreadable change notification %.200r (%s); treating it as "
                    "'everything changed'", payload, exc)
        return Change(everything=True, reason="unreadable notification")


class _Listening(ChangeConnection):
    """One ``LISTEN`` connection, driven at libpq level: ``select`` on its socket (and a
    wake-up socket), ``consume_input``, ``notifies``. Every ``heartbeat`` seconds it
    asks the catalog (the same way) which members the table's tree has (partitions and
    inheritance children) and which carry the triggers, answered within ``heartbeat``
    seconds or the connection counts as lost: a member attached or detached since is a
    change of everything, and while a member lacks the triggers (made after
    ``install()``), its changes go unheard, so each check reports everything too."""

    def __init__(self, raw: Any, feed: PostgresChanges, heartbeat: float) -> None:
        from psycopg import pq

        self._pq = pq
        self._raw = raw
        self._pgconn = raw.pgconn
        self._feed = feed
        self._arity = len(feed.key_columns)
        self._heartbeat = heartbeat
        self._pending: list[Change] = []
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._heard = time.monotonic()
        self._checked = self._heard
        self._members: dict[str, int] | None = None
        self._warned: list[str] = []

    def _drain(self) -> None:
        """Move what libpq has received into ``_pending``."""
        pgconn = self._pgconn
        while (notify := pgconn.notifies()) is not None:
            self._pending.append(parse_payload(notify.extra.decode("utf-8", "replace"),
                                               self._arity))
        if pgconn.status != self._pq.ConnStatus.OK:
            raise ConnectionError(f"the connection listening to {self._feed.describe()} broke")

    def _consume(self) -> None:
        self._pgconn.consume_input()
        self._heard = time.monotonic()
        self._drain()

    def receive(self, timeout: float) -> list[Change]:
        if not self._pending:
            wait = max(0.0, min(timeout, self._checked + self._heartbeat - time.monotonic()))
            readable, _, _ = select.select([self._pgconn.socket, self._wake_read], [], [], wait)
            if self._wake_read in readable:
                with contextlib.suppress(BlockingIOError):
                    self._wake_read.recv(64)
                return self._take()
            if readable:
                self._consume()
        if time.monotonic() - self._checked >= self._heartbeat:
            self.check()
        return self._take()

    def _take(self) -> list[Change]:
        received, self._pending = self._pending, []
        return received

    def check(self) -> None:
        """Ask which members the table's tree has and which carry the triggers, waiting
        at most one heartbeat for the answer; what changed since is a change."""
        pgconn, pq = self._pgconn, self._pq
        feed = self._feed
        pgconn.send_query_params(_COVERAGE, [feed._table_sql.encode(),
                                             _array_text(feed._names()[1:])])
        deadline = time.monotonic() + self._heartbeat
        members: dict[str, int] = {}
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer to a heartbeat within {self._heartbeat:g} s")
            readable, _, _ = select.select([pgconn.socket], [], [], left)
            if not readable:
                continue
            self._consume()
            if pgconn.is_busy():
                continue
            while (result := pgconn.get_result()) is not None:
                if result.status != pq.ExecStatus.TUPLES_OK:
                    raise ConnectionError(
                        f"a heartbeat failed: {result.error_message.decode(errors='replace')}")
                for row in range(result.ntuples):
                    members[result.get_value(row, 0).decode()] = int(result.get_value(row, 1))
            break
        self._checked = time.monotonic()
        self._compare(members)

    def _compare(self, members: dict[str, int]) -> None:
        feed = self._feed
        before, self._members = self._members, members
        if before is not None and set(before) != set(members):
            added, removed = sorted(set(members) - set(before)), sorted(set(before) - set(members))
            self._pending.append(Change(everything=True, reason=(
                f"members of {feed.table!r} changed (attached {added}, detached {removed})")))
        uncovered = sorted(name for name, count in members.items()
                           if count < len(_SUFFIXES) - 1)
        if uncovered != self._warned and uncovered:
            log.warning("%s: %s lack(s) the notifying triggers (a partition or inheritance "
                        "child made after install(), or install() never ran): changes "
                        "through it are not notified, so every cache is flushed each "
                        "heartbeat until PostgresChanges.install() (or the SQL of "
                        "install_sql()) runs again", feed.describe(), uncovered)
        self._warned = uncovered
        if uncovered and before is not None:
            self._pending.append(Change(everything=True, reason=(
                f"{uncovered} of {feed.table!r} lack the notifying triggers")))

    def interrupt(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending) or closed
            self._wake_write.send(b"x")

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            self._wake_read.close()
            self._wake_write.close()
