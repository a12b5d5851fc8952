"""LookupOptions: any provider, its cache and its trigger from Flink's option keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cache.base import LookupCache
from cache.default import DefaultLookupCache
from lookup.function import AsyncLookupFunction, LookupFunction
from lookup.providers import (
    AsyncLookupFunctionProvider,
    FullCachingLookupProvider,
    LookupFunctionProvider,
    LookupProvider,
    PartialCachingAsyncLookupProvider,
    PartialCachingLookupProvider,
)
from spark_lookup import options as opts
from spark_lookup.errors import ConfigError

__all__ = ["LookupOptions"]

_MODE_PREFIXES = {"PARTIAL": "lookup.partial-cache.", "FULL": "lookup.full-cache."}


@dataclass(frozen=True)
class LookupOptions:
    """Flink ``lookup.*`` options, validated, and the providers they describe.

    A Flink DDL's ``WITH (...)`` options carry over unchanged: keys outside ``lookup.``
    (a connector's own) are ignored here; an unknown ``lookup.*`` key, a key that does
    not apply to the chosen ``lookup.cache`` mode, or a bad value raises
    :class:`~spark_lookup.ConfigError` naming the key.

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
    """

    options: Mapping[str, Any]
    cache_type: str
    max_retries: int

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> LookupOptions:
        """Validate ``options`` (a dict of Flink keys to strings). Flink's deprecated
        lookup-cache keys (``lookup.cache.max-rows``, ``lookup.cache.ttl``,
        ``lookup.cache.caching-missing-key``) are accepted as Flink accepts them, with a
        ``FutureWarning`` naming the current key."""
        opts.check_instance(options, Mapping, "options", "a mapping")
        options = opts.with_current_keys(options)
        opts.check_known_keys(options, [o.key for o in opts.LOOKUP_OPTIONS])
        cache_type = opts.CACHE.get(options) or "NONE"
        max_retries = opts.MAX_RETRIES.get(options)
        assert max_retries is not None
        for key in options:
            if any(key.startswith(prefix) and mode != cache_type
                   for mode, prefix in _MODE_PREFIXES.items()):
                raise ConfigError(
                    f"option {key!r} does not apply when 'lookup.cache' is {cache_type}"
                )
        checked = cls(dict(options), cache_type, max_retries)
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
        self, target: Any, key_columns: Sequence[str] | str | None = None, **kwargs: Any
    ) -> LookupProvider:
        """The provider these options describe over ``target``.

        Parameters
        ----------
        target
            A :class:`~lookup.LookupFunction` or :class:`~lookup.AsyncLookupFunction` for
            ``NONE``/``PARTIAL``; a ``scan.Source`` for ``FULL``.
        key_columns
            Required for ``FULL`` (a source has no key). A function declares its own: given
            for one, they must be the same.
        kwargs
            More provider options (``retry_on_miss``, ``batch_size``, ``parallelism``...).
        """
        retries = self.max_retries
        if self.cache_type == "FULL":
            if key_columns is None:
                raise ConfigError("a FULL lookup cache needs key_columns (the source has none)")
            staleness = opts.FULL_CACHE_MAX_STALENESS.get(self.options)
            if staleness is not None:
                kwargs.setdefault("max_staleness", staleness)
            return FullCachingLookupProvider.of(
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
                return AsyncLookupFunctionProvider.of(target, max_retries=retries, **kwargs)
            return PartialCachingAsyncLookupProvider.of(
                target, cache, max_retries=retries, **kwargs
            )
        if cache is None:
            return LookupFunctionProvider.of(target, max_retries=retries, **kwargs)
        return PartialCachingLookupProvider.of(target, cache, max_retries=retries, **kwargs)
