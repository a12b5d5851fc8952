"""Redis key templates: lookup keys to Redis keys, and Redis keys back to key parts.

Design notes: DESIGN.md, connectors/ ``connectors/redis/template.py``.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from spark_lookup.errors import ConfigError

__all__ = ["KeyTemplate"]

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


class KeyTemplate:
    """A parsed key template: format, refuse or escape ambiguous parts, match, parse.

    Parameters
    ----------
    template
        The format string; every key column must appear, each placeholder a bare key
        column name with an optional format spec (no conversion, no index or attribute).
    key_columns
        The key columns.
    escape
        Percent-encode the separators (and ``%``) inside parts.

    Raises
    ------
    ConfigError
        For a malformed template, a placeholder that is not a key column, a key column
        without a placeholder, two placeholders with no literal text between them, or
        (with ``escape``) a separator holding ``%``.
    """

    def __init__(self, template: object, key_columns: Sequence[str], escape: bool = False) -> None:
        if not isinstance(template, str):
            raise ConfigError(f"key_template must be a string, got {type(template).__name__}")
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ConfigError(f"key_template {template!r}: {exc}") from exc
        self.template = template
        self.escape = bool(escape)
        self.fields: list[str] = []
        # literals[i] precedes placeholder i, literals[-1] follows the last one; the
        # parser splits a literal at each '{{' or '}}', so its pieces are joined here.
        literals = [""]
        for literal, field, spec, conversion in parsed:
            literals[-1] += literal
            if field is None:
                continue
            literals.append("")
            # Only bare key-column names: '{id.__class__}' or '{0}' would reach into values.
            if field not in key_columns:
                raise ConfigError(
                    f"key_template {template!r}: placeholder {{{field}}} is not a key column "
                    f"{list(key_columns)}"
                )
            if conversion is not None or (spec and "{" in spec):
                raise ConfigError(
                    f"key_template {template!r}: placeholder {{{field}}} may have a format "
                    "spec but no conversion (!r, !s) or nested placeholder"
                )
            self.fields.append(field)
        unused = [c for c in key_columns if c not in self.fields]
        if unused:
            raise ConfigError(
                f"key_template {template!r} has no placeholder for key column(s) {unused}: "
                "different keys would read the same Redis key"
            )
        if len(set(self.fields)) != len(self.fields):
            raise ConfigError(f"key_template {template!r} repeats a placeholder")
        separators = literals[1 : len(self.fields)]
        if any(not text for text in separators):
            raise ConfigError(
                f"key_template {template!r}: placeholders need literal text between them, "
                "or one key could be read as another"
            )
        self.separators = tuple(separators)
        self._literals = tuple(literals)
        if self.escape and any("%" in text for text in separators):
            # A '%' in a separator could be read as the start of a part's escape code:
            # ("x", "25%") and ("x%", "25") would both be "x%25%25" with separator "%".
            raise ConfigError(
                f"key_template {template!r}: with escape=True the text between placeholders "
                "may not contain '%' (it starts the escape codes of key parts)"
            )
        special = "".join(re.escape(c) for c in sorted({"%", *"".join(separators)}))
        self._special = re.compile(f"[{special}]")
        # A part's text: characters no separator holds, and escape codes.
        part_regex = f"((?:[^{special}]|%[0-9A-F]{{2}})*)"
        self._specs = {
            field: spec or "" for _, field, spec, _ in parsed if field is not None
        }
        pattern = ""
        glob = ""
        for literal, field, _, _ in parsed:
            pattern += re.escape(literal)
            glob += _GLOB_SPECIAL.sub(r"\\\1", literal)
            if field is not None:
                if self.escape:
                    pattern += part_regex
                else:
                    pattern += "(.*)" if len(self.fields) == 1 else "(.*?)"
                glob += "*"
        # Matched with fullmatch: a final '$' also matches before a trailing newline, so
        # "user:1\n" would have been read as the key of "user:1".
        self._regex = re.compile(pattern, re.DOTALL)
        self.glob = glob
        """The SCAN ``MATCH`` pattern of every key the template can make."""

    def spec(self, field: str) -> str:
        """The format spec of ``field``'s placeholder (empty: none)."""
        return self._specs[field]

    def part(self, field: str, value: Any) -> str:
        """The text of one key part (escaped when asked)."""
        text = format(value, self._specs[field])
        return self._special.sub(_percent, text) if self.escape else text

    def ambiguous(self, parts: Sequence[str]) -> bool:
        """Whether unescaped parts could be read as another key's (a part holds a
        separator); never with ``escape``."""
        if self.escape or len(self.fields) < 2:
            return False
        return any(sep in part for part in parts for sep in self.separators)

    def format(self, values: Mapping[str, Any]) -> tuple[str, bool]:
        """The Redis key of normalized key values, and whether it is ambiguous."""
        parts = {field: self.part(field, values[field]) for field in self.fields}
        key = self.template
        rendered = string.Formatter().vformat(
            _plain(key), (), {field: parts[field] for field in self.fields}
        )
        return rendered, self.ambiguous(list(parts.values()))

    def parse(self, redis_key: str) -> dict[str, str] | None:
        """The part texts of a Redis key made by this template (unescaped), or None
        when it does not fit the template or could be split more than one way."""
        match = self._regex.fullmatch(redis_key)
        if match is None:
            return None
        parts = list(match.groups())
        if self.ambiguous(parts):
            return None
        if self.escape:
            texts = []
            for part in parts:
                text = _unescape(part)
                # Only the canonical encoding names a key: "%41" is not "A"'s (a lookup
                # of "A" reads "A"), so a scan files no row under a key nobody wrote.
                if text is None or self._special.sub(_percent, text) != part:
                    return None
                texts.append(text)
            parts = texts
        return dict(zip(self.fields, parts, strict=True))

    def parse_all(self, redis_key: str, limit: int = 64) -> list[dict[str, str]] | None:
        """Every way a Redis key made by this template splits into part texts: the one
        [`parse`][] gives, or, unescaped, each split at the separators a part may hold
        (``ns:{a}:{b}`` reads ``ns:x:y:z`` as ``x``, ``y:z`` and as ``x:y``, ``z``). None
        when there are more than ``limit`` (the key could stand for too many keys)."""
        if self.escape or len(self.fields) < 2:
            parsed = self.parse(redis_key)
            return [] if parsed is None else [parsed]
        if self._regex.fullmatch(redis_key) is None:
            return []
        literals = list(self._literals)
        body = redis_key[len(literals[0]):len(redis_key) - len(literals[-1])]
        found: list[list[str]] = []

        def split(start: int, field: int, parts: list[str]) -> bool:
            if field == len(self.fields) - 1:
                found.append([*parts, body[start:]])
                return len(found) <= limit
            separator = literals[field + 1]
            at = body.find(separator, start)
            while at >= 0:
                if not split(at + len(separator), field + 1, [*parts, body[start:at]]):
                    return False
                at = body.find(separator, at + 1)
            return True

        if not split(0, 0, []):
            return None
        return [dict(zip(self.fields, parts, strict=True)) for parts in found]

    def check_formats(self, samples: Mapping[str, Any]) -> None:
        """Try the format specs on sample values of the key columns' types.

        Raises
        ------
        ConfigError
            If a spec does not format its column's values.
        """
        try:
            for field in self.fields:
                format(samples[field], self._specs[field])
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"key_template {self.template!r} does not format the key columns' types: {exc}"
            ) from exc


def _plain(template: str) -> str:
    """``template`` with format specs removed (parts are formatted already)."""
    out = []
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if field is not None:
            out.append("{" + field + "}")
    return "".join(out)


def _percent(match: re.Match[str]) -> str:
    # surrogatepass: a lone surrogate is a str Python holds; it round-trips as well.
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8", "surrogatepass"))


_CODES = re.compile(r"(?:%[0-9A-F]{2})+")


def _unescape(text: str) -> str | None:
    """``text`` with its runs of escape codes decoded as UTF-8; None if one is no UTF-8."""
    try:
        return _CODES.sub(
            lambda m: bytes.fromhex(m.group().replace("%", "")).decode("utf-8", "surrogatepass"),
            text,
        )
    except UnicodeDecodeError:
        return None
