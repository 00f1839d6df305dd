"""What the parsers and their dispatcher (the package's `parse`) share: the blocks a
parser yields, the limits and budget of a parse, and the kinds of file by extension and
content type. It imports no parser, so every parser and the child process that runs
them (isolated.py) import it, never the package, and no import circle forms.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kb_cli.errors import DocumentTooLarge, ParseError

# Raise by one whenever a parser's output for the same file changes (a new library
# version that extracts differently, a fix): parse artefacts of the old version are
# then ignored, and the next attempt parses again (kb_cli/artefacts.py).
PARSER_VERSION = 1

# (done, total) of the parser's own units: pages for a PDF, blocks otherwise.
ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class ParseLimits:
    """What one document may cost; each has an environment variable (config.py)."""

    max_chars: int = 50_000_000  # KB_MAX_CHARS: extracted text
    max_pages: int = 10_000  # KB_MAX_PAGES: PDF pages, DOCX paragraphs and tables / 100
    max_chunks: int = 1_000_000  # KB_MAX_CHUNKS
    # Both 256 MiB: a 1 GiB flate bomb then stops at a ~290 MiB peak (not 1,060), while
    # the largest real document measured peaks at 86 MiB; any DOCX the upload limit
    # (200 MB) allows, even of stored pictures, still passes the inflated-size check.
    # Measured in docs/limits.md.
    max_decompressed_bytes: int = 256 * 1024 * 1024  # KB_MAX_DECOMPRESSED_BYTES: DOCX parts
    timeout_seconds: float = 600.0  # KB_PARSE_TIMEOUT: wall time of a PDF/DOCX parse
    max_memory_bytes: int = 256 * 1024 * 1024  # KB_PARSE_MAX_MEMORY_MB: its growth
    # Scanned pages (parsers/ocr.py, the `ocr` extra): KB_OCR auto, off or force. The
    # parse child's limit rises to KB_OCR_MAX_MEMORY_MB when it starts reading one:
    # one page grew its address space by 516-1,200 MiB (docs/limits.md).
    ocr: str = "auto"
    # KB_PDF_BACKEND: auto (pdfium when installed, falling back to pypdf), pypdf or
    # pdfium (parsers/pdf.py). With `ocr`, a setting that travels with a task.
    pdf_backend: str = "auto"
    ocr_max_pages: int = 300  # KB_OCR_MAX_PAGES: pages read by OCR in one document
    ocr_max_memory_bytes: int = 1536 * 1024 * 1024  # KB_OCR_MAX_MEMORY_MB


class Budget:
    """Counts what a parse extracted; raises DocumentTooLarge the moment it is over."""

    def __init__(self, limits: ParseLimits) -> None:
        self.limits = limits
        self.chars = 0

    def add(self, text: str) -> str:
        self.chars += len(text)
        if self.chars > self.limits.max_chars:
            raise DocumentTooLarge(
                f"more than {self.limits.max_chars} characters of text (KB_MAX_CHARS)"
            )
        return text

    def pages(self, count: int, unit: str = "pages") -> None:
        if count > self.limits.max_pages:
            raise DocumentTooLarge(f"more than {self.limits.max_pages} {unit} (KB_MAX_PAGES)")


@contextlib.contextmanager
def part_errors(part: str) -> Iterator[None]:
    """A failure while reading one part of a document (a slide, a sheet, a chapter, an
    attachment) as a ParseError that names the part; limits and memory pass through."""
    try:
        yield
    except ParseError as error:
        detail = str(error)
        raise ParseError(detail if detail.startswith(part) else f"{part}: {detail}") from error
    except (ValueError, LookupError, AssertionError, TypeError, EOFError) as error:
        detail = " ".join(str(error).split())[:300]
        raise ParseError(f"{part}: {type(error).__name__}: {detail}") from error


@dataclass(frozen=True)
class Block:
    text: str
    page: int | None = None
    heading: str | None = None  # the nearest heading above the text
    parents: tuple[str, ...] = ()  # the headings above `heading`, outermost first
    ocr: bool = False  # read from a scanned page by OCR


# What site generators add to a heading for links and styles, not words of its title:
# `{#anchor}`, `{.class}`, `{#id .class key=value}` (Pandoc, kramdown `{: #id}`,
# VitePress, MkDocs attr_list) and the permalink mark of rendered pages (Sphinx's `¶`,
# "Permalink to this heading").
_ATTRIBUTES = re.compile(r"\s*\{:?\s*[#.][^{}]*\}\s*$")
_PERMALINK = re.compile(
    r"\s*(?:[¶§🔗]|Permalink to this (?:heading|headline|section|title))\s*$", re.IGNORECASE
)


def clean_heading(text: str) -> str:
    """A heading without generator attributes and permalink marks at its end (the
    heading itself when nothing else is left)."""
    cleaned = text
    while True:
        shorter = _PERMALINK.sub("", _ATTRIBUTES.sub("", cleaned))
        if shorter == cleaned:
            break
        cleaned = shorter
    return cleaned.strip() or text


class HeadingPath:
    """The headings enclosing the current position, as a parser meets them in order."""

    def __init__(self) -> None:
        self._open: list[tuple[int, str]] = []  # (level, text), outermost first

    def enter(self, level: int, text: str) -> None:
        """A heading of `level` (1 = outermost) closes every heading at or below it."""
        while self._open and self._open[-1][0] >= level:
            self._open.pop()
        self._open.append((level, clean_heading(text)))

    def block(self, text: str, page: int | None = None) -> Block:
        """A block of text under the current headings."""
        headings = tuple(heading for _level, heading in self._open)
        return Block(text, page, headings[-1] if headings else None, headings[:-1])


@dataclass(frozen=True)
class FileKind:
    extension: str
    content_type: str
    module: str


_OOXML = "application/vnd.openxmlformats-officedocument"
KINDS = {
    kind.extension: kind
    for kind in (
        FileKind(".pdf", "application/pdf", "pdf"),
        FileKind(".docx", f"{_OOXML}.wordprocessingml.document", "docx"),
        FileKind(".pptx", f"{_OOXML}.presentationml.presentation", "slides"),
        FileKind(".xlsx", f"{_OOXML}.spreadsheetml.sheet", "sheets"),
        FileKind(".epub", "application/epub+zip", "epub"),
        FileKind(".html", "text/html", "html_page"),
        FileKind(".htm", "text/html", "html_page"),
        FileKind(".xhtml", "application/xhtml+xml", "html_page"),
        FileKind(".eml", "message/rfc822", "mail"),
        FileKind(".csv", "text/csv", "delimited"),
        FileKind(".tsv", "text/tab-separated-values", "delimited"),
        FileKind(".txt", "text/plain", "text"),
        FileKind(".md", "text/markdown", "text"),
    )
}
KIND_BY_CONTENT_TYPE = {kind.content_type: kind for kind in KINDS.values()}
# Packages and binary formats: their content, not a text decoding of it, says what they are.
PACKAGED = {".docx", ".pptx", ".xlsx", ".epub"}


def kind_for_filename(filename: str) -> FileKind | None:
    return KINDS.get(Path(filename).suffix.lower())
