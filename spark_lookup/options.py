"""Flink-style option parsing shared by the whole library.

A Flink DDL's ``WITH (...)`` options carry over unchanged: the keys below are Flink's
(``lookup.cache``, ``lookup.partial-cache.max-rows``, ...), and values are parsed the way
Flink parses them. Durations accept Flink's ``TimeUtils`` forms (``10 s``, ``5 min``,
``1 h``, ``100 ms``; a bare number means milliseconds, as in Flink, with a
[`ConfigWarning`][spark_lookup.ConfigWarning] when it is under a second), ISO-8601 (``PT10S``), and
`datetime.timedelta`. Every invalid value raises [`ConfigError`][], whose
message names the option key.
"""

from __future__ import annotations

import difflib
import enum
import os
import re
import sys
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import time, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Generic, TypeVar

from spark_lookup.connection_budget import DEFAULT_MAX_SOURCE_CONNECTIONS
from spark_lookup.errors import ConfigError, ConfigWarning
from spark_lookup.shown import shown

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)

__all__ = [
    "ASYNC_CAPACITY",
    "ASYNC_TIMEOUT",
    "CACHE",
    "FULL_CACHE_MAX_STALENESS",
    "FULL_CACHE_RELOAD_STRATEGY",
    "LIBRARY_PREFIX",
    "LOAD_TIMEOUT",
    "LOOKUP_OPTIONS",
    "MAX_RETRIES",
    "MAX_SOURCE_CONNECTIONS",
    "PARTIAL_CACHE_CACHE_MISSING_KEY",
    "PARTIAL_CACHE_EXPIRE_AFTER_ACCESS",
    "PARTIAL_CACHE_EXPIRE_AFTER_WRITE",
    "PARTIAL_CACHE_EXPIRE_MISSING_AFTER",
    "PARTIAL_CACHE_MAX_BYTES",
    "PARTIAL_CACHE_MAX_ROWS",
    "PERIODIC_RELOAD_INTERVAL",
    "PERIODIC_RELOAD_SCHEDULE_MODE",
    "TIMED_RELOAD_INTERVAL_IN_DAYS",
    "TIMED_RELOAD_ISO_TIME",
    "ConfigOption",
    "as_timedelta",
    "check_enum",
    "check_known_keys",
    "non_negative_int",
    "parse_bool",
    "parse_duration",
    "parse_enum",
    "parse_int",
    "parse_iso_time",
    "parse_memory_size",
    "parse_source_connections",
    "positive_duration",
    "positive_int",
    "with_duration_units",
]

# Flink's TimeUtils unit labels (org.apache.flink.util.TimeUtils.TimeUnit).
_UNITS: dict[str, Decimal] = {label: seconds for labels, seconds in (
    (("ns", "nano", "nanos", "nanosecond", "nanoseconds"), Decimal("1e-9")),
    (("us", "µs", "micro", "micros", "microsecond", "microseconds"), Decimal("1e-6")),
    (("ms", "milli", "millis", "millisecond", "milliseconds"), Decimal("1e-3")),
    (("s", "sec", "secs", "second", "seconds"), Decimal(1)),
    (("m", "min", "mins", "minute", "minutes"), Decimal(60)),
    (("h", "hour", "hours"), Decimal(3600)),
    (("d", "day", "days"), Decimal(86400)),
) for label in labels}

_FLINK_DURATION = re.compile(r"^\s*([0-9]+)\s*([a-zµ]*)\s*$", re.IGNORECASE)
_ISO_DURATION = re.compile(
    r"^([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(?:T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+(?:[.,][0-9]{0,9})?)S)?)?$",
    re.IGNORECASE,
)


