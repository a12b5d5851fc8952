"""LookupOptions: any provider, its cache and its trigger from Flink's option keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cache.base import LookupCache
from cache.default import DefaultLookupCache
from lookup import providers  # builds whichever provider the options name
from lookup.function import AsyncLookupFunction, LookupFunction
from lookup.providers import LookupProvider
from lookup.table_options import (
    CONNECTORS,
    TableOptions,
    shown_options,
    table_options,
    with_connector_defaults,
)
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError
from spark_lookup.schema import SchemaLike

__all__ = ["LookupOptions"]

_MODE_PREFIXES = {"PARTIAL": "lookup.partial-cache.", "FULL": "lookup.full-cache."}


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
    """The options given (deprecated keys renamed), the password hidden."""
    cache_type: str
    max_retries: int
    table: TableOptions | None = None
    """The connector's options, checked (None when no connector built here is named)."""

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> LookupOptions:
        """Validate ``options`` (a dict of Flink keys to strings), on the driver: every
        key and value given; a connector's required keys are checked when
        [`provider`][] builds from them. Flink's deprecated lookup-cache keys
        (``lookup.cache.max-rows``, ``lookup.cache.ttl``,
        ``lookup.cache.caching-missing-key``) are accepted as Flink accepts them, with a
        ``FutureWarning`` naming the current key."""
        opts.check_instance(options, Mapping, "options", "a mapping")
        options = with_connector_defaults(opts.with_current_keys(options))
        opts.check_known_keys(options, [o.key for o in opts.LOOKUP_OPTIONS])
        table = table_options(options)
        cache_type = opts.CACHE.get(options) or "NONE"
        max_retries = opts.MAX_RETRIES.get(options)
        assert max_retries is not None
        for key in options:
            if any(key.startswith(prefix) and mode != cache_type
                   for mode, prefix in _MODE_PREFIXES.items()):
                raise ConfigError(
                    f"option {key!r} does not apply when 'lookup.cache' is {cache_type}"
                )
        checked = cls(shown_options(options), cache_type, max_retries, table)
        # Parse everything now, so a bad value fails here and not on an executor.
        if cache_type == "PARTIAL":
            checked.build_cache()
        elif cache_type == "FULL":
            checked.build_trigger()
            opts.FULL_CACHE_MAX_STALENESS.get(options)
        opts.ASYNC_CAPACITY.get(options)
        opts.ASYNC_TIMEOUT.get(options)
        return checked

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
    ) -> LookupProvider:
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
            For a target: required for ``FULL`` (a source has no key); a function
            declares its own, and given for one they must be the same. Built from the
            options: default the table's primary key (``jdbc``, from its catalog) or
            the key template's columns (``redis``); required for files and Delta.
        schema
            Built from the options: the table's columns, as a Flink DDL lists them (a
            Spark DDL string or ``StructType``); default all columns, with the types
            the catalog or files give. Required for ``redis``.
        kwargs
            More provider options (``retry_on_miss``, ``batch_size``, ``parallelism``...).

        Raises
        ------
        ConfigError
            For a missing required option (naming it), a connector that cannot build a
            provider, a table without a primary key and no ``key_columns``.
        ConnectorError
            When the table's catalog cannot be read (building from ``jdbc`` options
            reads it, on the driver).
        """
        if target is None:
            target, key_columns = self._from_table(key_columns, schema)
        elif schema is not None:
            raise ConfigError("schema= describes a table built from the connector options; "
                              "the target declares its own schema")
        retries = self.max_retries
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
            kwargs.setdefault("capacity", opts.ASYNC_CAPACITY.get(self.options))
            kwargs.setdefault("timeout", opts.ASYNC_TIMEOUT.get(self.options))
            if cache is None:
                return providers.AsyncLookupFunctionProvider.of(target, max_retries=retries,
                                                                **kwargs)
            return providers.PartialCachingAsyncLookupProvider.of(
                target, cache, max_retries=retries, **kwargs
            )
        if cache is None:
            return providers.LookupFunctionProvider.of(target, max_retries=retries, **kwargs)
        return providers.PartialCachingLookupProvider.of(target, cache, max_retries=retries,
                                                         **kwargs)

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
                f"{', '.join(CONNECTORS)}): pass its lookup function or source")
        if self.cache_type == "FULL":
            keys = table.key_columns(key_columns, schema)
            return table.source(keys, schema), keys
        function = table.function(key_columns, schema)
        return function, function.key_fields()
