"""Run the example of one extra (docs/extras.md, ``<!-- extra: NAME -->``) in this
interpreter: ``python tests/extras_examples.py NAME``, from any directory (the library is
imported as installed, not from the checkout).

The nox session ``extras`` runs it in a fresh virtualenv per extra holding PySpark,
the library and that extra alone (no test tools: nothing else can make up for what the
extra lacks). Plain Python: a failure is a traceback and a non-zero exit. An example's
hidden set-up (``<!-- test: -->`` before it) runs with it and registers its clean-up
with ``atexit``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# Run as a script, Python put this directory first on the path, where tests/lookup
# would stand for the library: the library must come from the virtualenv.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
_spec = importlib.util.spec_from_file_location("snippets", _HERE / "snippets.py")
assert _spec is not None
assert _spec.loader is not None
_snippets = importlib.util.module_from_spec(_spec)
sys.modules["snippets"] = _snippets  # dataclasses look their module up by name
_spec.loader.exec_module(_snippets)
ROOT, parse_page = _snippets.ROOT, _snippets.parse_page

PAGE = ROOT / "docs" / "extras.md"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/extras_examples.py EXTRA", file=sys.stderr)
        return 2
    extra = argv[0]
    snippets = parse_page(PAGE).snippets
    examples = [s for s in snippets if s.extra == extra]
    if not examples:
        known = sorted({s.extra for s in snippets if s.extra})
        print(f"no example of extra {extra!r} in {PAGE.name}; there are {known}",
              file=sys.stderr)
        return 2
    namespace: dict[str, object] = {"__name__": "__extras__"}
    for snippet in examples:
        exec(compile(snippet.code, snippet.id, "exec"), namespace)
    print(f"{PAGE.name}: the example of the {extra} extra ran")
    return 0


def extras() -> list[str]:
    """The extras the page has an example of, in page order."""
    return list(dict.fromkeys(s.extra for s in parse_page(PAGE).snippets if s.extra))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
