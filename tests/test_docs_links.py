"""Every link in the docs pages and in the README points at a file, and an anchor, that exist.

Each page is rendered with the Markdown extensions and settings of `mkdocs.yml` (the `toc` slug
rules, snippets included), so a heading's anchor is the one the site gives it; the links and ids are
read from the HTML, so nothing inside code is taken for a link. The API reference's anchors are the
objects its `::: path` directives render (mkdocstrings names each one by its dotted path). Links
from the README, which GitHub renders, must also match GitHub's anchor of the heading they name.
"""

from __future__ import annotations

import functools
import html
import importlib
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import markdown
import pytest
from mkdocs.config import load_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
EXCLUDED = {DOCS / "scripts"}  # build helpers, not pages (exclude_docs in mkdocs.yml)
PAGES = sorted(p for p in DOCS.rglob("*.md") if not any(d in p.parents for d in EXCLUDED))


@functools.cache
def _markdown_config() -> tuple[list, dict]:
    config = load_config(str(ROOT / "mkdocs.yml"))
    return list(config["markdown_extensions"]), dict(config["mdx_configs"])


class _LinksAndIds(HTMLParser):
    """The ids of a rendered page, and the links its author wrote: not the renderer's own (a
    heading's permalink, the line anchors of a highlighted code block)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()
        self._in_pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if anchor := values.get("id"):
            self.ids.add(anchor)
        if tag == "pre":
            self._in_pre += 1
        if self._in_pre or "headerlink" in (values.get("class") or "").split():
            return
        target = values.get("href") if tag == "a" else values.get("src") if tag in ("img", "source") else None
        if target is not None:
            self.links.append(target)

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self._in_pre = max(0, self._in_pre - 1)


def github_slug(text: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def _flatten(tokens: list[dict]) -> list[dict]:
    return [t for token in tokens for t in (token, *_flatten(token["children"]))]


@functools.cache
def render(path: Path, text: str | None = None) -> tuple[tuple[str, ...], frozenset[str], frozenset[str]]:
    """(links, ids, GitHub heading anchors) of a Markdown file, rendered as the site renders it."""
    extensions, configs = _markdown_config()
    md = markdown.Markdown(extensions=extensions, extension_configs=configs)
    page = md.convert(path.read_text(encoding="utf-8") if text is None else text)
    parser = _LinksAndIds()
    parser.feed(page)
    github = set()
    for token in _flatten(md.toc_tokens):  # type: ignore[attr-defined]
        slug = base = github_slug(html.unescape(re.sub(r"<[^>]+>", "", token["name"])))
        n = 0
        while slug in github:  # GitHub numbers repeated headings -1, -2, ...
            n += 1
            slug = f"{base}-{n}"
        github.add(slug)
    return tuple(parser.links), frozenset(parser.ids), frozenset(github)


@functools.cache
def _directives(path: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    found, lines = [], path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^::: ([\w.]+)\s*$", line)
        if not m:
            continue
        members: list[str] = []
        in_members = False
        for option in lines[i + 1 :]:
            if option.strip() and not option.startswith(" "):
                break
            if option.strip() == "members:":
                in_members = True
            elif in_members and option.strip().startswith("- "):
                members.append(option.strip()[2:].strip())
            elif option.strip():
                in_members = False
        found.append((m.group(1), tuple(members)))
    return tuple(found)


def _resolves(dotted: str) -> bool:
    """Whether a dotted path names an importable module or an attribute of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def api_anchor_exists(target: Path, anchor: str) -> bool:
    """An anchor of a page with `:::` directives: a directive's path, one of its listed members, or
    an attribute of either (a method of a rendered class) that imports."""
    if not target.exists():
        return False
    for path_, members in _directives(target):
        if anchor == path_ or anchor.startswith(path_ + "."):
            rest = anchor[len(path_) + 1 :].split(".") if anchor != path_ else []
            if members and rest and rest[0] not in members:
                continue
            return _resolves(anchor)
    return False


def broken_links(
    page: Path, text: str | None = None, *, site: Path = DOCS, github: bool = False
) -> list[str]:
    """The links of `page` (or of `text`, rendered as if it were `page`) that point nowhere.

    A relative link must name an existing file (inside `site`, for a docs page: the site serves
    nothing else); `#anchor`, alone or after a Markdown file, must be an id of that page. With
    `github`, an anchor must also be GitHub's for one of the target's headings.
    """
    links, _, _ = render(page, text)
    problems = []
    for link in links:
        parts = urlsplit(link)
        if parts.scheme or parts.netloc:  # http(s):, mailto:, ...: not checked here
            continue
        if link.startswith("/"):
            problems.append(f"{link}: absolute link (write it relative to the page)")
            continue
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if parts.path and not target.exists():
            shown = target.relative_to(ROOT) if target.is_relative_to(ROOT) else target
            problems.append(f"{link}: no file {shown}")
            continue
        if parts.path and site in page.parents and not target.is_relative_to(site):
            problems.append(f"{link}: {target} is outside {site.name}/, which the site does not serve")
            continue
        anchor = unquote(parts.fragment)
        if not anchor:
            continue
        if target.suffix != ".md":
            problems.append(f"{link}: an anchor into a file that is not a Markdown page")
            continue
        _, ids, headings = render(target) if target != page else render(page, text)
        if anchor not in ids and not api_anchor_exists(target, anchor):
            problems.append(f"{link}: no anchor #{anchor} in {target.name}")
        elif github and anchor not in headings:  # GitHub knows heading anchors only
            problems.append(f"{link}: #{anchor} is not GitHub's anchor for any heading of {target.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_page_links_resolve(page):
    assert broken_links(page) == []


def test_readme_links_resolve():
    assert broken_links(README, site=ROOT, github=True) == []


def test_anchors_follow_the_site_slug_rules():
    """Headings get the `toc` extension's default slugs (code spans and punctuation dropped, a
    repeated heading numbered), which is what links on this site must use."""
    text = "# T\n\n## The shipped model: `benchmarks/default_model.py`\n\n## S − off ≥ 3\n\n## S − off ≥ 3\n"
    _, ids, headings = render(DOCS / "page.md", text)
    assert {"the-shipped-model-benchmarksdefault_modelpy", "s-off-3", "s-off-3_1"} <= ids
    assert {"the-shipped-model-benchmarksdefault_modelpy", "s--off--3", "s--off--3-1"} <= headings


def test_broken_files_and_anchors_are_reported():
    page = DOCS / "concepts" / "imaginary.md"
    text = "\n\n".join(
        [
            "# Imaginary",
            "## A heading",
            "[ok](#a-heading) [ok](../benchmarks.md#the-shipped-model-benchmarksdefault_modelpy)",
            "[ok](../reference/api.md#dllm_edit.generate)",
            "[ok](../reference/api.md#dllm_edit.strategies.TokenEdit)",
            "[ok](../assets/tradeoff.png) [ok](https://example.org/missing)",
            "[bad](#no-such-heading) [bad](../no-such-page.md) [bad](../benchmarks.md#no-such-section)",
            "[bad](../reference/api.md#dllm_edit.NoSuchThing) [bad](../../README.md) [bad](/docs/index.md)",
            "`[not a link](#inside-code)`",
        ]
    )
    problems = broken_links(page, text)
    assert len(problems) == 6, problems
    for fragment in (
        "#no-such-heading",
        "no-such-page.md",
        "#no-such-section",
        "NoSuchThing",
        "outside docs/",
        "absolute link",
    ):
        assert sum(fragment in p for p in problems) == 1, (fragment, problems)
