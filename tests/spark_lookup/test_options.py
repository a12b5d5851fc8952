"""Flink-style option parsing (spark_lookup.options)."""

from __future__ import annotations

from datetime import time, timedelta, timezone
from typing import Any

import pytest

from spark_lookup import options as opts
from spark_lookup.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10 s", timedelta(seconds=10)),
        ("10s", timedelta(seconds=10)),
        ("10 sec", timedelta(seconds=10)),
        ("10 seconds", timedelta(seconds=10)),
        ("5 min", timedelta(minutes=5)),
        ("5m", timedelta(minutes=5)),
        ("1 h", timedelta(hours=1)),
        ("2 hours", timedelta(hours=2)),
        ("100 ms", timedelta(milliseconds=100)),
        ("250", timedelta(milliseconds=250)),  # Flink: no unit means milliseconds
        ("2 d", timedelta(days=2)),
        ("1 DAYS", timedelta(days=1)),
        ("1500 us", timedelta(microseconds=1500)),
        ("PT10S", timedelta(seconds=10)),
        ("pt1m30s", timedelta(seconds=90)),
        ("PT0.5S", timedelta(milliseconds=500)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("P2D", timedelta(days=2)),
        (timedelta(minutes=3), timedelta(minutes=3)),
    ],
)
# "250" warns (a bare number under a second): tests/lookup/test_flink_ddl.py tests that.
@pytest.mark.filterwarnings("ignore::spark_lookup.errors.ConfigWarning")
def test_parse_duration_accepts_flink_and_iso_forms(text: Any, expected: timedelta) -> None:
    assert opts.parse_duration(text, "k") == expected


@pytest.mark.parametrize("text", ["", "s", "10 parsecs", "1.5 s", "P", "PT", "10 s s", "-"])
def test_parse_duration_errors_name_the_key(text: str) -> None:
    with pytest.raises(ConfigError, match="'my.key'"):
        opts.parse_duration(text, "my.key")


@pytest.mark.parametrize("value", [10, 2.5, None, [1]])
def test_parse_duration_refuses_ambiguous_numbers_and_other_types(value: Any) -> None:
    with pytest.raises(ConfigError, match="'my.key'"):
        opts.parse_duration(value, "my.key")


def test_as_timedelta_takes_seconds_or_timedelta() -> None:
    assert opts.as_timedelta(1.5, "ttl") == timedelta(seconds=1.5)
    assert opts.as_timedelta(timedelta(hours=1), "ttl") == timedelta(hours=1)
    assert opts.as_timedelta(0, "ttl", allow_zero=True) == timedelta(0)
    for bad in (0, -1, "1 s", True, float("nan"), 1e300):
        with pytest.raises(ConfigError, match="ttl"):
            opts.as_timedelta(bad, "ttl")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10:15", time(10, 15)),
        ("10:15:30", time(10, 15, 30)),
        ("10:15:30.25", time(10, 15, 30, 250000)),
        ("10:15Z", time(10, 15, tzinfo=timezone.utc)),
        ("10:15+07:00", time(10, 15, tzinfo=timezone(timedelta(hours=7)))),
        ("23:59-0530", time(23, 59, tzinfo=timezone(-timedelta(hours=5, minutes=30)))),
    ],
)
def test_parse_iso_time(text: str, expected: time) -> None:
    parsed = opts.parse_iso_time(text, "k")
    assert parsed == expected
    assert parsed.tzinfo == expected.tzinfo


@pytest.mark.parametrize("text", ["25:00", "10", "10:60", "10:15+25:00", "noon", 1015])
def test_parse_iso_time_errors_name_the_key(text: Any) -> None:
    with pytest.raises(ConfigError, match="'t.key'"):
        opts.parse_iso_time(text, "t.key")


def test_parse_bool_int_enum() -> None:
    assert opts.parse_bool("TRUE", "k") is True
    assert opts.parse_bool(" false ", "k") is False
    assert opts.parse_int(" 42 ", "k") == 42
    with pytest.raises(ConfigError, match="'k'"):
        opts.parse_bool("1", "k")
    with pytest.raises(ConfigError, match="'k'.*>= 1"):
        opts.parse_int("0", "k", min_value=1)
    with pytest.raises(ConfigError, match="'k'"):
        opts.parse_int(True, "k")
    assert opts.CACHE.get({"lookup.cache": "partial"}) == "PARTIAL"


def test_config_option_get_require_and_defaults() -> None:
    assert opts.MAX_RETRIES.get({}) == 3
    assert opts.MAX_RETRIES.get({"lookup.max-retries": "5"}) == 5
    with pytest.raises(ConfigError, match="missing required option 'lookup.full-cache"):
        opts.PERIODIC_RELOAD_INTERVAL.require({})


def test_check_known_keys_ignores_other_prefixes_and_suggests() -> None:
    known = [o.key for o in opts.LOOKUP_OPTIONS]
    opts.check_known_keys({"connector": "jdbc", "lookup.cache": "FULL"}, known)
    with pytest.raises(ConfigError, match="did you mean 'lookup.max-retries'"):
        opts.check_known_keys({"lookup.max-retry": "1"}, known)
    with pytest.raises(ConfigError, match="unknown option 'lookup.qqqqqqqqqqqqqqqq'$"):
        opts.check_known_keys({"lookup.qqqqqqqqqqqqqqqq": "1"}, known)


def test_every_option_is_documented_in_the_readme() -> None:
    from pathlib import Path

    # The Configuration section moved from the README to the docs site.
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    missing = [o.key for o in opts.LOOKUP_OPTIONS if f"`{o.key}`" not in page]
    assert missing == [], f"docs/configuration.md's table lacks {missing}"