def parse_duration(value: object, key: str) -> timedelta:
    """Parse a Flink duration option value into a `timedelta`.

    Accepts a ``timedelta``, Flink's ``TimeUtils`` strings (``"10 s"``, ``"5min"``,
    ``"1 h"``, ``"100 ms"``, ``"2 d"``; a bare number is milliseconds, as in Flink) and
    ISO-8601 durations (``"PT10S"``, ``"P1DT2H"``). A Python ``int``/``float`` is refused
    because it is ambiguous (Flink reads milliseconds, Python APIs usually seconds).

    Warns
    -----
    ConfigWarning
        For a bare number under 1000 (``"600"``: 0.6 s, where seconds were likely
        meant), naming ``key`` and the units to write.

    Raises
    ------
    ConfigError
        For anything else; the message names ``key`` and quotes the value.
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ConfigError(
            f"option {key!r}: a bare number {value!r} is ambiguous; write it with a unit "
            f"('{value} s', '{value} ms') or pass a datetime.timedelta"
        )
    if not isinstance(value, str):
        raise ConfigError(f"option {key!r}: expected a duration, got {shown(value)}")
    text = value.strip()
    match = _FLINK_DURATION.match(text)
    if match:
        number, unit = match.groups()
        scale = _UNITS.get(unit.lower()) if unit else Decimal("1e-3")
        if not unit:
            _warn_if_under_a_second(int(number), key, value)
        if scale is None:
            raise ConfigError(
                f"option {key!r}: unknown time unit {unit!r} in {value!r}; use one of "
                "ns, us, ms, s, min, h, d (or their long forms)"
            )
        return _seconds_to_timedelta(Decimal(number) * scale, key, value)
    match = _ISO_DURATION.match(text)
    if match and any(g for g in match.groups()[1:]) and not text.upper().endswith("T"):
        sign, days, hours, minutes, seconds = match.groups()
        total = (
            Decimal(days or 0) * 86400
            + Decimal(hours or 0) * 3600
            + Decimal(minutes or 0) * 60
            + Decimal((seconds or "0").replace(",", "."))
        )
        return _seconds_to_timedelta(-total if sign == "-" else total, key, value)
    raise ConfigError(
        f"option {key!r}: cannot parse duration {value!r}; expected e.g. '10 s', '5 min', "
        "'1 h', '100 ms' or ISO-8601 'PT10S'"
    )


_BARE_NUMBER = re.compile(r"\s*([0-9]+)\s*")


def _warn_if_under_a_second(millis: int, key: str, value: object) -> None:
    if 0 < millis < 1000:
        _warn(f"option {key!r}: {value!r} is a bare number, which Flink reads as "
              f"milliseconds ({millis} ms); write the unit: '{millis} ms', or '{millis} s' if "
              "seconds are meant", ConfigWarning)


def with_duration_units(options: Mapping[str, Any], known: Iterable[ConfigOption[Any]]
                        ) -> dict[str, Any]:
    """``options`` with each bare-number value of a duration option of ``known`` given
    its unit, ``"600"`` as ``"600 ms"`` (as Flink reads it), so that reading them again
    warns no more; a [`ConfigWarning`][spark_lookup.ConfigWarning] for each under a second."""
    given = dict(options)
    for option in known:
        value = given.get(option.key)
        match = _BARE_NUMBER.fullmatch(value) if isinstance(value, str) else None
        if match is not None and option.parser in (parse_duration, positive_duration):
            _warn_if_under_a_second(int(match.group(1)), option.key, value)
            given[option.key] = f"{match.group(1)} ms"
    return given


# The library's packages: a warning names the first line outside them (the user's call).
_LIBRARY = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package, "")
    for package in ("spark_lookup", "lookup", "cache", "triggers", "scan", "connectors"))


def _warn(message: str, category: type[Warning]) -> None:
    # Attributed to the first caller outside the library: the line of the user's code
    # that gave the option, however deep in the library it is read.
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_LIBRARY):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def _seconds_to_timedelta(seconds: Decimal, key: str, value: object) -> timedelta:
    try:
        return timedelta(seconds=float(seconds))
    except (OverflowError, InvalidOperation) as exc:
        raise ConfigError(f"option {key!r}: duration {value!r} is out of range") from exc


def as_timedelta(value: object, name: str, *, allow_zero: bool = False) -> timedelta:
    """Coerce a Python API argument (a ``timedelta`` or a number of seconds) to a
    positive ``timedelta``.

    Raises
    ------
    ConfigError
        If ``value`` is neither, or is not positive (zero allowed with ``allow_zero``);
        the message names the argument ``name``.
    """
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != value:  # NaN
            raise ConfigError(f"{name} must be a number of seconds, got NaN")
        try:
            delta = timedelta(seconds=value)
        except OverflowError as exc:
            raise ConfigError(f"{name}={value!r} is out of range") from exc
    else:
        raise ConfigError(f"{name} must be a datetime.timedelta or a number of seconds, "
                          f"got {shown(value)}")
    if delta < timedelta(0) or (delta == timedelta(0) and not allow_zero):
        bound = "non-negative" if allow_zero else "positive"
        raise ConfigError(f"{name} must be {bound}, got {delta!r}")
    return delta


# Flink's MemorySize unit labels (powers of 1024).
_MEMORY_UNITS: dict[str, int] = {name: factor for names, factor in (
    (("b", "bytes"), 1),
    (("k", "kb", "kibibytes"), 1 << 10),
    (("m", "mb", "mebibytes"), 1 << 20),
    (("g", "gb", "gibibytes"), 1 << 30),
    (("t", "tb", "tebibytes"), 1 << 40),
) for name in names}
_MEMORY = re.compile(r"\s*(\d+)\s*([a-zA-Z]*)\s*")


def parse_memory_size(value: object, key: str) -> int:
    """Parse a byte count the way Flink's ``MemorySize`` does (``64 mb``, ``1g``,
    ``512 kb``; a bare number is bytes; units are powers of 1024) or a Python ``int``."""
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, str) and (match := _MEMORY.fullmatch(value)):
        unit = match.group(2).lower() or "b"
        if unit not in _MEMORY_UNITS:
            raise ConfigError(
                f"option {key!r}: unknown memory unit {match.group(2)!r} in {value!r} "
                f"(use b, kb, mb, gb or tb)"
            )
        count = int(match.group(1)) * _MEMORY_UNITS[unit]
    else:
        raise ConfigError(
            f"option {key!r}: expected a memory size such as '64 mb', got {shown(value)}"
        )
    if count < 1:
        raise ConfigError(f"option {key!r}: must be positive, got {value!r}")
    return count


def parse_bool(value: object, key: str) -> bool:
    """Parse ``true``/``false`` (any case) or a Python ``bool``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(f"option {key!r}: expected 'true' or 'false', got {shown(value)}")


