"""PDF, page by page; the page number stays on every block.

pypdfium2 (the optional `fast-pdf` extra) is used when installed: it extracts text
several times faster. pypdf is always there, as the fallback for whatever pdfium
cannot open or cannot load a page of, and as the backend when pdfium is absent.
KB_PDF_BACKEND=pypdf or pdfium picks one explicitly. Pages and characters count
against the parse's budget as they are read.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from kb_cli.errors import DocumentTooLarge, ParseError
from kb_cli.parsers.common import Block, Budget, ProgressCallback


def preload() -> None:
    """Import the libraries before a child process is forked to parse."""
    import pypdf  # noqa: F401

    if pdfium_available():
        import pypdfium2  # noqa: F401


def backend() -> str:
    """`pypdf`, `pdfium`, or `auto` (pdfium, falling back to pypdf on a parse error),
    as KB_PDF_BACKEND asks and the installed packages allow."""
    chosen = os.environ.get("KB_PDF_BACKEND", "auto")
    return "pypdf" if chosen == "auto" and not pdfium_available() else chosen


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    if backend() == "pypdf":
        return parse_with_pypdf(path, on_progress, budget)
    try:
        return parse_with_pdfium(path, on_progress, Budget(budget.limits))
    except ParseError:
        if backend() == "pdfium":
            raise
        return parse_with_pypdf(path, on_progress, budget)


def pdfium_available() -> bool:
    return importlib.util.find_spec("pypdfium2") is not None


def parse_with_pdfium(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    import pypdfium2

    try:
        document = pypdfium2.PdfDocument(str(path))
    except pypdfium2.PdfiumError as error:
        if "password" in str(error).lower():
            raise ParseError("the PDF is encrypted with a password") from error
        raise ParseError(f"pdfium cannot open the PDF: {error}") from error
    try:
        total = len(document)
        budget.pages(total)
        blocks = []
        for index in range(total):
            text = _pdfium_page_text(pypdfium2, document, index)
            if text.strip():
                blocks.append(Block(budget.add(text), page=index + 1))
            on_progress(index + 1, total)
        return blocks
    finally:
        document.close()


def _pdfium_page_text(pypdfium2, document, index: int) -> str:
    try:
        page = document[index]
        text_page = page.get_textpage()
    except pypdfium2.PdfiumError as error:  # pypdf may read what pdfium cannot
        raise ParseError(f"pdfium cannot load page {index + 1}: {error}") from error
    text: str = text_page.get_text_range().replace("\r\n", "\n")
    text_page.close()
    page.close()
    return text


def parse_with_pypdf(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, LimitReachedError, PdfReadError

    # pypdf logs recoverable oddities as warnings; they are not the user's business.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise ParseError("the PDF is encrypted with a password")
        total = len(reader.pages)
        budget.pages(total)
        blocks = []
        for number, page in enumerate(reader.pages, start=1):
            text = page.extract_text() or ""
            if text.strip():
                blocks.append(Block(budget.add(text), page=number))
            else:
                page.get_contents()  # extract_text hides a stream past the limit: raise it
            on_progress(number, total)
    except LimitReachedError as error:
        raise DocumentTooLarge(
            "a compressed stream inflates past the decompression limit of pypdf"
        ) from error
    except DependencyError as error:
        raise ParseError(f"cannot decrypt the PDF: {error}") from error
    except PdfReadError as error:
        raise ParseError(f"damaged PDF: {error}") from error
    return blocks
