"""A worker's hold on one task: taking it, and every write of task state after that.

This is the only code that writes a task's state. Each write is conditioned on the
claim (status running, this worker's id, this attempt), so a worker whose task was
cancelled or reclaimed writes nothing more. Every write is one short transaction; a
busy database makes the worker wait and retry its step, never give up its task.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeVar, Unpack

from kb_cli import artefacts, queries
from kb_cli.app import Kb
from kb_cli.chunking import ChunkText
from kb_cli.config import TaskSettings, WorkerOptions
from kb_cli.db import Connection, format_stamp
from kb_cli.errors import (
    ActorDisabled,
    BusyError,
    ClaimLost,
    KbError,
    ModelChanged,
    UserDisabled,
)
from kb_cli.lifecycle import DocStatus, ErrorCode, Stage, TaskStatus
from kb_cli.queries import TaskChanges
from kb_cli.records import DocumentRow, NewChunk, TaskRow
from kb_cli.transitions import (
    FRESH_RUN,
    Events,
    audit_event,
    move_document_from,
    move_task,
    requeue_task,
)
from kb_cli.worker.retry import RetryPolicy

BUSY_BACKOFF_CAP_SECONDS = 2.0
T = TypeVar("T")


def retrying(step: Callable[[], T], stop: threading.Event) -> T:
    """Run a transaction step again while the database is busy, with a growing,
    jittered pause; only a stop request ends the waiting (with BusyError)."""
    delay = 0.05
    while True:
        try:
            return step()
        except BusyError:
            if stop.is_set():
                raise
            stop.wait(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, BUSY_BACKOFF_CAP_SECONDS)


@dataclass(frozen=True)
class Claimant:
    """Who claims: the context, the worker's options, and its stop request."""

    kb: Kb
    options: WorkerOptions
    stop: threading.Event

    def now(self) -> str:
        return format_stamp(self.kb.clock.now())

    def stamps(self) -> tuple[str, str]:
        """Now and the end of a lease that starts now, from one reading of the clock
        (formatting a stamp is cheap; parsing one back, as a lease once did, is not)."""
        moment = self.kb.clock.now()
        lease = moment + timedelta(seconds=self.options.lease_seconds)
        return format_stamp(moment), format_stamp(lease)

    def audit_detail(self, detail: str | None) -> str:
        """The worker's name in every event's detail; the actor is the authenticated
        user (in open mode, the OS user), never a name the worker gave itself."""
        named = f"worker {self.options.worker_id}"
        return f"{named}; {detail}" if detail else named

    def actor_disabled(self, conn: Connection) -> bool:
        """Whether the user this worker authenticated as was disabled since: one lookup
        by primary key; never in open mode, where the actor is the OS user."""
        actor = self.kb.actor
        return actor.role is not None and queries.user_is_disabled(conn, actor.name)

    def refusal(self, task_id: str | None = None) -> UserDisabled:
        name = self.kb.actor.name
        released = f"; task {task_id} was released back to the queue" if task_id else ""
        return UserDisabled(
            f"forbidden: user {name} is disabled{released}; this worker stops "
            f"(an admin can run: kb user enable {name})"
        )

    def move_document(
        self,
        conn: Connection,
        task: TaskRow,
        to: DocStatus,
        action: str,
        events: Events | None = None,
    ) -> None:
        """Move the task's document along, if it is still processing (one guarded
        UPDATE: a document that was deleted or moved on is left alone)."""
        move_document_from(
            conn,
            task.document_id,
            DocStatus.PROCESSING,
            to,
            actor=self.kb.actor.name,
            action=action,
            detail=self.audit_detail(f"task {task.id}"),
            updated_at=self.now(),
            events=events,
        )


# Small tasks are claimed several at a time, in one transaction: for a tiny document
# the claim's transaction cost as much as the rest of the task. The batch is bounded by
# the bytes of its documents, so that a worker never sits on work another worker could
# do now (a drained queue ends within a fraction of a second of each other).
BATCH_TASKS = 32
BATCH_BYTES = 64 * 1024


