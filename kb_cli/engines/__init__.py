"""What differs between database engines lives here, one small module per engine.

Each engine module satisfies the `Engine` protocol below: the DB-API side
(connecting, transactions, statements and the verdicts on a driver's errors), the
row-lock clauses, the schema side, the few clauses whose spelling differs (a caseless
LIKE, a condition on JSON metadata), and how a waiting process learns of a commit
(`notify` in the writing transaction, a `Watch` in the waiting process). Statements
are written once, with `:name` parameters, for both engines. How each engine's indexes
rank is not here: kb_cli/lexical/ (words) and kb_cli/vectors/ (meaning).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sqlalchemy import Connection as SAConnection
    from sqlalchemy import Engine as SAEngine

SCHEMA_VERSION = "SELECT version_num FROM kb_schema_version"
# What a commit may have changed, as the channels a waiting process watches.
TASKS_CHANNEL = "kb_tasks"  # a task became claimable, or its retry time moved
EVENTS_CHANNEL = "kb_events"  # a lifecycle event was written
# How often a waiting process looks at its stop request (and, on SQLite, at the file).
WATCH_SLICE_SECONDS = 0.05


class Watch(Protocol):
    """Tells a waiting process that a commit may have changed what it waits for. A
    wake-up is a hint, never the news: the waiter reads the database after it, and a
    lost one costs at most the caller's fallback poll."""

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        """Block up to `seconds`: True when woken by a change, False on time-out or
        when `stop` is set (seen within WATCH_SLICE_SECONDS)."""

    def close(self) -> None: ...


class PollOnly:
    """A Watch that is never woken: each wait lasts its whole time (KB_WAKE=poll, for
    a connection pooler in transaction mode, which cannot keep a LISTEN)."""

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        stop.wait(seconds)
        return False

    def close(self) -> None:
        pass


class Engine(Protocol):
    """One database engine. `raw` is the driver's own connection (sqlite3, psycopg)."""

    @property
    def Error(self) -> type[Exception]:
        """The driver's base error class."""

    LOCK_ROW: str  # appended to a SELECT that locks the row it reads
    SKIP_LOCKED: str  # the same, skipping rows another transaction holds
    COUNT_TABLES: str
    VERSION_TABLE_EXISTS: str
    META_PATH: str  # the metadata `path` of {column}, as the unique index ux_documents_path has it

    def connect(self, url: str, busy_timeout_seconds: float) -> Any: ...
    def set_lock_wait(self, raw: Any, seconds: float) -> None:
        """How long the connection's statements wait for a lock (the busy timeout)."""

    def begin(self, raw: Any, write: bool) -> None: ...
    def commit(self, raw: Any) -> None: ...
    def rollback(self, raw: Any) -> None: ...
    def is_clean(self, raw: Any) -> bool: ...
    def shrink_log(self, raw: Any) -> None: ...
    def execute(self, raw: Any, sql: str, params: Mapping[str, Any]) -> Any: ...
    def executemany(self, raw: Any, sql: str, rows: Iterable[Mapping[str, Any]]) -> Any: ...
    def is_lock_error(self, error: BaseException) -> bool: ...
    def is_connection_error(self, error: BaseException) -> bool: ...
    def is_unique_violation(self, error: BaseException) -> bool: ...
    def connect_error_message(self, error: BaseException, url: str) -> str: ...
    def storage_message(self, error: BaseException) -> str | None:
        """What to say about a full or read-only disk, or None."""

    def problem_message(self, error: BaseException) -> str | None:
        """What to say about a damaged database, or None."""

    def notify(self, raw: Any, channel: str) -> None:
        """Wake the watchers of `channel` when the caller's transaction commits."""

    def watch(self, url: str, busy_timeout_seconds: float, channel: str) -> Watch: ...
    def sqlalchemy_engine(self, url: str, busy_timeout_seconds: float) -> SAEngine: ...
    def lock_for_migration(self, conn: SAConnection) -> None: ...
    def caseless_like(self, column: str, parameter: str) -> str: ...

    def meta_condition(
        self, column: str, name: str, key: str, value: str, prefix: bool
    ) -> tuple[str, dict[str, Any]]:
        """A condition that the JSON metadata in `column` has `key` equal to `value`
        (or starting with it, with `prefix`), and its parameters, named after `name`."""


def escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