def parse_int(value: object, key: str, *, min_value: int | None = None) -> int:
    """Parse an integer (a Python ``int`` or a decimal string), optionally bounded below."""
    result: int
    if isinstance(value, int) and not isinstance(value, bool):
        result = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", value):
        result = int(value)
    else:
        raise ConfigError(f"option {key!r}: expected an integer, got {shown(value)}")
    if min_value is not None and result < min_value:
        raise ConfigError(f"option {key!r}: must be >= {min_value}, got {result}")
    return result


def check_int(value: object, name: str, *, min_value: int = 1) -> int:
    """A Python API argument that must be an ``int`` (not a bool, not a string) of at
    least ``min_value``: the check every constructor shares."""
    if isinstance(value, bool) or not isinstance(value, int) or value < min_value:
        raise ConfigError(f"{name} must be an int >= {min_value}, got {shown(value)}")
    return value


def check_instance(value: Any, kind: type, name: str, described: str = "") -> Any:
    """A Python API argument that must be a ``kind`` (``described``: how the message
    names it, default ``a <kind>``)."""
    if not isinstance(value, kind):
        raise ConfigError(f"{name} must be {described or 'a ' + kind.__name__}, got "
                          f"{type(value).__name__}")
    return value


def check_callable(value: object, name: str, described: str = "a zero-argument callable"
                   ) -> Callable[..., Any]:
    """A Python API argument that must be callable (a clock, a timer, a factory)."""
    if not callable(value):
        raise ConfigError(f"{name} must be {described}, got {shown(value)}")
    return value


