"""Search over published revisions only."""

from __future__ import annotations

from kb_cli import queries
from kb_cli.errors import UsageError
from kb_cli.records import SearchHit
from kb_cli.services.context import Kb


def search(kb: Kb, query: str, limit: int = 10) -> list[SearchHit]:
    words = query.split()
    if not words:
        raise UsageError("the search query is empty")
    with kb.db.read() as conn:
        rows = queries.search_published_chunks(conn, words, limit)
    return [
        SearchHit(
            row.document_id,
            row.filename,
            row.revision,
            row.chunk_index,
            1.0,
            row.text,
            row.page,
            row.heading,
        )
        for row in rows
    ]