@dataclass
class Taken:
    """What one claim attempt did: its claims (the task to run now first, then the
    small ones taken with it, to run after it in that order), and the tasks it failed on
    the way because their workers were lost too often (task id, reason)."""

    claims: list[Claim] = field(default_factory=list)
    given_up: list[tuple[str, str]] = field(default_factory=list)

    @property
    def claim(self) -> Claim | None:
        return self.claims[0] if self.claims else None


def take(claimant: Claimant, task_id: str | None, limit: int = 1) -> Taken:
    """Take the named or the oldest claimable task, in one write transaction; with a
    `limit` above 1, the oldest queued tasks after it too, while their documents are
    small (BATCH_BYTES in all). Each claim is its own guarded UPDATE, with its own
    attempt and lease, as if taken alone."""
    return retrying(lambda: _take_once(claimant, task_id, limit), claimant.stop)


def _take_once(claimant: Claimant, task_id: str | None, limit: int) -> Taken:
    taken = Taken()
    budget = BATCH_BYTES
    events = Events()  # the claims' audit events, written together before the commit
    with claimant.kb.db.write() as conn:
        if claimant.actor_disabled(conn):  # a disabled user's worker takes nothing more
            raise claimant.refusal()
        bases = claimant.options.bases
        while (task := _candidate(conn, task_id, claimant.now(), bases)) is not None:
            if taken.claims and task.status == TaskStatus.RUNNING:
                break  # a reclaim is never a batch's extra: it goes first, next time
            if task.status == TaskStatus.RUNNING and task.attempt >= claimant.options.max_attempts:
                lost = _fail_lost_worker(claimant, conn, task)
                taken.given_up += [lost] if lost else []
                if lost is None or task_id is not None:
                    break
                continue  # look for the next claimable task
            document = queries.get_document(conn, task.document_id)
            size = document.size_bytes if document else 0
            if taken.claims and size > budget:
                break
            claim = _claim(claimant, conn, task, document, events)
            if claim is None:
                break
            taken.claims.append(claim)
            budget -= size
            if task_id is not None or len(taken.claims) >= limit or budget <= 0:
                break
        events.write(conn)
    return taken


def _candidate(
    conn: Connection, task_id: str | None, now: str, bases: tuple[str, ...]
) -> TaskRow | None:
    """The named or the oldest claimable task, of `bases` when the worker is kept to
    some: read in the claim's transaction, so a task whose document moved to another
    base meanwhile is a missed claim."""
    if task_id is not None:
        return queries.claimable_task(conn, task_id, now, bases)
    return queries.next_claimable_task(conn, now, bases)


def _claim(
    claimant: Claimant,
    conn: Connection,
    task: TaskRow,
    document: DocumentRow | None,
    events: Events | None = None,
) -> Claim | None:
    """Claim (or reclaim) one claimable task in the caller's transaction."""
    reclaimed_from = task.worker_id if task.status == TaskStatus.RUNNING else None
    now, lease = claimant.stamps()
    run: TaskChanges = {
        **FRESH_RUN,
        "worker_id": claimant.options.worker_id,
        "attempt": task.attempt + 1,
        "lease_expires_at": lease,
    }
    claimed = move_task(
        conn,
        task,
        TaskStatus.RUNNING,
        actor=claimant.kb.actor.name,
        action="reclaim" if reclaimed_from else "claim",
        # A reclaim takes over exactly the lost claim it read, never a newer one.
        fence=(reclaimed_from, task.attempt) if reclaimed_from else None,
        detail=claimant.audit_detail(
            f"lease of {reclaimed_from} expired at {task.lease_expires_at}"
            if reclaimed_from
            else None
        ),
        updated_at=now,
        events=events,
        **run,
    )
    if claimed is None:  # cannot happen under BEGIN IMMEDIATE / row locks; be safe
        return None
    # Chunks a dead attempt wrote go at the start of indexing, in bounded batches.
    # Whether a parse is kept for this revision is one look-up by primary key here,
    # so that an attempt with none (nearly every one) reads nothing more for it.
    kept_parse = queries.has_artefact(conn, task.document_id, task.revision)
    return Claim(claimant, claimed, document, reclaimed_from, kept_parse)


