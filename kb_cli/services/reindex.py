"""`kb reindex --embeddings`: give every stored chunk a vector of the configured model;
`kb reindex --vectors`: rebuild the vector index from the database (kb_cli/vectors/).

After the embedding model changes, search compares only vectors of the new model, so
chunks embedded by the old one rank by words alone until this has run. It works in
batches, each written in its own short transaction: stopped with Ctrl-C, it loses at
most one batch, and running it again resumes with the chunks still to do. Published
revisions go first; revisions waiting for review follow, so they are ready when
published.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.chunking import contextual_text
from kb_cli.embeddings import to_blob
from kb_cli.errors import UsageError
from kb_cli.records import BuildReport, ChunkVector


@dataclass
class ReindexReport:
    model: str
    revisions: int
    chunks: int

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def reindex_embeddings(kb: Kb, on_progress: Callable[[int, int], None]) -> ReindexReport:
    """Embed every chunk that has no vector of the configured model; (done, total)."""
    embedder = kb.embedder
    if embedder is None:
        raise UsageError("embeddings are off (KB_EMBEDDINGS=none): nothing to reindex")
    with kb.db.read() as conn:
        revisions = queries.revisions_to_embed(conn, embedder.model)
    total = sum(revision.chunks for revision in revisions)
    done = 0
    on_progress(done, total)
    for revision in revisions:
        with kb.db.read() as conn:
            chunks = queries.chunks_to_embed(
                conn, revision.document_id, revision.revision, embedder.model
            )
        for start in range(0, len(chunks), embedder.batch_size):
            batch = chunks[start : start + embedder.batch_size]
            vectors = embedder.embed([contextual_text(c.context, c.text) for c in batch])
            rows = [
                ChunkVector(chunk.id, to_blob(vector), embedder.model, len(vector))
                for chunk, vector in zip(batch, vectors, strict=True)
            ]
            with kb.db.write() as conn:
                beside = kb.vectors.beside(conn, [row.embedding for row in rows])
                queries.set_embeddings(conn, rows, beside)
            done += len(batch)
            on_progress(done, total)
    return ReindexReport(embedder.model, len(revisions), done)


def rebuild_vector_index(kb: Kb) -> list[BuildReport]:
    """Write the vector index of the configured model anew from the database (every
    dimension it has vectors in), whatever its size: the index is derived, and this is
    how it is made current at once. Waits for another process writing it."""
    embedder = kb.embedder
    if embedder is None:
        raise UsageError("embeddings are off (KB_EMBEDDINGS=none): there are no vectors to index")
    return kb.vectors.rebuild(kb.db, embedder.model)
