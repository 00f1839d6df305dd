"""PDF, page by page; the page number stays on every block.

pypdfium2 (the optional `fast-pdf` extra) is used when installed: it extracts text
several times faster. pypdf is always there, as the fallback for whatever pdfium
cannot open and as the backend when pdfium is absent. KB_PDF_BACKEND=pypdf or
pdfium picks one explicitly.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from kb_cli.parsers import Block, ParseError, ProgressCallback


def parse(path: Path, on_progress: ProgressCallback, *, markdown: bool = False) -> list[Block]:
    backend = os.environ.get("KB_PDF_BACKEND", "auto")
    if backend == "pypdf" or (backend == "auto" and not pdfium_available()):
        return parse_with_pypdf(path, on_progress)
    try:
        return parse_with_pdfium(path, on_progress)
    except ParseError:
        if backend == "pdfium":
            raise
        return parse_with_pypdf(path, on_progress)


def pdfium_available() -> bool:
    return importlib.util.find_spec("pypdfium2") is not None


def parse_with_pdfium(path: Path, on_progress: ProgressCallback) -> list[Block]:
    import pypdfium2

    try:
        document = pypdfium2.PdfDocument(str(path))
    except pypdfium2.PdfiumError as error:
        if "password" in str(error).lower():
            raise ParseError("the PDF is encrypted with a password") from error
        raise ParseError(f"pdfium cannot open the PDF: {error}") from error
    try:
        total = len(document)
        blocks = []
        for index in range(total):
            page = document[index]
            text_page = page.get_textpage()
            text = text_page.get_text_range().replace("\r\n", "\n")
            text_page.close()
            page.close()
            if text.strip():
                blocks.append(Block(text, page=index + 1))
            on_progress(index + 1, total)
        return blocks
    finally:
        document.close()


def parse_with_pypdf(path: Path, on_progress: ProgressCallback) -> list[Block]:
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
