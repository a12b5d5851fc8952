"""The connector half of a Flink table's ``WITH (...)`` options: the base of every
connector's option table ([`TableOptions`][]), and the chooser that finds the table a
``'connector'`` value names (``'jdbc'``, ``'filesystem'``, ``'delta'`` or ``'redis'``) in
its backend's module (`CONNECTOR_MODULES`), read into what builds a provider's lookup
function (``lookup.cache`` NONE or PARTIAL) or scan source (FULL). [`LookupOptions`][] is
the entry point.

Every key and value given is checked when the options are read (on the driver): an
unknown key is a [`ConfigError`][] naming it and the key it
resembles; a connector's required keys are checked when a provider is built from them.
A password (``'password'``, or in a URL) is held by a `Secret`
inside the connection factory and never shown.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from lookup.function import LookupFunction
from lookup.validity import Validity
from spark_lookup import options as opts
from spark_lookup.credentials import Secret, redact_credentials
from spark_lookup.errors import ConfigError
from spark_lookup.options import ConfigOption
from spark_lookup.schema import SchemaLike
from spark_lookup.shown import shown

__all__ = [
    "CONNECTOR_MODULES",
    "Keys",
    "TableOptions",
    "connector_hint",
    "connector_of",
    "connector_options",
    "non_empty_text",
    "one_of",
    "shown_options",
    "table_options",
]

log = logging.getLogger("lookup")

T = TypeVar("T")
_Options = TypeVar("_Options", bound="TableOptions")
Keys = Sequence[str] | str | None
"""Key columns as a caller gives them: a list, one name, or None for the table's own."""


# --- parsers of option values every connector uses (each names its key)

def non_empty_text(value: object, key: str) -> str:
    """``value``, a non-empty string; a ConfigError naming ``key`` otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"option {key!r}: expected a non-empty string, got {shown(value)}")
    return value


def one_of(*names: str) -> Callable[[object, str], str]:
    """A parser of one of ``names`` (any case, around spaces), returned lower-cased."""
    def parse(value: object, key: str) -> str:
        text = value.strip().lower() if isinstance(value, str) else ""
        if text not in names:
            raise ConfigError(f"option {key!r}: expected one of {', '.join(names)}, got "
                              f"{shown(value)}")
        return text

    return parse


# --- the connectors

class TableOptions(ABC):
    """One connector's options, checked: what builds the lookup function of a NONE or
    PARTIAL provider (`function`) and the scan source of a FULL one
    (`source`), on the driver."""

    connector: ClassVar[str]
    OPTIONS: ClassVar[tuple[ConfigOption[Any], ...]]
    """The connector's keys, in documentation order."""
    IGNORED: ClassVar[Mapping[str, str]] = {}
    """Flink keys accepted and not applied (a key, or a prefix ending in ``.``), each
    with the reason."""
    FOREIGN: ClassVar[Mapping[str, str]] = {}
    """Keys of other Flink connectors of the same name, refused with what to write here."""

    @classmethod
    def from_options(cls: type[_Options], options: Mapping[str, Any]) -> _Options:
        """Check the keys and values given (the required ones are checked on use); by
        default the fields are the values of `OPTIONS`, in order."""
        fields: Any = cls  # a dataclass of the connector's fields
        built: _Options = fields(*(option.get(options) for option in cls.OPTIONS))
        return built

    @classmethod
    def ignored(cls, key: str) -> str | None:
        """Why ``key`` is accepted and not applied, or None when it is not such a key."""
        for name, reason in cls.IGNORED.items():
            if key == name or (name.endswith(".") and key.startswith(name)):
                return reason
        return None

    @classmethod
    def check_keys(cls, options: Mapping[str, Any]) -> None:
        """Refuse a key this connector does not know, naming the key it resembles."""
        known = {"connector", *(o.key for o in cls.OPTIONS), *(o.key for o in opts.LOOKUP_OPTIONS)}
        applied = {}
        for key, value in options.items():
            if key in cls.FOREIGN and key not in known:
                raise ConfigError(f"unknown option {key!r} of connector {cls.connector!r}: "
                                  f"{cls.FOREIGN[key]}")
            reason = cls.ignored(key) if isinstance(key, str) else None
            if reason is None:
                applied[key] = value
            else:
                log.info("option %r of connector %r is accepted and not applied: %s", key,
                         cls.connector, reason)
        opts.check_known_keys(applied, known, prefix="",
                              where=f" of connector {cls.connector!r}")

    def required(self, value: T | None, option: ConfigOption[Any]) -> T:
        """``value``, the parsed value of ``option``; a ConfigError naming it if absent."""
        if value is None:
            raise ConfigError(f"missing required option {option.key!r} of connector "
                              f"{self.connector!r}: {option.description}")
        return value

    def key_columns(self, given: Keys, schema: SchemaLike | None) -> list[str]:
        """``given``, else the table's primary key where its catalog has one.

        Raises
        ------
        ConfigError
            When none is given and the table has none.
        """
        if given is not None:
            return [given] if isinstance(given, str) else list(given)
        raise ConfigError(f"a {self.connector!r} table declares no primary key: pass "
                          "key_columns")

    def function(self, key_columns: Keys, schema: SchemaLike | None) -> LookupFunction:
        """The lookup function of a NONE or PARTIAL provider.

        Raises
        ------
        ConfigError
            For a connector read only whole (files, Delta): lookups of a key would
            read every file for each batch of misses; its tables take ``lookup.cache``
            FULL.
        """
        raise ConfigError(
            f"connector {self.connector!r} is looked up through a full cache only: set "
            "'lookup.cache' = 'FULL' with its reload options (a lookup by key would read "
            "the whole table for each batch of misses: there is no index to find a key by)"
        )

    @abstractmethod
    def source(self, key_columns: list[str], schema: SchemaLike | None) -> Any:
        """The ``scan.Source`` a FULL provider loads."""

    def validity(self) -> Validity | None:
        """The version columns of the rows `source` reads, where it makes them (a
        Delta table's history): the provider built from the options takes them."""
        return None


