"""The only place that opens database connections and transactions.

Statements go straight to the DB-API driver (sqlite3, psycopg), written once with
`:name` parameters: importing SQLAlchemy costs more than a whole `kb status`, and its
per-statement overhead dominated the worker's hot path. SQLAlchemy and Alembic are
loaded only to create or upgrade the schema. `write()` opens a short write
transaction (BEGIN IMMEDIATE on SQLite), `read()` a snapshot. What differs between
engines lives in `kb_cli/engines/`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from kb_cli import engines
from kb_cli.errors import (
    AlreadyExists,
    BusyError,
    DatabaseUnavailable,
    InternalError,
    KbError,
    SchemaError,
    StopRequested,
    StorageUnavailable,
    UsageError,
)

T = TypeVar("T")


def format_stamp(moment: datetime) -> str:
    """A moment as a fixed-width RFC 3339 UTC timestamp; such strings sort
    chronologically. Every timestamp kb writes is one of the application's clock
    (kb_cli/clock.py), through Kb.timestamp or a Claimant's now."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_stamp(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


BUSY_MESSAGE = "the database stayed locked past the busy timeout; safe to run again"
FIRST_RECONNECT_SECONDS = 0.1
RECONNECT_CAP_SECONDS = 2.0


def outlasting_outages(step: Callable[[], T], stop: threading.Event, bound_seconds: float) -> T:
    """What `step` (its own transactions, safe to run again) returns, run again while
    the database server cannot be reached: a restart, a failover, a short outage. The
    pauses grow from 0.1 s to 2 s; after `bound_seconds` of failing (KB_RECONNECT_SECONDS)
    its DatabaseUnavailable goes to the caller, saying so. A stop request ends the
    waiting with StopRequested."""
    started = time.monotonic()
    delay = FIRST_RECONNECT_SECONDS
    while True:
        try:
            return step()
        except DatabaseUnavailable as error:
            left = bound_seconds - (time.monotonic() - started)
            if left <= 0:
                raise DatabaseUnavailable(
                    f"{error.message} (still unreachable after {bound_seconds:g} s of "
                    "reconnecting; KB_RECONNECT_SECONDS sets how long)"
                ) from error
            if stop.wait(min(delay, left)):
                raise StopRequested() from error
            delay = min(delay * 2, RECONNECT_CAP_SECONDS)


RawRow = tuple[Any, ...]
"""A row as the driver returns it; kb_cli/queries.py turns it into a typed row
(kb_cli/records.py) or reads it by position."""


