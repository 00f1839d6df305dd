"""Rows of a table (a CSV file, a spreadsheet's sheet) -> blocks of rows.

Each block holds as many rows as fit in about one chunk, the header row (the table's
first non-empty row) repeated at its top so that a chunk of rows stays readable on
its own; its heading names the sheet and the rows it holds, as a spreadsheet numbers
them ("Budget, rows 12–40"), so that a search hit says where to look."""

from __future__ import annotations

from collections.abc import Iterable

from kb_cli.parsers.common import Block, Budget

ROWS_CHARS = 900  # below the chunker's target, so one block stays one chunk
CELL_SEPARATOR = " | "


def row_text(cells: list[str]) -> str:
    """A row's cells in column order, up to its last non-empty one."""
    while cells and not cells[-1]:
        cells = cells[:-1]
    return CELL_SEPARATOR.join(" ".join(cell.split()) for cell in cells)


def row_blocks(rows: Iterable[tuple[int, str]], sheet: str | None, budget: Budget) -> list[Block]:
    """Blocks of (row number, row text) pairs; empty rows are left out."""
    blocks: list[Block] = []
    header: str | None = None
    pending: list[tuple[int, str]] = []
    size = 0
    for number, text in rows:
        if not text:
            continue
        budget.add(text)
        if header is None:
            header = text
            pending, size = [(number, text)], len(text)
            continue
        if size + 2 + len(text) > ROWS_CHARS and len(pending) > (1 if not blocks else 0):
            blocks.append(_block(pending, header, sheet, repeat=bool(blocks)))
            pending, size = [], len(header)
        pending.append((number, text))
        size += 2 + len(text)
    if pending:
        blocks.append(_block(pending, header or "", sheet, repeat=bool(blocks)))
    return blocks


def _block(rows: list[tuple[int, str]], header: str, sheet: str | None, repeat: bool) -> Block:
    first, last = rows[0][0], rows[-1][0]
    span = f"row {first}" if first == last else f"rows {first}–{last}"
    lines = [header, *(text for _, text in rows)] if repeat else [text for _, text in rows]
    # One paragraph a row: the chunker keeps paragraphs apart, and joins a line's lines.
    return Block("\n\n".join(lines), heading=f"{sheet}, {span}" if sheet else span)
