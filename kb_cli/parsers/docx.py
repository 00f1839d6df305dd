"""DOCX with python-docx: paragraphs and tables in document order, headings kept."""

from __future__ import annotations

import zipfile
from pathlib import Path

from kb_cli.parsers import Block, ParseError, ProgressCallback


def parse(path: Path, on_progress: ProgressCallback, *, markdown: bool = False) -> list[Block]:
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(str(path))
    except PackageNotFoundError as error:
        raise ParseError("not a valid DOCX file (not a zip package)") from error
    except (zipfile.BadZipFile, KeyError, ValueError) as error:
        raise ParseError(f"not a valid DOCX file: {error}") from error
    items = list(document.iter_inner_content())
    blocks: list[Block] = []
    heading: str | None = None
    for done, item in enumerate(items, start=1):
        if isinstance(item, Paragraph):
            text = item.text.strip()
            if (
                text
                and item.style is not None
                and item.style.name.lower().startswith(("heading", "title"))
            ):
                heading = text
            if text:
                blocks.append(Block(text, heading=heading))
        elif isinstance(item, Table):
            rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in item.rows]
            table_text = "\n".join(row for row in rows if row.strip(" |"))
            if table_text:
                blocks.append(Block(table_text, heading=heading))
        on_progress(done, len(items))
    if not items:
        on_progress(1, 1)
    return blocks
