"""SQLite: WAL, a busy timeout, foreign keys on, and BEGIN IMMEDIATE for writes.

A writer takes the lock up front, where the busy timeout applies, instead of failing
when a deferred transaction tries to upgrade its read lock. The words ranking over its
FTS5 index is kb_cli/lexical/fts5.py's.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from collections import namedtuple
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_cli.engines import WATCH_SLICE_SECONDS
from kb_cli.errors import UsageError

if TYPE_CHECKING:
    from sqlalchemy import Connection as SAConnection
    from sqlalchemy import Engine

Error = sqlite3.Error
WAL_CHECKPOINT_PAGES = 10_000
LOCK_ROW = ""  # BEGIN IMMEDIATE already excludes every other writer
SKIP_LOCKED = ""
COUNT_TABLES = "SELECT count(*) FROM sqlite_master"
# The expression of the unique index ux_documents_path (migration 0012).
META_PATH = "json_extract({column}, '$.path')"
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
    _refuse_empty_file(Path(database_path(url)))
    # isolation_level=None: kb says BEGIN (IMMEDIATE) itself, see `begin`.
    raw = sqlite3.connect(database_path(url), isolation_level=None)
    try:
        _configure(raw, busy_timeout_seconds)
    except BaseException:
        raw.close()
        raise
    return raw


def _refuse_empty_file(path: Path) -> None:
    """An existing 0-byte file is an emptied database, never a new one to fill.

    A process creating the database holds it at 0 bytes for a moment (between open
    and its first pragma), so a 0-byte file gets a second to grow before it counts."""
    deadline = time.monotonic() + 1.0
    while _is_empty(path) and not path.with_name(path.name + "-wal").exists():
        if time.monotonic() > deadline:
            raise UsageError(
                "the database file is empty (0 bytes), not a kb database: restore it from "
                "a backup, or move it away to start a new knowledge base"
            )
        time.sleep(0.05)


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def _configure(raw: sqlite3.Connection, busy_timeout_seconds: float) -> None:
    set_lock_wait(raw, busy_timeout_seconds)
    _use_write_ahead_log(raw, busy_timeout_seconds)
    raw.execute("PRAGMA synchronous = NORMAL")
    raw.execute("PRAGMA foreign_keys = ON")
    # Checkpoint (and fsync) every ~40 MiB of log, not SQLite's default ~4 MiB: the same
    # task and index pages are rewritten by every task, so a longer log folds many of
    # their versions into one write. The drained queue measured about 25% faster.
    raw.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
    raw.execute(f"PRAGMA journal_size_limit = {WAL_CHECKPOINT_PAGES * 4096}")


def _use_write_ahead_log(raw: sqlite3.Connection, busy_timeout_seconds: float) -> None:
    """Switch to WAL, waiting as long as the busy timeout promises.

    Until its first commit a new database is still in rollback-journal mode, and while
    another process writes it SQLite refuses the switch at once ("database is locked")
    without consulting the busy handler: two first commands on a new home would
    otherwise fail one of them for nothing."""
    deadline = time.monotonic() + busy_timeout_seconds
    while True:
        try:
            raw.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if not is_lock_error(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def set_lock_wait(raw: sqlite3.Connection, seconds: float) -> None:
    raw.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")


def begin(raw: sqlite3.Connection, write: bool) -> None:
    raw.execute("BEGIN IMMEDIATE" if write else "BEGIN")


def commit(raw: sqlite3.Connection) -> None:
    raw.execute("COMMIT")


def rollback(raw: sqlite3.Connection) -> None:
    if raw.in_transaction:
        raw.execute("ROLLBACK")


def shrink_log(raw: sqlite3.Connection) -> None:
    """Truncate the write-ahead log: a write that failed for lack of space leaves the
    log as large as the disk allowed, and nothing else would fit until it shrinks."""
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def notify(raw: sqlite3.Connection, channel: str) -> None:
    """Nothing to send: every commit changes the file, and a DataVersionWatch sees it."""


def watch(url: str, busy_timeout_seconds: float, channel: str) -> DataVersionWatch:
    return DataVersionWatch(url, busy_timeout_seconds)


class DataVersionWatch:
    """SQLite has no notifications between processes: `PRAGMA data_version` on a held
    connection changes when another connection commits, and costs about 12 µs a look
    (no query, no lock), so looking every 50 ms wakes a waiter in ~20 ms median. Any
    commit wakes it (a heartbeat too); the waiter's read then says whether it cares."""

    def __init__(self, url: str, busy_timeout_seconds: float) -> None:
        self._raw = connect(url, busy_timeout_seconds)
        self._seen = self._version()

    def _version(self) -> int | None:
        try:
            version: int = self._raw.execute("PRAGMA data_version").fetchone()[0]
            return version
        except sqlite3.Error:  # a look that failed is a wake-up: the read will tell
            return None

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        deadline = time.monotonic() + seconds
        while not stop.wait(max(0.0, min(WATCH_SLICE_SECONDS, deadline - time.monotonic()))):
            version = self._version()
            if version != self._seen or version is None:
                self._seen = version
                return True
            if time.monotonic() >= deadline:
                return False
        return False

    def close(self) -> None:
        self._raw.close()


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
    # A namedtuple made at run time: mypy knows it only as a tuple, not its _make.
    make = namedtuple("Row", names, rename=True)._make  # type: ignore[attr-defined]
    return lambda _cursor, values: make(values)


