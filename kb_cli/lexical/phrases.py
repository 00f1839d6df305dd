"""What every words candidate meets on both engines, and what a meaning ranking keeps
when a question quotes a phrase: each quoted phrase verbatim (ASCII case ignored), its
document in the caller's scope."""

from __future__ import annotations

from collections.abc import Callable

from kb_cli import queries
from kb_cli.db import Connection
from kb_cli.engines import escape_like
from kb_cli.permissions import Scope


def candidate_filters(
    phrases: list[str],
    scope: str,
    params: dict[str, object],
    caseless_like: Callable[[str, str], str],
) -> str:
    """The conditions every words candidate meets on both engines: each quoted phrase
    verbatim (`caseless_like` is the engine's), and its document `d` within `scope`
    (queries.scope_filter). Adds the phrases' parameters to `params`."""
    filters = []
    for i, phrase in enumerate(phrases):
        params[f"phrase{i}"] = "%" + escape_like(phrase) + "%"
        filters.append(" AND " + caseless_like("c.text", f"phrase{i}"))
    if scope:
        filters.append(f" AND {scope}")
    return "".join(filters)


def chunks_with_phrases(conn: Connection, phrases: list[str], scope: Scope) -> set[int]:
    """Published chunks in `scope` holding every phrase (ASCII case ignored): what a
    meaning ranking keeps of its candidates when the question quotes a phrase."""
    scoped, params = queries.scope_filter(scope, engine=conn.engine)
    filters = candidate_filters(phrases, scoped, params, conn.engine.caseless_like)
    sql = f"SELECT c.id {queries.PUBLISHED_CHUNKS} WHERE 1 = 1{filters}"
    return set(conn.execute(sql, params).scalars())
