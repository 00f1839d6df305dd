"""pg_textsearch on PostgreSQL: a BM25 index of the chunks' words, which lets the words
ranking ask the index for its best candidates instead of reading every chunk that
holds a common word (kb_cli/lexical/tsvector.py).

Made where the server offers the `pg_textsearch` extension (1.0 or later, loaded by
`shared_preload_libraries`), by migration 0020 and again by every `kb db upgrade`, so
that installing it later and running `kb db upgrade` enables it; without it nothing is
made and the words ranking reads the GIN index as before. The index is on
`chunks.terms` (the words kb indexes, Chinese already segmented) with kb's own text
search configuration (`kb_english`: accents dropped, English stemmed, as the stored
`chunks.words` are), and holds every chunk: the ranking keeps the published ones of
the caller's scope, and scores them itself.
"""

from __future__ import annotations

import re
from typing import Any

from kb_cli.migrations.pgvector import version_of

INDEX = "ix_chunks_bm25"
MIN_VERSION = (1, 0)


def available(raw: Any) -> bool:
    """The server offers pg_textsearch 1.0 or later (whether it is preloaded, as it must
    be, only creating the extension tells: reading `shared_preload_libraries` needs a
    privilege kb's user may not have)."""
    row = raw.execute(
        "SELECT coalesce(installed_version, default_version) FROM pg_available_extensions"
        " WHERE name = 'pg_textsearch'"
    ).fetchone()
    return row is not None and version_of(row[0]) >= MIN_VERSION


def enabled(raw: Any) -> bool:
    """The index exists: the words ranking asks it for candidates."""
    return bool(raw.execute("SELECT to_regclass(%s) IS NOT NULL", (INDEX,)).fetchone()[0])


def enable(raw: Any) -> bool:
    """Make the index in the caller's transaction when the server offers the extension
    and has it loaded (creating either needs the right to: a failure is no error, `kb
    doctor` says what to ask for). True when enabled."""
    if enabled(raw):
        return True
    if not available(raw):
        return False
    schema = raw.execute("SELECT current_schema()").fetchone()[0]
    return _in_savepoint(
        raw,
        "CREATE EXTENSION IF NOT EXISTS pg_textsearch",
        f"CREATE INDEX {INDEX} ON chunks USING bm25 (terms)"
        f" WITH (text_config = '{schema}.kb_english')",
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


def disable(raw: Any) -> None:
    """Undo `enable` (the extension stays: other schemas may use it)."""
    raw.execute(f"DROP INDEX IF EXISTS {INDEX}")


def _in_savepoint(raw: Any, *statements: str) -> bool:
    """Run the statements, or none of them: not allowed to (creating an extension is an
    administrator's privilege), or the library not preloaded (after its extension was
    made, say, and then taken out of shared_preload_libraries)."""
    import psycopg

    raw.execute("SAVEPOINT kb_textsearch")
    try:
        for statement in statements:
            raw.execute(statement)
    except psycopg.Error:
        raw.execute("ROLLBACK TO SAVEPOINT kb_textsearch")
        return False
    raw.execute("RELEASE SAVEPOINT kb_textsearch")
    return True
