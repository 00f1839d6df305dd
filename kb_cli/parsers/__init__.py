"""Parsers: a stored file -> text blocks with their page or heading.

Each parser module is imported only when a file of its kind is parsed, so commands
that never parse (status, --help) do not pay for pypdf or python-docx.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# (done, total) of the parser's own units: pages for a PDF, blocks otherwise.
ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class Block:
    text: str
    page: int | None = None
    heading: str | None = None


class ParseError(Exception):
    """The file could not be parsed (damaged, encrypted, not what its name says)."""


@dataclass(frozen=True)
class FileKind:
    extension: str
    content_type: str
    module: str


KINDS = {
    ".pdf": FileKind(".pdf", "application/pdf", "pdf"),
    ".docx": FileKind(
        ".docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "docx",
    ),
    ".txt": FileKind(".txt", "text/plain", "text"),
    ".md": FileKind(".md", "text/markdown", "text"),
}
KIND_BY_CONTENT_TYPE = {kind.content_type: kind for kind in KINDS.values()}


def kind_for_filename(filename: str) -> FileKind | None:
    return KINDS.get(Path(filename).suffix.lower())


def parse(path: Path, content_type: str, on_progress: ProgressCallback) -> list[Block]:
    """Parse a file of a supported content type; raises ParseError when it cannot."""
    kind = KIND_BY_CONTENT_TYPE[content_type]
    module = importlib.import_module(f"kb_cli.parsers.{kind.module}")
    return module.parse(path, on_progress, markdown=kind.extension == ".md")
