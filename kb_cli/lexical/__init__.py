"""Ranking published chunks by their words: the `LexicalIndex` protocol, and the index
this knowledge base's engine calls for. Beside kb_cli/vectors/, which ranks by meaning.

Both implementations score BM25 with FTS5's constants (kb_cli/ranking.py), so the two
engines agree on the same data; both count only the chunks of the bases in the caller's
scope, and return only chunks of published revisions in it: the scope is a condition
of the ranking's own statements (docs/access.md, "Knowledge bases"), never a filter
applied after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kb_cli.db import Connection, Database
from kb_cli.permissions import Scope
from kb_cli.ranking import Scored

if TYPE_CHECKING:
    from kb_cli.config import Settings


class LexicalIndex(Protocol):
    def ranking(
        self, conn: Connection, terms: list[str], phrases: list[str], limit: int, scope: Scope
    ) -> list[Scored]:
        """(chunk id, BM25 score) of the best `limit` published chunks in `scope` that
        hold any of `terms` and every one of `phrases` (verbatim, ASCII case ignored),
        best first; ties by chunk id."""
        ...

    def kind(self, conn: Connection) -> str:
        """Which index ranks the words here, as `kb doctor` names it: `fts5` (SQLite),
        `pg_textsearch` (PostgreSQL's BM25 index) or `gin` (PostgreSQL without it)."""
        ...

    def problems(self, conn: Connection) -> list[str]:
        """What the index cannot find now although it should (each a sentence saying
        what `kb doctor --repair` does about it)."""
        ...

    def rebuild(self, db: Database) -> bool:
        """Write the index anew from the chunks (what `kb doctor --repair` does); False
        when it cannot be now (the server does not load its extension)."""
        ...


def make_lexical_index(settings: Settings) -> LexicalIndex:
    """The words index of this knowledge base's engine: SQLite's FTS5 index of the
    chunks' terms (kb_cli/lexical/fts5.py), or PostgreSQL's full-text index of their
    stored words (kb_cli/lexical/tsvector.py)."""
    if settings.is_sqlite:
        from kb_cli.lexical.fts5 import Fts5Index

        return Fts5Index()
    from kb_cli.lexical.tsvector import TsvectorIndex

    return TsvectorIndex()
