"""The worker: claim a task, run its stages, finish it; fenced against every race.

Each database write of a worker is conditioned on its claim (status running, its
worker id, its attempt), so a worker whose task was cancelled or reclaimed writes
nothing more. No transaction is open while the worker reads, parses or sleeps, and
none grows with the document: chunks are written in batches (KB_CHUNK_BATCH rows), each
its own short transaction fenced on the claim, and the completion transaction only
makes them the task's result. A busy database makes the worker wait and retry its
step, never give up its task.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Protocol, TypeVar

from kb_cli import queries
from kb_cli.chunking import ChunkText, chunk_blocks, contextual_text, with_context
from kb_cli.db import Connection, format_stamp, parse_stamp, utcnow
from kb_cli.embeddings import to_blob
from kb_cli.errors import (
    BusyError,
    DatabaseUnavailable,
    DocumentTooLarge,
    KbError,
    ProviderRejected,
    ProviderUnavailable,
    StorageUnavailable,
)
from kb_cli.lifecycle import TRANSIENT_ERRORS, DocStatus, ErrorCode, Stage, TaskStatus
from kb_cli.records import Row, TaskRecord, WorkResult
from kb_cli.services.context import Kb, resolve_task_id
from kb_cli.textsearch import count_words, index_terms
from kb_cli.transitions import FRESH_RUN, move_document, move_task, requeue_task

DETAIL_LIMIT = 500
BACKOFF_CAP_SECONDS = 3600.0
BUSY_BACKOFF_CAP_SECONDS = 2.0
# The disk, not the object, is at fault for these: storage_unavailable, retried.
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
T = TypeVar("T")


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class WorkerOptions:
    worker_id: str
    lease_seconds: float = 60.0
    max_attempts: int = 3
    stage_delay: float = 0.0
    backoff_seconds: float = 5.0
    # Progress is written at most this often, so a 500-page PDF is not 500 commits.
    progress_interval: float = 0.25
    poll_seconds: float = 1.0


class WorkerListener(Protocol):
    """What the worker tells its display. Every method is optional to act on."""

    def claimed(self, task: TaskRecord, filename: str, reclaimed_from: str | None) -> None: ...
    def missed(self, task_id: str | None) -> None: ...
    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None: ...
    def finished(self, task: TaskRecord) -> None: ...
    def released(self, task_id: str) -> None: ...
    def lost(self, task_id: str) -> None: ...
    def gave_up(self, task_id: str, reason: str) -> None: ...


class SilentListener:
    def claimed(self, task, filename, reclaimed_from):
        pass

    def missed(self, task_id):
        pass

    def progress(self, task_id, stage, done, total):
        pass

    def finished(self, task):
        pass

    def released(self, task_id):
        pass

    def lost(self, task_id):
        pass

    def gave_up(self, task_id, reason):
        pass


class _Interrupt(Exception):
    """Control flow out of a running task; never reported as the task's error."""


class StopRequested(_Interrupt):
    """SIGINT/SIGTERM: release the task at this safe point."""


class ClaimLost(_Interrupt):
    """The task was cancelled or reclaimed: write nothing more."""


class TaskFailure(Exception):
    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def describe_error(error: BaseException) -> str:
    """Type name and a short message: no traceback, SQL or filesystem path."""
    # Database errors never get here raw: `kb_cli.db` turns them into KbErrors whose
    # messages carry no SQL.
    if isinstance(error, OSError) and error.strerror:
        message = error.strerror  # str(error) would name the file
    else:
        message = _scrub_paths(" ".join(str(error).split()))
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text[:DETAIL_LIMIT]


_PATH = re.compile(r"(?:(?<=^)|(?<=[\s'\"(=:]))(?:[A-Za-z]:)?[\\/][^\s'\"]*")


def _scrub_paths(message: str) -> str:
    return _PATH.sub("<path>", message)


def _error_detail(error: KbError) -> str:
    return f"{type(error).__name__}: {error.message}"[:DETAIL_LIMIT]


def _read_failure(error: OSError) -> TaskFailure:
    """A stored object that cannot be read: gone or unreadable (object_read_error), or
    on a disk that is full or read-only (storage_unavailable); both are retried."""
    code = ErrorCode.STORAGE_UNAVAILABLE if error.errno in _STORAGE_ERRNOS else None
    return TaskFailure(code or ErrorCode.OBJECT_READ_ERROR, describe_error(error))


