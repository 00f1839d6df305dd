"""What a reviewer reads: `kb show` (a revision's text, or its chunks), `kb diff` (a
unified diff, coloured on a terminal) and `kb export` (a line per file written).

On a terminal `show` and `diff` go through a pager, as `git show` does: `$PAGER`, else
`less -FRX` (which leaves a short text on the screen and quits); piped, plain lines.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kb_cli.console.core import (
    emit,
    is_fancy,
    quoted,
    short,
    visible,
    write_json,
    write_json_lines,
)

if TYPE_CHECKING:
    from kb_cli.records import ChunkRecord
    from kb_cli.services.reading import Diff, Exported, Revision

_GREEN, _RED, _CYAN, _BOLD, _RESET = "\x1b[32m", "\x1b[31m", "\x1b[36m", "\x1b[1m", "\x1b[0m"


def print_revision(revision: Revision, as_json: bool) -> None:
    """The revision's text, under a line that says which it is."""
    document = revision.document
    lines = revision.lines()
    if as_json:
        write_json(
            {
                "document_id": document.id,
                "filename": document.filename,
                "revision": revision.number,
                "role": revision.role,
                "chunks": len(revision.chunks),
                "text": "\n".join(lines),
            }
        )
        return
    fancy = is_fancy(sys.stdout)
    head = (
        f"document {document.id if not fancy else short(document.id)} {visible(document.filename)}"
        f" revision {revision.number} ({revision.role}, {len(revision.chunks)} chunks)"
    )
    _paged([_styled(head, _BOLD, fancy), "", *(visible(line) for line in lines)], fancy)


def print_chunks(records: list[ChunkRecord], as_json: bool) -> None:
    if as_json:
        write_json_lines(records)
        return
    fancy = is_fancy(sys.stdout)
    out: list[str] = []
    for chunk in records:
        pages = f" page={chunk.page}" if chunk.page is not None else ""
        if chunk.page is not None and chunk.page_end:
            pages = f" pages={chunk.page}-{chunk.page_end}"
        heading = f" heading={quoted(chunk.heading)}" if chunk.heading else ""
        where = f"chunk={chunk.chunk_index}{pages}{heading} length={chunk.length}"
        if not fancy:
            out.append(f"{where} text={quoted(chunk.text)}")
            continue
        out += [_styled(where, _CYAN, fancy), *(visible(line) for line in chunk.text.splitlines())]
        out.append("")
    _paged(out, fancy)


def print_diff(result: Diff, as_json: bool) -> None:
    """The hunks, then the chunks added, removed and kept."""
    if as_json:
        write_json_lines([*result.hunks, result])
        return
    fancy = is_fancy(sys.stdout)
    before = f"revision {result.from_revision}" if result.from_revision is not None else "nothing"
    name = visible(result.filename)
    out = [
        _styled(f"--- {name} {before}", _BOLD, fancy),
        _styled(f"+++ {name} revision {result.to_revision}", _BOLD, fancy),
    ]
    for hunk in result.hunks:
        out.append(_styled(visible(hunk.header()), _CYAN, fancy))
        for line in hunk.lines:
            colour = {"+": _GREEN, "-": _RED}.get(line[:1], "")
            out.append(_styled(visible(line), colour, fancy) if colour else visible(line))
    out.append(
        f"chunks: {result.chunks_added} added, {result.chunks_removed} removed, "
        f"{result.chunks_kept} kept"
    )
    _paged(out, fancy)


def print_exports(exported: list[Exported], as_json: bool) -> None:
    if as_json:
        write_json_lines(exported)
        return
    fancy = is_fancy(sys.stdout)
    for item in exported:
        document = short(item.document_id) if fancy else item.document_id
        emit(
            f"exported document={document} revision={item.revision} "
            f"size={item.size_bytes} sha256={item.sha256} to={quoted(item.path)}"
        )


def _styled(text: str, style: str, fancy: bool) -> str:
    return f"{style}{text}{_RESET}" if fancy and style else text


def _paged(lines: Iterable[str], fancy: bool) -> None:
    """On a terminal, through the pager; else, or when there is none, line by line."""
    if fancy:
        pager = shlex.split(os.environ.get("PAGER") or "less -FRX")
        if pager and shutil.which(pager[0]):
            text = "".join(f"{line}\n" for line in lines)
            subprocess.run(pager, input=text, text=True, check=False)
            return
    for line in lines:
        emit(line)
