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
from kb_cli.app import Kb, require_base
from kb_cli.chunking import contextual_text
from kb_cli.db import Connection
from kb_cli.embeddings import Embedder, check_model, to_blob
from kb_cli.errors import ConflictError, UsageError
from kb_cli.permissions import BASE_PREFIX
from kb_cli.queries import ChunkToEmbed, RevisionChunks
from kb_cli.records import BuildReport, ChunkVector
from kb_cli.transitions import audit_event


@dataclass
class ReindexReport:
    model: str
    revisions: int
    chunks: int

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def reindex_embeddings(kb: Kb, on_progress: Callable[[int, int], None]) -> list[ReindexReport]:
    """Embed every chunk that has no vector of its base's model (KB_EMBEDDINGS' for a
    base that follows it); (done, total) per model; a report per model."""
    with kb.db.read() as conn:
        bases_of = kb.models_in(conn, kb.scope)
    embedders = {provider: kb.embedder_for(provider) for provider in bases_of}
    if not any(embedders.values()):
        raise UsageError("embeddings are off (KB_EMBEDDINGS=none): nothing to reindex")
    reports = []
    for provider, embedder in embedders.items():
        if embedder is not None:
            bases = bases_of[provider] if len(bases_of) > 1 else None
            reports.append(_embed_missing(kb, embedder, bases, on_progress))
    return reports


def _embed_missing(
    kb: Kb,
    embedder: Embedder,
    bases: list[str] | None,
    on_progress: Callable[[int, int], None],
) -> ReindexReport:
    with kb.db.read() as conn:
        revisions = queries.revisions_to_embed(conn, embedder.model, bases)

    def chunks_of(conn: Connection, revision: RevisionChunks) -> list[ChunkToEmbed]:
        return queries.chunks_to_embed(
            conn, revision.document_id, revision.revision, embedder.model
        )

    def write(conn: Connection, rows: list[ChunkVector]) -> None:
        beside = kb.vectors.beside(conn, [row.embedding for row in rows])
        queries.set_embeddings(conn, rows, beside)

    done = _embed_revisions(kb, embedder, revisions, chunks_of, write, on_progress)
    return ReindexReport(embedder.model, len(revisions), done)


def _embed_revisions(
    kb: Kb,
    embedder: Embedder,
    revisions: list[RevisionChunks],
    chunks_of: Callable[[Connection, RevisionChunks], list[ChunkToEmbed]],
    write: Callable[[Connection, list[ChunkVector]], None],
    on_progress: Callable[[int, int], None],
) -> int:
    """Embed the chunks `chunks_of` each revision gives, a batch of the model's at a
    time, each batch written by `write` in a transaction of its own (stopped, a run
    loses at most one batch); how many were embedded."""
    total = sum(revision.chunks for revision in revisions)
    done = 0
    on_progress(done, total)
    for revision in revisions:
        with kb.db.read() as conn:
            chunks = chunks_of(conn, revision)
        for start in range(0, len(chunks), embedder.batch_size):
            batch = chunks[start : start + embedder.batch_size]
            vectors = embedder.embed([contextual_text(c.context, c.text) for c in batch])
            rows = [
                ChunkVector(chunk.id, to_blob(vector), embedder.model, len(vector))
                for chunk, vector in zip(batch, vectors, strict=True)
            ]
            with kb.db.write() as conn:
                write(conn, rows)
            done += len(batch)
            on_progress(done, total)
    return done


def rebuild_vector_index(kb: Kb) -> list[BuildReport]:
    """Write the vector index of every model in use anew from the database (every
    dimension it has vectors in), whatever its size: the index is derived, and this is
    how it is made current at once. Waits for another process writing it."""
    with kb.db.read() as conn:
        providers = kb.models_in(conn, kb.scope)
    embedders = [kb.embedder_for(provider) for provider in providers]
    models = sorted({embedder.model for embedder in embedders if embedder is not None})
    if not models:
        raise UsageError("embeddings are off (KB_EMBEDDINGS=none): there are no vectors to index")
    return [report for model in models for report in kb.vectors.rebuild(kb.db, model)]


