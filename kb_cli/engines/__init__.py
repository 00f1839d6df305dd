"""What differs between database engines lives here, one small module per engine.

Each module offers: `create_engine(url, busy_timeout_seconds)`, `is_lock_error(error)`,
`SKIP_LOCKED` (whether claiming uses FOR UPDATE SKIP LOCKED), `schema_version_sql()`
helpers, `lock_for_migration(conn)` and `search_statement(...)`.
"""

from __future__ import annotations

from types import ModuleType


def for_url(url: str) -> ModuleType:
    if url.startswith("sqlite"):
        from kb_cli.engines import sqlite

        return sqlite
    if url.startswith("postgresql"):
        from kb_cli.engines import postgresql

        return postgresql
    from kb_cli.errors import UsageError

    raise UsageError("unsupported database URL: use sqlite:///PATH or postgresql+psycopg://...")
