"""HTML and XHTML: the page's main content as blocks under its headings.

The standard library's event parser reads the page in one pass without building a
tree, so depth costs nothing: 100,000 nested <div>s are read whole and in linear
time, where lxml (libxml2's depth limit) silently returns nothing and selectolax takes
22 s (benchmarks/README.md). What a reader does not come for is left out: scripts,
styles, navigation, forms, and a page's header, footer and asides (those inside an
<article> or <main> stay: an article's header holds its title). When the page marks
its main content (<main>, <article>, role=main), only that is kept. Headings <h1>-<h6>
stay headings; the <title> is the heading of a page that has none."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from kb_cli.parsers.common import Block, Budget, HeadingPath, ProgressCallback
from kb_cli.parsers.text import decode

FEED_CHARS = 1 << 16
_SKIPPED = {
    "script", "style", "noscript", "template", "nav", "form", "svg", "iframe",
    "button", "select", "textarea", "object", "canvas", "math",
}  # fmt: skip
_SKIPPED_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "menu"}
_OUTSIDE_MAIN_SKIPPED = {"header", "footer", "aside"}
_MAIN = {"main", "article"}
_BLOCK = {
    "p", "div", "section", "li", "ul", "ol", "tr", "table", "br", "blockquote", "pre",
    "dd", "dt", "dl", "figcaption", "figure", "hr", "address", "details", "summary",
    "header", "footer", "aside", "main", "article", "body", "caption", "tbody", "thead",
}  # fmt: skip
_CELL = {"td", "th"}
_HEADING = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([-\w.:]+)""", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def preload() -> None:
    """Nothing to import ahead: the standard library's parser is light."""


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    return html_blocks(read_html(path.read_bytes()), budget, on_progress)


def read_html(data: bytes) -> str:
    """The page as text, in the charset its <meta> declares when Python knows it."""
    declared = _CHARSET.search(data[:4096])
    if declared and not data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode(declared.group(1).decode("ascii"), "replace")
        except LookupError:
            pass
    return decode(data)


def html_blocks(
    page: str,
    budget: Budget,
    on_progress: ProgressCallback = lambda done, total: None,
    title: str | None = None,
) -> list[Block]:
    """The page's main content; `title` (an e-book's chapter title) stands above all
    of its headings."""
    reader = _MainContent(budget)
    total = max(1, -(-len(page) // FEED_CHARS))
    for done, start in enumerate(range(0, len(page), FEED_CHARS), start=1):
        reader.feed(page[start : start + FEED_CHARS])
        on_progress(done, total)
    reader.close()
    return reader.blocks(title)


class _MainContent(HTMLParser):
    def __init__(self, budget: Budget) -> None:
        super().__init__(convert_charrefs=True)
        self.budget = budget
        # ("text", text, in main) or ("heading", level, text), in page order
        self.events: list[tuple[Any, ...]] = []
        self.text: list[str] = []
        self.skipping: tuple[str, int] | None = None  # (tag, nesting of it)
        self.main_tags: list[list[Any]] = []  # [tag, nesting of it] of each main element open
        self.heading: tuple[int, list[str]] | None = None
        self.pre = 0
        self.page_title: list[str] | None = None
        self.title_text = ""

    # --- events -----------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skipping is not None:
            if tag == self.skipping[0]:
                self.skipping = (tag, self.skipping[1] + 1)
            return
        role = next((value for name, value in attrs if name == "role"), None)
        if self.main_tags and tag == self.main_tags[-1][0]:
            self.main_tags[-1][1] += 1
        if tag == "title" and not self.title_text:
            self.page_title = []
        elif self._skipped(tag, role):
            self._flush()
            self.skipping = (tag, 1)
        elif tag in _MAIN or role == "main":
            self._flush()
            self.main_tags.append([tag, 1])
        elif tag in _HEADING:
            self._flush()
            self.heading = (_HEADING[tag], [])
        elif tag in _BLOCK:
            self._flush()
            if tag == "pre":
                self.pre += 1
        elif tag in _CELL and self.text and self.text[-1].strip():
            self.text.append(" | ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skipping is None and tag in _BLOCK:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if self.skipping is not None:
            if tag == self.skipping[0]:
                depth = self.skipping[1] - 1
                self.skipping = (tag, depth) if depth else None
            return
        if tag == "title" and self.page_title is not None:
            self.title_text = _SPACES.sub(" ", "".join(self.page_title)).strip()
            self.page_title = None
        elif self.heading is not None and tag in _HEADING:
            level, pieces = self.heading
            self.heading = None
            text = _SPACES.sub(" ", "".join(pieces)).strip()
            if text:
                self.events.append(("heading", level, self.budget.add(text)))
        elif self.main_tags and tag == self.main_tags[-1][0]:
            self._flush()
            self.main_tags[-1][1] -= 1
            if not self.main_tags[-1][1]:
                self.main_tags.pop()
        elif tag in _BLOCK:
            self._flush()
            if tag == "pre" and self.pre:
                self.pre -= 1

    def handle_data(self, data: str) -> None:
        if self.skipping is not None:
            return
        if self.page_title is not None:
            self.page_title.append(data)
        elif self.heading is not None:
            self.heading[1].append(data)
        else:
            self.text.append(data)

    def close(self) -> None:
        super().close()
        self._flush()

    # --- results ----------------------------------------------------------------

    def blocks(self, title: str | None) -> list[Block]:
        events = self.events
        if any(event[0] == "text" and event[2] for event in events):
            events = self._main_only(events)
        path = HeadingPath()
        top = title or (None if any(e[0] == "heading" for e in events) else self.title_text)
        if top:
            path.enter(0, top)
        blocks: list[Block] = []
        for kind, first, second in events:
            if kind == "heading":
                if second != top:  # else the chapter's own title, met again
                    path.enter(first, second)
                blocks.append(path.block(second))
            else:
                blocks.append(path.block(first))
        return blocks

    @staticmethod
    def _main_only(events: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The text marked as main content and the headings among it (from the first
        heading before it)."""
        kept: list[tuple[Any, ...]] = []
        started = False
        for index, event in enumerate(events):
            in_main = event[0] == "text" and event[2]
            if in_main and not started:
                started = True
                kept.extend(e for e in events[:index] if e[0] == "heading")
            if in_main or (started and event[0] == "heading"):
                kept.append(event)
        return kept

    # --- helpers ----------------------------------------------------------------

    def _skipped(self, tag: str, role: str | None) -> bool:
        if tag in _SKIPPED or role in _SKIPPED_ROLES:
            return True
        return tag in _OUTSIDE_MAIN_SKIPPED and not self.main_tags

    def _flush(self) -> None:
        if not self.text:
            return
        joined = "".join(self.text)
        self.text = []
        if not self.pre:
            joined = _SPACES.sub(" ", joined)
        joined = joined.strip()
        if joined:
            self.events.append(("text", self.budget.add(joined), bool(self.main_tags)))