@dataclass
class SwitchReport:
    """What `kb reindex --base NAME --model M` did: the base's model before and after,
    the chunks it embedded now (those built by an earlier, stopped run are not
    counted again), and the chunks that took the new vectors at the switch."""

    base: str
    model_from: str
    model: str
    embedded: int
    switched: int
    notes: list[str]

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


# A base that keeps receiving chunks while its vectors are built is looked at again this
# many times before the switch gives up (each look builds what arrived meanwhile).
SWITCH_ROUNDS = 5


def switch_model(
    kb: Kb, base: str, model: str, on_progress: Callable[[int, int], None]
) -> SwitchReport:
    """Give `base` the embedding model `model` online: the new vectors are built beside
    the served ones (in batches, each its own transaction: stopped or killed, running it
    again resumes), search keeps serving the old ones meanwhile, and once every chunk of
    the base has a new vector one transaction swaps them in and sets the model. To
    `none`: the base's vectors are dropped in that one transaction. To the model the
    base has: a switch under way is abandoned."""
    check_model(model)
    embedder = kb.embedder_for(model)  # a provider it cannot use is refused before
    vectors = embedder.model if embedder is not None else None
    with kb.db.write() as conn:
        require_base(conn, kb.scope, base)
        pinned = queries.base_model(conn, base)
        current = pinned or kb.settings.embeddings.provider
        if current == model:
            return _abandon(kb, conn, base, model, pin=pinned is None)
        queries.start_model_switch(conn, base, model, vectors)
        _audit(kb, conn, "model_switch", base, f"{current} -> {model}")
    embedded = 0
    for _round in range(SWITCH_ROUNDS):
        if embedder is not None:
            embedded += _build(kb, base, embedder, on_progress)
        with kb.db.write() as conn:
            if vectors is not None and queries.chunks_without_built_vector(conn, base, vectors):
                continue  # chunks written meanwhile: build theirs, then look again
            switched = queries.finish_model_switch(conn, base, model, vectors)
            if switched is None:
                raise ConflictError(
                    f"the switch of {base!r} to {model} was changed by another command meanwhile"
                )
            _audit(kb, conn, "model_switched", base, f"{current} -> {model}: {switched} chunks")
        notes: list[str] = []
        if vectors is not None:
            kb.vectors.refresh(kb.db, vectors)
            with kb.db.read() as conn:
                notes = kb.vectors.notes(conn)
        return SwitchReport(base, current, model, embedded, switched, notes)
    raise ConflictError(
        f"knowledge base {base!r} kept receiving new chunks while its vectors were built; "
        "run the same command again (it resumes) when fewer documents are being processed"
    )


def _abandon(kb: Kb, conn: Connection, base: str, model: str, pin: bool) -> SwitchReport:
    """`--model` the base has: a switch under way is given up (its built vectors
    dropped), and a base that followed KB_EMBEDDINGS keeps this model from now on;
    with neither there is nothing to do."""
    switching = queries.switching_to(conn, base)
    if switching is None and not pin:
        raise ConflictError(f"knowledge base {base!r} already uses the model {model}")
    queries.abandon_model_switch(conn, base, model)
    given_up = f"{switching} abandoned, " if switching else ""
    _audit(kb, conn, "model_kept", base, f"{given_up}{model} kept")
    return SwitchReport(base, model, model, 0, 0, [])


def _audit(kb: Kb, conn: Connection, action: str, base: str, detail: str) -> None:
    event = audit_event(kb.actor.name, action, BASE_PREFIX + base, detail=detail, at=kb.timestamp())
    queries.insert_audit_events(conn, [event])


def _build(kb: Kb, base: str, embedder: Embedder, on_progress: Callable[[int, int], None]) -> int:
    """Build a vector of `embedder` beside every chunk of the base that has none yet;
    how many were built. The published revisions first."""
    with kb.db.read() as conn:
        revisions = queries.revisions_to_build(conn, base, embedder.model)

    def chunks_of(conn: Connection, revision: RevisionChunks) -> list[ChunkToEmbed]:
        return queries.chunks_to_build(
            conn, revision.document_id, revision.revision, embedder.model
        )

    def write(conn: Connection, rows: list[ChunkVector]) -> None:
        queries.insert_built_vectors(conn, base, rows)

    return _embed_revisions(kb, embedder, revisions, chunks_of, write, on_progress)
