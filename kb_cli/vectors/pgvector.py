"""The nearest published chunks from pgvector's HNSW index on PostgreSQL, where the
database has it (kb_cli/migrations/pgvector.py); the exact scan where it has not.

One statement walks the index of the query's model in order of inner product (the
vectors are unit length) and keeps only chunks of published revisions in the caller's
scope: the same join and scope condition as every other search statement, in the same
transaction, so no chunk outside them is ever returned. pgvector 0.8's iterative
scan (`relaxed_order`) goes on past `ef_search` candidates while the filter leaves
fewer than `depth`; when it stops short (the scope is small, or `hnsw.max_scan_tuples`
was reached) the exact scan answers instead. The candidates' own stored vectors then
give the similarities, exactly as the exact scan computes them, so scores, the floor
and ties (by chunk id) are the same; only which chunks are candidates is approximate
(recall@10 measured in benchmarks/README.md, "pgvector on PostgreSQL")."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kb_cli import queries
from kb_cli.db import Connection
from kb_cli.embeddings import from_blobs, to_blob
from kb_cli.permissions import Scope
from kb_cli.ranking import Scored, top_similar

if TYPE_CHECKING:
    import numpy as np

# Candidates the graph search keeps (hnsw.ef_search), at least `depth`: chosen on
# benchmarks/README.md, "pgvector on PostgreSQL" (recall@10 against the exact ranking).
EF_SEARCH = 100

Nearest = Callable[[Connection, str, "np.ndarray", int, Scope, float], list[Scored]]


class PgVectorIndex:
    def __init__(self, exact: Nearest) -> None:
        self.exact = exact

    def nearest(
        self,
        conn: Connection,
        model: str,
        query: np.ndarray,
        depth: int,
        scope: Scope,
        floor: float,
    ) -> list[Scored]:
        if not conn.engine.indexes_vectors(conn.raw):
            return self.exact(conn, model, query, depth, scope, floor)
        dim = len(query)
        ef_search = max(EF_SEARCH, depth)
        chunk_ids, blobs = queries.nearest_by_index(
            conn, model, dim, to_blob(query), depth, scope, ef_search
        )
        if len(chunk_ids) < depth:
            return self.exact(conn, model, query, depth, scope, floor)
        return top_similar(chunk_ids, from_blobs(blobs, dim), query, floor, depth)
