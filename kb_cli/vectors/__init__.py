"""Finding the published chunks nearest a query vector: the `VectorIndex` protocol, and
the index this knowledge base's engine calls for. Beside kb_cli/lexical/, which ranks
by words. Every implementation returns only chunks of published revisions in the
caller's scope: an index may propose candidates, the database decides what may be seen.

The protocol is all that the search, the worker, `kb doctor` and `kb reindex` know of
an index: what it finds, what a chunk write keeps beside each vector for it, how it
catches up after chunks are written, what is wrong with it, and how it is built anew.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from kb_cli.db import Connection, Database
from kb_cli.permissions import Scope
from kb_cli.ranking import Scored
from kb_cli.records import BuildReport, IndexProblem

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

    def beside(self, conn: Connection, vectors: Sequence[bytes | None]) -> dict[str, list[object]]:
        """The columns a write of chunks with these stored vectors (None: no vector)
        fills for the index in the same statement, each a value per chunk, in `conn`'s
        transaction: none for an index kept outside the chunk rows."""
        ...

    def refresh(self, db: Database, model: str) -> None:
        """After chunks were written, with no transaction open: bring the index of
        `model` up to date when it is due. Skipped while another process does; a
        failure leaves search to read every vector until a later refresh."""
        ...

    def notes(self, conn: Connection) -> list[str]:
        """What an operator could do, outside kb, for search to stop reading every
        vector (a database extension to install), as `kb doctor` says it."""
        ...

    def problems(self, db: Database, model: str) -> list[IndexProblem]:
        """The vectors of `model` that the index cannot serve now, although it should."""
        ...

    def rebuild(self, db: Database, model: str, dims: Sequence[int] = ()) -> list[BuildReport]:
        """Write the index of `model` anew from the database, at each of `dims` (every
        dimension it has vectors in when none is given); waits for another process
        writing it. UsageError where the database indexes vectors itself."""
        ...


def make_vector_index(settings: Settings) -> VectorIndex:
    """The index search uses on this knowledge base: on SQLite, the derived index file
    beside the database when there is a current one (kb_cli/vectors/signfile.py); on
    PostgreSQL, pgvector's (which scans exactly where the database has no pgvector)."""
    if settings.is_sqlite:
        from kb_cli.vectors.signfile import SignFileIndex, directory_for

        return SignFileIndex(directory_for(settings), settings.vector_index_min_chunks)
    from kb_cli.vectors.pgvector import PgVectorIndex

    return PgVectorIndex()
