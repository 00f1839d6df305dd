"""pg_textsearch on PostgreSQL: a BM25 index of the chunks' words, which lets the words
ranking ask the index for its best candidates instead of reading every chunk that
holds a common word (kb_cli/lexical/tsvector.py).

Made by an operator, never by kb itself (docs/many-hosts.md: pg_textsearch 1.0 is young,
and one of three full test passes with it loaded lost the server's backends and left a
garbled chunk row, a cause not yet found): `create_index` is the statement the docs
give, which the tests run. Where the index exists kb uses it; without it the words
ranking reads the GIN index as before. The index is on
`chunks.terms` (the words kb indexes, Chinese already segmented) with kb's own text
search configuration (`kb_english`: accents dropped, English stemmed, as the stored
`chunks.words` are), and holds every chunk: the ranking keeps the published ones of
the caller's scope, and scores them itself.
"""

from __future__ import annotations

import re
from typing import Any

INDEX = "ix_chunks_bm25"


def enabled(raw: Any) -> bool:
    """The index exists: the words ranking asks it for candidates."""
    return bool(raw.execute("SELECT to_regclass(%s) IS NOT NULL", (INDEX,)).fetchone()[0])


def create_index(raw: Any) -> None:
    """The extension and the index, as docs/many-hosts.md has an operator make them
    (pg_textsearch in shared_preload_libraries, a user allowed to create extensions)."""
    schema = raw.execute("SELECT current_schema()").fetchone()[0]
    raw.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")
    raw.execute(
        f"CREATE INDEX {INDEX} ON chunks USING bm25 (terms)"
        f" WITH (text_config = '{schema}.kb_english')"
    )


def indexed_chunks(raw: Any) -> int | None:
    """How many chunks the index holds, as pg_textsearch counts them (its summary's
    `total_docs`); None when the server does not load pg_textsearch (taken out of
    shared_preload_libraries after the index was made), which nothing can then ask."""
    import psycopg

    raw.execute("SAVEPOINT kb_textsearch")
    try:
        summary = raw.execute("SELECT bm25_summarize_index(%s)", (INDEX,)).fetchone()[0]
    except psycopg.Error:
        raw.execute("ROLLBACK TO SAVEPOINT kb_textsearch")
        return None
    raw.execute("RELEASE SAVEPOINT kb_textsearch")
    found = re.search(r"total_docs:\s*(\d+)", str(summary))
    return int(found.group(1)) if found else 0
