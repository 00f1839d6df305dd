"""Finding the published chunks nearest a query vector: the `VectorIndex` protocol, and
the index this knowledge base's settings and engine call for. Every implementation
returns only chunks of published revisions in the caller's scope: an index may propose
candidates, the database decides what may be seen."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kb_cli import queries
from kb_cli.db import Connection
from kb_cli.embeddings import from_blobs
from kb_cli.permissions import Scope
from kb_cli.ranking import Scored, top_similar

if TYPE_CHECKING:
    import numpy as np

    from kb_cli.config import Settings


class VectorIndex(Protocol):
    def nearest(
        self,
        conn: Connection,
        model: str,
        query: np.ndarray,
        depth: int,
        scope: Scope,
        floor: float,
    ) -> list[Scored]:
        """(chunk id, cosine similarity) of the `depth` published chunks in `scope`
        embedded by `model` most similar to `query` (a unit vector), at or above
        `floor`, best first; ties by chunk id."""
        ...


class ExactScan:
    """Reads every published vector in scope and ranks them all: exact, and linear in
    the size of the scope."""

    def nearest(
        self,
        conn: Connection,
        model: str,
        query: np.ndarray,
        depth: int,
        scope: Scope,
        floor: float,
    ) -> list[Scored]:
        chunk_ids, blobs = queries.published_vectors(conn, model, len(query), scope)
        if not chunk_ids:
            return []
        return top_similar(chunk_ids, from_blobs(blobs, len(query)), query, floor, depth)


def make_vector_index(settings: Settings) -> VectorIndex:
    """The index search uses on this knowledge base: on SQLite, the derived index file
    beside the database when there is a current one (kb_cli/vectors/signfile.py); on
    PostgreSQL, pgvector's (which scans exactly where the database has no pgvector)."""
    if settings.is_sqlite:
        from kb_cli.vectors.signfile import SignFileIndex, directory_for

        return SignFileIndex(directory_for(settings), ExactScan().nearest)
    if settings.database_url.startswith("postgresql"):
        from kb_cli.vectors.pgvector import PgVectorIndex

        return PgVectorIndex(ExactScan().nearest)
    return ExactScan()