CONNECTOR_MODULES: Mapping[str, str] = {
    "jdbc": "connectors.sql.jdbc.options",
    "filesystem": "connectors.files.options",
    "delta": "connectors.files.options",
    "redis": "connectors.redis.options",
}
"""The connectors a provider is built from, by their ``'connector'`` value: the module
beside each backend that exports its option table."""


def connector_options(name: str) -> type[TableOptions]:
    """The option table of connector ``name`` (a key of `CONNECTOR_MODULES`), imported
    from its backend's module on first use."""
    # By name, not imported here: each table builds its backend's lookup function and
    # source, which build on this package.
    module = importlib.import_module(CONNECTOR_MODULES[name])
    for exported in module.__all__:
        kind = getattr(module, exported)
        if isinstance(kind, type) and issubclass(kind, TableOptions) and kind.connector == name:
            return kind
    raise LookupError(f"{module.__name__} exports no option table of connector {name!r}")


def connector_of(options: Mapping[str, Any]) -> type[TableOptions] | None:
    """The connector ``options`` name, or None when they name none or one this library
    does not build (``'kafka'``)."""
    name = options.get("connector")
    if name is None:
        return None
    if not isinstance(name, str):
        raise ConfigError(f"option 'connector' must be a string, got {shown(name)}")
    name = name.strip().lower()
    return connector_options(name) if name in CONNECTOR_MODULES else None


def table_options(options: Mapping[str, Any]) -> TableOptions | None:
    """The connector options of ``options``, checked; None when no connector is named,
    or one this library does not build (``'kafka'``: the provider then needs its
    lookup function or source, and the connector's keys are left alone).

    Raises
    ------
    ConfigError
        For an unknown key of the connector (naming the key it resembles) or a bad
        value; without ``'connector'``, for any key but ``lookup.*`` and
        ``spark.lookup.*`` (naming the connector whose key it is, or the key it resembles).
    """
    kind = connector_of(options)
    if kind is None:
        if "connector" not in options:
            _check_keys_without_connector(options)
        return None
    kind.check_keys(options)
    return kind.from_options(options)


def _check_keys_without_connector(options: Mapping[str, Any]) -> None:
    known = {"connector", *(o.key for o in opts.LOOKUP_OPTIONS)}
    unknown = [key for key in options if isinstance(key, str) and key not in known]
    # A misspelt key first: it may be the missing 'connector'.
    opts.check_known_keys({key: None for key in unknown
                           if difflib.get_close_matches(key, known, n=1)}, known, prefix="")
    for key in unknown:
        owners = [name for name in CONNECTOR_MODULES
                  if key in {o.key for o in connector_options(name).OPTIONS}]
        if owners:
            raise ConfigError(f"option {key!r} is an option of connector "
                              f"{' or '.join(map(repr, owners))}: give 'connector' too "
                              "(without one, only the lookup.* and spark.lookup.* options "
                              "are read)")
    opts.check_known_keys(options, known, prefix="")


def connector_hint(name: str) -> str:
    """``"; did you mean 'jdbc'?"`` for a connector name close to one built here."""
    close = difflib.get_close_matches(name.strip().lower(), list(CONNECTOR_MODULES), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


_WHOLE_TABLE_DEFAULTS = {"lookup.cache": "FULL",
                         "lookup.full-cache.periodic-reload.interval": "1 h"}
_FLINK_FILE_TTL = "lookup.join.cache.ttl"


def with_connector_defaults(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with what Flink implies for a connector read only whole: a
    ``filesystem`` or ``delta`` table without ``'lookup.cache'`` is a full cache
    reloaded every hour (Flink's filesystem lookup reloads after
    ``lookup.join.cache.ttl``, 60 min by default, which is read as the reload interval).

    Raises
    ------
    ConfigError
        When ``lookup.join.cache.ttl`` and the reload interval are both given.
    """
    given = dict(options)
    name = given.get("connector")
    if not isinstance(name, str) or name.strip().lower() not in ("filesystem", "delta"):
        return given
    interval = "lookup.full-cache.periodic-reload.interval"
    if _FLINK_FILE_TTL in given:
        if interval in given:
            raise ConfigError(f"give {_FLINK_FILE_TTL!r} (Flink's filesystem key) or "
                              f"{interval!r}, not both")
        given[interval] = given.pop(_FLINK_FILE_TTL)
    if "lookup.cache" not in given:
        given["lookup.cache"] = _WHOLE_TABLE_DEFAULTS["lookup.cache"]
    if (opts.CACHE.get(given) == "FULL"
            and "lookup.full-cache.reload-strategy" not in given and interval not in given):
        given[interval] = _WHOLE_TABLE_DEFAULTS[interval]
    return given


def shown_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as they may be kept and shown: the password a
    `Secret`, URLs without their passwords."""
    kept = dict(options)
    if isinstance(kept.get("password"), str):
        kept["password"] = Secret(kept["password"])
    if isinstance(kept.get("url"), str):
        kept["url"] = _redacted(kept["url"])
    return kept


def _redacted(url: str) -> str:
    """A JDBC or Redis URL without its password (``user:password@`` or ``password=``)."""
    return redact_credentials(url)