class Result:
    """What a statement returned: rows, or a row count."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        count: int = self._cursor.rowcount
        return count

    def first(self) -> RawRow | None:
        row: RawRow | None = self._cursor.fetchone()
        return row

    def one(self) -> RawRow:
        """The row a statement always returns (an aggregate's)."""
        row = self.first()
        if row is None:
            raise InternalError("a statement of one row returned none")
        return row

    def all(self) -> list[RawRow]:
        rows: list[RawRow] = self._cursor.fetchall()
        return rows

    def scalar(self) -> Any:
        row = self._cursor.fetchone()
        return None if row is None else row[0]

    def scalars(self) -> list[Any]:
        return [row[0] for row in self._cursor.fetchall()]

    def __iter__(self) -> Iterator[RawRow]:
        return iter(self._cursor)


class Connection:
    """One open transaction. Statements use `:name` parameters on every engine."""

    __slots__ = ("engine", "raw")

    def __init__(self, raw: Any, engine: engines.Engine) -> None:
        self.raw = raw
        self.engine = engine

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Result:
        return Result(self.engine.execute(self.raw, sql, params or {}))

    def executemany(self, sql: str, rows: Iterable[Mapping[str, Any]]) -> Result:
        return Result(self.engine.executemany(self.raw, sql, rows))


def engine_for(url: str) -> engines.Engine:
    """The engine module of a database URL, imported only when a URL names it (the
    engines package never imports its engines: they import it)."""
    if url.startswith("sqlite"):
        from kb_cli.engines import sqlite

        return sqlite
    if url.startswith("postgresql"):
        from kb_cli.engines import postgresql

        return postgresql
    raise UsageError("unsupported database URL: use sqlite:///PATH or postgresql+psycopg://...")


class Database:
    """Opens short transactions: `write()` for changes, `read()` for snapshots.

    Connections are kept per thread (the worker's heartbeat has its own) and reused;
    one that lost its server is dropped, so the next transaction connects anew.
    """

    # For measuring (the benchmarks time how long the worker holds SQLite's write lock):
    # called after every committed transaction of the process with "read" or "write" and
    # the seconds from BEGIN having returned (the write lock taken) to COMMIT having
    # returned. Process-wide, so that it sees a command's database too; unset, it costs
    # one check per transaction.
    on_transaction: ClassVar[Callable[[str, float], None] | None] = None

    def __init__(self, url: str, busy_timeout_seconds: float, wake: bool = True) -> None:
        self.url = url
        self.busy_timeout_seconds = busy_timeout_seconds
        self.wake = wake  # False: waiters poll (engines.PollOnly)
        self.engine = engine_for(url)
        self.is_sqlite = url.startswith("sqlite")
        self._idle = threading.local()

    @contextmanager
    def write(self, lock_wait_seconds: float | None = None) -> Iterator[Connection]:
        """A write transaction; with `lock_wait_seconds`, one that waits at most that
        long for a lock instead of the busy timeout (a best-effort write that must not
        hold its command up), on the same pooled connection."""
        with self._transaction(write=True, lock_wait_seconds=lock_wait_seconds) as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self._transaction(write=False) as conn:
            yield conn

    @contextmanager
    def _transaction(
        self, write: bool, lock_wait_seconds: float | None = None
    ) -> Iterator[Connection]:
        observer = Database.on_transaction
        with self._translate_errors():
            raw = self._begin(write, lock_wait_seconds)
            began = time.perf_counter() if observer is not None else 0.0
            try:
                yield Connection(raw, self.engine)
                self.engine.commit(raw)
            except BaseException:
                with contextlib.suppress(self.engine.Error):  # the first error is the news
                    self.engine.rollback(raw)
                raise
            finally:
                self._release(raw, restore_lock_wait=lock_wait_seconds is not None)
        if observer is not None:
            observer("write" if write else "read", time.perf_counter() - began)

    def _begin(self, write: bool, lock_wait_seconds: float | None) -> Any:
        """A connection with its transaction begun. A pooled connection that the server
        dropped while it sat idle (restart, failover, idle timeout) is replaced:
        nothing has run in the transaction yet, so beginning again is safe."""
        idle = self._idle.__dict__.setdefault("connections", [])
        while True:
            pooled = bool(idle)
            raw = idle.pop() if pooled else self._connect()
            try:
                if lock_wait_seconds is not None:
                    self.engine.set_lock_wait(raw, lock_wait_seconds)
                self.engine.begin(raw, write)
                return raw
            except BaseException as error:
                self._release(raw, restore_lock_wait=lock_wait_seconds is not None)
                if not (pooled and self._is_connection_error(error)):
                    raise

    def _is_connection_error(self, error: BaseException) -> bool:
        return isinstance(error, self.engine.Error) and self.engine.is_connection_error(error)

    def _connect(self) -> Any:
        try:
            return self.engine.connect(self.url, self.busy_timeout_seconds)
        except self.engine.Error as error:
            if self.engine.is_lock_error(error):
                raise BusyError(BUSY_MESSAGE) from error
            storage = self.engine.storage_message(error)
            if storage:
                raise StorageUnavailable(storage) from error
            message = self.engine.connect_error_message(error, self.url)
            if self.is_sqlite:
                raise UsageError(message) from error
            raise DatabaseUnavailable(message) from error

    def _release(self, raw: Any, restore_lock_wait: bool = False) -> None:
        """Back to this thread's idle list if it is clean (with its busy timeout again,
        after a brief write); closed if it is broken or still inside a transaction (an
        interrupt between BEGIN and ROLLBACK)."""
        if not self.engine.is_clean(raw):
            self._discard(raw)
            return
        if restore_lock_wait:
            try:
                self.engine.set_lock_wait(raw, self.busy_timeout_seconds)
            except self.engine.Error:
                self._discard(raw)
                return
        self._idle.connections.append(raw)

    @staticmethod
    def _discard(raw: Any) -> None:
        with contextlib.suppress(Exception):  # a dead connection may fail to close
            raw.close()

    def watch(self, channel: str) -> engines.Watch:
        """A Watch of `channel` (engines.TASKS_CHANNEL, EVENTS_CHANNEL) on a connection
        of its own; the caller closes it."""
        if not self.wake:
            return engines.PollOnly()
        with self._translate_errors():
            return self.engine.watch(self.url, self.busy_timeout_seconds, channel)

    def release_space(self) -> None:
        """After a write failed for lack of space, give back what the failed write took
        (SQLite's write-ahead log), so that a small write, such as recording the
        failure, fits again. Best effort."""
        with contextlib.suppress(KbError), self._translate_errors():
            raw = self._connect()
            try:
                self.engine.shrink_log(raw)
            finally:
                self._discard(raw)

    def close(self) -> None:
        """Close this thread's idle connections (other threads close theirs on exit)."""
        for raw in self._idle.__dict__.pop("connections", []):
            self._discard(raw)

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        try:
            yield
        except self.engine.Error as error:
            name = type(error).__name__
            if self.engine.is_lock_error(error):
                raise BusyError(BUSY_MESSAGE) from error
            if self.engine.is_unique_violation(error):
                raise AlreadyExists(
                    "it already exists: another command made it meanwhile; read it and run again"
                ) from error
            if self.engine.is_connection_error(error):
                raise DatabaseUnavailable(
                    f"lost the connection to the database server ({name}); "
                    "run again when it is back"
                ) from error
            if storage := self.engine.storage_message(error):
                raise StorageUnavailable(storage) from error
            if damage := self.engine.problem_message(error):
                raise UsageError(damage) from error
            raise InternalError(f"database error ({name})") from error

    # --- schema ----------------------------------------------------------------------

    def ensure_schema(self, create: bool = True) -> bool | None:
        """Create the schema on first use (True then; None when there is none and not
        `create`: nothing done); upgrade SQLite automatically.

        PostgreSQL databases shared by many hosts are upgraded on purpose, with
        `kb db upgrade`, never as a side effect of some command.
        """
        from kb_cli.migrations import HEAD

        with self.read() as conn:
            version = self.schema_version(conn)
        if version == HEAD:
            return False
        self._refuse_unknown(version)
        if version is None and self.is_sqlite:
            self._refuse_foreign_file()
        if version is None and not create:
            return None
        if version is not None and not self.is_sqlite:
            raise SchemaError(
                f"the database schema is at revision {version}, this kb needs {HEAD}: "
                "run `kb db upgrade`"
            )
        self.upgrade()
        return version is None

    def _refuse_foreign_file(self) -> None:
        """A SQLite file with tables but no kb schema belongs to something else."""
        with self.read() as conn:
            tables = conn.execute(self.engine.COUNT_TABLES).scalar()
        if tables:
            raise UsageError(
                "the database file is not a kb database (it has tables but no kb schema): "
                "point --home / --database-url at a kb database, or at a new file"
            )

    def upgrade(self) -> tuple[str | None, str]:
        """Bring the schema to this kb's revision; (before, after). Alembic runs on a
        SQLAlchemy connection of its own, inside one transaction."""
        from sqlalchemy import exc

        from kb_cli import migrations

        engine = self.engine.sqlalchemy_engine(self.url, self.busy_timeout_seconds)
        try:
            with self._translate_errors(), engine.begin() as conn:
                self.engine.lock_for_migration(conn)
                before = self.schema_version(conn)
                self._refuse_unknown(before)
                if before != migrations.HEAD:
                    migrations.upgrade(conn)
                elif not self.is_sqlite:
                    # pgvector installed since migration 0013 ran (which made nothing
                    # then), or a model in use without its index yet.
                    from kb_cli.migrations import pgvector

                    pgvector.enable(pgvector.driver(conn))
        except exc.DBAPIError as error:
            # Same verdicts as for kb's own statements, judged on the driver's error.
            with self._translate_errors():
                raise (error.orig or error) from error
        finally:
            engine.dispose()
        return before, migrations.HEAD

    def schema_version(self, conn: Any) -> str | None:
        """The schema revision, on a kb Connection or a SQLAlchemy one."""
        run = getattr(conn, "exec_driver_sql", None) or conn.execute
        if not run(self.engine.VERSION_TABLE_EXISTS).scalar():
            return None
        version: str | None = run(engines.SCHEMA_VERSION).scalar()
        return version

    @staticmethod
    def _refuse_unknown(version: str | None) -> None:
        from kb_cli.migrations import REVISIONS

        if version is not None and version not in REVISIONS:
            raise SchemaError(
                f"the database schema is at revision {version}, newer than this kb knows "
                f"({REVISIONS[-1]}); upgrade kb"
            )
