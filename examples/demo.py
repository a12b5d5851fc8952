"""The streaming enrichment demo behind ``python -m examples demo`` (and ``make demo``).

A Structured Streaming query on local Spark enriches order events with two SQLite
dimension tables: ``customers`` through a partial cache (keys looked up on demand, each
entry expiring a few seconds after it was loaded) and ``products`` through a full cache
(the whole table, reloaded every few seconds). Partway through, the demo updates one
row of each table, prints the micro-batches in which the new values replace the cached
ones, then the cache metrics. Everything lives in a temporary directory: the SQLite
database, the JSON inbox the events are written to, the checkpoint. No server is needed.

The same demo runs on a Spark Connect session (``--connect`` starts a local Connect
server in the process, ``--remote sc://host:port`` uses a running one): the query
writes to a memory table that the driver reads after each micro-batch, so nothing of
the demo has to run on the server but the query itself.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

__all__ = ["CHANGES", "Change", "DemoSettings", "run_demo"]

CUSTOMERS = [
    (1, "Ada", "gold", "GB"),
    (2, "Grace", "silver", "US"),
    (3, "Edsger", "bronze", "NL"),
    (4, "Barbara", "silver", "US"),
    (5, "Donald", "gold", "US"),
    (6, "Frances", "bronze", "US"),
    (7, "Niklaus", "silver", "CH"),
    (8, "Margaret", "gold", "US"),
]
PRODUCTS = [
    (1, "keyboard", 49.0),
    (2, "mouse", 19.5),
    (3, "monitor", 189.0),
    (4, "dock", 129.0),
    (5, "cable", 9.9),
]
EVENT_SCHEMA = "order_id BIGINT, customer_id BIGINT, product_id BIGINT, quantity INT"


@dataclass(frozen=True)
class Change:
    """One UPDATE the demo applies while the query runs, and where it shows in the output.

    Parameters
    ----------
    table, key_column, key
        The row updated: ``WHERE key_column = key`` in ``table``.
    column, old, new
        The column set from ``old`` (its initial value) to ``new``.
    output_column
        The name of the column in the enriched rows (after any prefix).
    cache
        How the table is cached, for the output (e.g. ``"partial cache"``).
    """

    table: str
    key_column: str
    key: int
    column: str
    old: object
    new: object
    output_column: str
    cache: str

    def statement(self) -> str:
        """The UPDATE as it is shown (the demo runs it with bound parameters)."""
        return (f"UPDATE {self.table} SET {self.column} = {self.new!r} "
                f"WHERE {self.key_column} = {self.key}")

    def apply(self, connection: sqlite3.Connection) -> None:
        """Run the UPDATE on ``connection`` and commit it."""
        # Identifiers come from the constants below, never from input; values are bound.
        connection.execute(f"UPDATE {self.table} SET {self.column} = ? WHERE {self.key_column} = ?",
                           (self.new, self.key))
        connection.commit()


CHANGES = (
    Change("customers", "customer_id", 3, "tier", "bronze", "platinum", "tier", "partial cache"),
    Change("products", "product_id", 2, "price", 19.5, 17.0, "product_price", "full cache"),
)


@dataclass(frozen=True)
class DemoSettings:
    """Timing of the demo (seconds). The defaults make a run of about a minute.

    Parameters
    ----------
    seconds
        How long the streaming query runs. The UPDATEs run after a third of it (and two
        batches); when the new values have not shown by the end, the query runs on until
        they do, up to ``time_limit``.
    time_limit
        The demo stops the query in any case so as to end within this many seconds of
        its start, Spark's start and stop included (on a machine so loaded that the
        first batch takes a minute, the new values may not show by then).
    trigger_seconds
        Micro-batch interval (processing-time trigger).
    files_per_second, events_per_file
        Rate of the event writer.
    expire_after_write_seconds
        Time to live of a partial-cache entry (customers).
    reload_seconds
        Interval of the full-cache reloads (products), measured from the end of a load.
    remote
        ``None``: a classic ``local[2]`` session. Otherwise a Spark Connect session:
        ``local[N]`` starts a local Connect server in this process, ``sc://host:port``
        uses a running server on this machine (its executors read the demo's files).
    """

    seconds: float = 60.0
    trigger_seconds: float = 3.0
    files_per_second: float = 2.0
    events_per_file: int = 3
    expire_after_write_seconds: float = 4.0
    reload_seconds: float = 5.0
    time_limit: float = 120.0
    remote: str | None = None


# --- the dimension database and the event writer --------------------------------------


def create_database(path: Path) -> None:
    """Create the SQLite dimension database with its two tables at ``path``."""
    with sqlite3.connect(path) as db:
        # WAL: the executors' reads never wait for the demo's UPDATEs, nor block them.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT, "
                   "tier TEXT, country TEXT)")
        db.execute("CREATE TABLE products (product_id INTEGER PRIMARY KEY, name TEXT, "
                   "price REAL)")
        db.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", CUSTOMERS)
        db.executemany("INSERT INTO products VALUES (?, ?, ?)", PRODUCTS)
    # ``with`` commits but keeps the connection open; close it so nothing holds the file.
    db.close()


class EventWriter(threading.Thread):
    """Writes JSON files of order events into ``inbox`` at a steady rate, until stopped.

    Each file is written under ``staging`` and then renamed into the inbox, so Spark's
    file source never lists a half-written file. The first event of every file is the
    customer and product that `CHANGES` update, so every micro-batch shows them.
    """

    def __init__(self, inbox: Path, staging: Path, settings: DemoSettings) -> None:
        super().__init__(name="demo-event-writer", daemon=True)
        self.inbox = inbox
        self.staging = staging
        self.settings = settings
        self.files_written = 0
        self._order_ids = itertools.count(1)
        self._stop_event = threading.Event()

    def write_file(self) -> None:
        """Write one file of ``events_per_file`` events."""
        lines = []
        for position in range(self.settings.events_per_file):
            order_id = next(self._order_ids)
            if position == 0:
                customer_id, product_id = CHANGES[0].key, CHANGES[1].key
            else:  # a fixed walk over the other keys: deterministic, no RNG needed
                customer_id = 1 + (order_id * 5) % len(CUSTOMERS)
                product_id = 1 + (order_id * 3) % len(PRODUCTS)
            lines.append(json.dumps({"order_id": order_id, "customer_id": customer_id,
                                     "product_id": product_id, "quantity": 1 + order_id % 3}))
        name = f"orders-{self.files_written:05d}.json"
        staged = self.staging / name
        staged.write_text("\n".join(lines) + "\n")
        os.replace(staged, self.inbox / name)
        self.files_written += 1

    def run(self) -> None:
        interval = 1.0 / self.settings.files_per_second
        while not self._stop_event.wait(interval):
            self.write_file()

    def stop(self) -> None:
        """Stop writing and wait for the thread to end."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)


# --- per-batch output ------------------------------------------------------------------


def _format(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return "-" if value is None else str(value)


_ROW = "{order:<7} {name:9} {tier:17} {country:4} {quantity:>3} {product:9} {price:15} {amount:>7}"
_BATCH = "{batch:>7} {time:>6} {rows:>5}   "
_COLUMNS = _BATCH.format(batch="batch", time="time", rows="rows") + _ROW.format(
    order="order", name="customer", tier="tier", country="ctry", quantity="qty",
    product="product", price="price", amount="amount")


class BatchPrinter:
    """Prints each micro-batch of enriched rows and tracks the changes.

    Runs on the driver (`SinkReader` hands it the rows of each micro-batch), so it
    may keep state; the clock and the output stream are injected for the summary and
    for tests.

    Values of a changed column are marked in the output: ``*`` for the new value, and
    ``(cached)`` for the old value still served from a cache after the UPDATE ran.
    """

    def __init__(self, changes: Sequence[Change], out: TextIO, clock: Callable[[], float],
                 samples: int = 2) -> None:
        self.changes = tuple(changes)
        self.out = out
        self.clock = clock
        self.samples = samples
        self.started = clock()
        self.lock = threading.Lock()
        self.batches = 0
        self.events = 0
        self.applied_at: dict[Change, float] = {}
        self.first_new: dict[Change, tuple[int, float]] = {}
        self.last_old: dict[Change, int] = {}
        # Per change: whether the latest batch with its key served the new value only.
        self.settled: dict[Change, bool] = {}

    def elapsed(self) -> float:
        """Seconds since the printer was created (the query's start)."""
        return self.clock() - self.started

    def say(self, text: str) -> None:
        """Print a line (from any thread)."""
        with self.lock:
            print(text, file=self.out, flush=True)

    def apply(self, changes: Sequence[Change], connection: sqlite3.Connection) -> None:
        """Run the UPDATEs and remember when, so later batches can tell new from cached."""
        for change in changes:
            change.apply(connection)
            with self.lock:
                self.applied_at[change] = self.clock()
            self.say(f"{'>>':>7} {self.elapsed():5.1f}s   {change.statement()}   ({change.cache})")

    def all_seen(self) -> bool:
        """Whether every change has been applied and shown its new value in a batch."""
        with self.lock:
            return all(c in self.first_new for c in self.changes)

    def all_settled(self) -> bool:
        """Whether, for every change, the latest batch with its key served only the new
        value (each Python worker has a partial cache of its own, so one worker may show
        the new value while another still serves its cached old one)."""
        with self.lock:
            return all(self.settled.get(c, False) for c in self.changes)

    def _mark(self, change: Change, value: object) -> str:
        text = _format(value)
        if change not in self.applied_at:
            return text
        if value == change.new:
            return text + "*"
        return text + " (cached)" if value == change.old else text

    def _cell(self, row: dict[str, Any], column: str) -> str:
        for change in self.changes:
            if column == change.output_column and row.get(change.key_column) == change.key:
                return self._mark(change, row[column])
        return _format(row[column])

    def _row_line(self, row: dict[str, Any]) -> str:
        cell = functools.partial(self._cell, row)
        return _ROW.format(
            order=f"#{row['order_id']}", name=cell("name"), tier=cell("tier"),
            country=cell("country"), quantity=row["quantity"], product=cell("product_name"),
            price=cell("product_price"), amount=_format(row["amount"]))

    def _track(self, batch_id: int, rows: list[dict[str, Any]], now: float) -> None:
        for change in self.changes:
            applied = self.applied_at.get(change)
            if applied is None:
                continue
            values = {r[change.output_column] for r in rows
                      if r.get(change.key_column) == change.key}
            if change.new in values and change not in self.first_new:
                self.first_new[change] = (batch_id, now - applied)
            if change.old in values:
                self.last_old[change] = batch_id
            if values:
                self.settled[change] = values == {change.new}

    def __call__(self, batch: Sequence[dict[str, Any]], batch_id: int) -> None:
        """Print micro-batch ``batch_id`` of enriched rows (dicts by column name)."""
        rows = sorted(batch, key=lambda r: r["order_id"])
        if not rows:
            return
        now = self.clock()
        with self.lock:
            if self.batches == 0:
                print(_COLUMNS, file=self.out)
            self.batches += 1
            self.events += len(rows)
            self._track(batch_id, rows, now)
            # First the latest row of the updated customer and product, then another one.
            watched: list[dict[str, Any]] = []
            others: list[dict[str, Any]] = []
            for row in rows:
                is_watched = all(row.get(c.key_column) == c.key for c in self.changes)
                (watched if is_watched else others).append(row)
            ranked = {r["order_id"]: r for r in watched[-1:] + others[-1:] + watched + others}
            sample = list(ranked.values())[: self.samples]
            head = _BATCH.format(batch=batch_id, time=f"{now - self.started:.1f}s",
                                 rows=len(rows))
            lines = [head + self._row_line(sample[0])]
            lines += [" " * len(head) + self._row_line(row) for row in sample[1:]]
            print("\n".join(lines), file=self.out, flush=True)


class SinkReader:
    """Reads the query's memory table on the driver and hands each new micro-batch's
    rows to ``printer``.

    Every row carries its micro-batch's timestamp (``current_timestamp()`` is fixed per
    micro-batch in Structured Streaming), so the rows of one micro-batch are those of
    one timestamp; they are numbered in order, as Spark numbers the micro-batches that
    have rows. Works alike on classic and Spark Connect sessions (a ``foreachBatch``
    function would run on the Connect server, away from the printer).
    """

    def __init__(self, spark: Any, table: str, printer: BatchPrinter) -> None:
        self.spark = spark
        self.table = table
        self.printer = printer
        self.last: Any = None
        self.batches = 0

    def poll(self) -> int:
        """Print the micro-batches added since the last poll; returns how many."""
        from pyspark.sql import functions as F

        frame = self.spark.table(self.table)
        if self.last is not None:
            frame = frame.where(F.col(BATCH_TIME) > F.lit(self.last))
        groups = split_batches([row.asDict() for row in frame.collect()])
        for batch_time, rows in groups:
            self.printer(rows, self.batches)
            self.batches += 1
            self.last = batch_time
        return len(groups)


BATCH_TIME = "batch_time"


def split_batches(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, list[dict[str, Any]]]]:
    """Rows grouped by `BATCH_TIME`, in time order (the column removed)."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        values = dict(row)
        groups.setdefault(values.pop(BATCH_TIME), []).append(values)
    return sorted(groups.items(), key=lambda item: item[0])


# --- Spark ---------------------------------------------------------------------------

_LOG4J2 = """\
# Written by the spark-lookup demo: errors only, so that the demo's own lines stay readable.
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
# PySpark counts as a shell, and Spark resets a shell's root level, with a notice, to
# the level configured for its own loggers (WARN when none is): configure it the same.
logger.spark.name = org.apache.spark
logger.spark.level = error
"""


def start_spark(workdir: Path, remote: str | None = None) -> Any:
    """Start the demo's SparkSession: classic ``local[2]`` (UI off, Spark logs errors
    only), or Spark Connect (``remote``: ``local[N]`` starts a local Connect server in
    this process with the same settings; ``sc://...`` connects to a running server,
    whose settings are its own)."""
    # Python workers must run this interpreter, which has this package installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    log_config = workdir / "log4j2.properties"
    log_config.write_text(_LOG4J2)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("spark-lookup-demo")
    if remote is not None and remote.startswith("sc://"):
        return builder.remote(remote).getOrCreate()
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        # Read by the driver JVM at its start: Spark's default config prints WARN lines.
        # The C1 compiler only and the serial GC: for a few rows a second, JIT and GC
        # threads are pure start-up cost (Spark starts about a third faster on 2 CPUs).
        .config("spark.driver.extraJavaOptions",
                "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
                f"-Dlog4j2.configurationFile={log_config.as_uri()}")
    )
    if remote is None:
        return builder.master("local[2]").getOrCreate()
    with warnings.catch_warnings():
        # The static settings went to the local server's start; the Connect session
        # then refuses to set them again, with a warning each.
        warnings.filterwarnings("ignore", "Failed to set spark", UserWarning)
        return builder.remote(remote).getOrCreate()


def build_providers(database: Path, settings: DemoSettings) -> tuple[Any, Any]:
    """The two providers: customers behind a partial cache, products behind a full one."""
    from cache import DefaultLookupCache
    from lookup import FullCachingLookupProvider, PartialCachingLookupProvider, SqlLookupFunction
    from scan import SqlTableSource
    from triggers import PeriodicCacheReloadTrigger

    # A partial of a module-level function pickles: it travels to the executors.
    connect = functools.partial(sqlite3.connect, str(database))
    customers = PartialCachingLookupProvider.of(
        SqlLookupFunction(connect, "customers", key_columns=["customer_id"]),
        DefaultLookupCache.new_builder()
        .maximum_size(1000)
        .expire_after_write(timedelta(seconds=settings.expire_after_write_seconds))
        .build(),
    )
    products = FullCachingLookupProvider.of(
        SqlTableSource(connect, "products"),
        PeriodicCacheReloadTrigger(timedelta(seconds=settings.reload_seconds)),
        key_columns=["product_id"],
    )
    return customers, products


def enrich(events: Any, customers: Any, products: Any) -> Any:
    """Join the event stream with both dimensions and price each order."""
    from pyspark.sql import functions as F

    from lookup import lookup_join

    # metrics=True: the demo prints the cache metrics at the end (they are opt-in, for
    # what the channel costs a join's throughput).
    return (
        events.transform(lambda df: lookup_join(df, customers, on="customer_id", metrics=True))
        .transform(lambda df: lookup_join(df, products, on="product_id", prefix="product_",
                                          metrics=True))
        .withColumn("amount", F.round(F.col("quantity") * F.col("product_price"), 2))
        .withColumn(BATCH_TIME, F.current_timestamp())
    )


# --- the run -------------------------------------------------------------------------


def _where(remote: str | None) -> str:
    if remote is None:
        return "local Spark"
    if remote.startswith("sc://"):
        return f"the Spark Connect server at {remote}"
    return f"Spark Connect (a local server, {remote})"


def _header(settings: DemoSettings, workdir: Path) -> str:
    partial, full = CHANGES
    ttl, reload = settings.expire_after_write_seconds, settings.reload_seconds
    rate = f"{settings.files_per_second:g} JSON files a second, {settings.events_per_file} orders"
    return f"""\
