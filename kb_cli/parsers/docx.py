"""DOCX with python-docx: paragraphs and tables in document order, headings kept.

The package's parts are counted before python-docx inflates them (package.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from kb_cli.errors import ParseError
from kb_cli.parsers.common import Block, Budget, HeadingPath, ProgressCallback
from kb_cli.parsers.package import check_inflated_size


def preload() -> None:
    """Import the library before a child process is forked to parse."""
    import docx  # noqa: F401


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    check_inflated_size(path, budget.limits.max_decompressed_bytes)
    try:
        document = docx.Document(str(path))
    except PackageNotFoundError as error:
        raise ParseError("not a valid DOCX file (not a zip package)") from error
    except (zipfile.BadZipFile, KeyError, ValueError) as error:
        raise ParseError(f"not a valid DOCX file: {error}") from error
    items = list(document.iter_inner_content())
    blocks: list[Block] = []
    headings = HeadingPath()
    for done, item in enumerate(items, start=1):
        text, level = _text_of(item)
        if text:
            if level is not None:
                headings.enter(level, text)
            blocks.append(headings.block(budget.add(text)))
        on_progress(done, len(items))
    if not items:
        on_progress(1, 1)
    return blocks


def _text_of(item) -> tuple[str, int | None]:
    """(text, heading level or None) of a paragraph or a table: the Title style is
    level 0, "Heading N" level N."""
    from docx.text.paragraph import Paragraph

    if isinstance(item, Paragraph):
        return item.text.strip(), _heading_level(item.style.name if item.style else None)
    rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in item.rows]
    return "\n".join(row for row in rows if row.strip(" |")), None


def _heading_level(style: str | None) -> int | None:
    name = (style or "").lower()
    if name.startswith("title"):
        return 0
    if name.startswith("heading"):
        digits = name.removeprefix("heading").strip()
        return int(digits) if digits.isdigit() else 1
    return None
