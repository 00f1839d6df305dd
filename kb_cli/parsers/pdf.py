"""PDF with pypdf, page by page; the page number stays on every block."""

from __future__ import annotations

import logging
from pathlib import Path

from kb_cli.parsers import Block, ParseError, ProgressCallback


def parse(path: Path, on_progress: ProgressCallback, *, markdown: bool = False) -> list[Block]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    # pypdf logs recoverable oddities as warnings; they are not the user's business.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise ParseError("the PDF is encrypted with a password")
        total = len(reader.pages)
    except PdfReadError as error:
        raise ParseError(f"damaged PDF: {error}") from error
    blocks = []
    for number, page in enumerate(reader.pages, start=1):
        text = page.extract_text() or ""
        if text.strip():
            blocks.append(Block(text, page=number))
        on_progress(number, total)
    return blocks
