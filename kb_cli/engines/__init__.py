"""What differs between database engines lives here, one small module per engine.

Each module offers the DB-API side (`connect`, `begin`, `commit`, `rollback`,
`execute`, `executemany`, `Error`, `is_lock_error`, `is_connection_error`,
`connect_error_message`, and `storage_message` / `problem_message`, which name a
full or read-only disk and a damaged database), the row-lock clauses `LOCK_ROW` and
`SKIP_LOCKED`, the schema side (`sqlalchemy_engine`, `lock_for_migration`,
`VERSION_TABLE_EXISTS`) and `lexical_ranking(...)`, BM25 over the caller's scope.
Statements are written once, with `:name` parameters, for both engines.
"""

from __future__ import annotations

from types import ModuleType

SCHEMA_VERSION = "SELECT version_num FROM kb_schema_version"


def for_url(url: str) -> ModuleType:
    if url.startswith("sqlite"):
        from kb_cli.engines import sqlite

        return sqlite
    if url.startswith("postgresql"):
        from kb_cli.engines import postgresql

        return postgresql
    from kb_cli.errors import UsageError

    raise UsageError("unsupported database URL: use sqlite:///PATH or postgresql+psycopg://...")


def escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def candidate_filters(
    phrases: list[str], scope: str, params: dict[str, object], caseless_like
) -> str:
    """The conditions every lexical candidate meets on both engines: each quoted phrase
    verbatim (`caseless_like` is the engine's), and its document `d` within `scope`
    (queries.scope_filter). Adds the phrases' parameters to `params`."""
    filters = []
    for i, phrase in enumerate(phrases):
        params[f"phrase{i}"] = "%" + escape_like(phrase) + "%"
        filters.append(" AND " + caseless_like("c.text", f"phrase{i}"))
    if scope:
        filters.append(f" AND {scope}")
    return "".join(filters)
