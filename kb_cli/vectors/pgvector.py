"""The nearest published chunks from pgvector's HNSW index on PostgreSQL, where the
database has it; the exact scan where it has not. Everything kb does with pgvector
at run time is here: the search, the halfvec column a chunk write fills, and what
`kb doctor` says of it. The schema it needs (the halfvec column, its trigger, an HNSW
index per model) is made by the migrations, as every table's is
(kb_cli/migrations/pgvector.py), and the binary `halfvec` a write sends is
kb_cli/embeddings/halfvec.py's, which a migration sends too.

One statement walks the index of the query's model in order of inner product (the
vectors are unit length). The index holds each distinct vector once; a vector's chunks
are found by its key (kb_cli/migrations/pgvector.py says why), and only chunks of
published revisions in the caller's scope are kept: the same join and scope condition
as every other search statement, in the same transaction, so no chunk outside them is
ever returned. pgvector 0.8's iterative scan (`relaxed_order`) goes on past `ef_search`
candidates while the filter leaves fewer than `depth`; when it stops short (the scope is
small, or `hnsw.max_scan_tuples` was reached) the exact scan answers instead. The index
is asked for WIDER times the chunks wanted, and the candidates' own stored vectors then
give the similarities, exactly as the exact scan computes them, so scores, the floor and
ties (by chunk id) are the same; only which chunks are candidates is approximate (and,
where more than WIDER times `depth` published chunks share one vector, which of them)
(recall@10 measured in benchmarks/README.md, "pgvector on PostgreSQL")."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kb_cli import queries
from kb_cli.db import Connection, Database
from kb_cli.embeddings import from_blobs
from kb_cli.errors import UsageError
from kb_cli.migrations import pgvector as schema
from kb_cli.permissions import Scope
from kb_cli.ranking import Scored, top_similar
from kb_cli.records import BuildReport, IndexProblem
from kb_cli.vectors import stored
from kb_cli.vectors.stored import Nearest

if TYPE_CHECKING:
    import numpy as np

# Candidates the graph search keeps (hnsw.ef_search), at least `depth`: chosen on
# benchmarks/README.md, "Both engines at 100k and 986k" (recall@10 against the exact
# ranking over the chunks' distinct vectors: at 80,832 chunks 0.91 / 0.97 / 0.99 at 100 /
# 200 / 400, at 984,472 chunks 0.92 / 0.93 / 0.96, for about 3 ms more a search).
EF_SEARCH = 400
# The index is asked for this many times `depth` chunks, ranked again exactly by their
# stored vectors: on text whose vectors are often near-identical (a module kept in
# several versions) the graph's order is rough, and the chunks it puts just past
# `depth` hold many of the true nearest (at 80,832 chunks, the retrieval questions'
# English hit@3 by meaning 0.38 -> 0.53, the exact scan's 0.56: benchmarks/README.md).
WIDER = 4
# pgvector refuses a larger hnsw.ef_search; a deeper search (--limit 84 and more) goes on
# past it by the iterative scan, or is answered by the exact scan.
MAX_EF_SEARCH = 1000


class PgVectorIndex:
    """The `VectorIndex` of a PostgreSQL knowledge base (kb_cli/vectors/__init__.py);
    where pgvector cannot answer, `fallback` does (the exact scan)."""

    def __init__(self, fallback: Nearest = stored.exact_nearest) -> None:
        self.fallback = fallback

    def nearest(
        self,
        conn: Connection,
        model: str,
        query: np.ndarray,
        depth: int,
        scope: Scope,
        floor: float,
    ) -> list[Scored]:
        if not indexes_vectors(conn):
            return self.fallback(conn, model, query, depth, scope, floor)
        dim = len(query)
        wider = min(WIDER * depth, MAX_EF_SEARCH)
        ef_search = min(max(EF_SEARCH, wider), MAX_EF_SEARCH)
        chunk_ids, blobs = nearest_by_index(conn, model, query, wider, scope, ef_search)
        if len(chunk_ids) < depth:
            return self.fallback(conn, model, query, depth, scope, floor)
        return top_similar(chunk_ids, from_blobs(blobs, dim), query, floor, depth)

    def beside(self, conn: Connection, vectors: Sequence[bytes | None]) -> dict[str, list[object]]:
        """The halfvec copy of each vector, where the database keeps one (written here
        in binary: the database's trigger would derive it at half a millisecond a
        vector, inside the write)."""
        if not indexes_vectors(conn):
            return {}
        from kb_cli.embeddings.halfvec import HalfVec

        return {schema.COLUMN: [None if blob is None else HalfVec(bytes(blob)) for blob in vectors]}

    def refresh(self, db: Database, model: str) -> None:
        """Nothing to catch up: the database indexes each chunk as it is written."""

    def notes(self, conn: Connection) -> list[str]:
        """How to let search use pgvector's index where it reads every vector."""
        if not schema.enabled(conn.raw):
            if schema.available(conn.raw):
                return [
                    "the server offers pgvector but this database does not use it yet: run "
                    "`kb db upgrade` as a user allowed to CREATE EXTENSION vector"
                ]
            return [
                "vector search reads every stored vector (no pgvector on this server): "
                "install pgvector 0.8 or later on it, then run `kb db upgrade` to build its "
                "index"
            ]
        return [
            f"the vectors of {model} ({dim} dimensions) have no index yet: `kb db upgrade` "
            "builds it"
            for model, dim in schema.missing_indexes(conn.raw)
        ]

    def problems(self, db: Database, model: str) -> list[IndexProblem]:
        return []  # what could be better is a note: nothing kb could repair

    def rebuild(self, db: Database, model: str, dims: Sequence[int] = ()) -> list[BuildReport]:
        raise UsageError(
            "kb reindex --vectors builds the vector index of a SQLite home; "
            "on PostgreSQL the database indexes vectors itself"
        )


