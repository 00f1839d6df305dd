"""Parsers: a stored file -> text blocks with their page or heading.

Each parser module is imported only when a file of its kind is parsed, so commands
that never parse (status, --help) do not pay for pypdf, python-docx or lxml. What a
file is, is read from its content where its content says so (detect.py).

Every parse is bounded (ParseLimits): characters, pages and decompressed bytes are
counted as the parser goes; every format but plain text and Markdown runs in a child
process with a memory limit and a deadline (`kb_cli/parsers/isolated.py`): PDF,
DOCX, PPTX, XLSX and EPUB because their libraries (pdfium, lxml) cannot be
interrupted or limited from inside, HTML, CSV and mail because a mail's attachments
are PDFs and DOCX files and a page's or a table's cost is better bounded the same
way. Plain text and Markdown stay in-process: their parse is one decode of a file
the upload limit already bounds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from kb_cli.parsers.common import (
    KIND_BY_CONTENT_TYPE,
    KINDS,
    PACKAGED,
    PARSER_VERSION,
    Block,
    Budget,
    FileKind,
    HeadingPath,
    ParseLimits,
    ProgressCallback,
    kind_for_filename,
    part_errors,
)

__all__ = [
    "KINDS",
    "KIND_BY_CONTENT_TYPE",
    "PACKAGED",
    "PARSER_VERSION",
    "Block",
    "Budget",
    "FileKind",
    "HeadingPath",
    "ParseLimits",
    "ProgressCallback",
    "kind_for_filename",
    "parse",
    "part_errors",
]


def parse(
    path: Path,
    content_type: str,
    on_progress: ProgressCallback,
    limits: ParseLimits | None = None,
    checkpoint: Callable[[], None] = lambda: None,
) -> list[Block]:
    """Parse a file of a supported content type; raises ParseError when it cannot and
    DocumentTooLarge past a limit. `checkpoint` is called at least every 0.1 s while
    a child process parses, so that a stop or a cancel ends it at once."""
    kind = KIND_BY_CONTENT_TYPE[content_type]
    module = importlib.import_module(f"kb_cli.parsers.{kind.module}")
    budget = Budget(limits or ParseLimits())
    markdown = kind.extension == ".md"
    if kind.module == "text":
        blocks: list[Block] = module.parse(path, on_progress, budget, markdown=markdown)
        return blocks
    from kb_cli.parsers import isolated

    return isolated.run(module, path, on_progress, budget, checkpoint)
