"""PostgreSQL: the engine for teams whose workers run on many hosts.

Claiming uses FOR UPDATE SKIP LOCKED, so workers never queue behind each other's row
locks. A lock held past the busy timeout (lock_timeout) is `busy`, as on SQLite.
Search: English full text (to_tsvector) plus pg_trgm indexes for substrings.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from kb_cli.engines import escape_like
from kb_cli.errors import UsageError

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Connection as SAConnection
    from sqlalchemy import Engine

try:
    from psycopg import Error
except ModuleNotFoundError:  # only without the `postgres` extra: connect() explains

    class Error(Exception):  # type: ignore[no-redef]
        pass


LOCK_ROW = " FOR UPDATE"
SKIP_LOCKED = " FOR UPDATE SKIP LOCKED"
# to_regclass follows the search_path, as the queries that use the table do.
VERSION_TABLE_EXISTS = "SELECT to_regclass('kb_schema_version') IS NOT NULL"
_MIGRATION_LOCK = 4_710_001  # any constant: one migrating process at a time


def conninfo(url: str) -> str:
    """libpq's URI from SQLAlchemy's `postgresql+psycopg://...` (the form kb documents)."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in ("postgresql", "postgresql+psycopg"):
        raise UsageError("the database URL is not valid: use postgresql+psycopg://...")
    return f"postgresql://{rest}"


def connect(url: str, busy_timeout_seconds: float) -> psycopg.Connection:
    try:
        import psycopg
        from psycopg.rows import namedtuple_row
    except ModuleNotFoundError:
        raise UsageError(
            "the PostgreSQL driver is not installed: install kb-cli[postgres]"
        ) from None
    timeout_ms = max(1, int(busy_timeout_seconds * 1000))
    try:
        return psycopg.connect(
            conninfo(url),
            autocommit=True,  # kb says BEGIN itself, as on SQLite
            row_factory=namedtuple_row,
            options=f"-c lock_timeout={timeout_ms}",
            connect_timeout=10,
        )
    except psycopg.ProgrammingError:
        raise UsageError("the database URL is not valid") from None


def begin(raw: psycopg.Connection, write: bool) -> None:
    raw.execute("BEGIN")


def commit(raw: psycopg.Connection) -> None:
    raw.execute("COMMIT")


def rollback(raw: psycopg.Connection) -> None:
    if not raw.closed:
        raw.execute("ROLLBACK")


def is_clean(raw: psycopg.Connection) -> bool:
    """Fit for the next transaction: connected, and no transaction left open."""
    from psycopg.pq import TransactionStatus

    return not raw.broken and raw.info.transaction_status == TransactionStatus.IDLE


def execute(raw: psycopg.Connection, sql: str, params):
    return raw.execute(driver_sql(sql), params)


def executemany(raw: psycopg.Connection, sql: str, rows):
    cursor = raw.cursor()
    cursor.executemany(driver_sql(sql), rows)
    return cursor


_LITERAL = re.compile(r"('(?:[^']|'')*')")
_PARAMETER = re.compile(r"(?<![:\w]):(\w+)")


@functools.lru_cache(maxsize=1024)
def driver_sql(sql: str) -> str:
    """`:name` parameters as psycopg's `%(name)s`; string literals and casts left alone.

    Made for kb's own statements, which have no comments, quoted identifiers, dollar
    quotes or E'' strings: in those, a `:word` would be taken for a parameter."""
    parts = _LITERAL.split(sql.replace("%", "%%"))
    return "".join(
        part if index % 2 else _PARAMETER.sub(r"%(\1)s", part) for index, part in enumerate(parts)
    )


def is_lock_error(error: BaseException) -> bool:
    state = getattr(error, "sqlstate", None)
    return state in ("55P03", "40P01") or "lock timeout" in str(error).lower()


def is_connection_error(error: BaseException) -> bool:
    """The connection is gone (not a query that failed on a live one): the client lost
    it (no SQLSTATE), or the server says so (class 08, or an admin shutdown 57P0x)."""
    from psycopg import OperationalError

    state = getattr(error, "sqlstate", None)
    if state is None:
        return isinstance(error, OperationalError)
    return state.startswith("08") or state in ("57P01", "57P02", "57P03")


def connect_error_message(error: BaseException) -> str:
    """The server's own reason when it gave one (no such database, bad password)."""
    reason = re.search(r"FATAL:\s+(.+)", str(error))
    if reason:
        return f"the database server refused the connection: {reason.group(1).strip()[:200]}"
    return f"cannot reach the database server ({type(error).__name__})"


# --- schema changes (Alembic, through SQLAlchemy: imported only to migrate) ------------


def sqlalchemy_engine(url: str, busy_timeout_seconds: float) -> Engine:
    from sqlalchemy import create_engine, pool

    timeout_ms = max(1, int(busy_timeout_seconds * 1000))
    return create_engine(
        "postgresql+psycopg://" + url.partition("://")[2],
        poolclass=pool.NullPool,
        connect_args={"options": f"-c lock_timeout={timeout_ms}", "connect_timeout": 10},
    )


def lock_for_migration(conn: SAConnection) -> None:
    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")


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
