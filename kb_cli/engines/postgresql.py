"""PostgreSQL: the engine for teams whose workers run on many hosts.

Claiming uses FOR UPDATE SKIP LOCKED, so workers never queue behind each other's row
locks. A lock held past the busy timeout (lock_timeout) is `busy`, as on SQLite. The
words ranking over its full-text index is kb_cli/lexical/tsvector.py's; pgvector's
index is kb_cli/vectors/pgvector.py's.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
import time
from typing import TYPE_CHECKING, Any

from kb_cli.engines import WATCH_SLICE_SECONDS
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
COUNT_TABLES = (
    "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
)
# The expression of the unique index ux_documents_path (migration 0012).
META_PATH = "({column} ->> 'path')"
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


def set_lock_wait(raw: psycopg.Connection, seconds: float) -> None:
    raw.execute(f"SET lock_timeout = {max(1, int(seconds * 1000))}")


def begin(raw: psycopg.Connection, write: bool) -> None:
    # Whatever the server's default: every conditional UPDATE and the vector keys'
    # triggers (kb_cli/migrations/pgvector.py) count on each statement seeing what
    # was committed before it.
    raw.execute("BEGIN ISOLATION LEVEL READ COMMITTED")


def commit(raw: psycopg.Connection) -> None:
    raw.execute("COMMIT")


def rollback(raw: psycopg.Connection) -> None:
    if not raw.closed:
        raw.execute("ROLLBACK")


def shrink_log(raw: psycopg.Connection) -> None:
    """Nothing to give back: the server manages its own log."""


def notify(raw: psycopg.Connection, channel: str) -> None:
    """Delivered at commit, and not at all on a rollback; one per channel per
    transaction however often it is said."""
    raw.execute(f"NOTIFY {channel}")


def watch(url: str, busy_timeout_seconds: float, channel: str) -> Listener:
    return Listener(url, channel)


# The listener's connection is checked this often while nothing arrives: a connection
# dropped without a word (a pooler, a firewall) would otherwise listen to nothing.
PING_SECONDS = 30.0
RECONNECT_CAP_SECONDS = 5.0


class Listener:
    """LISTEN on a dedicated connection, in a thread of its own; a notification only
    rings a bell, which the waiter's `wait` answers. A lost connection is reconnected
    with backoff, and the bell rings on every (re)connection: whatever was committed
    while nobody listened is looked at then."""

    def __init__(self, url: str, channel: str) -> None:
        self.url = url
        self.channel = channel
        self.bell = threading.Event()
        self.connected = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="kb-listen", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        import psycopg

        delay = 0.1
        while not self._closed.is_set():
            try:
                with psycopg.connect(
                    conninfo(self.url), autocommit=True, connect_timeout=10
                ) as raw:
                    raw.execute(f"LISTEN {self.channel}")
                    self.connected.set()
                    self.bell.set()
                    delay = 0.1
                    self._relay_notifications(raw)
            except psycopg.Error:
                self.connected.clear()
                self.bell.set()  # the waiter reads once; its fallback poll covers the rest
                self._closed.wait(delay)
                delay = min(delay * 2, RECONNECT_CAP_SECONDS)

    def _relay_notifications(self, raw: psycopg.Connection) -> None:
        last_ping = time.monotonic()
        while not self._closed.is_set():
            for _ in raw.notifies(timeout=1.0):
                self.bell.set()
            if time.monotonic() - last_ping >= PING_SECONDS:
                raw.execute("SELECT 1")
                last_ping = time.monotonic()

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self.bell.wait(min(remaining, WATCH_SLICE_SECONDS)):
                self.bell.clear()  # before the waiter reads: a later ring is not lost
                return True
        return False

    def close(self) -> None:
        """The thread ends within a second; as a daemon it never holds the process."""
        self._closed.set()
        with contextlib.suppress(RuntimeError):
            self._thread.join(timeout=2.0)


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


def is_unique_violation(error: BaseException) -> bool:
    return getattr(error, "sqlstate", None) == "23505"


def is_connection_error(error: BaseException) -> bool:
    """The connection is gone (not a query that failed on a live one): the client lost
    it (no SQLSTATE), or the server says so (class 08, or an admin shutdown 57P0x)."""
    from psycopg import OperationalError

    state = getattr(error, "sqlstate", None)
    if state is None:
        return isinstance(error, OperationalError)
    return state.startswith("08") or state in ("57P01", "57P02", "57P03")


def problem_message(error: BaseException) -> str | None:
    return None  # a damaged PostgreSQL database is the server's to report


def storage_message(error: BaseException) -> str | None:
    """kb's message for a server that cannot write now (disk full, read-only)."""
    state = getattr(error, "sqlstate", None) or ""
    if state == "53100":
        return "the database server has no space left on device: free some space, then run again"
    if state == "25006":
        return "the database server is read-only (a standby?): point kb at the primary"
    if state.startswith("53"):
        return "the database server is out of resources (memory, disk, connections)"
    return None


def connect_error_message(error: BaseException, url: str) -> str:
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


def meta_condition(
    column: str, name: str, key: str, value: str, prefix: bool
) -> tuple[str, dict[str, Any]]:
    """Equality is jsonb containment, which the GIN index ix_documents_meta (migration
    0012) answers; a prefix reads the key's text."""
    if prefix:
        params = {f"{name}_key": key, f"{name}_value": value}
        return f"starts_with({column} ->> :{name}_key, :{name}_value)", params
    return f"{column} @> CAST(:{name} AS jsonb)", {name: json.dumps({key: value})}


def caseless_like(column: str, parameter: str) -> str:
    """PostgreSQL's LIKE is case-sensitive, and its default escape is the backslash."""
    return f"{column} ILIKE :{parameter}"