def check_bool(value: object, name: str) -> bool:
    """A Python API argument that must be ``True`` or ``False`` (not a truthy value)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {shown(value)}")
    return value


def parse_enum(value: object, key: str, enum_type: type[E]) -> E:
    """Parse an enum member by name, case-insensitively (``FIXED_DELAY``, ``partial``)."""
    member = _member(value, enum_type)
    if member is None:
        raise ConfigError(f"option {key!r}: expected one of {_member_names(enum_type)}, got "
                          f"{shown(value)}")
    return member


def check_enum(value: object, name: str, enum_type: type[E]) -> E:
    """A Python API argument that names a member of ``enum_type`` (a member, or its name
    in any case): the check constructors share with `parse_enum`."""
    member = _member(value, enum_type)
    if member is None:
        raise ConfigError(
            f"{name} must be one of {_member_names(enum_type)}, got {shown(value)}")
    return member


def _member(value: object, enum_type: type[E]) -> E | None:
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        wanted = value.strip().upper().replace("-", "_")
        for member in enum_type:
            if member.name == wanted:
                return member
    return None


def _member_names(enum_type: type[enum.Enum]) -> str:
    return ", ".join(m.name for m in enum_type)


_ISO_TIME = re.compile(
    r"^([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,6}))?)?"
    r"(Z|[-+][0-9]{2}:?[0-9]{2})?$",
    re.IGNORECASE,
)


def parse_iso_time(value: object, key: str) -> time:
    """Parse an ISO-8601 time of day: ``10:15`` (local), ``10:15Z`` (UTC), ``10:15+07:00``.

    Returns a `datetime.time`; it carries a fixed-offset ``tzinfo`` when the text
    has an offset, and none for local time.
    """
    if isinstance(value, time):
        return value
    if not isinstance(value, str):
        raise ConfigError(f"option {key!r}: expected a time like '10:15', got {shown(value)}")
    match = _ISO_TIME.match(value.strip())
    if not match:
        raise ConfigError(
            f"option {key!r}: cannot parse time {value!r}; expected 'HH:MM[:SS]' optionally "
            "followed by 'Z' or an offset like '+07:00'"
        )
    hh, mm, ss, frac, zone = match.groups()
    tzinfo: timezone | None = None
    if zone:
        if zone.upper() == "Z":
            tzinfo = timezone.utc
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
            if offset >= timedelta(hours=24):
                raise ConfigError(f"option {key!r}: offset out of range in {value!r}")
            tzinfo = timezone(sign * offset)
    try:
        return time(int(hh), int(mm), int(ss or 0), int((frac or "0").ljust(6, "0")), tzinfo=tzinfo)
    except ValueError as exc:
        raise ConfigError(f"option {key!r}: invalid time {value!r}: {exc}") from exc


@dataclass(frozen=True)
class ConfigOption(Generic[T]):
    """One option key with its parser, default and description (Flink's ``ConfigOption``)."""

    key: str
    parser: Callable[[object, str], T]
    default: T | None
    description: str

    def get(self, options: Mapping[str, Any]) -> T | None:
        """The parsed value of this key in ``options``, or the default when absent."""
        if self.key not in options or options[self.key] is None:
            return self.default
        return self.parser(options[self.key], self.key)

    def require(self, options: Mapping[str, Any]) -> T:
        """The parsed value; [`ConfigError`][] naming the key when absent."""
        value = self.get(options)
        if value is None:
            raise ConfigError(f"missing required option {self.key!r}: {self.description}")
        return value


def check_known_keys(
    options: Mapping[str, Any], known: Collection[str], prefix: str = "lookup.",
    where: str = "",
) -> None:
    """Refuse unknown keys under ``prefix`` so a typo is never silently ignored; the
    message names the key, the known key it resembles, and ``where`` (``" of connector
    'jdbc'"``).

    Keys outside ``prefix`` (a connector's own ``url``, ``table-name``...) are left alone.
    """
    for key in options:
        if not isinstance(key, str):
            raise ConfigError(f"option keys must be strings, got {shown(key)}")
        if key.startswith(prefix) and key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown option {key!r}{where}{hint}")


def positive_duration(value: object, key: str) -> timedelta:
    """Option ``key``'s value as a duration above zero (`parse_duration`'s forms)."""
    delta = parse_duration(value, key)
    if delta <= timedelta(0):
        raise ConfigError(f"option {key!r}: must be a positive duration, got {value!r}")
    return delta


def non_negative_int(value: object, key: str) -> int:
    """Option ``key``'s value as an integer of at least 0."""
    return parse_int(value, key, min_value=0)


def positive_int(value: object, key: str) -> int:
    """Option ``key``'s value as an integer of at least 1."""
    return parse_int(value, key, min_value=1)


_UNLIMITED = "unlimited"


def parse_source_connections(value: object, key: str) -> int | None:
    """Option ``key``'s value as a connection budget: an integer of at least 1, or
    ``unlimited`` (any case) for None, as ``max_source_connections=None`` means."""
    if isinstance(value, str) and value.strip().lower() == _UNLIMITED:
        return None
    try:
        return positive_int(value, key)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (or {_UNLIMITED!r})") from None


def _one_of(*names: str) -> Callable[[object, str], str]:
    """A parser of one of ``names``, read as `parse_enum` reads an enum's."""
    choice = enum.Enum("Choice", names)  # type: ignore[misc]  # a functional enum

    def parse(value: object, key: str) -> str:
        return parse_enum(value, key, choice).name

    return parse


# --- Flink's lookup option keys (org.apache.flink.table.connector.source.lookup.LookupOptions)

CACHE: ConfigOption[str] = ConfigOption(
    "lookup.cache", _one_of("NONE", "PARTIAL", "FULL"), "NONE", "Cache type: NONE, PARTIAL or FULL."
)
MAX_RETRIES: ConfigOption[int] = ConfigOption(
    "lookup.max-retries", non_negative_int, 3,
    "Retries of a failed load, with exponential backoff.",
)
PARTIAL_CACHE_MAX_ROWS: ConfigOption[int] = ConfigOption(
    "lookup.partial-cache.max-rows", positive_int, None,
    "Maximum number of cached keys (LRU eviction).",
)
# Beyond Flink (Arroyo's lookup cache has one): a bound on the cache's bytes.
PARTIAL_CACHE_MAX_BYTES: ConfigOption[int] = ConfigOption(
    "lookup.partial-cache.max-bytes", parse_memory_size, None,
    "Maximum bytes held by the cache, from its Arrow buffers ('256 mb'; LRU eviction).",
)
PARTIAL_CACHE_EXPIRE_AFTER_WRITE: ConfigOption[timedelta] = ConfigOption(
    "lookup.partial-cache.expire-after-write", positive_duration, None,
    "An entry expires this long after it was loaded.",
)
PARTIAL_CACHE_EXPIRE_AFTER_ACCESS: ConfigOption[timedelta] = ConfigOption(
    "lookup.partial-cache.expire-after-access", positive_duration, None,
    "An entry expires this long after it was last read or written.",
)
PARTIAL_CACHE_CACHE_MISSING_KEY: ConfigOption[bool] = ConfigOption(
    "lookup.partial-cache.cache-missing-key", parse_bool, True,
    "Whether a key with no rows is cached (as an empty result).",
)
LIBRARY_PREFIX = "spark.lookup."
"""The prefix of the table options this library adds beyond Flink's keys: ``lookup.`` is
Flink's, where a later Flink may define the same key with other semantics, and in a DDL
shared with Flink this prefix shows which keys only this library reads."""

# Beyond Flink, whose cache-missing-key is only on or off: a shorter life for "no such
# key", so that a dimension row arriving late is found.
PARTIAL_CACHE_EXPIRE_MISSING_AFTER: ConfigOption[timedelta] = ConfigOption(
    f"{LIBRARY_PREFIX}partial-cache.expire-missing-after", positive_duration, None,
    "A cached missing key (no rows) expires this long after it was loaded; rows keep "
    "the other TTLs.",
)
FULL_CACHE_RELOAD_STRATEGY: ConfigOption[str] = ConfigOption(
    "lookup.full-cache.reload-strategy", _one_of("PERIODIC", "TIMED"), "PERIODIC",
    "PERIODIC (every interval) or TIMED (a time of day every N days).",
)
PERIODIC_RELOAD_INTERVAL: ConfigOption[timedelta] = ConfigOption(
    "lookup.full-cache.periodic-reload.interval", positive_duration, None,
    "Interval between full reloads (PERIODIC).",
)
PERIODIC_RELOAD_SCHEDULE_MODE: ConfigOption[str] = ConfigOption(
    "lookup.full-cache.periodic-reload.schedule-mode", _one_of("FIXED_DELAY", "FIXED_RATE"),
    "FIXED_DELAY",
    "FIXED_DELAY (from the end of a load) or FIXED_RATE (from its start; never overlapping).",
)
TIMED_RELOAD_ISO_TIME: ConfigOption[time] = ConfigOption(
    "lookup.full-cache.timed-reload.iso-time", parse_iso_time, None,
    "Time of day of the reload: '10:15' local, '10:15Z' UTC, '10:15+07:00' (TIMED).",
)
TIMED_RELOAD_INTERVAL_IN_DAYS: ConfigOption[int] = ConfigOption(
    "lookup.full-cache.timed-reload.interval-in-days", positive_int, 1,
    "Days between timed reloads (TIMED).",
)
# Beyond Flink: a failed reload keeps serving the last good snapshot up to this age.
FULL_CACHE_MAX_STALENESS: ConfigOption[timedelta] = ConfigOption(
    "lookup.full-cache.max-staleness", positive_duration, None,
    "Beyond Flink: lookups fail once the last good snapshot is older than this.",
)
ASYNC_CAPACITY: ConfigOption[int] = ConfigOption(
    "lookup.async.capacity", positive_int, 100,
    "Async lookups in flight at once.",
)
ASYNC_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    "lookup.async.timeout", positive_duration, timedelta(seconds=180),
    "Timeout of one async lookup.",
)