_HALFVEC_COLUMN = (
    "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('chunks')"
    f" AND attname = '{schema.COLUMN}' AND NOT attisdropped"
)
_indexes_vectors: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def indexes_vectors(conn: Connection) -> bool:
    """The database keeps pgvector's halfvec copy of the chunks' vectors: chunk writes
    fill it, search asks its index. Looked up once per connection (kb keeps its
    connections), in the caller's transaction; such a connection can then send HalfVec
    parameters. A connection opened before `kb db upgrade` made the column writes
    without it: the database's trigger derives it then."""
    ready = _indexes_vectors.get(conn.raw)
    if ready is None:
        ready = conn.raw.execute(_HALFVEC_COLUMN).fetchone() is not None
        if ready:
            from kb_cli.embeddings.halfvec import register

            register(conn.raw)
        _indexes_vectors[conn.raw] = ready
    return ready


def nearest_by_index(
    conn: Connection, model: str, query: np.ndarray, depth: int, scope: Scope, ef_search: int
) -> tuple[list[int], list[bytes]]:
    """Ids and stored vectors of up to `depth` published chunks in `scope` embedded by
    `model`, nearest `query` first by the HNSW index of that model (approximately);
    none where the database has no pgvector."""
    from kb_cli.embeddings import to_blob
    from kb_cli.embeddings.halfvec import HalfVec

    if not indexes_vectors(conn):  # which also lets it send HalfVec
        return [], []
    dim = len(query)
    conn.execute(
        "SELECT set_config('hnsw.ef_search', :ef_search, true) AS ef_search,"
        " set_config('hnsw.iterative_scan', 'relaxed_order', true) AS iterative_scan",
        {"ef_search": str(ef_search)},
    )
    scoped, params = queries.scope_filter(scope, engine=conn.engine)
    sql = nearest_statement(model, dim, scoped)
    rows = conn.execute(sql, {**params, "query": HalfVec(to_blob(query)), "depth": depth}).all()
    return [row[0] for row in rows], [bytes(row[1]) for row in rows]


def nearest_statement(model: str, dim: int, scoped: str) -> str:
    """The search statement (parameters :query, :depth and the scope's). The index
    yields distinct vectors nearest first; each one's chunks are found by their key, and
    those outside the scope are passed over while the walk goes on."""
    return (
        f"SELECT c.id, c.embedding FROM {schema.DISTINCT} AS v"
        f" JOIN {queries.CHUNKS} AS c ON c.embedding_model = v.model"
        f" AND {schema.vector_key('c.')} = v.key AND c.embedding IS NOT NULL"
        f" {queries.OF_PUBLISHED_REVISION}"
        f"{queries.where_all([schema.model_condition(model, dim, 'v.'), scoped])}"
        f" ORDER BY {schema.indexed_expression(dim, 'v.')} <#> :query LIMIT :depth"
    )