def is_lock_error(error: BaseException) -> bool:
    text = str(error).lower()
    return any(sign in text for sign in ("database is locked", "table is locked", "is busy"))


def is_unique_violation(error: BaseException) -> bool:
    return isinstance(error, sqlite3.IntegrityError) and "UNIQUE constraint" in str(error)


def is_connection_error(error: BaseException) -> bool:
    return False  # a file, not a server: nothing to lose


def connect_error_message(error: BaseException, url: str) -> str:
    """Why the file would not open, as far as the filesystem tells."""
    path = Path(database_path(url))
    if not path.parent.is_dir():
        return "cannot open the SQLite database: its directory does not exist (--home / KB_HOME)"
    if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
        return (
            "cannot open the SQLite database: its filesystem is read-only; remount it "
            "read-write, or point --home / --database-url elsewhere"
        )
    if not os.access(path.parent, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.R_OK | os.W_OK)
    ):
        return (
            "cannot open the SQLite database: permission denied; give kb's user read and "
            "write access to the database file and its directory"
        )
    return problem_message(error) or f"cannot open the SQLite database file ({error})"[:300]


# SQLite's own words for a damaged file or a failing disk, and what kb says instead.
_DAMAGE = {
    "file is not a database": "the database file is not a SQLite database (damaged, or "
    "another kind of file): restore it from a backup, or point --home elsewhere",
    "database disk image is malformed": "the database file is damaged (database disk image "
    "is malformed): restore it from a backup; `sqlite3 FILE .recover` may save its rows",
}
_STORAGE = {
    "database or disk is full": "no space left on device for the database: free some "
    "space, then run again",
    "readonly": "the database is read-only (a read-only file or filesystem): give kb's "
    "user write access or remount it read-write, then run again",
    "disk i/o error": "disk I/O error on the database (a full or failing disk?): check "
    "the disk, then run again",
}


def problem_message(error: BaseException) -> str | None:
    """kb's message for a damaged database file, None for anything else."""
    text = str(error).lower()
    return next((message for sign, message in _DAMAGE.items() if sign in text), None)


def storage_message(error: BaseException) -> str | None:
    """kb's message for a database that cannot be written now, None for anything else."""
    text = str(error).lower()
    return next((message for sign, message in _STORAGE.items() if sign in text), None)


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


def caseless_like(column: str, parameter: str) -> str:
    """LIKE is case-insensitive for ASCII in SQLite; the pattern is escape_like'd."""
    return f"{column} LIKE :{parameter} ESCAPE '\\'"


def meta_condition(
    column: str, name: str, key: str, value: str, prefix: bool
) -> tuple[str, dict[str, Any]]:
    """Metadata is JSON text here; the key is quoted in the JSON path, as keys may hold
    dots. A prefix compares the leading characters (LIKE would ignore case)."""
    extracted = f"json_extract({column}, :{name}_key)"
    params = {f"{name}_key": f'$."{key}"', f"{name}_value": value}
    if prefix:
        return f"substr({extracted}, 1, length(:{name}_value)) = :{name}_value", params
    return f"{extracted} = :{name}_value", params
