"""CSV and TSV with the standard library: rows in blocks under their row numbers.

The delimiter is read from the first line (tab, comma or semicolon, whichever it has
most of), so a mislabelled file is still read right."""

from __future__ import annotations

import csv
from pathlib import Path

from kb_cli.errors import ParseError
from kb_cli.parsers import Block, Budget, ProgressCallback
from kb_cli.parsers.rows import row_blocks, row_text
from kb_cli.parsers.text import decode

DELIMITERS = ("\t", ",", ";")


def preload() -> None:
    """Nothing to import ahead: the standard library's csv is light."""


def parse(path: Path, on_progress: ProgressCallback, budget: Budget) -> list[Block]:
    text = decode(path.read_bytes())
    if "\x00" in text:
        raise ParseError("binary content (NUL bytes) in a CSV file")
    lines = text.splitlines()
    first = lines[0] if lines else ""
    delimiter = max(DELIMITERS, key=first.count)
    budget.pages(len(lines) // 100, "rows / 100")
    blocks = row_blocks(_rows(lines, delimiter), None, budget)
    on_progress(1, 1)
    return blocks


def _rows(lines: list[str], delimiter: str):
    number = 0
    try:
        for number, cells in enumerate(csv.reader(lines, delimiter=delimiter), start=1):
            yield number, row_text(cells)
    except csv.Error as error:
        raise ParseError(f"row {number + 1}: {error}") from error
