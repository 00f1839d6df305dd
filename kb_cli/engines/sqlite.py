"""SQLite: WAL, a busy timeout, foreign keys on, and BEGIN IMMEDIATE for writes.

A writer takes the lock up front, where the busy timeout applies, instead of failing
when a deferred transaction tries to upgrade its read lock. Search uses two FTS5
indexes kept in step with `chunks` by triggers.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import namedtuple
from typing import TYPE_CHECKING

from kb_cli.engines import escape_like
from kb_cli.errors import UsageError

if TYPE_CHECKING:
    from sqlalchemy import Connection as SAConnection
    from sqlalchemy import Engine

Error = sqlite3.Error
WAL_CHECKPOINT_PAGES = 10_000
LOCK_ROW = ""  # BEGIN IMMEDIATE already excludes every other writer
SKIP_LOCKED = ""
VERSION_TABLE_EXISTS = (
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'kb_schema_version'"
)


def database_path(url: str) -> str:
    """The file of a `sqlite:///PATH` URL (four slashes for an absolute path)."""
    scheme, _, rest = url.partition("://")
    if scheme not in ("sqlite", "sqlite+pysqlite") or not rest.startswith("/"):
        raise UsageError("the database URL is not valid: use sqlite:///PATH")
    path = rest[1:].split("?", 1)[0]
    if not path or path == ":memory:":
        raise UsageError("the database URL is not valid: kb needs a database file")
    return path


def connect(url: str, busy_timeout_seconds: float) -> sqlite3.Connection:
    if sqlite3.sqlite_version_info < (3, 35):  # RETURNING; FTS5 trigram needs 3.34
        raise UsageError(f"kb needs SQLite 3.35 or newer; this Python has {sqlite3.sqlite_version}")
    # isolation_level=None: kb says BEGIN (IMMEDIATE) itself, see `begin`.
    raw = sqlite3.connect(database_path(url), isolation_level=None)
    try:
        _configure(raw, busy_timeout_seconds)
    except BaseException:
        raw.close()
        raise
    return raw


def _configure(raw: sqlite3.Connection, busy_timeout_seconds: float) -> None:
    raw.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("PRAGMA synchronous = NORMAL")
    raw.execute("PRAGMA foreign_keys = ON")
    # Checkpoint (and fsync) every ~40 MiB of log, not SQLite's default ~4 MiB: the same
    # task and index pages are rewritten by every task, so a longer log folds many of
    # their versions into one write. The drained queue measured about 25% faster.
    raw.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
    raw.execute(f"PRAGMA journal_size_limit = {WAL_CHECKPOINT_PAGES * 4096}")


def begin(raw: sqlite3.Connection, write: bool) -> None:
    raw.execute("BEGIN IMMEDIATE" if write else "BEGIN")


def commit(raw: sqlite3.Connection) -> None:
    raw.execute("COMMIT")


def rollback(raw: sqlite3.Connection) -> None:
    if raw.in_transaction:
        raw.execute("ROLLBACK")


def is_clean(raw: sqlite3.Connection) -> bool:
    """Fit for the next transaction: none left open."""
    return not raw.in_transaction


def execute(raw: sqlite3.Connection, sql: str, params) -> sqlite3.Cursor:
    cursor = raw.execute(sql, params)
    if cursor.description is not None:
        cursor.row_factory = _row_maker(tuple(column[0] for column in cursor.description))
    return cursor


def executemany(raw: sqlite3.Connection, sql: str, rows) -> sqlite3.Cursor:
    return raw.executemany(sql, rows)


@functools.lru_cache(maxsize=512)
def _row_maker(names: tuple[str, ...]):
    """Rows with attribute access (`row.status`), one tuple class per column list."""
    make = namedtuple("Row", names, rename=True)._make
    return lambda _cursor, values: make(values)


def is_lock_error(error: BaseException) -> bool:
    text = str(error).lower()
    return any(sign in text for sign in ("database is locked", "table is locked", "is busy"))


def is_connection_error(error: BaseException) -> bool:
    return False  # a file, not a server: nothing to lose


def connect_error_message(error: BaseException) -> str:
    return "cannot open the SQLite database file: does its directory exist, and may kb write there?"


# --- schema changes (Alembic, through SQLAlchemy: imported only to migrate) ------------


def sqlalchemy_engine(url: str, busy_timeout_seconds: float) -> Engine:
    from sqlalchemy import create_engine, event, pool

    engine = create_engine(url, poolclass=pool.NullPool)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # the begin event below starts transactions
        _configure(dbapi_connection, busy_timeout_seconds)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: SAConnection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def lock_for_migration(conn: SAConnection) -> None:
    """Nothing to do: the migration's transaction is BEGIN IMMEDIATE."""


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
        params[f"like{i}"] = "%" + escape_like(substring) + "%"
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
