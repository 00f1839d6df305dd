"""SQLite: WAL, a busy timeout, foreign keys on, and BEGIN IMMEDIATE for writes.

A writer takes the lock up front, where the busy timeout applies, instead of failing
when a deferred transaction tries to upgrade its read lock. Search uses two FTS5
indexes kept in step with `chunks` by triggers.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, event
from sqlalchemy import create_engine as sa_create_engine

from kb_cli import queries

WRITE_OPTION = "kb_write"
SKIP_LOCKED = False  # BEGIN IMMEDIATE already serialises claimers
VERSION_TABLE_EXISTS = (
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'kb_schema_version'"
)


def create_engine(url: str, busy_timeout_seconds: float) -> Engine:
    # The worker's heartbeat thread checks out its own pooled connection; no
    # connection is ever used by two threads at once.
    engine = sa_create_engine(url, connect_args={"check_same_thread": False})
    busy_ms = int(busy_timeout_seconds * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # Let the begin event below decide how each transaction starts.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def is_lock_error(error: BaseException) -> bool:
    text = str(getattr(error, "orig", error)).lower()
    return any(sign in text for sign in ("database is locked", "table is locked", "is busy"))


def lock_for_migration(conn: Connection) -> None:
    """Nothing to do: the write transaction is BEGIN IMMEDIATE."""


# Two FTS5 indexes over the chunk text: words (Porter-stemmed English, any language
# with spaces) and trigrams (substrings, for Chinese and other unspaced scripts).
SEARCH_SCHEMA = [
    "CREATE VIRTUAL TABLE chunks_words USING fts5(text, content='chunks', "
    "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE chunks_trigrams USING fts5(text, content='chunks', "
    "content_rowid='id', tokenize='trigram')",
    """CREATE TRIGGER chunks_indexed AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_words(rowid, text) VALUES (new.id, new.text);
        INSERT INTO chunks_trigrams(rowid, text) VALUES (new.id, new.text);
    END""",
    """CREATE TRIGGER chunks_unindexed AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_words(chunks_words, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO chunks_trigrams(chunks_trigrams, rowid, text)
            VALUES ('delete', old.id, old.text);
    END""",
    # Index whatever chunks an older schema already holds.
    "INSERT INTO chunks_words(chunks_words) VALUES ('rebuild')",
    "INSERT INTO chunks_trigrams(chunks_trigrams) VALUES ('rebuild')",
]


def search_statement(
    words: list[str], trigrams: list[str], substrings: list[str], limit: int
) -> tuple[str, dict[str, object]]:
    """Chunks of published revisions matching every term, best first.

    The first full-text index with terms drives the query and ranks it (BM25); the
    other terms filter. Substrings too short for a trigram (one or two Chinese
    characters) are matched with LIKE on the chunk text itself: a trigram index cannot
    find them (a two-character LIKE on the trigram table silently returns nothing).
    """
    params: dict[str, object] = {"limit": limit}
    filters: list[str] = []
    indexes = [("chunks_trigrams", trigrams), ("chunks_words", words)]
    ranked = [(name, terms) for name, terms in indexes if terms]
    for position, (name, terms) in enumerate(ranked):
        params[name] = fts_query(terms)
        if position > 0:
            filters.append(f"c.id IN (SELECT rowid FROM {name} WHERE {name} MATCH :{name})")
    for i, substring in enumerate(substrings):
        params[f"s{i}"] = substring
        params[f"like{i}"] = "%" + queries.escape_like(substring) + "%"
        filters.append(f"c.text LIKE :like{i} ESCAPE '\\'")
    if ranked:
        primary = ranked[0][0]
        source = f"{primary} JOIN chunks AS c ON c.id = {primary}.rowid"
        filters.insert(0, f"{primary} MATCH :{primary}")
        score = f"-bm25({primary})"
        snippet = f"snippet({primary}, 0, '[', ']', '…', 16)"
    else:
        source = "chunks AS c"
        score = "(length(c.text) - length(replace(c.text, :s0, ''))) * 1.0 / length(:s0)"
        snippet = "NULL"
    sql = f"""
        SELECT c.document_id, d.filename, c.revision, c.chunk_index, c.text, c.page,
               c.heading, {score} AS score, {snippet} AS snippet
        FROM {source}
        JOIN documents AS d ON d.id = c.document_id AND c.revision = d.published_revision
        WHERE {" AND ".join(filters)}
        ORDER BY score DESC, c.document_id, c.chunk_index
        LIMIT :limit
    """
    return sql, params


def fts_query(terms: list[str]) -> str:
    """Every term as a quoted FTS5 string: operators in user input stay plain text."""
    return " ".join('"' + term.replace('"', '""') + '"' for term in terms)
