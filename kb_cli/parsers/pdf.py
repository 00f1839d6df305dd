"""PDF, page by page; the page number stays on every block.

pypdfium2 (the optional `fast-pdf` extra) is used when installed: it extracts text
several times faster. pypdf is always there, as the fallback for whatever pdfium
cannot open or cannot load a page of, and as the backend when pdfium is absent.
KB_PDF_BACKEND=pypdf or pdfium (the parse's limits carry it) picks one explicitly. Pages
and characters count against the parse's budget as they are read.

Scanned pages are read by OCR (parsers/ocr.py) when the `ocr` extra is installed, with
pdfium. Without it, a document whose only content is images fails as empty, saying
that the extra reads them.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from kb_cli.errors import DocumentTooLarge, ParseError, ScannedWithoutOcr, UnreadableScan
from kb_cli.parsers import ocr
from kb_cli.parsers.common import Block, Budget, ParseLimits, ProgressCallback


def preload() -> None:
    """Import the libraries before a child process is forked to parse."""
    import pypdf  # noqa: F401

    if pdfium_available():
        import pypdfium2  # noqa: F401


def backend(limits: ParseLimits) -> str:
    """`pypdf`, `pdfium`, or `auto` (pdfium, falling back to pypdf on a parse error),
    as the limits (KB_PDF_BACKEND) ask and the installed packages allow."""
    chosen = limits.pdf_backend
    return "pypdf" if chosen == "auto" and not pdfium_available() else chosen


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    chosen = backend(budget.limits)
    if chosen == "pypdf":
        return parse_with_pypdf(path, on_progress, budget)
    try:
        return parse_with_pdfium(path, on_progress, Budget(budget.limits))
    except ParseError as error:
        if chosen == "pdfium" or isinstance(error, UnreadableScan):
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
    mode = ocr_mode(budget.limits)
    try:
        total = len(document)
        budget.pages(total)
        if mode != "off" and total > budget.limits.ocr_max_pages:
            _ocr_pages(_scanned_pages(pypdfium2, document, mode), budget)
        blocks = []
        scanned = 0  # pages read by OCR (auto, force) or left unread (off)
        for index in range(total):
            text, by_ocr = _pdfium_page_text(pypdfium2, document, index, mode)
            if by_ocr:
                scanned += 1
                if mode != "off":
                    _ocr_pages(scanned, budget)
            if text.strip():
                blocks.append(Block(budget.add(text), page=index + 1, ocr=by_ocr))
            on_progress(index + 1, total)
        if not blocks and scanned and mode == "off":
            raise _scanned_without_ocr()
        return blocks
    finally:
        document.close()


def ocr_mode(limits: ParseLimits) -> str:
    """The KB_OCR setting where the extra is installed; `off` where it is not."""
    return limits.ocr if ocr.available() else "off"


def _ocr_pages(count: int, budget: Budget) -> None:
    if count > budget.limits.ocr_max_pages:
        raise DocumentTooLarge(
            f"more than {budget.limits.ocr_max_pages} pages to read by OCR (KB_OCR_MAX_PAGES)"
        )


def _scanned_pages(pypdfium2, document, mode: str) -> int:
    """How many pages OCR would read: counted before reading any when the document has
    more pages than it may read, so that a long scan is refused at once."""
    if mode == "force":
        return len(document)
    count = 0
    for index in range(len(document)):
        _text, scanned = _pdfium_page_text(pypdfium2, document, index, "off")
        count += scanned
    return count


def _pdfium_page_text(pypdfium2, document, index: int, mode: str) -> tuple[str, bool]:
    """The page's text and whether it is a scanned page: read by OCR unless `mode` is
    off, when its text layer (if any) is all there is."""
    try:
        page = document[index]
        text_page = page.get_textpage()
    except pypdfium2.PdfiumError as error:  # pypdf may read what pdfium cannot
        raise ParseError(f"pdfium cannot load page {index + 1}: {error}") from error
    cover = lambda page: ocr.image_cover(pypdfium2, page)  # noqa: E731
    try:
        text: str = text_page.get_text_range().replace("\r\n", "\n")
        text_page.close()
        if not ocr.needs_ocr("auto" if mode == "off" else mode, text, lambda: cover(page)):
            return text, False
        if mode == "off":
            return text, True
        return ocr.read_page(pypdfium2, page, index + 1), True
    finally:
        page.close()


def _scanned_without_ocr() -> ScannedWithoutOcr:
    if ocr.available():
        return ScannedWithoutOcr(
            "EmptyDocument: the pages are images without text, and OCR is off (KB_OCR=off); "
            "KB_OCR=auto reads them"
        )
    return ScannedWithoutOcr(
        "EmptyDocument: the pages are images without text; OCR reads them when the "
        f"optional extra `ocr` is installed ({ocr.INSTALL_HINT})"
    )


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
        images = False  # a page without text that shows an image
        for number, page in enumerate(reader.pages, start=1):
            text = page.extract_text() or ""
            if text.strip():
                blocks.append(Block(budget.add(text), page=number))
            else:
                page.get_contents()  # extract_text hides a stream past the limit: raise it
                images = images or _shows_images(page)
            on_progress(number, total)
        if not blocks and images:
            raise _scanned_without_ocr()
    except LimitReachedError as error:
        raise DocumentTooLarge(
            "a compressed stream inflates past the decompression limit of pypdf"
        ) from error
    except DependencyError as error:
        raise ParseError(f"cannot decrypt the PDF: {error}") from error
    except PdfReadError as error:
        raise ParseError(f"damaged PDF: {error}") from error
    return blocks


def _shows_images(page) -> bool:
    """Whether the page's resources hold an image (not decoded: only its dictionary)."""
    try:
        objects = page["/Resources"].get_object()["/XObject"].get_object()
        return any(entry.get_object().get("/Subtype") == "/Image" for entry in objects.values())
    except (KeyError, AttributeError, TypeError):
        return False
