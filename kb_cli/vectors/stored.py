"""The stored vectors as the vector indexes read them: the published ones in a scope,
those a derived index holds, and what tells such an index built earlier from the
chunks now. The chunks' own table is the only source of truth; an index proposes
candidates, these statements decide what may be seen."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from kb_cli import queries
from kb_cli.db import Connection
from kb_cli.embeddings import from_blobs
from kb_cli.permissions import Scope
from kb_cli.ranking import Scored, top_similar

if TYPE_CHECKING:
    import numpy as np


def published_vectors(
    conn: Connection,
    model: str,
    dim: int,
    scope: Scope,
    after: int | None = None,
    among: Sequence[int] | None = None,
) -> tuple[list[int], list[bytes]]:
    """Ids and stored vectors of the published chunks in `scope` embedded by `model`;
    only those with an id above `after`, or only those `among` the ids given (what a
    vector index proposed: the database decides which may be seen)."""
    scoped, params = queries.scope_filter(scope, engine=conn.engine)
    clauses = ["c.embedding_model = :model", "c.embedding_dim = :dim", scoped]
    if after is not None:
        clauses.append("c.id > :after")
        params["after"] = after
    if among is not None:
        if not among:
            return [], []
        clauses.append(f"c.id IN ({', '.join(str(int(chunk_id)) for chunk_id in among)})")
    sql = f"SELECT c.id, c.embedding {queries.PUBLISHED_CHUNKS}{queries.where_all(clauses)}"
    rows = conn.execute(sql, {**params, "model": model, "dim": dim}).all()
    return [row[0] for row in rows], [bytes(row[1]) for row in rows]


class IndexMarks(NamedTuple):
    """What tells a vector index built earlier from the chunks now: whose database,
    which re-embedding epoch, and the newest chunk it saw (its id and identity)."""

    database_id: str | None
    epoch: int
    anchor: str | None  # the identity of the chunk at the watermark, None when gone


def index_marks(conn: Connection, watermark: int) -> IndexMarks:
    row = conn.execute(
        f"""SELECT (SELECT value FROM kb_meta WHERE key = 'database_id'),
            (SELECT value FROM kb_meta WHERE key = 'vector_epoch'),
            c.document_id, c.revision, c.chunk_index, c.task_id, c.embedding
        FROM (SELECT 1) AS one LEFT JOIN {queries.CHUNKS} AS c ON c.id = :watermark""",
        {"watermark": watermark},
    ).one()
    anchor = None
    if row[2] is not None:
        identity = f"{row[2]}:{row[3]}:{row[4]}:{row[5]}:".encode()
        anchor = hashlib.sha256(identity + bytes(row[6] or b"")).hexdigest()[:32]
    return IndexMarks(row[0], int(row[1] or 0), anchor)


def newest_chunk_id(conn: Connection) -> int:
    return int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {queries.CHUNKS}").scalar())


def vectors_between(
    conn: Connection, model: str, dim: int, after: int, upto: int, limit: int
) -> tuple[list[int], list[bytes]]:
    """Ids and vectors of every chunk (published or not) embedded by `model` with an id
    in (after, upto], in id order, at most `limit`: what a vector index holds."""
    rows = conn.execute(
        f"""SELECT id, embedding FROM {queries.CHUNKS}
        WHERE id > :after AND id <= :upto AND embedding_model = :model
          AND embedding_dim = :dim
        ORDER BY id LIMIT :limit""",
        {"after": after, "upto": upto, "model": model, "dim": dim, "limit": limit},
    ).all()
    return [row[0] for row in rows], [bytes(row[1]) for row in rows]


def count_vectors(conn: Connection, model: str, dim: int | None = None, after: int = 0) -> int:
    """Chunks (published or not) embedded by `model`, with an id above `after`."""
    clauses = ["id > :after", "embedding_model = :model"]
    if dim is not None:
        clauses.append("embedding_dim = :dim")
    sql = f"SELECT count(*) FROM {queries.CHUNKS}{queries.where_all(clauses)}"
    return int(conn.execute(sql, {"after": after, "model": model, "dim": dim}).scalar())


def newest_dim(conn: Connection, model: str) -> int | None:
    """The dimension of the newest vector `model` made (None: it made none)."""
    sql = f"""SELECT embedding_dim FROM {queries.CHUNKS} WHERE embedding_model = :model
        ORDER BY id DESC LIMIT 1"""
    dim = conn.execute(sql, {"model": model}).scalar()
    return None if dim is None else int(dim)


def embedding_dims(conn: Connection, model: str) -> list[int]:
    sql = f"SELECT DISTINCT embedding_dim FROM {queries.CHUNKS} WHERE embedding_model = :model"
    return [int(dim) for dim in conn.execute(sql, {"model": model}).scalars()]


# VectorIndex.nearest as a function: what an index falls back on.
Nearest = Callable[[Connection, str, "np.ndarray", int, Scope, float], list[Scored]]


def exact_nearest(
    conn: Connection, model: str, query: np.ndarray, depth: int, scope: Scope, floor: float
) -> list[Scored]:
    """`VectorIndex.nearest` without an index: every published vector in scope read and
    ranked. Exact, and linear in the size of the scope; what each index falls back on
    where it cannot answer."""
    chunk_ids, blobs = published_vectors(conn, model, len(query), scope)
    if not chunk_ids:
        return []
    return top_similar(chunk_ids, from_blobs(blobs, len(query)), query, floor, depth)
