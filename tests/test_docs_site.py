"""The documentation site as a reader meets it: built by ``mkdocs build --strict`` into a
temporary directory, opened from disk (``file://``) in a real headless Chromium, and
followed link by link from ``index.html`` to every page.

Each page must be a file (not a directory listing), show no markup the renderer left raw
(a Sphinx role, a double backquote, an unresolved ``[`Name`][]``, a reST ``::``) and hold
the anchors that links point at; each API page lists its package's public names in the
order of its ``members:`` list. Search needs a server (browsers refuse its web worker on
``file://``), so it is tried on the site served over HTTP, as the README says to serve it.

Chromium and chromedriver are the system's (``make test`` installs them with apt where
it can); missing, the browser tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import functools
import http.server
import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# One build and one browser serve the module's tests: keep them on one xdist worker.
pytestmark = pytest.mark.xdist_group("docs-site")

# Chromium must not reach for the network (this machine's is closed; a reader's may be
# too): no component updates, sync, or background requests. --no-sandbox: tests may run
# as root, where Chromium's sandbox refuses to start.
_CHROMIUM_ARGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--window-size=1280,1000",
)

# What a reader must never see: markup the site's renderer did not turn into text.
_SHOWN_ROLE = re.compile(r":(?:py:)?(?:meth|class|func|attr|mod|exc|data|obj|ref|const):")
_RAW_MARKUP = {
    "a double backquote (a reST literal)": re.compile(r"``"),
    "an unresolved cross-reference": re.compile(r"\]\["),
    "a reST literal-block marker": re.compile(r"\S::(?:\s|$)"),
}


# --- the API pages' member lists (no browser) -----------------------------------------

def _directives(page: Path) -> list[tuple[str, list[str] | None]]:
    """The ``::: identifier`` blocks of a page, with their ``members:`` list (None: none)."""
    blocks: list[tuple[str, list[str] | None]] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("::: "):
            body = []
            for following in lines[i + 1:]:
                if following and not following.startswith(" "):
                    break
                body.append(following)
            import yaml  # the docs extra's (not in the matrix's test extra)

            options = (yaml.safe_load("\n".join(body)) or {}).get("options", {})
            blocks.append((line[4:].strip(), options.get("members")))
    return blocks


@pytest.mark.parametrize("page", sorted(p.name for p in (DOCS / "api").glob("*.md")))
def test_an_api_page_lists_each_public_name_of_its_packages_once(page: str) -> None:
    blocks = _directives(DOCS / "api" / page)
    packages = [target for target, members in blocks if members is not None]
    assert packages, f"docs/api/{page} lists no members: order them by importance"
    expected = sorted(n for p in packages for n in importlib.import_module(p).__all__)
    listed = [n for _, members in blocks if members is not None for n in members]
    # A name griffe cannot see in its package (scan's lazy register_data_source) is
    # rendered by its own ::: block.
    listed += [target.rsplit(".", 1)[1] for target, members in blocks if members is None]
    assert sorted(listed) == expected, (
        f"docs/api/{page}: its members: lists must name each of {packages}' __all__ once")


# --- the built site, in a browser ------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True, text=True, timeout=240, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def _browser_paths() -> tuple[str, str]:
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        unavailable("Chromium and chromedriver are not installed (make test installs them "
                    "with apt-get when run as root; else: apt-get install chromium "
                    "chromium-driver)")
    assert browser is not None
    assert driver is not None
    return browser, driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    chromium, chromedriver = _browser_paths()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        unavailable(f"selenium is not installed ({exc}): pip install -e '.[dev]'")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (*_CHROMIUM_ARGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(arg)
    # The driver's path given: Selenium does not look for (or download) one.
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()


_PAGE_SCRIPT = """
const article = document.querySelector("article.md-content__inner");
let prose = "";
if (article) {
  const copy = article.cloneNode(true);
  copy.querySelectorAll("pre, code, script, style").forEach(e => e.remove());
  prose = copy.textContent;
}
return {
  title: document.title,
  isPage: article !== null,
  text: document.body.innerText,
  prose: prose,
  links: [...document.querySelectorAll("a[href]")].map(a => a.href),
  ids: [...document.querySelectorAll("[id]")].map(e => e.id),
  headings: [...document.querySelectorAll(".doc-heading[id]")].map(h => h.id),
};
"""


@dataclass
class Crawl:
    """What the browser showed, from index.html on, following every link within the site."""

    pages: dict[str, dict[str, Any]] = field(default_factory=dict)  # file -> _PAGE_SCRIPT's
    links: list[tuple[str, str, str]] = field(default_factory=list)  # (from, file, anchor)


@pytest.fixture(scope="module")
def crawl(site: Path, browser: Any) -> Crawl:
    root = site.as_uri() + "/"
    found = Crawl()
    queue = ["index.html"]
    while queue:
        page = queue.pop(0)
        if page in found.pages:
            continue
        browser.get(root + page)
        found.pages[page] = shown = browser.execute_script(_PAGE_SCRIPT)
        for href in shown["links"] if shown["isPage"] else []:
            if not href.startswith(root):
                continue  # another site
            url, _, anchor = href.partition("#")
            target = unquote(url[len(root):])
            found.links.append((page, target, unquote(anchor)))
            if target.endswith(".html") and (site / target).is_file():
                queue.append(target)
    return found


def _raw_markup(shown: dict[str, Any]) -> Iterator[str]:
    """Markup the renderer left raw in a page: a Sphinx role anywhere; a double backquote,
    an unresolved cross-reference or a reST ``::`` in its prose (code may hold them)."""
    checks = [("a Sphinx role", _SHOWN_ROLE, shown["text"])]
    checks += [(what, pattern, shown["prose"]) for what, pattern in _RAW_MARKUP.items()]
    for what, pattern, text in checks:
        for match in pattern.finditer(text):
            yield f"{what}: {text[max(0, match.start() - 40):match.end() + 40]!r}"


def test_links_from_the_index_reach_every_page(crawl: Crawl) -> None:
    pages = {p.relative_to(DOCS).with_suffix(".html").as_posix() for p in DOCS.rglob("*.md")}
    assert pages - crawl.pages.keys() == set()
    assert len(pages) > 20


def test_every_link_opens_a_page_not_a_directory_listing(site: Path, crawl: Crawl) -> None:
    wrong = [f"{page} links to {target}: {'a directory' if (site / target).is_dir() else 'no file'}"
             for page, target, _ in crawl.links if not (site / target).is_file()]
    wrong += [f"{page}: not a page of the site (title {shown['title']!r})"
              for page, shown in crawl.pages.items() if not shown["isPage"]]
    assert not wrong, "\n".join(wrong)


def test_a_directory_url_is_what_that_test_catches(site: Path, browser: Any) -> None:
    # What each link showed before use_directory_urls: false: Chromium's listing.
    browser.get((site / "api").as_uri() + "/")
    shown = browser.execute_script(_PAGE_SCRIPT)
    assert not shown["isPage"]
    assert shown["title"].startswith("Index of")


def test_every_link_anchor_is_on_its_page(crawl: Crawl) -> None:
    missing = sorted({f"{page} links to {target}#{anchor}" for page, target, anchor
                      in crawl.links if anchor and target in crawl.pages
                      and anchor not in crawl.pages[target]["ids"]})
    assert not missing, "\n".join(missing)
    assert sum(1 for _, target, anchor in crawl.links if anchor and "api/" in target) > 500


def test_no_page_shows_raw_markup(crawl: Crawl) -> None:
    raw = [f"{page}: {problem}" for page, shown in sorted(crawl.pages.items())
           for problem in _raw_markup(shown)]
    assert not raw, "\n".join(raw)


def test_the_raw_markup_check_sees_what_the_api_pages_showed() -> None:
    before = {"text": "Connects (see :meth:connect) and :class:Change values.",
              "prose": "A ``char(n)`` column, [connect][] unresolved, so that::"}
    assert [found.split(":")[0] for found in _raw_markup(before)] == [
        "a Sphinx role", "a Sphinx role", "a double backquote (a reST literal)",
        "a double backquote (a reST literal)", "an unresolved cross-reference",
        "a reST literal-block marker"]
    after = {"text": "Connects (see connect) and Change values; $1::int8[]",
             "prose": "A char(n) column, connect resolved, so that:"}
    assert list(_raw_markup(after)) == []


@pytest.mark.parametrize("page", sorted(p.stem for p in (DOCS / "api").glob("*.md")))
def test_an_api_page_shows_members_in_the_listed_order(crawl: Crawl, page: str) -> None:
    headings = crawl.pages[f"api/{page}.html"]["headings"]
    blocks = _directives(DOCS / "api" / f"{page}.md")
    for target, members in blocks:
        if members is None:
            assert target in headings
            continue
        shown = [h.rsplit(".", 1)[1] for h in headings
                 if h.startswith(f"{target}.") and "." not in h[len(target) + 1:]
                 and h not in {t for t, _ in blocks}]
        assert shown == members


def test_the_lookup_api_page_opens_with_lookup_join(crawl: Crawl) -> None:
    assert crawl.pages["api/lookup.html"]["headings"][:2] == ["lookup", "lookup.lookup_join"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_search_finds_a_name_on_the_site_served_over_http(site: Path, browser: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, name="docs-http", daemon=True)
    thread.start()
    try:
        # ?q= opens Material's search with the query typed in.
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/index.html?q=lookup_join")
        WebDriverWait(browser, 30).until(lambda b: b.execute_script(
            'return document.querySelectorAll(".md-search-result__item a").length > 0'))
        found = browser.execute_script(
            'return [...document.querySelectorAll(".md-search-result__item a")]'
            '.map(a => a.href)')
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert any(href.endswith("api/lookup.html?h=lookup_join#lookup.lookup_join")
               for href in found), found
