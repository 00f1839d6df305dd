"""The only place that creates engines and transactions.

SQLite: WAL, a busy timeout, foreign keys on, and `BEGIN IMMEDIATE` for writes, so a
writer waits for the lock up front (where the busy timeout applies) instead of
failing when a deferred transaction tries to upgrade its read lock.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, create_engine, event, exc

from kb_cli.errors import BusyError, InternalError

SCHEMA_VERSION = 1
_WRITE = "kb_write"


def utcnow() -> str:
    """Now as a fixed-width RFC 3339 UTC timestamp; such strings sort chronologically."""
    return format_stamp(datetime.now(UTC))


def format_stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_stamp(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def _configure_sqlite(engine: Engine, busy_timeout_seconds: float) -> None:
    busy_ms = int(busy_timeout_seconds * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        # Let SQLAlchemy's begin event below decide how each transaction starts.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@functools.cache
def get_engine(url: str, busy_timeout_seconds: float) -> Engine:
    if url.startswith("sqlite"):
        # The worker's heartbeat thread checks out its own pooled connection;
        # no connection is ever shared by two threads at once.
        engine = create_engine(url, connect_args={"check_same_thread": False})
        _configure_sqlite(engine, busy_timeout_seconds)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    return engine


def is_lock_error(error: BaseException) -> bool:
    text = str(getattr(error, "orig", error)).lower()
    return any(sign in text for sign in ("database is locked", "table is locked", "is busy"))


class Database:
    """Opens short transactions: `write()` for changes, `read()` for snapshots."""

    def __init__(self, url: str, busy_timeout_seconds: float) -> None:
        self.url = url
        self.engine = get_engine(url, busy_timeout_seconds)
        self.is_sqlite = url.startswith("sqlite")

    @contextmanager
    def write(self) -> Iterator[Connection]:
        with self._translate_errors(), self.engine.connect() as conn:
            conn = conn.execution_options(**{_WRITE: True})
            with conn.begin():
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self._translate_errors(), self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        try:
            yield
        except exc.OperationalError as error:
            if is_lock_error(error):
                raise BusyError(
                    "the database stayed locked past the busy timeout; safe to run again"
                ) from error
            raise InternalError(f"database error ({type(error.orig).__name__})") from error

    def ensure_schema(self) -> None:
        """Create the schema on first use; cheap when it already exists."""
        from kb_cli import models

        with self.read() as conn:
            if self._schema_version(conn) == SCHEMA_VERSION:
                return
        with self.write() as conn:
            if self._schema_version(conn) == SCHEMA_VERSION:
                return
            models.metadata.create_all(conn)
            self._create_extras(conn)
            if self.is_sqlite:
                conn.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _schema_version(self, conn: Connection) -> int:
        if self.is_sqlite:
            return conn.exec_driver_sql("PRAGMA user_version").scalar_one()
        return 0

    def _create_extras(self, conn: Connection) -> None:
        """The search index, kept in step with `chunks` by triggers in the same transaction."""
        if self.is_sqlite:
            for statement in SQLITE_SEARCH_SCHEMA:
                conn.exec_driver_sql(statement)


# Two FTS5 indexes over the chunk text: words (Porter-stemmed English, any language
# with spaces) and trigrams (substrings, for Chinese and other unspaced scripts).
SQLITE_SEARCH_SCHEMA = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_words USING fts5(text, content='chunks', "
    "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_trigrams USING fts5(text, content='chunks', "
    "content_rowid='id', tokenize='trigram')",
    """CREATE TRIGGER IF NOT EXISTS chunks_indexed AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_words(rowid, text) VALUES (new.id, new.text);
        INSERT INTO chunks_trigrams(rowid, text) VALUES (new.id, new.text);
    END""",
    """CREATE TRIGGER IF NOT EXISTS chunks_unindexed AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_words(chunks_words, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO chunks_trigrams(chunks_trigrams, rowid, text)
            VALUES ('delete', old.id, old.text);
    END""",
]
