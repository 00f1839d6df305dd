"""PostgreSQL: the engine for teams whose workers run on many hosts.

Claiming uses FOR UPDATE SKIP LOCKED, so workers never queue behind each other's row
locks. A lock held past the busy timeout (lock_timeout) is `busy`, as on SQLite.
Search: English full text (to_tsvector) plus pg_trgm indexes for substrings.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text
from sqlalchemy import create_engine as sa_create_engine

from kb_cli.queries import escape_like

SKIP_LOCKED = True
# to_regclass follows the search_path, as the queries that use the table do.
VERSION_TABLE_EXISTS = "SELECT to_regclass('kb_schema_version') IS NOT NULL"
_MIGRATION_LOCK = 4_710_001  # any constant: one migrating process at a time


def create_engine(url: str, busy_timeout_seconds: float) -> Engine:
    timeout_ms = max(1, int(busy_timeout_seconds * 1000))
    return sa_create_engine(
        url,
        pool_pre_ping=True,
        connect_args={"options": f"-c lock_timeout={timeout_ms}", "connect_timeout": 10},
    )


def is_lock_error(error: BaseException) -> bool:
    original = getattr(error, "orig", error)
    state = getattr(original, "sqlstate", None)
    return state in ("55P03", "40P01") or "lock timeout" in str(original).lower()


def lock_for_migration(conn: Connection) -> None:
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})


# Words as SQLite's FTS5 index sees them: punctuation splits words (example.com is
# "example" and "com"), accents are dropped, English is stemmed, no stopwords.
WORDS = "to_tsvector('kb_english', regexp_replace({text}, '[^[:alnum:]]+', ' ', 'g'))"
SEARCH_SCHEMA = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE EXTENSION IF NOT EXISTS unaccent",
    "CREATE TEXT SEARCH DICTIONARY kb_english_stem (TEMPLATE = snowball, Language = english)",
    "CREATE TEXT SEARCH CONFIGURATION kb_english (COPY = simple)",
    "ALTER TEXT SEARCH CONFIGURATION kb_english ALTER MAPPING FOR asciiword, asciihword, "
    "hword_asciipart, word, hword, hword_part WITH unaccent, kb_english_stem",
    f"CREATE INDEX ix_chunks_words ON chunks USING gin ({WORDS.format(text='text')})",
    "CREATE INDEX ix_chunks_trigrams ON chunks USING gin (text gin_trgm_ops)",
]


def search_statement(
    words: list[str], trigrams: list[str], substrings: list[str], limit: int
) -> tuple[str, dict[str, object]]:
    """Same visibility rule and result shape as SQLite: published revisions only."""
    params: dict[str, object] = {"limit": limit}
    filters = []
    if words:
        params["words"] = " ".join(words)
        words_of_chunk = WORDS.format(text="c.text")
        query = "plainto_tsquery('kb_english', :words)"
        filters.append(f"{words_of_chunk} @@ {query}")
        score = f"ts_rank({words_of_chunk}, {query})"
        snippet = (
            f"ts_headline('kb_english', c.text, {query}, "
            "'StartSel=[, StopSel=], MaxWords=24, MinWords=8')"
        )
    else:
        first = (trigrams + substrings)[0]
        params["first"] = first
        score = "(length(c.text) - length(replace(c.text, :first, ''))) * 1.0 / length(:first)"
        snippet = "NULL"
    for i, term in enumerate(trigrams + substrings):
        params[f"like{i}"] = "%" + escape_like(term) + "%"
        filters.append(f"c.text ILIKE :like{i}")
    sql = f"""
        SELECT c.document_id, d.filename, c.revision, c.chunk_index, c.text, c.page,
               c.heading, {score} AS score, {snippet} AS snippet
        FROM chunks AS c
        JOIN documents AS d ON d.id = c.document_id AND c.revision = d.published_revision
        WHERE {" AND ".join(filters)}
        ORDER BY score DESC, c.document_id, c.chunk_index
        LIMIT :limit
    """
    return sql, params
