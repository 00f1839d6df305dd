"""Stage artefacts: a revision's parse result, kept in the database between attempts.

The chunks a parse made (before the document's title is added as their context) are
stored as zlib-compressed JSON, keyed by the document revision, the object's sha256
and the parser key: the parser version and everything else that shapes the chunks
(content type, PDF backend, chunk sizes). A retry, an automatic retry after a
transient error, or a reclaim whose key matches starts at the embedding stage; a
replaced file or an upgraded parser simply finds no match and parses again.

An artefact lives from the parse until its task succeeds: the completion removes it in
the transaction that makes the chunks the task's result, because nothing can retry a
succeeded task (a reviewer's reject or a new file means a new run). Replacing the file
and deleting the document remove it too; `kb doctor` reports any other as stray.
"""

from __future__ import annotations

import json
import zlib

from kb_cli.chunking import OVERLAP_CHARS, TARGET_CHARS, ChunkText
from kb_cli.parsers import PARSER_VERSION, ParseLimits

_PDF = "application/pdf"


def parser_key(
    content_type: str, chunk_chars: int = TARGET_CHARS, limits: ParseLimits = ParseLimits()
) -> str:
    """What besides the file's bytes decides its chunks, as one comparable string: the
    settings a parse runs with (a task's own, or its worker's), as the parse sees them
    (the OCR mode is `off` where the `ocr` extra is not installed)."""
    key = f"v{PARSER_VERSION};{content_type};chunks={chunk_chars}/{OVERLAP_CHARS}"
    if content_type == _PDF:
        from kb_cli.parsers import pdf

        key += f";pdf={pdf.backend(limits)};ocr={pdf.ocr_mode(limits)}"
    return key


def encode(chunks: list[ChunkText]) -> bytes:
    rows = [
        [chunk.text, chunk.page, chunk.heading, list(chunk.parents), chunk.page_end]
        for chunk in chunks
    ]
    text = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    return zlib.compress(text.encode(), 6)


def decode(payload: bytes) -> list[ChunkText]:
    rows = json.loads(zlib.decompress(payload))
    return [  # a parse kept before chunks knew their last page has four columns
        ChunkText(index, text, page, heading, tuple(parents), page_end=(rest or [None])[0])
        for index, (text, page, heading, parents, *rest) in enumerate(rows)
    ]