def _fail_lost_worker(
    claimant: Claimant, conn: Connection, task: TaskRow
) -> tuple[str, str] | None:
    detail = (
        f"WorkerLost: worker {task.worker_id} stopped heartbeating; "
        f"{task.attempt} of {claimant.options.max_attempts} attempts used"
    )
    if not move_task(
        conn,
        task,
        TaskStatus.FAILED,
        actor=claimant.kb.actor.name,
        action="fail",
        detail=claimant.audit_detail(detail),
        # A running task always names its worker; "" would match no claim.
        fence=(task.worker_id or "", task.attempt),
        error_code=ErrorCode.WORKER_LOST,
        error_detail=detail,
        lease_expires_at=None,
        updated_at=claimant.now(),
    ):
        return None
    queries.delete_task_chunks(conn, task.id)
    claimant.move_document(conn, task, DocStatus.FAILED, "fail")
    return task.id, detail


@dataclass
class Written:
    """When progress was last written: of one attempt, or shared by the tasks of a batch
    (kb_cli/worker/batch.py), which then write now and then all together, not each."""

    at: float


class Claim:
    """One attempt's hold on its task, and every write it makes.

    Chunks are written in batches (KB_CHUNK_BATCH rows), each its own short transaction
    fenced on the claim, and the completion transaction writes the last batch with the
    task's and the document's new status. Until then the rows belong to a running task:
    search shows published revisions only, and an attempt that stops removes them (or
    the next claim of the task does, or `doctor --repair`)."""

    def __init__(
        self,
        claimant: Claimant,
        task: TaskRow,
        document: DocumentRow | None,
        reclaimed_from: str | None,
        kept_parse: bool = True,
    ) -> None:
        self.claimant = claimant
        self.kb = claimant.kb
        self.task = task
        self.document = document
        self.reclaimed_from = reclaimed_from
        self.lost = threading.Event()  # set by the heartbeat when the claim is gone
        # Set when a write (or the heartbeat) finds the worker's user disabled: the
        # attempt releases its task at the next checkpoint and the worker stops.
        self.disabled = threading.Event()
        self._giving_up = False  # releasing: the last writes check no user
        self.final_row: TaskRow | None = None  # the task row this attempt's last write left
        self.position: tuple[Stage, int, int] = (Stage.DOWNLOAD, 0, 0)
        options = claimant.options
        # A stage delay exists so that others can watch: then every step is written.
        self._write_interval = 0.0 if options.stage_delay else options.progress_interval
        self._started = time.monotonic()
        self.written = Written(self._started)
        self.batch = self.kb.settings.chunk_batch
        # Whether chunks of this task's revision may exist before the completion: an
        # earlier attempt may have left some, and this one writes batches ahead.
        self._may_have_chunks = task.attempt > 1
        self._kept_parse = kept_parse  # False: the claim saw no kept parse to read
        # This attempt's parse, not kept (yet): see save_parse.
        self._unsaved_parse: tuple[str, str, list[ChunkText]] | None = None
        # Pages this attempt's parse read by OCR; None when it reused a kept parse, whose
        # count was written with it (_keep_parse).
        self.ocr_pages: int | None = 0

    def started(self) -> None:
        """The attempt begins now (a task claimed with others waited for its turn):
        progress writes and the parse's cost are counted from here."""
        self.written.at = self._started = time.monotonic()

    @property
    def asked(self) -> TaskSettings:
        """The settings the task was queued with: the pipeline uses them instead of
        the worker's own (none for a task queued before tasks carried settings)."""
        return TaskSettings.from_json(self.task.settings)

    @property
    def fence(self) -> tuple[str, int]:
        """The claim every write of this attempt is conditioned on (the claimed row names
        this worker)."""
        return self.claimant.options.worker_id, self.task.attempt

    def _retrying(self, step: Callable[[], T]) -> T:
        return retrying(step, self.claimant.stop)

    # --- while it runs -------------------------------------------------------------

    def progress(self, stage: Stage, done: int, total: int) -> None:
        """Remember where the attempt is; write it now and then. On a busy database the
        write waits for the next step; the heartbeat keeps the lease meanwhile."""
        self.position = (stage, done, total)
        if time.monotonic() - self.written.at >= self._write_interval:
            with contextlib.suppress(BusyError), self.kb.db.write() as conn:
                self._write_progress(conn, stage, done, total)

    def _check_actor(self, conn: Connection) -> None:
        """Refuse a write of a worker whose user was disabled (ActorDisabled), except
        the writes that give the task up."""
        if not self._giving_up and self.claimant.actor_disabled(conn):
            self.disabled.set()
            raise ActorDisabled()

    def _write_progress(self, conn: Connection, stage: Stage, done: int, total: int) -> None:
        self._check_actor(conn)
        now, lease = self.claimant.stamps()
        if not queries.update_task(
            conn,
            self.task.id,
            [TaskStatus.RUNNING],
            fence=self.fence,
            stage=stage,
            completed=done,
            total=total,
            updated_at=now,
            lease_expires_at=lease,
        ):
            raise ClaimLost()
        self.written.at = time.monotonic()

    def renew_lease(self) -> None:
        with self.kb.db.write() as conn:
            if self.claimant.actor_disabled(conn):
                self.disabled.set()  # the attempt's next checkpoint releases the task
            renewed = queries.update_task(
                conn,
                self.task.id,
                [TaskStatus.RUNNING],
                fence=self.fence,
                lease_expires_at=self.claimant.stamps()[1],
            )
        if not renewed:
            self.lost.set()

    def store_chunks(self, rows: list[NewChunk], done: int, total: int) -> None:
        """One batch of chunk rows ahead of the completion, with the progress that
        checks the claim, in one transaction."""

        def write() -> None:
            self._may_have_chunks = True
            with self.kb.db.write() as conn:
                self._write_progress(conn, Stage.INDEXING, done, total)
                self._insert_chunks(conn, rows)

        self._retrying(write)

    def _insert_chunks(self, conn: Connection, rows: list[NewChunk]) -> None:
        """A batch of this task's chunks, with what its vector index keeps beside them."""
        task = self.task
        beside = self.kb.vectors.beside(conn, [row.embedding for row in rows])
        queries.insert_chunks(conn, task.document_id, task.revision, task.id, rows, beside)

    def purge_chunks(self) -> None:
        """Delete the chunks of this task's revision (an unpublished one: only a new
        revision is ever processed) in bounded batches, each fenced on the claim."""
        if not self._may_have_chunks:
            return
        while self._retrying(self._purge_batch) == self.batch:
            pass
        self._may_have_chunks = False

    def _purge_batch(self) -> int:
        with self.kb.db.write() as conn:
            self._write_progress(conn, *self.position)
            task = self.task
            return queries.delete_revision_chunks(conn, task.document_id, task.revision, self.batch)

    # --- the parse artefact (kb_cli/artefacts.py) --------------------------------------

    def saved_parse(self, parser_key: str) -> bytes | None:
        """The parse an earlier attempt (or run) kept of this revision's bytes."""
        document = self._document_of_this_revision()
        if document is None or not self._kept_parse:
            return None
        with self.kb.db.read() as conn:
            return queries.get_artefact(
                conn, self.task.document_id, self.task.revision, document.sha256, parser_key
            )

    def save_parse(self, parser_key: str, chunks: list[ChunkText]) -> None:
        """Keep this attempt's parse for the next one, fenced on the claim like every
        other write. Only for the document's current revision: the key pairs the task's
        revision with the document's file.

        A parse that took long (download and parse past the progress interval) is kept
        now, in a transaction of its own, so that a worker killed later loses it not.
        A quick one is cheaper to redo than to compress and write: it is kept only when
        the attempt fails or is released (in that transaction), never when it succeeds."""
        document = self._document_of_this_revision()
        if document is None:
            return
        self._unsaved_parse = (parser_key, document.sha256, chunks)
        if time.monotonic() - self._started >= self._write_interval:

            def write() -> None:
                with self.kb.db.write() as conn:
                    self._write_progress(conn, *self.position)
                    self._keep_parse(conn)

            self._retrying(write)

    def _keep_parse(self, conn: Connection) -> None:
        """Write the parse this attempt has not kept yet, in the caller's transaction."""
        if self._unsaved_parse is None:
            return
        parser_key, sha256, chunks = self._unsaved_parse
        queries.put_artefact(
            conn,
            document_id=self.task.document_id,
            revision=self.task.revision,
            sha256=sha256,
            parser_key=parser_key,
            chunks=len(chunks),
            payload=artefacts.encode(chunks),
            task_id=self.task.id,
            created_at=self.claimant.now(),
        )
        self._write_ocr_pages(conn)
        self._unsaved_parse = None
        self._kept_parse = True

    def _write_ocr_pages(self, conn: Connection) -> None:
        """The revision's count of pages read by OCR, from this attempt's parse (a reused
        parse's count was written when it was kept)."""
        if self.ocr_pages is not None:
            task = self.task
            queries.set_ocr_pages(conn, task.document_id, task.revision, self.ocr_pages)

    def _document_of_this_revision(self) -> DocumentRow | None:
        """The claimed document while its file is still the task's revision's."""
        document = self.document
        return (
            document if document is not None and document.revision == self.task.revision else None
        )

    def note_reuse(self, chunks: int) -> None:
        """Say, in the task's history, that this attempt starts at the embedding stage
        with a kept parse, and write that stage now."""
        self.position = (Stage.EMBEDDING, 0, chunks)
        self.ocr_pages = None
        self._note(
            "reuse_parse",
            f"parse of revision {self.task.revision} reused: {chunks} chunks; "
            "no download or parse this attempt",
        )

    def note_ocr(self, pages: int, engine: str) -> None:
        """Say, in the task's history, how many pages this parse read by OCR and with
        what engine."""
        self.ocr_pages = pages
        plural = "" if pages == 1 else "s"
        self._note(
            "read_by_ocr",
            f"{pages} page{plural} of revision {self.task.revision} read by OCR ({engine})",
        )

    def _note(self, action: str, detail: str) -> None:
        """A history event of the task that is no state change (no from or to status),
        written with the attempt's position: fenced on the claim as a progress write is."""

        def write() -> None:
            with self.kb.db.write() as conn:
                self._write_progress(conn, *self.position)
                event = audit_event(
                    self.kb.actor.name,
                    action,
                    self.task.id,
                    detail=self.claimant.audit_detail(detail),
                    at=self.claimant.now(),
                )
                queries.insert_audit_events(conn, [event])

        self._retrying(write)

    # --- endings ---------------------------------------------------------------------

    def complete(self, rows: list[NewChunk]) -> TaskRow:
        """The last batch of chunks, task and document in one short transaction that
        makes all the chunks the task's result; the claim is checked in it."""
        [finished] = complete_together([(self, rows)])
        if finished is None:
            raise ClaimLost()
        return finished

    def _complete_in(
        self, conn: Connection, rows: list[NewChunk], events: Events
    ) -> TaskRow | None:
        """This task's completion in the caller's transaction: its task, the last batch
        of its chunks and its document; None (nothing written) when the claim is lost."""
        task = self.task
        self._check_model(conn, rows)
        finished = self._end(
            conn,
            TaskStatus.SUCCEEDED,
            "complete",
            events=events,
            stage=Stage.FINALIZING,
            completed=1,
            total=1,
        )
        if finished is None:
            return None
        self._insert_chunks(conn, rows)
        self._write_ocr_pages(conn)
        # The chunks are the result now; nothing retries a succeeded task. Only a claim
        # that saw (or wrote) a kept parse has one to delete: no other claim writes one.
        if self._kept_parse:
            queries.delete_artefacts(conn, task.document_id, task.revision)
        self.claimant.move_document(conn, task, DocStatus.REVIEW_PENDING, "complete", events)
        return finished

    def _check_model(self, conn: Connection, rows: list[NewChunk]) -> None:
        """ModelChanged when the vectors were made by another model than the one of the
        document's base now (a switch swapped in while this task embedded): its chunks
        would be invisible to meaning search."""
        if not rows:
            return
        provider = queries.document_base_model(conn, self.task.document_id)
        embedder = self.kb.embedder_for(provider)
        now = embedder.model if embedder is not None else None
        if now != rows[0].embedding_model:
            raise ModelChanged(
                f"the base's embedding model changed to {now or 'none'} while the task "
                "ran; queued again to embed with it"
            )

    def fail(self, code: ErrorCode, detail: str) -> TaskRow | None:
        """Fail the task, or park it in retry_wait when the cause may pass by itself;
        None when the claim was lost meanwhile."""
        self._purge_quietly()
        self.final_row = self._retrying(lambda: self._fail_once(code, detail))
        return self.final_row

    def _fail_once(self, code: ErrorCode, detail: str) -> TaskRow | None:
        options = self.claimant.options
        policy = RetryPolicy(options.max_attempts, options.backoff_seconds)
        retry_at = policy.decide(
            code, self.task.attempt, self.kb.clock.now(), jitter=random.uniform(0.5, 1.5)
        )
        # Progress writes are throttled: record the stage the failure happened in.
        stage, done, total = self.position
        with self.kb.db.write() as conn:
            self._check_actor(conn)
            if retry_at is not None:
                stamp = format_stamp(retry_at)
                moved = self._end(
                    conn,
                    TaskStatus.RETRY_WAIT,
                    "retry_wait",
                    detail=f"{code} ({detail}); retry at {stamp}",
                    error_code=code,
                    error_detail=detail,
                    retry_at=stamp,
                    stage=stage,
                    completed=done,
                    total=total,
                )
            else:
                moved = self._end(
                    conn,
                    TaskStatus.FAILED,
                    "fail",
                    detail=f"{code}: {detail}",
                    error_code=code,
                    error_detail=detail,
                    stage=stage,
                    completed=done,
                    total=total,
                )
                if moved:
                    self.claimant.move_document(conn, self.task, DocStatus.FAILED, "fail")
            if moved:
                queries.delete_task_chunks(conn, self.task.id)  # what the purge left, if any
                self._keep_parse(conn)  # for the retry
        return moved

    def release(self, reason: str = "stopped by a signal") -> TaskRow | None:
        """Graceful stop: back to queued with no chunks left behind, and its attempt
        given back: a stop someone asked for (Ctrl-C, SIGTERM, a disabled user) is no
        attempt at the task, so `attempt` never passes --max-attempts by releases.
        None when the claim was lost meanwhile. Also how a disabled user's worker gives
        its task up: these writes check no user."""
        self._giving_up = True
        self._purge_quietly()
        with self.kb.db.write() as conn:
            self.final_row = requeue_task(
                conn,
                self.task,
                actor=self.kb.actor.name,
                action="release",
                detail=self.claimant.audit_detail(reason),
                fence=self.fence,
                updated_at=self.claimant.now(),
                attempt=self.task.attempt - 1,
            )
            if self.final_row is not None:
                self._keep_parse(conn)  # for whoever takes the task next
        return self.final_row

    def _purge_quietly(self) -> None:
        """Remove this attempt's chunks before it ends; a lost claim or a failing
        database leaves them to the next claim or to `doctor --repair`."""
        with contextlib.suppress(ClaimLost, KbError):
            self.purge_chunks()

    def _end(
        self,
        conn: Connection,
        to: TaskStatus,
        action: str,
        detail: str | None = None,
        events: Events | None = None,
        **values: Unpack[TaskChanges],
    ) -> TaskRow | None:
        """Move this attempt's task on from its own running claim, lease over."""
        changes: TaskChanges = {**values, "lease_expires_at": None}
        return move_task(
            conn,
            self.task,
            to,
            actor=self.kb.actor.name,
            action=action,
            detail=self.claimant.audit_detail(detail),
            fence=self.fence,
            updated_at=self.claimant.now(),
            events=events,
            **changes,
        )


def complete_together(done: list[tuple[Claim, list[NewChunk]]]) -> list[TaskRow | None]:
    """Complete the tasks of several claims (each with the last batch of its chunks) in
    one short transaction, their events written together: one statement per table
    instead of one per event. Each task is moved on its own claim, as if alone: one
    whose claim was lost meanwhile (cancelled, reclaimed) writes nothing and is None
    here, and the others complete. A disabled user completes none (ActorDisabled)."""
    first = done[0][0]

    def write() -> list[TaskRow | None]:
        events = Events()
        with first.kb.db.write() as conn:
            if first.claimant.actor_disabled(conn):
                for claim, _rows in done:
                    claim.disabled.set()
                raise ActorDisabled()
            finished = [claim._complete_in(conn, rows, events) for claim, rows in done]
            events.write(conn)
        return finished

    finished = first._retrying(write)
    for (claim, _rows), row in zip(done, finished, strict=True):
        claim.final_row = row
        if row is not None:
            claim._unsaved_parse = None
    return finished
