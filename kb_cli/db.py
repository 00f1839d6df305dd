"""The only place that creates engines and transactions.

`write()` opens a short write transaction (BEGIN IMMEDIATE on SQLite), `read()` a
snapshot. What differs between engines lives in `kb_cli/engines/`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, exc

from kb_cli import engines
from kb_cli.errors import BusyError, InternalError, KbError, UsageError


def utcnow() -> str:
    """Now as a fixed-width RFC 3339 UTC timestamp; such strings sort chronologically."""
    return format_stamp(datetime.now(UTC))


def format_stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_stamp(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


BUSY_MESSAGE = "the database stayed locked past the busy timeout; safe to run again"


@functools.cache
def get_engine(url: str, busy_timeout_seconds: float) -> Engine:
    try:
        return engines.for_url(url).create_engine(url, busy_timeout_seconds)
    except ModuleNotFoundError as error:
        raise UsageError(
            f"the database driver {error.name!r} is not installed: use postgresql+psycopg://"
            " and install kb-cli[postgres]"
        ) from None


class DatabaseUnavailable(InternalError):
    """The database server cannot be reached, or the connection to it was lost."""


class SchemaError(KbError):
    """The database schema does not match this version of kb."""

    exit_code = 1
    code = "internal_error"


class Database:
    """Opens short transactions: `write()` for changes, `read()` for snapshots."""

    def __init__(self, url: str, busy_timeout_seconds: float) -> None:
        self.url = url
        self.engine_module = engines.for_url(url)
        try:
            self.engine = get_engine(url, busy_timeout_seconds)
        except (ValueError, exc.ArgumentError) as error:
            raise UsageError("the database URL is not valid") from error
        self.is_sqlite = url.startswith("sqlite")

    @contextmanager
    def write(self) -> Iterator[Connection]:
        with self._translate_errors(), self._connect() as conn:
            conn = conn.execution_options(kb_write=True)
            with conn.begin():
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self._translate_errors(), self._connect() as conn, conn.begin():
            yield conn

    def _connect(self) -> Connection:
        try:
            return self.engine.connect()
        except (ValueError, exc.ArgumentError) as error:
            raise UsageError("the database URL is not valid") from error
        except exc.OperationalError as error:
            if self.engine_module.is_lock_error(error):
                raise BusyError(BUSY_MESSAGE) from error
            if self.is_sqlite:
                raise UsageError(
                    "cannot open the SQLite database file: does its directory exist, "
                    "and may kb write there?"
                ) from error
            raise DatabaseUnavailable(
                f"cannot reach the database server ({type(error.orig).__name__})"
            ) from error

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        try:
            yield
        except exc.DBAPIError as error:
            if self.engine_module.is_lock_error(error):
                raise BusyError(BUSY_MESSAGE) from error
            if isinstance(error, exc.OperationalError) and not self.is_sqlite:
                raise DatabaseUnavailable(
                    "lost the connection to the database server "
                    f"({type(error.orig).__name__}); run again when it is back"
                ) from error
            if self.is_sqlite and "readonly" in str(error.orig).lower():
                raise UsageError("the SQLite database is read-only for kb") from error
            raise InternalError(f"database error ({type(error.orig).__name__})") from error

    # --- schema ----------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the schema on first use; upgrade SQLite automatically.

        PostgreSQL databases shared by many hosts are upgraded on purpose, with
        `kb db upgrade`, never as a side effect of some command.
        """
        from kb_cli.migrations import HEAD

        with self.read() as conn:
            version = self.schema_version(conn)
        if version == HEAD:
            return
        self._refuse_unknown(version)
        if version is not None and not self.is_sqlite:
            raise SchemaError(
                f"the database schema is at revision {version}, this kb needs {HEAD}: "
                "run `kb db upgrade`"
            )
        self.upgrade()

    def upgrade(self) -> tuple[str | None, str]:
        """Bring the schema to this kb's revision; (before, after)."""
        from kb_cli import migrations

        with self.write() as conn:
            self.engine_module.lock_for_migration(conn)
            before = self.schema_version(conn)
            self._refuse_unknown(before)
            if before != migrations.HEAD:
                migrations.upgrade(conn)
        return before, migrations.HEAD

    def schema_version(self, conn: Connection) -> str | None:
        if not conn.exec_driver_sql(self.engine_module.VERSION_TABLE_EXISTS).scalar():
            return None
        return conn.exec_driver_sql("SELECT version_num FROM kb_schema_version").scalar()

    @staticmethod
    def _refuse_unknown(version: str | None) -> None:
        from kb_cli.migrations import REVISIONS

        if version is not None and version not in REVISIONS:
            raise SchemaError(
                f"the database schema is at revision {version}, newer than this kb knows "
                f"({REVISIONS[-1]}); upgrade kb"
            )