# Beyond Flink, whose connectors open a connection per task: the provider's budget of
# connections per host (issue 44), so that a wide job cannot exhaust the source's limit.
MAX_SOURCE_CONNECTIONS: ConfigOption[int | None] = ConfigOption(
    f"{LIBRARY_PREFIX}max-source-connections", parse_source_connections,
    DEFAULT_MAX_SOURCE_CONNECTIONS,
    "Connections a provider opens to its source at once per host ('unlimited': no bound).",
)
ADAPTIVE_CONCURRENCY: ConfigOption[bool] = ConfigOption(
    f"{LIBRARY_PREFIX}adaptive-concurrency", parse_bool, True,
    "Whether a host uses fewer of max-source-connections while the source is slow or "
    "failing, and more as it recovers.",
)
LOAD_TIMEOUT: ConfigOption[timedelta] = ConfigOption(
    f"{LIBRARY_PREFIX}load-timeout", positive_duration, timedelta(seconds=180),
    "How long a load waits for its source: for a connection of the host's budget, and "
    "while the source refuses connections for being over its own limit.",
)

LOOKUP_OPTIONS: tuple[ConfigOption[Any], ...] = (
    CACHE,
    MAX_RETRIES,
    PARTIAL_CACHE_MAX_ROWS,
    PARTIAL_CACHE_MAX_BYTES,
    PARTIAL_CACHE_EXPIRE_AFTER_WRITE,
    PARTIAL_CACHE_EXPIRE_AFTER_ACCESS,
    PARTIAL_CACHE_CACHE_MISSING_KEY,
    PARTIAL_CACHE_EXPIRE_MISSING_AFTER,
    FULL_CACHE_RELOAD_STRATEGY,
    PERIODIC_RELOAD_INTERVAL,
    PERIODIC_RELOAD_SCHEDULE_MODE,
    TIMED_RELOAD_ISO_TIME,
    TIMED_RELOAD_INTERVAL_IN_DAYS,
    FULL_CACHE_MAX_STALENESS,
    ASYNC_CAPACITY,
    ASYNC_TIMEOUT,
    MAX_SOURCE_CONNECTIONS,
    ADAPTIVE_CONCURRENCY,
    LOAD_TIMEOUT,
)
"""Every ``lookup.*`` key the library understands, and its own table options under
``spark.lookup.`` (`LIBRARY_PREFIX`), in documentation order."""

