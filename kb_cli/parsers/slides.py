"""PPTX with zipfile and lxml: one block per slide, in the deck's order.

A slide's block holds its title, the text of its other shapes (tables row by row)
and its speaker notes; its page is the slide number and its heading the slide's
title ("Slide N" when it has none). python-pptx would read the same parts but
brings Pillow and XlsxWriter (39 MB) and builds every shape's object; these few
parts are all that is needed (benchmarks/README.md)."""

from __future__ import annotations

from pathlib import Path

from kb_cli.errors import ParseError
from kb_cli.parsers.common import Block, Budget, ProgressCallback, part_errors
from kb_cli.parsers.package import (
    local_name,
    open_package,
    parse_xml,
    read_part,
    relationships,
)

PRESENTATION = "ppt/presentation.xml"
_TITLE_PLACEHOLDERS = {"title", "ctrTitle"}
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"


def preload() -> None:
    """Import the library before a child process is forked to parse."""
    import lxml.etree  # noqa: F401


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    with open_package(path, budget.limits.max_decompressed_bytes, "PPTX") as package:
        slides = _slide_parts(package)
        budget.pages(len(slides), "slides")
        blocks = []
        for number, part in enumerate(slides, start=1):
            what = f"slide {number}"
            with part_errors(what):
                title, text = _slide_text(package, part, what)
            heading = title or f"Slide {number}"
            if text.strip():
                blocks.append(Block(budget.add(text), page=number, heading=heading))
            on_progress(number, len(slides))
        if not slides:
            on_progress(1, 1)
        return blocks


def _slide_parts(package) -> list[str]:
    """The slides' part names in the deck's order (the presentation's slide list)."""
    what = "the presentation"
    root = parse_xml(read_part(package, PRESENTATION, what), what)
    targets = relationships(package, PRESENTATION, what)
    parts: list[str] = []
    for element in root.iter():
        if local_name(element) == "sldId":
            rel = targets.get(element.get(_R, ""))
            if rel is None:
                raise ParseError(f"slide {len(parts) + 1}: its part is not in the package")
            parts.append(rel[1])
    return parts


def _slide_text(package, part: str, what: str) -> tuple[str, str]:
    """(title, the whole slide's text with its notes)."""
    root = parse_xml(read_part(package, part, what), what)
    title, lines = _shapes(root)
    notes = next(
        (
            target
            for kind, target in relationships(package, part, what).values()
            if kind == "notesSlide"
        ),
        None,
    )
    if notes is not None:
        notes_root = parse_xml(read_part(package, notes, f"{what} notes"), f"{what} notes")
        spoken = [line for line in _notes(notes_root) if line]
        if spoken:
            lines += ["Speaker notes:", *spoken]
    # One paragraph a line: the chunker would join the lines of a paragraph into one.
    return title, "\n\n".join(([title] if title else []) + [line for line in lines if line])


def _shapes(root) -> tuple[str, list[str]]:
    """The title placeholder's text and every other paragraph or table row, in order."""
    title = ""
    lines: list[str] = []
    for shape in root.iter():
        name = local_name(shape)
        if name == "sp":
            text = _paragraphs(shape)
            if _placeholder(shape) in _TITLE_PLACEHOLDERS and not title:
                title = " ".join(text).strip()
            else:
                lines += text
        elif name == "tr":
            cells = [" ".join(_paragraphs(cell)) for cell in shape if local_name(cell) == "tc"]
            lines.append(" | ".join(cells))
    return title, lines


def _notes(root) -> list[str]:
    """The notes page's body text (not its slide image or slide number)."""
    return [
        line
        for shape in root.iter()
        if local_name(shape) == "sp" and _placeholder(shape) == "body"
        for line in _paragraphs(shape)
    ]


def _placeholder(shape) -> str | None:
    for element in shape.iter():
        if local_name(element) == "ph":
            kind: str = element.get("type", "body")
            return kind
    return None


def _paragraphs(element) -> list[str]:
    """Each <a:p>'s text (its runs and line breaks), stripped."""
    out = []
    for paragraph in element.iter():
        if local_name(paragraph) != "p":
            continue
        pieces = []
        for piece in paragraph.iter():
            kind = local_name(piece)
            if kind == "t":
                pieces.append(piece.text or "")
            elif kind == "br":
                pieces.append("\n")
        out.append("".join(pieces).strip())
    return out
