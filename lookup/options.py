"""LookupOptions: any provider, its cache and its trigger from Flink's option keys, or
from a Flink ``CREATE TABLE`` statement."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import StructType

from cache.base import LookupCache
from cache.default.cache import DefaultLookupCache
from lookup import providers
from lookup._flink_ddl import read_create_table
from lookup.function import AsyncLookupFunction, LookupFunction
from lookup.table_options import (
    CONNECTOR_MODULES,
    TableOptions,
    connector_hint,
    connector_of,
    shown_options,
    table_options,
    with_connector_defaults,
)
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError
from spark_lookup.schema import SchemaLike, parse_schema

__all__ = ["LookupOptions"]

log = logging.getLogger("lookup")

# The cache mode each prefix's keys belong to.
_MODE_PREFIXES = {"lookup.partial-cache.": "PARTIAL",
                  f"{opts.LIBRARY_PREFIX}partial-cache.": "PARTIAL",
                  "lookup.full-cache.": "FULL"}
# A provider option that a mode's provider has not, and what that provider has instead.
_NOT_IN_MODE = {opts.LOAD_TIMEOUT.key: (
    "FULL", "a full cache's loads wait up to its initial_load_timeout "
            "(FullCachingLookupProvider.of)")}


@dataclass(frozen=True)
class LookupOptions:
    """A Flink table's ``WITH (...)`` options, validated, and the providers they describe.

    A Flink DDL's options carry over unchanged. With ``'connector'`` = ``'jdbc'``,
    ``'filesystem'``, ``'delta'`` or ``'redis'``, [`provider`][] builds the whole
    provider from them (see `lookup.table_options` and
    docs/flink-table-options.md); otherwise it takes the lookup function or source, and the keys of
    another connector are left alone. An unknown key (of ``lookup.*`` or of the named
    connector), a key that does not apply to the chosen ``lookup.cache`` mode, or a
    bad value raises [`ConfigError`][] naming the key. A password (the
    ``'password'`` option, or one in a URL) is never shown: not in this object's repr,
    the provider's, a log line or an error.

    Examples
    --------
    >>> from lookup import LookupFunction
    >>> class Names(LookupFunction):
    ...     schema, key_columns = "id BIGINT, name STRING", ["id"]
    ...     def lookup(self, key):
    ...         return []
    >>> options = LookupOptions.from_dict({
    ...     "connector": "jdbc",
    ...     "lookup.cache": "PARTIAL",
    ...     "lookup.partial-cache.max-rows": "10000",
    ...     "lookup.partial-cache.expire-after-write": "10 min",
    ...     "lookup.max-retries": "5",
    ... })
    >>> provider = options.provider(Names())
    >>> provider.kind, provider.retry_policy.max_retries
    ('PARTIAL', 5)

    With the table's connector options, one call builds the function or source too
    (keyed here by the table's primary key):

    >>> import os, sqlite3, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "dim.db")
    >>> with sqlite3.connect(path) as db:
    ...     _ = db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    ...     _ = db.execute("INSERT INTO customers VALUES (1, 'Ada')")
    >>> from lookup import open_lookup
    >>> customers = LookupOptions.from_dict({
    ...     "connector": "jdbc", "url": f"jdbc:sqlite:{path}", "table-name": "customers",
    ...     "lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "1000",
    ... }).provider()
    >>> customers.key_columns
    ('id',)
    >>> with open_lookup(customers) as handle:
    ...     handle.lookup((1,))
    ((1, 'Ada'),)
    """

    options: Mapping[str, Any]
    """The options given (deprecated keys renamed, a bare-number duration with its unit
    ``ms``), the password hidden."""
    cache_type: str
    max_retries: int
    table: TableOptions | None = None
    """The connector's options, checked (None when no connector built here is named)."""
    schema: StructType | None = None
    """A DDL's columns ([`from_ddl`][]): the table's schema for [`provider`][]."""
    key_columns: tuple[str, ...] | None = None
    """A DDL's ``PRIMARY KEY``: the default key columns of [`provider`][]."""

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> LookupOptions:
        """Validate ``options`` (a dict of Flink keys to strings), on the driver: every
        key and value given; a connector's required keys are checked when
        [`provider`][] builds from them. Flink's deprecated lookup-cache keys
        (``lookup.cache.max-rows``, ``lookup.cache.ttl``,
        ``lookup.cache.caching-missing-key``) are accepted as Flink accepts them, with a
        ``FutureWarning`` naming the current key. A duration given as a bare number is
        milliseconds, as in Flink, with a [`ConfigWarning`][spark_lookup.ConfigWarning] naming the
        key when it is under a second (``'600'``: 0.6 s). Beyond Flink's keys, it reads
        the library's own under ``spark.lookup.`` (docs/configuration.md), as strictly.

        Raises
        ------
        ConfigError
            For an unknown key, naming the key it resembles (any key but ``lookup.*``
            and ``spark.lookup.*`` without ``'connector'``; a connector's own for
            ``jdbc``, ``filesystem``, ``delta`` and ``redis``), or a bad value, naming
            its key.
        """
        opts.check_instance(options, Mapping, "options", "a mapping")
        options = with_connector_defaults(opts.with_current_keys(options))
        known = [o.key for o in opts.LOOKUP_OPTIONS]
        opts.check_known_keys(options, known)
        opts.check_known_keys(options, known, opts.LIBRARY_PREFIX)
        kind = connector_of(options)
        options = opts.with_duration_units(
            options, [*opts.LOOKUP_OPTIONS, *(kind.OPTIONS if kind is not None else ())])
        table = table_options(options)
        cache_type = opts.CACHE.get(options) or "NONE"
        max_retries = opts.MAX_RETRIES.get(options)
        assert max_retries is not None
        for key in options:
            if any(key.startswith(prefix) and mode != cache_type
                   for prefix, mode in _MODE_PREFIXES.items()):
                raise ConfigError(
                    f"option {key!r} does not apply when 'lookup.cache' is {cache_type}"
                )
            mode, instead = _NOT_IN_MODE.get(key, (None, ""))
            if mode == cache_type:
                raise ConfigError(f"option {key!r} does not apply when 'lookup.cache' is "
                                  f"{cache_type}: {instead}")
        checked = cls(shown_options(options), cache_type, max_retries, table)
        # Parse everything now, so a bad value fails here and not on an executor.
        if cache_type == "PARTIAL":
            checked.build_cache()
        elif cache_type == "FULL":
            checked.build_trigger()
            opts.FULL_CACHE_MAX_STALENESS.get(options)
        opts.ASYNC_CAPACITY.get(options)
        opts.ASYNC_TIMEOUT.get(options)
        opts.MAX_SOURCE_CONNECTIONS.get(options)
        opts.ADAPTIVE_CONCURRENCY.get(options)
        opts.LOAD_TIMEOUT.get(options)
        return checked

    @classmethod
    def from_ddl(cls, ddl: str) -> LookupOptions:
        """Read a Flink ``CREATE TABLE`` statement, on the driver: its ``WITH (...)``
        options are checked by [`from_dict`][], its columns become the schema and its
        ``PRIMARY KEY`` the default key columns of [`provider`][] (nothing else is
        derived: as in Flink, ``'table-name'`` is not the DDL's table name).

        Flink's types map to Spark's (docs/flink-table-options.md): ``STRING``,
        ``CHAR(n)`` and ``VARCHAR(n)`` to STRING; ``TIMESTAMP(p)`` to TIMESTAMP_NTZ and
        ``TIMESTAMP_LTZ(p)`` to TIMESTAMP; ``TIME(p)`` to STRING; ``ROW<...>`` to a
        struct; ``NOT NULL`` and ``COMMENT`` kept, primary key columns NOT NULL. A
        ``WATERMARK``, a computed ``AS PROCTIME()`` column, the table's ``COMMENT`` and
        ``DISTRIBUTED BY`` are read and not applied (logged).

        Raises
        ------
        ConfigError
            Naming the line and column: a syntax error; a type with no Spark counterpart
            (MULTISET, INTERVAL, RAW), a computed or metadata column, ``PARTITIONED BY``,
            ``LIKE`` or ``AS SELECT``, each with why; and every error of
            [`from_dict`][], with where its option is written.

        Examples
        --------
        >>> options = LookupOptions.from_ddl('''
        ...     CREATE TABLE customers (
        ...       id BIGINT,
        ...       name STRING,
        ...       PRIMARY KEY (id) NOT ENFORCED
        ...     ) WITH (
        ...       'connector' = 'kafka',
        ...       'lookup.cache' = 'PARTIAL',
        ...       'lookup.partial-cache.max-rows' = '1000'
        ...     )''')
        >>> options.schema.simpleString(), options.key_columns
        ('struct<id:bigint,name:string>', ('id',))
        """
        table = read_create_table(ddl)
        for note in table.ignored:
            log.info("Flink DDL of %s: read and not applied: %s", table.name, note)
        try:
            checked = cls.from_dict(table.options)
        except ConfigError as exc:
            raise ConfigError(f"{exc}{table.where(str(exc))}") from exc
        return dataclasses.replace(checked, schema=table.schema,
                                   key_columns=table.primary_key)

    def build_cache(self) -> LookupCache | None:
        """The partial cache (``lookup.cache=PARTIAL``), or None for other modes."""
        if self.cache_type != "PARTIAL":
            return None
        return DefaultLookupCache.from_options(self.options)

    def build_trigger(self) -> Any:
        """The reload trigger (``lookup.cache=FULL``), or None for other modes."""
        if self.cache_type != "FULL":
            return None
        from triggers import reload_trigger_from_options

        return reload_trigger_from_options(self.options)

    def provider(
        self,
        target: Any = None,
        key_columns: Sequence[str] | str | None = None,
        *,
        schema: SchemaLike | None = None,
        **kwargs: Any,
    ) -> providers.LookupProvider:
        """The provider these options describe: over ``target``, or, without one, over
        the lookup function (``NONE``/``PARTIAL``) or scan source (``FULL``) the
        connector options describe. Runs on the driver.

        Parameters
        ----------
        target
            A [`LookupFunction`][] or [`AsyncLookupFunction`][] for
            ``NONE``/``PARTIAL``; a ``scan.Source`` for ``FULL``. None: built from the
            connector options (``jdbc``: ``lookup.SqlLookupFunction`` /
            ``scan.SqlTableSource``; ``redis``: ``lookup.RedisLookupFunction`` /
            ``scan.RedisScanSource``; ``filesystem``: ``scan.FileSource`` and ``delta``:
            ``scan.DeltaSource``, ``FULL`` only).
        key_columns
            For a target: required for ``FULL`` (a source has no key) unless the DDL
            has a ``PRIMARY KEY``; a function declares its own, and given for one they
            must be the same. Built from the options: default the DDL's ``PRIMARY
            KEY`` ([`from_ddl`][]), else the table's primary key (``jdbc``, from its
            catalog) or the key template's columns (``redis``); required for files and
            Delta otherwise.
        schema
            Built from the options: the table's columns, as a Flink DDL lists them (a
            Spark DDL string or ``StructType``); default the DDL's columns
            ([`from_ddl`][], which then takes no ``schema=``), else all columns, with
            the types the catalog or files give. Required for ``redis``. A target's own
            schema must have the DDL's columns, of the same types.
        kwargs
            More provider options (``retry_on_miss``, ``batch_size``, ``parallelism``...).

        Raises
        ------
        ConfigError
            For a missing required option (naming it), a connector that cannot build a
            provider, a table without a primary key and no ``key_columns``, or
            ``spark.lookup.load-timeout`` with an async function (whose loads wait up
            to ``lookup.async.timeout``).
        ConnectorError
            When the table's catalog cannot be read (building from ``jdbc`` options
            reads it, on the driver).
        """
        if schema is not None and self.schema is not None:
            raise ConfigError("schema= is given and the DDL declares the table's columns: "
                              "give them once (in the DDL)")
        if target is None:
            if key_columns is None and self.key_columns is not None:
                key_columns = list(self.key_columns)
            target, key_columns = self._from_table(
                key_columns, schema if schema is not None else self.schema)
            if self.table is not None and self.cache_type == "FULL":
                validity = self.table.validity()
                if validity is not None:
                    kwargs.setdefault("validity", validity)
        elif schema is not None:
            raise ConfigError("schema= describes a table built from the connector options; "
                              "the target declares its own schema")
        elif self.schema is not None:
            _check_declared_columns(self.schema, target)
            if (key_columns is None and self.key_columns is not None
                    and not isinstance(target, (LookupFunction, AsyncLookupFunction))):
                key_columns = list(self.key_columns)  # a source has no key of its own
        retries = self.max_retries
        kwargs.setdefault("max_source_connections",
                          opts.MAX_SOURCE_CONNECTIONS.get(self.options))
        kwargs.setdefault("adaptive_concurrency", opts.ADAPTIVE_CONCURRENCY.get(self.options))
        if self.cache_type == "FULL":
            if key_columns is None:
                raise ConfigError("a FULL lookup cache needs key_columns (the source has none)")
            staleness = opts.FULL_CACHE_MAX_STALENESS.get(self.options)
            if staleness is not None:
                kwargs.setdefault("max_staleness", staleness)
            return providers.FullCachingLookupProvider.of(
                target, self.build_trigger(), key_columns, max_retries=retries, **kwargs
            )
        if not isinstance(target, (LookupFunction, AsyncLookupFunction)):
            raise ConfigError(f"lookup.cache={self.cache_type} needs a LookupFunction or "
                              f"AsyncLookupFunction, got {type(target).__name__}")
        if key_columns is not None:
            # The same call for every mode: a function's keys may be restated, not changed.
            # key_fields() reads the function's declaration as the providers do (a single
            # column may be declared as a plain string).
            given = [key_columns] if isinstance(key_columns, str) else list(key_columns)
            own = target.key_fields()
            if given != own:
                raise ConfigError(
                    f"key_columns={given} differ from the lookup function's own key columns "
                    f"{own}: a function declares its keys (key_columns chooses them only for "
                    "a FULL cache's source)"
                )
        cache = self.build_cache()
        if isinstance(target, AsyncLookupFunction):
            if opts.LOAD_TIMEOUT.key in self.options:
                raise ConfigError(
                    f"option {opts.LOAD_TIMEOUT.key!r} does not apply to an async lookup "
                    f"function ({type(target).__name__}): its loads wait for the source up "
                    f"to {opts.ASYNC_TIMEOUT.key!r}")
            kwargs.setdefault("capacity", opts.ASYNC_CAPACITY.get(self.options))
            kwargs.setdefault("timeout", opts.ASYNC_TIMEOUT.get(self.options))
            if cache is None:
                return providers.AsyncLookupFunctionProvider.of(
                    target, max_retries=retries, **kwargs
                )
            return providers.PartialCachingAsyncLookupProvider.of(
                target, cache, max_retries=retries, **kwargs
            )
        kwargs.setdefault("load_timeout", opts.LOAD_TIMEOUT.get(self.options))
        if cache is None:
            return providers.LookupFunctionProvider.of(target, max_retries=retries, **kwargs)
        return providers.PartialCachingLookupProvider.of(
            target, cache, max_retries=retries, **kwargs
        )

    def _from_table(self, key_columns: Sequence[str] | str | None, schema: SchemaLike | None
                    ) -> tuple[Any, Sequence[str] | str | None]:
        """The function or source the connector options describe, and its keys."""
        table = self.table
        if table is None:
            name = self.options.get("connector")
            if name is None:
                raise ConfigError("missing required option 'connector' (jdbc, filesystem, "
                                  "delta or redis), or pass the lookup function or source")
            raise ConfigError(
                f"connector {name!r} cannot build a provider here (supported: "
                f"{', '.join(CONNECTOR_MODULES)}){connector_hint(str(name))}: pass its lookup "
                "function or source")
        if self.cache_type == "FULL":
            keys = table.key_columns(key_columns, schema)
            return table.source(keys, schema), keys
        function = table.function(key_columns, schema)
        return function, function.key_fields()


def _check_declared_columns(declared: StructType, target: Any) -> None:
    """Refuse a target whose schema lacks a column of the DDL or types it otherwise
    (nullability and comments aside, at every depth)."""
    own = target.struct if hasattr(target, "struct") else parse_schema(
        getattr(target, "schema", None), f"{type(target).__name__}.schema")
    types = {field.name: field.dataType.simpleString() for field in own}
    wrong = [f"{field.name} {field.dataType.simpleString()} (the target's: "
             f"{types.get(field.name, 'none')})"
             for field in declared if types.get(field.name) != field.dataType.simpleString()]
    if wrong:
        raise ConfigError(f"the DDL's columns differ from {type(target).__name__}'s schema: "
                          f"{', '.join(wrong)}")
