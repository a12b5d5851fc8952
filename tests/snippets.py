"""The python blocks of README.md and docs/, read as tests/test_docs_snippets.py and the
extras check (tests/extras_examples.py) run them: no pytest here, so the check can run in
a virtualenv holding the library and one extra only.

Markers, HTML comments on the line before a block (invisible on GitHub and the site):
``<!-- skip: reason -->``, ``<!-- needs: GATE[, GATE] -->`` (see test_docs_snippets.py),
``<!-- extra: NAME -->`` (the block is the example of the extra NAME: run by the extras
check in a virtualenv with only that extra, nox session ``extras``); and
``<!-- test: ... -->`` (hidden code run before the next block).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
_SKIP = re.compile(r"^\s*<!--\s*skip:\s*(?P<reason>.+?)\s*-->\s*$")
_HIDDEN = re.compile(r"^\s*<!--\s*test:(?P<rest>.*)$")
_NEEDS = re.compile(r"^\s*<!--\s*needs:\s*(?P<gates>[A-Z_, ]+?)\s*-->\s*$")
_EXTRA = re.compile(r"^\s*<!--\s*extra:\s*(?P<name>[\w-]+)\s*-->\s*$")
_USES_SPARK = re.compile(r"(?<![\w.-])spark(?![\w-])")  # not spark-lookup


@dataclass
class Snippet:
    page: str
    line: int  # of the opening fence, 1-based
    code: str  # the hidden code before it, then the block
    skip: str | None = None
    needs: tuple[str, ...] = ()
    extra: str | None = None
    """The extra this block is the example of (``<!-- extra: NAME -->``)."""

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass
class Page:
    name: str
    snippets: list[Snippet] = field(default_factory=list)

    @property
    def uses_spark(self) -> bool:
        return any(_USES_SPARK.search(s.code) for s in self.snippets if s.skip is None)


def parse_page(path: Path) -> Page:
    name = str(path.relative_to(ROOT))
    page = Page(name)
    lines = path.read_text().splitlines()
    hidden: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        hidden_start = _HIDDEN.match(line)
        fence = _FENCE.match(line)
        if hidden_start:
            body, rest = [], hidden_start["rest"]
            while "-->" not in rest:
                body.append(rest)
                i += 1
                rest = lines[i]
            body.append(rest[: rest.index("-->")])
            hidden.append(textwrap.dedent("\n".join(body)))
        elif fence:
            indent, lang, start = fence["indent"], fence["lang"], i
            i += 1
            block = []
            while lines[i].rstrip() != f"{indent}```":
                block.append(lines[i][len(indent):])
                i += 1
            if lang == "python":
                before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()),
                              "")
                skip = _SKIP.match(before)
                needs = _NEEDS.match(before)
                extra = _EXTRA.match(before)
                reason = skip["reason"] if skip else None
                if extra:
                    reason = (f"the example of the {extra['name']} extra: run in a virtualenv "
                              "with only that extra (noxfile.py: extras)")
                page.snippets.append(Snippet(
                    name, start + 1, "\n".join([*hidden, *block]), reason,
                    tuple(g.strip() for g in needs["gates"].split(",")) if needs else (),
                    extra["name"] if extra else None))
                hidden = []
        i += 1
    if hidden:
        assert page.snippets, f"{name}: hidden test code but no python block"
        page.snippets[-1].code += "\n" + "\n".join(hidden)
    return page