DEPRECATED_KEYS: Mapping[str, str] = {
    "lookup.cache.max-rows": PARTIAL_CACHE_MAX_ROWS.key,
    "lookup.cache.ttl": PARTIAL_CACHE_EXPIRE_AFTER_WRITE.key,
    "lookup.cache.caching-missing-key": PARTIAL_CACHE_CACHE_MISSING_KEY.key,
}
"""Flink's legacy JDBC lookup-cache keys, still in many DDLs, and the keys that replaced
them (Flink still accepts them as fallbacks)."""


def with_current_keys(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with Flink's deprecated keys (`DEPRECATED_KEYS`) renamed, each
    with a ``FutureWarning`` naming its replacement; as in Flink, a current key given
    too wins, and a legacy row bound or TTL without ``lookup.cache`` means PARTIAL."""
    current = dict(options)
    renamed = []
    for old, new in DEPRECATED_KEYS.items():
        if old not in current:
            continue
        value = current.pop(old)
        ignored = new in current
        _warn(f"option {old!r} is deprecated (Flink's legacy lookup-cache key): use {new!r}"
              + (f"; {new!r} is given too and wins" if ignored else ""), FutureWarning)
        if not ignored:
            current[new] = value
            renamed.append(old)
    if CACHE.key not in current and set(renamed) & {"lookup.cache.max-rows", "lookup.cache.ttl"}:
        current[CACHE.key] = "PARTIAL"
    return current
