"""EPUB with zipfile and the HTML reader: chapters in reading order, under their titles.

The package document (OPF) gives the reading order (spine); the table of contents
(EPUB 3 nav document, or EPUB 2 NCX) gives each chapter's title, else its first
heading does. ebooklib would do the same reading but is AGPL-licensed and loads
every member into memory (benchmarks/README.md)."""

from __future__ import annotations

from pathlib import Path

from kb_cli.errors import ParseError
from kb_cli.parsers.common import Block, Budget, ProgressCallback, part_errors
from kb_cli.parsers.html_page import html_blocks, read_html
from kb_cli.parsers.package import local_name, open_package, parse_xml, read_part, resolve

CONTAINER = "META-INF/container.xml"


def preload() -> None:
    """Import the library before a child process is forked to parse."""
    import lxml.etree  # noqa: F401


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    with open_package(path, budget.limits.max_decompressed_bytes, "EPUB") as package:
        opf = _package_document(package)
        root = parse_xml(read_part(package, opf, "the package document"), "the package document")
        spine, toc = _spine(root, opf)
        titles = _toc_titles(package, toc) if toc else {}
        budget.pages(len(spine), "chapters")
        blocks: list[Block] = []
        for number, member in enumerate(spine, start=1):
            what = f"chapter {number}"
            with part_errors(what):
                page = read_html(read_part(package, member, what))
                blocks += html_blocks(page, budget, title=titles.get(member))
            on_progress(number, len(spine))
        if not spine:
            on_progress(1, 1)
        return blocks


def _package_document(package) -> str:
    what = "the container"
    container = parse_xml(read_part(package, CONTAINER, what), what)
    for element in container.iter():
        if local_name(element) == "rootfile" and element.get("full-path"):
            path: str = element.get("full-path", "")
            return path
    raise ParseError("the container names no package document")


def _spine(root, opf: str) -> tuple[list[str], str | None]:
    """(the spine's members in reading order, the table of contents' member: the nav
    document, else the NCX)."""
    manifest: dict[str, str] = {}
    nav = ncx = None
    spine_ids: list[str] = []
    toc_id = None
    for element in root.iter():
        kind = local_name(element)
        if kind == "item" and element.get("href"):
            member = resolve(opf, element.get("href", ""))
            manifest[element.get("id", "")] = member
            if "nav" in (element.get("properties") or "").split():
                nav = member
        elif kind == "spine":
            toc_id = element.get("toc")
        elif kind == "itemref":
            spine_ids.append(element.get("idref", ""))
    if toc_id:
        ncx = manifest.get(toc_id)
    spine = [manifest[i] for i in spine_ids if i in manifest and manifest[i] != nav]
    return spine, nav or ncx


def _toc_titles(package, toc: str) -> dict[str, str]:
    """Each chapter member's first title in the table of contents."""
    what = "the table of contents"
    root = parse_xml(read_part(package, toc, what), what)
    titles: dict[str, str] = {}
    for element in root.iter():
        kind = local_name(element)
        if kind == "a" and element.get("href"):  # EPUB 3 nav: <a href>title</a>
            title, href = " ".join("".join(element.itertext()).split()), element.get("href", "")
        elif kind == "navPoint":  # EPUB 2 NCX: <navLabel><text/></navLabel><content src/>
            label = next((e for e in element.iter() if local_name(e) == "text"), None)
            content = next((e for e in element.iter() if local_name(e) == "content"), None)
            if label is None or content is None:
                continue
            title, href = " ".join((label.text or "").split()), content.get("src", "")
        else:
            continue
        if title:
            titles.setdefault(resolve(toc, href), title)
    return titles
