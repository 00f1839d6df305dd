"""Plain text and Markdown: UTF-8 first, then a legacy encoding rather than a crash."""

from __future__ import annotations

import re
from pathlib import Path

from kb_cli.errors import ParseError
from kb_cli.parsers.common import Block, Budget, HeadingPath, ProgressCallback, clean_heading

# Tried in order. GB18030 is a superset of GBK and GB2312, the legacy encodings most
# often met in Chinese text; latin-1 decodes any bytes, so the chain always ends.
ENCODINGS = ("utf-8-sig", "gb18030", "cp1252", "latin-1")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TITLE = re.compile(r"^title:\s*(\S.*)$")
MAX_FRONT_MATTER_LINES = 200
# A reStructuredText link target (`.. _label:`): markup that names the next heading,
# no text of the page.
_RST_TARGET = re.compile(r"^\.\. _[^:]+:\s*$")
_ADORNMENT_CHARS = "=-~^\"'`#*+:._"
MAX_TITLE_CHARS = 120


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
    lines = text.split("\n")
    if not markdown:
        lines = [line for line in lines if not _RST_TARGET.match(line)]
    blocks = _sections(lines, markdown)
    on_progress(1, 1)
    return [block for block in blocks if block.text.strip()]


def _sections(lines: list[str], markdown: bool) -> list[Block]:
    """Split at headings so each block knows the headings it falls under: in Markdown
    `#` headings outside code fences, `===`/`---` underlines, and a front matter's
    `title:` above them all; in plain text the underlined (and overlined) titles of
    reStructuredText and of many README files, levelled in the order their adornments
    first appear, as reStructuredText does. A heading's text stays the first line of
    its block; a front matter is metadata, not text."""
    path = HeadingPath()
    blocks: list[Block] = []
    body: list[str] = []
    adornments: list[tuple[str, bool]] = []  # plain text: one per level, in order met
    fence: str | None = None  # the open code fence's marker
    i = _front_matter(lines, path) if markdown else 0
    while i < len(lines):
        line = lines[i]
        heading, level, used = None, 0, 1
        if fence is not None:
            fence = None if _closes(line, fence) else fence
        elif markdown and (opening := _FENCE.match(line)):
            fence = opening.group(1)
        elif markdown and (match := _HEADING.match(line)):
            heading, level = match.group(2), len(match.group(1))
        elif underlined := _underlined(lines, i, markdown):
            heading, style, used = underlined
            if markdown:
                level = 1 if style[0] == "=" else 2
            else:
                if style not in adornments:
                    adornments.append(style)
                level = adornments.index(style) + 1
        if heading is None:
            body.append(line)
            i += 1
            continue
        blocks.append(path.block("\n".join(body)))
        path.enter(level, heading)
        body = [clean_heading(heading)]
        i += used
    blocks.append(path.block("\n".join(body)))
    return blocks


def _closes(line: str, fence: str) -> bool:
    """A fence closes with the same character, at least as many, and nothing else."""
    marker = line.strip()
    return len(marker) >= len(fence) and marker == fence[0] * len(marker)


def _front_matter(lines: list[str], path: HeadingPath) -> int:
    """The line after a YAML front matter (0 if there is none); its `title:`, if any,
    becomes the heading above every other (level 0, as a DOCX Title)."""
    if not lines or lines[0].strip() != "---":
        return 0
    for end in range(1, min(len(lines), MAX_FRONT_MATTER_LINES)):
        if lines[end].strip() in ("---", "..."):
            for line in lines[1:end]:
                if match := _TITLE.match(line):
                    path.enter(0, match.group(1).strip().strip("\"'"))
            return end + 1
    return 0


def _underlined(
    lines: list[str], i: int, markdown: bool
) -> tuple[str, tuple[str, bool], int] | None:
    """(title, (adornment character, overlined), lines used) when a title starts at
    line i: a short unindented line under which (and, in plain text, optionally above
    which) stands a line of one repeated punctuation character at least as long."""
    over = not markdown and _is_adornment(lines[i]) and i + 2 < len(lines)
    title_at = i + 1 if over else i
    if title_at + 1 >= len(lines):
        return None
    title, under = lines[title_at], lines[title_at + 1]
    stripped = title.strip()
    if (
        not stripped
        or len(stripped) > MAX_TITLE_CHARS
        or "  " in stripped  # a table's header row, not a title
        or "\t" in stripped
        or "|" in stripped
        or (title[0].isspace() and not over)
        or (i > 0 and lines[i - 1].strip() and not over)  # a paragraph's last line
        or not _is_adornment(under)
        or len(under.rstrip()) < len(stripped)
        or (markdown and under[0] not in "=-")
    ):
        return None
    if over and lines[i].rstrip() != under.rstrip():
        return None
    return stripped, (under[0], over), title_at + 2 - i


def _is_adornment(line: str) -> bool:
    line = line.rstrip()
    return len(line) >= 3 and line[0] in _ADORNMENT_CHARS and line == line[0] * len(line)
