"""Small tasks claimed together, run together: each is downloaded and parsed in its
turn, their texts go to the embedding model in one call, and their completions are
written in one transaction (kb_cli/worker/claim.py `complete_together`).

Each task keeps its own attempt: its own claim fences each of its writes, a failure
(a parse error, a cancel, a lease taken over) ends that task alone, in its own way, and
the others go on. What each attempt tells the display is kept and told after the batch
ends, task by task, so that the log reads as if the tasks ran one after the other
(a task's `finished` line never comes before its completion commits). No transaction
is open while a task is read, parsed or embedded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kb_cli.chunking import ChunkText
from kb_cli.embeddings import Embedder
from kb_cli.lifecycle import Stage
from kb_cli.records import NewChunk
from kb_cli.worker.claim import Claim, Written, complete_together
from kb_cli.worker.pipeline import Pipeline, Reporter, embed_texts, embedding_texts


class Listener(Protocol):
    """What a batch tells of each task's ending (the worker's listener, or what keeps
    its words for later)."""

    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None: ...
    def lost(self, task_id: str) -> None: ...


# How an attempt ends on an error (kb_cli/worker/loop.py, Worker.end_attempt).
EndAttempt = Callable[[Claim, Any, Exception], None]


@dataclass
class Member:
    """One task of a batch: its claim, its attempt and where it is."""

    claim: Claim
    attempt: Reporter
    recorder: Listener
    pipeline: Pipeline
    chunks: list[ChunkText] = field(default_factory=list)
    vectors: list[bytes | None] = field(default_factory=list)
    rows: list[NewChunk] = field(default_factory=list)
    embedder: Embedder | None = None  # its base's model
    ended: bool = False  # its attempt ended early (failed, released, lost)


class Batch:
    """The stages of several small tasks, each ended on its own when it fails."""

    def __init__(self, members: list[Member], end_attempt: EndAttempt) -> None:
        self.members = members
        self.end_attempt = end_attempt

    def run(self) -> None:
        """Every member's attempt to its end. ActorDisabled (the worker's user was
        disabled) and ClaimStranded (the database went away) end the whole batch: the
        caller gives back or leaves the tasks not ended yet."""
        written = Written(time.monotonic())
        for member in self.members:  # progress is written now and then for the batch
            member.claim.written = written
        self._each(self._parse)
        self._embed()
        self._each(self._index)
        self._complete()

    @staticmethod
    def _parse(member: Member) -> None:
        """Read and parse one task in its turn: its attempt's clock starts now, as if
        it ran alone (a parse that takes long is kept at once, claim.save_parse)."""
        claim = member.claim
        claim.started()
        member.chunks = member.pipeline.chunks_of(claim.document, claim.task.document_id)

    def _each(self, step: Callable[[Member], object]) -> None:
        """`step` for each member still running; a failure ends that member alone."""
        for member in self.members:
            if member.ended:
                continue
            try:
                step(member)
            except Exception as error:  # as a task run alone ends on it
                self._end(member, error)

    def _end(self, member: Member, error: Exception) -> None:
        """End a member's attempt on `error`; one that ends the batch (ActorDisabled,
        ClaimStranded) leaves it to the caller, not ended."""
        self.end_attempt(member.claim, member.recorder, error)
        member.ended = True

    def _end_each(self, error: Exception) -> None:
        for member in self._live():
            self._end(member, error)

    def _live(self) -> list[Member]:
        return [member for member in self.members if not member.ended]

    def _embed(self) -> None:
        """Every member's chunks in as few calls to each model as its batch size allows
        (for tiny documents of one base: one call, not one per task); each member is
        embedded by its base's model."""
        self._each(lambda m: m.pipeline.report(Stage.EMBEDDING, 0, len(m.chunks)))
        self._each(self._choose_model)
        by_model: dict[str, tuple[Embedder, list[Member]]] = {}
        for member in self._live():
            if member.embedder is None:
                member.vectors = [None] * len(member.chunks)
            else:
                by_model.setdefault(member.embedder.model, (member.embedder, []))[1].append(member)
        for embedder, members in by_model.values():
            self._embed_with(embedder, members)
        self._each(lambda m: m.pipeline.report(Stage.EMBEDDING, len(m.chunks), len(m.chunks)))

    @staticmethod
    def _choose_model(member: Member) -> None:
        member.embedder = member.pipeline.embedder()

    def _embed_with(self, embedder: Embedder, members: list[Member]) -> None:
        texts = [text for m in members for text in embedding_texts(m.chunks)]
        blobs: list[bytes | None] = []
        dim = 0
        try:
            for start in range(0, len(texts), embedder.batch_size):
                vectors, dim = embed_texts(embedder, texts[start : start + embedder.batch_size])
                blobs.extend(vectors)
        except Exception as error:  # the provider failed each member's call
            for member in members:
                self._end(member, error)
            return
        for member in members:
            member.vectors, blobs = blobs[: len(member.chunks)], blobs[len(member.chunks) :]
            member.pipeline.model, member.pipeline.dim = embedder.model, dim

    @staticmethod
    def _index(member: Member) -> None:
        member.rows = member.pipeline.index(member.chunks, member.vectors)
        member.attempt.report(Stage.FINALIZING, 0, 1)

    def _complete(self) -> None:
        live = self._live()
        if not live:
            return
        try:
            finished = complete_together([(m.claim, m.rows) for m in live])
        except Exception as error:
            self._end_each(error)
            return
        for member, row in zip(live, finished, strict=True):
            task_id = member.claim.task.id
            if row is None:
                member.recorder.lost(task_id)
            else:
                member.recorder.progress(task_id, Stage.FINALIZING, 1, 1)