spark-lookup demo: streaming lookup joins on {_where(settings.remote)}, dimension tables
in SQLite (everything in {workdir})

  orders     {rate} each, dropped into inbox/;
             Structured Streaming reads them in micro-batches every {settings.trigger_seconds:g} s
  customers  looked up by key, through a PARTIAL cache: SqlLookupFunction +
             DefaultLookupCache(max 1000 rows, entries expire {ttl:g} s after they are loaded)
  products   the whole table in a FULL cache: SqlTableSource, reloaded {reload:g} s after
             the previous load ended (PeriodicCacheReloadTrigger)

After about {settings.seconds / 3:.0f} s (and two batches) the demo runs two UPDATEs:
  {partial.statement()}
  {full.statement()}
New values are marked *, old values still served from a cache "(cached)". The query
stops after about {settings.seconds:g} s, then the cache metrics are printed.

Starting Spark...
"""


def _metrics_table(providers: Sequence[tuple[str, Any]]) -> str:
    from lookup import lookup_metrics
    from spark_lookup.errors import MetricsUnavailableError

    lines = [f"  {'':10} {'cache':8} {'hits':>6} {'misses':>6} {'loads':>6} {'failures':>8} "
             f"{'cached rows':>11} {'cached bytes':>12} {'last load':>9}"]
    for name, provider in providers:
        try:
            m = lookup_metrics(provider)
        except MetricsUnavailableError:
            lines.append(f"  {name:10} {provider.kind:8} no report reached the driver")
            continue
        last = f"{m.latest_load_time} ms" if m.latest_load_time >= 0 else "-"
        lines.append(f"  {name:10} {provider.kind:8} {m.hit_count:6d} {m.miss_count:6d} "
                     f"{m.load_count:6d} {m.num_load_failures:8d} {m.num_cached_records:11d} "
                     f"{m.num_cached_bytes:12d} {last:>9}")
    return "\n".join(lines)


def _summary(printer: BatchPrinter, settings: DemoSettings) -> list[str]:
    lines = [f"{printer.events} orders enriched in {printer.batches} micro-batches, "
             f"{printer.elapsed():.0f} s of streaming."]
    for change in printer.changes:
        lines.append(f"  {change.table}.{change.column} = {_format(change.new)} "
                     f"({change.cache}):")
        if change not in printer.applied_at:
            lines.append("      not applied: fewer than two batches arrived in time")
        elif change not in printer.first_new:
            lines.append("      NOT seen before the end of the run")
        else:
            batch_id, after = printer.first_new[change]
            line = f"      first seen in batch {batch_id}, {after:.1f} s after the UPDATE"
            if change in printer.last_old:
                line += f"; the old value last served in batch {printer.last_old[change]}"
            lines.append(line)
    lines.append(
        f"A partial-cache entry lives {settings.expire_after_write_seconds:g} s; the full "
        f"cache reloads {settings.reload_seconds:g} s after its last load.\n"
        "Each Python worker of Spark has a partial cache of its own, so workers may see a "
        "new value\nat different times; the full cache is one snapshot per host, which each "
        "worker picks up\nat its next batch after a reload."
    )
    return lines


def run_demo(settings: DemoSettings | None = None, out: TextIO | None = None) -> int:
    """Run the demo: start Spark, stream, update the tables, print, stop.

    Runs on the driver and starts (and stops) its own SparkSession (classic ``local[2]``,
    or Spark Connect: ``settings.remote``), so call it in a process without one
    (``python -m examples demo`` does).

    Parameters
    ----------
    settings
        Timing; default `DemoSettings` (about a minute of streaming).
    out
        Where to print (default ``sys.stdout``).

    Returns
    -------
    int
        The exit status: 0 when the updated values showed up in the stream, else 1.

    Raises
    ------
    pyspark.errors.StreamingQueryException
        When the streaming query fails.
    """
    settings = settings or DemoSettings()
    out = out or sys.stdout
    # Stopping the query and Spark takes a few seconds (more on a loaded machine).
    give_up_at = time.monotonic() + settings.time_limit - _STOP_SECONDS
    workdir = Path(tempfile.mkdtemp(prefix="spark-lookup-demo-"))
    inbox, staging = workdir / "inbox", workdir / "staging"
    inbox.mkdir()
    staging.mkdir()
    database = workdir / "dimensions.db"
    create_database(database)
    print(_header(settings, workdir), file=out, flush=True)
    writer = EventWriter(inbox, staging, settings)
    spark = query = None
    try:
        spark = start_spark(workdir, settings.remote)
        customers, products = build_providers(database, settings)
        events = spark.readStream.schema(EVENT_SCHEMA).json(str(inbox))
        writer.write_file()  # the first batch has data at once
        writer.start()
        printer = BatchPrinter(CHANGES, out, time.monotonic)
        table = f"spark_lookup_demo_{os.getpid()}"
        query = (
            enrich(events, customers, products)
            .writeStream.format("memory").queryName(table)
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .trigger(processingTime=f"{settings.trigger_seconds:g} seconds")
            .start()
        )
        reader = SinkReader(spark, table, printer)
        printer.say("Streaming. The first batch also starts Spark's Python workers and loads "
                    "the full cache.")
        _drive(query, reader, settings, database, give_up_at)
        _stop_between_batches(query, writer)
        reader.poll()
        printer.say("\n" + "\n".join(_summary(printer, settings)))
        printer.say("\nCache metrics, summed over the Python workers that ran the joins:")
        printer.say(_metrics_table([("customers", customers), ("products", products)]))
        if printer.all_seen():
            return 0
        printer.say(f"\nThe new values did not show within the time limit of "
                    f"{settings.time_limit:g} s: is the machine busy? Try --time-limit 300.")
        return 1
    finally:
        writer.stop()
        if query is not None:
            query.stop()
        if spark is not None:
            from lookup.spark.metrics import stop_metrics_listener

            stop_metrics_listener(spark)
            spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _drive(query: Any, reader: SinkReader, settings: DemoSettings, database: Path,
           give_up_at: float) -> None:
    """Wait while the query runs: apply the UPDATEs once a third of the time has passed
    and two batches have shown the old values; return after ``settings.seconds`` once
    a batch has served only the new values (every worker's cache has them), or at the
    latest at ``give_up_at`` (the printer's clock; a loaded machine may take half a
    minute for the first batch)."""
    printer = reader.printer
    applied = False
    while True:
        # Returns early, raising StreamingQueryException, if the query failed.
        if query.awaitTermination(0.25):
            raise RuntimeError("the streaming query stopped unexpectedly")
        reader.poll()
        elapsed = printer.elapsed()
        if not applied and elapsed >= settings.seconds / 3 and printer.batches >= 2:
            with sqlite3.connect(database) as connection:
                printer.apply(CHANGES, connection)
            connection.close()
            applied = True
        if printer.clock() >= give_up_at or (elapsed >= settings.seconds
                                             and printer.all_settled()):
            return


_STOP_SECONDS = 15.0


def _stop_between_batches(query: Any, writer: EventWriter,
                          timeout: float = _STOP_SECONDS / 2) -> None:
    """Stop the writer, let the query finish the data it has (for up to ``timeout``
    seconds), then stop it: a query with no data left stops while it waits for its next
    trigger, without interrupting a batch."""
    writer.stop()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = query.status
        if not status["isDataAvailable"] and not status["isTriggerActive"]:
            break
        if query.awaitTermination(0.2):
            break
    query.stop()
