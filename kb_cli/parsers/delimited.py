"""CSV and TSV with the standard library: rows in blocks under their row numbers.

The delimiter is read from the first line (tab, comma or semicolon, whichever it has
most of), so a mislabelled file is still read right."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from kb_cli.errors import ParseError
from kb_cli.parsers.common import Block, Budget, ProgressCallback
from kb_cli.parsers.rows import row_blocks, row_text
from kb_cli.parsers.text import decode

DELIMITERS = ("\t", ",", ";")


def preload() -> None:
    """Nothing to import ahead: the standard library's csv is light."""


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    text = decode(path.read_bytes())
    if "\x00" in text:
        raise ParseError("binary content (NUL bytes) in a CSV file")
    first = text.split("\n", 1)[0]
    delimiter = max(DELIMITERS, key=first.count)
    budget.pages(text.count("\n") // 100, "rows / 100")
    blocks = row_blocks(_rows(text, delimiter), None, budget)
    on_progress(1, 1)
    return blocks


def _rows(text: str, delimiter: str):
    number = 0
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        for number, cells in enumerate(reader, start=1):
            yield number, row_text(cells)
    except csv.Error as error:
        raise ParseError(f"row {number + 1}: {error}") from error