@dataclass(frozen=True)
class _Claim:
    task: Row
    document: Row | None
    reclaimed_from: str | None = None

    @property
    def fence(self) -> tuple[str, int]:
        return self.task.worker_id, self.task.attempt


class Worker:
    def __init__(
        self,
        kb: Kb,
        options: WorkerOptions,
        listener: WorkerListener | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.kb = kb
        self.options = options
        self.listener = listener or SilentListener()
        self.stop = stop or threading.Event()
        self.heartbeat = _Heartbeat(options.lease_seconds / 3)

    # --- the loop ----------------------------------------------------------------

    def run(
        self, task_ref: str | None = None, max_tasks: int | None = 1, loop: bool = False
    ) -> Iterator[WorkResult]:
        """Yield one result per claim attempt; stop when told, done, or out of work."""
        try:
            if task_ref is not None:
                yield self.run_once(task_ref)
                return
            done = 0
            while not self.stop.is_set() and (max_tasks is None or done < max_tasks):
                result = self.run_once()
                if result.claimed:
                    done += 1
                    yield result
                elif loop:
                    self.stop.wait(self.options.poll_seconds)
                else:
                    yield result
                    return
        finally:
            self.heartbeat.close()

    def run_once(self, task_ref: str | None = None) -> WorkResult:
        worker_id = self.options.worker_id
        task_id = None
        if task_ref is not None:  # a prefix is resolved first, so logs carry the full id
            with self.kb.db.read() as conn:
                task_id = resolve_task_id(conn, self.kb.scope, task_ref)
        claim = self._claim(task_id)
        if claim is None:
            self.listener.missed(task_id)
            return WorkResult(False, worker_id, task_id, None)
        record = self._execute(claim)
        return WorkResult(True, worker_id, claim.task.id, record)

    # --- claiming ------------------------------------------------------------------

    def _claim(self, task_id: str | None) -> _Claim | None:
        """Take the named or the oldest claimable task in one immediate transaction."""
        return self.retrying(lambda: self._claim_once(task_id))

    def _claim_once(self, task_id: str | None) -> _Claim | None:
        given_up: list[tuple[str, str]] = []  # reported once the transaction commits
        claim = None
        with self.kb.db.write() as conn:
            while (task := self._candidate(conn, task_id, now := utcnow())) is not None:
                if task.status == TaskStatus.RUNNING and task.attempt >= self.options.max_attempts:
                    lost = self._fail_lost_worker(conn, task)
                    if lost is None or task_id is not None:
                        given_up += [lost] if lost else []
                        break
                    given_up.append(lost)
                    continue  # look for the next claimable task
                claim = self._take(conn, task, now)
                break
        for lost_task_id, reason in given_up:
            self.listener.gave_up(lost_task_id, reason)
        if claim is not None:
            filename = claim.document.filename if claim.document else "(no document)"
            self.listener.claimed(TaskRecord.from_row(claim.task), filename, claim.reclaimed_from)
        return claim

    def _candidate(self, conn: Connection, task_id: str | None, now: str) -> Row | None:
        if task_id is not None:
            return queries.claimable_task(conn, task_id, now)
        return queries.next_claimable_task(conn, now)

    def _take(self, conn: Connection, task: Row, now: str) -> _Claim | None:
        """Claim (or reclaim) one claimable task in the caller's transaction."""
        reclaimed_from = None
        if task.status == TaskStatus.RUNNING:
            reclaimed_from = task.worker_id
        claimed = move_task(
            conn,
            task,
            TaskStatus.RUNNING,
            actor=self.kb.actor.name,
            action="reclaim" if reclaimed_from else "claim",
            # A reclaim takes over exactly the lost claim it read, never a newer one.
            fence=(task.worker_id, task.attempt) if reclaimed_from else None,
            detail=self.audit_detail(
                f"lease of {reclaimed_from} expired at {task.lease_expires_at}"
                if reclaimed_from
                else None
            ),
            worker_id=self.options.worker_id,
            attempt=task.attempt + 1,
            lease_expires_at=self._lease_from(now),
            updated_at=now,
            **FRESH_RUN,
        )
        if claimed is None:  # cannot happen under BEGIN IMMEDIATE / row locks; be safe
            return None
        # Chunks a dead attempt wrote go at the start of indexing, in bounded batches.
        return _Claim(claimed, queries.get_document(conn, task.document_id), reclaimed_from)

    def _fail_lost_worker(self, conn: Connection, task: Row) -> tuple[str, str] | None:
        detail = (
            f"WorkerLost: worker {task.worker_id} stopped heartbeating; "
            f"{task.attempt} of {self.options.max_attempts} attempts used"
        )
        if not move_task(
            conn,
            task,
            TaskStatus.FAILED,
            actor=self.kb.actor.name,
            action="fail",
            detail=self.audit_detail(detail),
            fence=(task.worker_id, task.attempt),
            error_code=ErrorCode.WORKER_LOST,
            error_detail=detail,
            lease_expires_at=None,
        ):
            return None
        queries.delete_task_chunks(conn, task.id)
        self._move_document_with(conn, task, DocStatus.FAILED, "fail")
        return task.id, detail

    def retrying(self, step: Callable[[], T]) -> T:
        """Run a transaction step again while the database is busy, with a growing,
        jittered pause; only a stop request ends the waiting (with BusyError)."""
        delay = 0.05
        while True:
            try:
                return step()
            except BusyError:
                if self.stop.is_set():
                    raise
                self.stop.wait(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, BUSY_BACKOFF_CAP_SECONDS)

    def _lease_from(self, now: str) -> str:
        return format_stamp(parse_stamp(now) + timedelta(seconds=self.options.lease_seconds))

    # --- running -------------------------------------------------------------------

    def _execute(self, claim: _Claim) -> TaskRecord:
        run = _Run(self, claim)
        self.heartbeat.watch(run)
        try:
            run.execute()
        except ClaimLost:
            self.listener.lost(claim.task.id)
        except StopRequested:
            run.release()
        except TaskFailure as failure:
            run.fail(failure.code, failure.detail)
        except StorageUnavailable as error:
            self.kb.db.release_space()
            run.fail(ErrorCode.STORAGE_UNAVAILABLE, _error_detail(error))
        except DatabaseUnavailable as error:
            # Not the task's fault, and nothing can be written now: leave the claim to
            # expire, so that another worker (or this one, restarted) takes it over.
            raise DatabaseUnavailable(
                f"{error.message}; task {claim.task.id} stays claimed until its lease "
                "expires, then another worker takes it over"
            ) from error
        except Exception as error:  # a bug or an unforeseen input: fail, do not hang
            run.fail(ErrorCode.INTERNAL_ERROR, describe_error(error))
        finally:
            self.heartbeat.watch(None)
        final = run.final_row
        if final is None:  # the claim was lost: someone else wrote the last state
            with self.kb.db.read() as conn:
                final = queries.get_task(conn, claim.task.id)
        record = TaskRecord.from_row(final)
        self.listener.finished(record)
        return record

    def _move_document_with(self, conn: Connection, task: Row, to: DocStatus, action: str):
        """Move the task's document along, if it is still processing (one guarded
        UPDATE: a document that was deleted or moved on is left alone)."""
        move_document(
            conn,
            SimpleNamespace(id=task.document_id, status=DocStatus.PROCESSING),
            to,
            actor=self.kb.actor.name,
            action=action,
            detail=self.audit_detail(f"task {task.id}"),
        )

    def audit_detail(self, detail: str | None) -> str:
        """The worker's name in every event's detail; the actor is the authenticated
        user (in open mode, the OS user), never a name the worker gave itself."""
        named = f"worker {self.options.worker_id}"
        return f"{named}; {detail}" if detail else named


class _Run:
    """One attempt at one task."""

    def __init__(self, worker: Worker, claim: _Claim) -> None:
        self.worker = worker
        self.kb = worker.kb
        self.options = worker.options
        self.claim = claim
        self.task_id = claim.task.id
        self.lost = threading.Event()
        self.final_row: Row | None = None  # the task row this run's last write left
        self._last_write = time.monotonic()
        self.position: tuple[Stage, int, int] = (Stage.DOWNLOAD, 0, 0)
        self.model: str | None = None  # of the vectors this run made
        self.dim: int | None = None
        # A stage delay exists so that others can watch: then every step is written.
        self._write_interval = 0.0 if self.options.stage_delay else self.options.progress_interval
        self.batch = self.kb.settings.chunk_batch
        # Whether chunks of this task's revision may exist before the completion: an
        # earlier attempt may have left some, and this one writes batches ahead.
        self.may_have_chunks = claim.task.attempt > 1

    # --- the stages ------------------------------------------------------------

    def execute(self) -> None:
        document = self.claim.document
        if document is None:
            raise TaskFailure(
                ErrorCode.DOCUMENT_NOT_FOUND,
                f"document {self.claim.task.document_id} does not exist",
            )
        path = self._download(document)
        chunks = with_context(self._parse(path, document.content_type), document.filename)
        self._finalize(self._index(chunks, self._embed(chunks)))

    def _download(self, document: Row) -> Path:
        """Stream the stored object and check it against the checksum taken at upload."""
        total = document.size_bytes
        self.report(Stage.DOWNLOAD, 0, total)
        digest = hashlib.sha256()
        done = 0
        try:
            for block in self.kb.store.read_blocks(document.object_key):
                digest.update(block)
                done += len(block)
                self.report(Stage.DOWNLOAD, done, total)
        except OSError as error:
            raise _read_failure(error) from error
        if digest.hexdigest() != document.sha256:
            raise TaskFailure(
                ErrorCode.OBJECT_READ_ERROR,
                "ChecksumMismatch: the stored object does not match its sha256",
            )
        if total == 0:
            self.report(Stage.DOWNLOAD, 0, 0)
        return self.kb.store.local_path(document.object_key)

    def _parse(self, path: Path, content_type: str) -> list[ChunkText]:
        """Parse and chunk within the configured limits; a stop or a cancel is noticed
        within a fraction of a second, even inside a long parse."""
        from kb_cli import parsers

        self.report(Stage.PARSE, 0, 0)
        limits = self.kb.settings.limits
        try:
            blocks = parsers.parse(
                path,
                content_type,
                lambda done, total: self.report(Stage.PARSE, done, total),
                limits,
                self.checkpoint,
            )
            chunks = chunk_blocks(blocks, max_chunks=limits.max_chunks, checkpoint=self.checkpoint)
        except DocumentTooLarge as error:
            raise TaskFailure(ErrorCode.DOCUMENT_TOO_LARGE, _error_detail(error)) from error
        except (_Interrupt, KbError):
            raise
        except OSError as error:  # the object vanished, or its disk failed, meanwhile
            raise _read_failure(error) from error
        except Exception as error:
            raise TaskFailure(ErrorCode.PARSE_ERROR, describe_error(error)) from error
        if not chunks:
            raise TaskFailure(
                ErrorCode.EMPTY_DOCUMENT, "EmptyDocument: parsing found no indexable text"
            )
        return chunks

    def _embed(self, chunks: list[ChunkText]) -> list[bytes | None]:
        """Each chunk's vector, in batches, with progress in chunks; no vectors when
        embeddings are off. A provider that may recover (unreachable, 429, 5xx) makes
        the task wait and retry; one that refuses the configuration fails it."""
        total = len(chunks)
        self.report(Stage.EMBEDDING, 0, total)
        embedder = self.kb.embedder
        if embedder is None:
            self.report(Stage.EMBEDDING, total, total)
            return [None] * total
        blobs: list[bytes | None] = []
        for start in range(0, total, embedder.batch_size):
            batch = [
                contextual_text(chunk.context, chunk.text)
                for chunk in chunks[start : start + embedder.batch_size]
            ]
            try:
                vectors = embedder.embed(batch)
            except ProviderUnavailable as error:
                raise TaskFailure(ErrorCode.PROVIDER_UNAVAILABLE, _error_detail(error)) from error
            except ProviderRejected as error:
                raise TaskFailure(ErrorCode.INTERNAL_ERROR, _error_detail(error)) from error
            blobs.extend(to_blob(vector) for vector in vectors)
            self.report(Stage.EMBEDDING, len(blobs), total)
        self.model = embedder.model
        self.dim = len(vectors[0])
        return blobs

    def _index(self, chunks: list[ChunkText], vectors: list[bytes | None]) -> list[dict]:
        """The chunk rows (text, words for the lexical index, vector), in batches.

        Every batch but the last is written here, each in one short transaction that
        first checks the claim; the last (at most KB_CHUNK_BATCH rows, so a small
        document costs one transaction) goes with the completion. Until then the rows
        belong to a running task: search shows published revisions only, and a run
        that stops removes them (or the next claim of the task, or `doctor --repair`)."""
        total = len(chunks)
        self.report(Stage.INDEXING, 0, total)
        self._purge_chunks()  # what an earlier attempt at this task left, if any
        last = (total - 1) // self.batch * self.batch
        for start in range(0, last, self.batch):
            rows = self._rows(chunks, vectors, start)
            done = start + len(rows)
            self.worker.retrying(lambda rows=rows, done=done: self._write_batch(rows, done, total))
            self.report(Stage.INDEXING, done, total)
        rows = self._rows(chunks, vectors, last)
        self.report(Stage.INDEXING, total, total)
        return rows

    def _rows(self, chunks: list[ChunkText], vectors: list[bytes | None], start: int) -> list[dict]:
        end = start + self.batch
        return [
            self._row(chunk, vector)
            for chunk, vector in zip(chunks[start:end], vectors[start:end], strict=True)
        ]

    def _row(self, chunk: ChunkText, vector: bytes | None) -> dict:
        terms = index_terms(contextual_text(chunk.context, chunk.text))
        return {
            "chunk_index": chunk.index,
            "text": chunk.text,
            "page": chunk.page,
            "heading": chunk.heading and chunk.heading[:500],
            "context": chunk.context or None,
            "terms": terms,
            "term_count": count_words(terms),
            "embedding": vector,
            "embedding_model": vector and self.model,
            "embedding_dim": vector and self.dim,
        }

    def _write_batch(self, rows: list[dict], done: int, total: int) -> None:
        task = self.claim.task
        self.may_have_chunks = True
        with self.kb.db.write() as conn:
            self._write_progress(conn, Stage.INDEXING, done, total)  # checks the claim
            queries.insert_chunks(conn, task.document_id, task.revision, task.id, rows)

    def _purge_chunks(self) -> None:
        """Delete the chunks of this task's revision (an unpublished one: only a new
        revision is ever processed) in bounded batches, each fenced on the claim."""
        if not self.may_have_chunks:
            return
        while self.worker.retrying(self._purge_batch) == self.batch:
            pass
        self.may_have_chunks = False

    def _purge_batch(self) -> int:
        with self.kb.db.write() as conn:
            self._write_progress(conn, *self.position)
            task = self.claim.task
            return queries.delete_revision_chunks(conn, task.document_id, task.revision, self.batch)

    def _finalize(self, rows: list[dict]) -> None:
        """The last batch of chunks, task and document in one short transaction that
        makes all the chunks the task's result; the claim is checked in it."""
        self.report(Stage.FINALIZING, 0, 1)
        finished = self.worker.retrying(lambda: self._complete(rows))
        self.final_row = finished
        self.worker.listener.progress(self.task_id, Stage.FINALIZING, 1, 1)

    def _complete(self, rows: list[dict]) -> Row:
        task = self.claim.task
        with self.kb.db.write() as conn:
            finished = self._end(
                conn, TaskStatus.SUCCEEDED, "complete", stage=Stage.FINALIZING, completed=1, total=1
            )
            if finished is None:
                raise ClaimLost()
            queries.insert_chunks(conn, task.document_id, task.revision, task.id, rows)
            self.worker._move_document_with(conn, task, DocStatus.REVIEW_PENDING, "complete")
        return finished

    # --- progress, pauses and safe points -----------------------------------------

    def report(self, stage: Stage, done: int, total: int) -> None:
        """A progress step: show it, write it now and then, pause, check for a stop."""
        self.checkpoint()
        self.position = (stage, done, total)
        self.worker.listener.progress(self.task_id, stage, done, total)
        if time.monotonic() - self._last_write >= self._write_interval:
            # On a busy database, progress waits for the next step; the heartbeat keeps
            # the lease meanwhile.
            with contextlib.suppress(BusyError), self.kb.db.write() as conn:
                self._write_progress(conn, stage, done, total)
        self._pause()

    def _write_progress(self, conn: Connection, stage: Stage, done: int, total: int) -> None:
        now = utcnow()
        if not queries.update_task(
            conn,
            self.task_id,
            [TaskStatus.RUNNING],
            fence=self.claim.fence,
            stage=stage,
            completed=done,
            total=total,
            updated_at=now,
            lease_expires_at=self.worker._lease_from(now),
        ):
            raise ClaimLost()
        self._last_write = time.monotonic()

    def _pause(self) -> None:
        if self.options.stage_delay > 0:
            self.worker.stop.wait(self.options.stage_delay)
        self.checkpoint()

    def checkpoint(self) -> None:
        if self.lost.is_set():
            raise ClaimLost()
        if self.worker.stop.is_set():
            raise StopRequested()

    def renew_lease(self) -> None:
        now = utcnow()
        with self.kb.db.write() as conn:
            renewed = queries.update_task(
                conn,
                self.task_id,
                [TaskStatus.RUNNING],
                fence=self.claim.fence,
                lease_expires_at=self.worker._lease_from(now),
            )
        if not renewed:
            self.lost.set()

    # --- endings other than success -----------------------------------------------

    def fail(self, code: ErrorCode, detail: str, transient: bool | None = None) -> None:
        """Fail the task, or park it in retry_wait when the cause may pass by itself."""
        transient = code in TRANSIENT_ERRORS if transient is None else transient
        self._purge_quietly()
        self.final_row = moved = self.worker.retrying(
            lambda: self._fail_once(code, detail, transient)
        )
        if not moved:
            self.worker.listener.lost(self.task_id)

    def _fail_once(self, code: ErrorCode, detail: str, transient: bool) -> Row | None:
        attempt = self.claim.task.attempt
        # Progress writes are throttled: record the stage the failure happened in.
        stage, done, total = self.position
        where = {"stage": stage, "completed": done, "total": total}
        task = self.claim.task
        with self.kb.db.write() as conn:
            if transient and attempt < self.options.max_attempts:
                retry_at = self._backoff(attempt)
                moved = self._end(
                    conn,
                    TaskStatus.RETRY_WAIT,
                    "retry_wait",
                    detail=f"{code} ({detail}); retry at {retry_at}",
                    error_code=code,
                    error_detail=detail,
                    retry_at=retry_at,
                    **where,
                )
            else:
                moved = self._end(
                    conn,
                    TaskStatus.FAILED,
                    "fail",
                    detail=f"{code}: {detail}",
                    error_code=code,
                    error_detail=detail,
                    **where,
                )
                if moved:
                    self.worker._move_document_with(conn, task, DocStatus.FAILED, "fail")
            if moved:
                queries.delete_task_chunks(conn, self.task_id)  # what the purge left, if any
        return moved

    def _purge_quietly(self) -> None:
        """Remove this run's chunks before it ends; a lost claim or a failing database
        leaves them to the next claim or to `doctor --repair`."""
        with contextlib.suppress(ClaimLost, KbError):
            self._purge_chunks()

    def _end(
        self, conn: Connection, to: TaskStatus, action: str, detail: str | None = None, **values
    ) -> Row | None:
        """Move this run's task on from its own running claim (the fence), lease over."""
        return move_task(
            conn,
            self.claim.task,
            to,
            actor=self.kb.actor.name,
            action=action,
            detail=self.worker.audit_detail(detail),
            fence=self.claim.fence,
            lease_expires_at=None,
            **values,
        )

    def _backoff(self, attempt: int) -> str:
        """Exponential with jitter, so a burst of failures does not return as a burst."""
        delay = min(BACKOFF_CAP_SECONDS, self.options.backoff_seconds * 2 ** (attempt - 1))
        delay *= random.uniform(0.5, 1.5)
        return format_stamp(parse_stamp(utcnow()) + timedelta(seconds=delay))

    def release(self) -> None:
        """Graceful stop: back to queued (attempt kept), with no chunks left behind."""
        self._purge_quietly()
        with self.kb.db.write() as conn:
            moved = requeue_task(
                conn,
                self.claim.task,
                actor=self.kb.actor.name,
                action="release",
                detail=self.worker.audit_detail("stopped by a signal"),
                fence=self.claim.fence,
            )
        self.final_row = moved
        if moved:
            self.worker.listener.released(self.task_id)
        else:
            self.worker.listener.lost(self.task_id)


class _Heartbeat:
    """Renews the lease of the current task in the background, so that one long page
    cannot let it lapse. One thread per worker, started at its first task."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._run: _Run | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, run: _Run | None) -> None:
        self._run = run
        if run is not None and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="kb-heartbeat", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        while not self._done.wait(self.interval):
            run = self._run
            if run is None:
                continue
            try:
                run.renew_lease()
            except KbError:
                continue  # try again at the next beat; the lease has slack for it
