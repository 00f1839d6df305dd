"""Plain text and Markdown: UTF-8 first, then a legacy encoding rather than a crash."""

from __future__ import annotations

import re
from pathlib import Path

from kb_cli.parsers import Block, Budget, ParseError, ProgressCallback

# Tried in order. GB18030 is a superset of GBK and GB2312, the legacy encodings most
# often met in Chinese text; latin-1 decodes any bytes, so the chain always ends.
ENCODINGS = ("utf-8-sig", "gb18030", "cp1252", "latin-1")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def decode(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")  # the BOM says so; a NUL check would reject it
    for encoding in ENCODINGS:
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise AssertionError("latin-1 decodes every byte string")


def parse(
    path: Path, on_progress: ProgressCallback, budget: Budget, *, markdown: bool = False
) -> list[Block]:
    text = budget.add(decode(path.read_bytes())).replace("\r\n", "\n").replace("\r", "\n")
    if "\x00" in text:
        raise ParseError("binary content (NUL bytes) in a text file")
    blocks = _markdown_sections(text) if markdown else [Block(text)]
    on_progress(1, 1)
    return [block for block in blocks if block.text.strip()]


def _markdown_sections(text: str) -> list[Block]:
    """Split Markdown at headings so each block knows the heading it falls under."""
    blocks: list[Block] = []
    heading: str | None = None
    lines: list[str] = []
    for line in text.split("\n"):
        match = _HEADING.match(line)
        if match:
            blocks.append(Block("\n".join(lines), heading=heading))
            heading, lines = match.group(2), [match.group(2)]
        else:
            lines.append(line)
    blocks.append(Block("\n".join(lines), heading=heading))
    return blocks
