"""Values shown in error messages."""

from __future__ import annotations

__all__ = ["shown"]


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters. Never raises: an integer too long
    for ``repr`` (Python's digit limit) is shown by its size, also inside tuples and
    lists, so a malformed key cannot hide the error that names it."""
    try:
        text = repr(value)
    except ValueError:
        text = _sized(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _sized(value: object) -> str:
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_sized(item) for item in value)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    try:
        return repr(value)
    except ValueError:
        if isinstance(value, int):
            return f"<an integer of {value.bit_length()} bits>"
        return f"<a {type(value).__name__}>"
