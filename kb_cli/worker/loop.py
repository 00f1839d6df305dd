"""The run loop: claim a task, run its pipeline, end the attempt; again, until told to
stop, done, or out of work. No transaction is open while the worker reads, parses,
embeds or sleeps."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Protocol, TypeVar

from kb_cli import queries
from kb_cli.app import Kb, require_caller, require_own_store
from kb_cli.config import WorkerOptions
from kb_cli.db import format_stamp, outlasting_outages, parse_stamp
from kb_cli.engines import TASKS_CHANNEL, Watch
from kb_cli.errors import (
    ActorDisabled,
    ClaimLost,
    ClaimStranded,
    DatabaseUnavailable,
    KbError,
    ModelChanged,
    StopRequested,
    StorageUnavailable,
    TaskFailure,
    UsageError,
)
from kb_cli.lifecycle import ErrorCode, Stage, TaskStatus
from kb_cli.records import TaskRecord, WorkResult
from kb_cli.worker.claim import BATCH_BYTES, BATCH_TASKS, Claim, Claimant, take
from kb_cli.worker.heartbeat import Heartbeat
from kb_cli.worker.pipeline import Pipeline, describe_error, error_detail

# A due time that has just passed is not claimable in the same microsecond (leases
# expire strictly after their stamp): look again a moment later, not in a tight loop.
MIN_WAIT_SECONDS = 0.01
# How often, at most, a worker lets the vector index catch up with the chunks written.
REFRESH_SECONDS = 5.0
T = TypeVar("T")


def _batchable(claim: Claim) -> bool:
    """Whether a claimed task may run in a batch with others: a small document, a
    first claim (a reclaim or a retry runs alone, as it always did)."""
    document = claim.document
    return (
        claim.reclaimed_from is None
        and claim.task.attempt == 1
        and document is not None
        and document.size_bytes <= BATCH_BYTES
    )


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class WorkerListener(Protocol):
    """What the worker tells its display."""

    def claimed(self, task: TaskRecord, filename: str, reclaimed_from: str | None) -> None: ...
    def missed(self, task_id: str | None) -> None: ...
    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None: ...
    def reused(self, task_id: str, revision: int, chunks: int) -> None: ...
    def read_by_ocr(self, task_id: str, pages: int, engine: str | None) -> None: ...
    def finished(self, task: TaskRecord) -> None: ...
    def released(self, task_id: str) -> None: ...
    def lost(self, task_id: str) -> None: ...
    def gave_up(self, task_id: str, reason: str) -> None: ...
    def stranded(self, task_id: str, reason: str) -> None: ...
    def held(self) -> contextlib.AbstractContextManager[None]:
        """What is said meanwhile may be written at once at the end (a batch's tasks are
        told one after the other when it has ended)."""
        ...


class SilentListener:
    def claimed(self, task: TaskRecord, filename: str, reclaimed_from: str | None) -> None:
        pass

    def missed(self, task_id: str | None) -> None:
        pass

    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None:
        pass

    def reused(self, task_id: str, revision: int, chunks: int) -> None:
        pass

    def read_by_ocr(self, task_id: str, pages: int, engine: str | None) -> None:
        pass

    def finished(self, task: TaskRecord) -> None:
        pass

    def released(self, task_id: str) -> None:
        pass

    def lost(self, task_id: str) -> None:
        pass

    def gave_up(self, task_id: str, reason: str) -> None:
        pass

    def stranded(self, task_id: str, reason: str) -> None:
        pass

    def held(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class Recorder:
    """A listener that keeps what one attempt of a batch says, to say it to `listener`
    in the same order once the batch has ended."""

    def __init__(self, listener: WorkerListener) -> None:
        self.listener = listener
        self.said: list[Callable[[], None]] = []

    def tell(self) -> None:
        said, self.said = self.said, []
        for say in said:
            say()

    def claimed(self, task: TaskRecord, filename: str, reclaimed_from: str | None) -> None:
        self.said.append(partial(self.listener.claimed, task, filename, reclaimed_from))

    def missed(self, task_id: str | None) -> None:
        self.said.append(partial(self.listener.missed, task_id))

    def progress(self, task_id: str, stage: Stage, done: int, total: int) -> None:
        self.said.append(partial(self.listener.progress, task_id, stage, done, total))

    def reused(self, task_id: str, revision: int, chunks: int) -> None:
        self.said.append(partial(self.listener.reused, task_id, revision, chunks))

    def read_by_ocr(self, task_id: str, pages: int, engine: str | None) -> None:
        self.said.append(partial(self.listener.read_by_ocr, task_id, pages, engine))

    def finished(self, task: TaskRecord) -> None:
        self.said.append(partial(self.listener.finished, task))

    def released(self, task_id: str) -> None:
        self.said.append(partial(self.listener.released, task_id))

    def lost(self, task_id: str) -> None:
        self.said.append(partial(self.listener.lost, task_id))

    def gave_up(self, task_id: str, reason: str) -> None:
        self.said.append(partial(self.listener.gave_up, task_id, reason))

    def stranded(self, task_id: str, reason: str) -> None:
        self.said.append(partial(self.listener.stranded, task_id, reason))

    def held(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class Worker:
    def __init__(
        self,
        kb: Kb,
        options: WorkerOptions,
        listener: WorkerListener | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        if not options.worker_id:  # a reclaim tells workers apart by their ids
            raise UsageError("a worker needs a non-empty worker id")
        self.kb = kb
        self.options = options
        self.listener = listener or SilentListener()
        self.ocr_announced = False  # the OCR engine is named once, on its first use
        self.stop = stop or threading.Event()
        self.claimant = Claimant(kb, options, self.stop)
        self.heartbeat = Heartbeat(options.lease_seconds / 3)
        self._watch: Watch | None = None
        # Small tasks claimed with an earlier one (claim.take), in claim order: each
        # runs in its turn, and a stop gives back those that have not started.
        self.waiting: list[Claim] = []
        self._vectors_checked: float | None = None  # when it last looked (monotonic)
        self._models_written: set[str] = set()  # whose vectors its tasks wrote

    def run(
        self, task_id: str | None = None, max_tasks: int | None = 1, loop: bool = False
    ) -> Iterator[WorkResult]:
        """Yield one result per claim attempt (`task_id`: a full id, claimed alone); stop
        when told, done, or out of work. A store that is not this knowledge base's is
        refused before any claim, so no task burns its attempts on it."""
        require_own_store(self.kb)
        try:
            if task_id is not None:
                yield self.run_once(task_id)
                return
            done = 0
            while not self.stop.is_set() and (max_tasks is None or done < max_tasks):
                try:
                    results = self.run_some(limit=self._batch_limit(max_tasks, done))
                except ClaimStranded as stranded:
                    self.waiting.clear()  # their leases run out; then anyone takes them
                    if not loop:
                        raise
                    # A looping worker outlives the server's restart: it waits for the
                    # server (idle), then takes the task over itself once its lease ends.
                    self.listener.stranded(stranded.task_id, stranded.message)
                    continue
                if results[0].claimed:
                    done += len(results)
                    yield from results
                elif loop:
                    self.idle()
                else:
                    yield from results
                    return
            yield from self.release_waiting()
        finally:
            if self.waiting:  # an error ends the run: give them back if the database lets
                with contextlib.suppress(KbError):
                    self.release_waiting()
            self.heartbeat.close()
            if self._watch is not None:
                self._watch.close()

    def idle(self) -> None:
        """Wait until a task is claimable: woken by the commit that queued it, at the
        earliest retry time or lease expiry, or (should a wake-up be lost) after the
        fallback poll; a stop ends the wait at once. Each look is one read, never a
        claim: a commit that queued nothing costs no write lock. Each look checks the
        caller again, and a lost database server is reconnected to."""
        if self._watch is None:
            self._watch = self.kb.db.watch(TASKS_CHANNEL)
        while not self.stop.is_set():
            try:
                seconds = self._outlasting(self._seconds_until_due)
            except StopRequested:
                return
            if seconds <= 0:
                return
            self._watch.wait(seconds, self.stop)

    def _outlasting(self, step: Callable[[], T]) -> T:
        return outlasting_outages(step, self.stop, self.kb.settings.reconnect_seconds)

    def _seconds_until_due(self) -> float:
        """0 when a task is claimable now; else how long until one may become so by
        itself, at most the fallback poll."""
        now = self.kb.clock.now()
        bases = self.options.bases
        with self.kb.db.read() as conn:
            require_caller(conn, self.kb.actor)
            if queries.has_claimable_task(conn, format_stamp(now), bases):
                return 0.0
            due = queries.next_due(conn, bases)
        poll = self.options.poll_seconds
        if due is None:
            return poll
        return min(poll, max(MIN_WAIT_SECONDS, (parse_stamp(due) - now).total_seconds()))

    def _batch_limit(self, max_tasks: int | None, done: int) -> int:
        """How many small tasks the next claim may take: one when a stage delay lets
        others watch each task (or race it); never more than --max-tasks leaves."""
        if self.options.stage_delay > 0:
            return 1
        left = BATCH_TASKS if max_tasks is None else max_tasks - done
        return max(1, min(BATCH_TASKS, left))

    def release_waiting(self, reason: str = "stopped by a signal") -> list[WorkResult]:
        """Give back the tasks claimed with an earlier one that have not started: each
        back to queued with its attempt, as a stop releases a running task. One result
        per task, as for a claim attempt (a claim lost meanwhile: its current row)."""
        results = []
        while (claim := self._next_waiting()) is not None:
            self._announce(claim, self.listener)
            self._told(claim.task.id, claim.release(reason), self.listener)
            record = self._final_record(claim)
            if record is not None:
                self.listener.finished(record)
            results.append(WorkResult(True, self.options.worker_id, claim.task.id, record))
        return results

    def run_once(self, task_id: str | None = None, limit: int = 1) -> WorkResult:
        worker_id = self.options.worker_id
        claim = self._next_waiting() or self.claim(task_id, limit)
        if claim is None:
            self.listener.missed(task_id)
            return WorkResult(False, worker_id, task_id, None)
        self._announce(claim, self.listener)
        return WorkResult(True, worker_id, claim.task.id, self.execute(claim))

    def run_some(self, limit: int = 1) -> list[WorkResult]:
        """One claim attempt's results: the next task run alone, or with the small ones
        claimed with it run together (kb_cli/worker/batch.py); a miss when nothing is
        claimable."""
        claim = self._next_waiting() or self.claim(None, limit)
        if claim is None or not _batchable(claim):
            return [self._run_claimed(claim)]
        together = [claim]
        while self.waiting and _batchable(self.waiting[0]):
            together.append(self.waiting.pop(0))
        if len(together) == 1:
            return [self._run_claimed(claim)]
        return self.execute_together(together)

    def _run_claimed(self, claim: Claim | None) -> WorkResult:
        worker_id = self.options.worker_id
        if claim is None:
            self.listener.missed(None)
            return WorkResult(False, worker_id, None, None)
        self._announce(claim, self.listener)
        return WorkResult(True, worker_id, claim.task.id, self.execute(claim))

    def _next_waiting(self) -> Claim | None:
        return self.waiting.pop(0) if self.waiting else None

    def claim(self, task_id: str | None = None, limit: int = 1) -> Claim | None:
        """Take the named or the oldest claimable task (and, `limit` above 1, small
        ones after it, which wait in `waiting`), and say so (None also when stopped
        while the database server was away)."""
        try:
            taken = self._outlasting(lambda: take(self.claimant, task_id, limit))
        except StopRequested:
            return None
        for lost_task_id, reason in taken.given_up:
            self.listener.gave_up(lost_task_id, reason)
        if not taken.claims:
            return None
        claim, *self.waiting = taken.claims
        return claim

    @staticmethod
    def _announce(claim: Claim, listener: WorkerListener) -> None:
        filename = claim.document.filename if claim.document else "(no document)"
        listener.claimed(TaskRecord.from_row(claim.task), filename, claim.reclaimed_from)

    def execute(self, claim: Claim) -> TaskRecord | None:
        """Run the claimed task's stages and end the attempt: completed, failed (or
        waiting for a retry), released on a stop, or left alone when the claim was
        lost. The final task record; None when the task is gone (its document was
        deleted while it ran)."""
        task_id = claim.task.id
        claim.started()
        self.heartbeat.watch(claim, *self.waiting)
        try:
            self._run_attempt(claim)
        except ActorDisabled:  # from a write, a checkpoint, or an ending's write
            reason = f"user {self.kb.actor.name} is disabled"
            self._told(task_id, claim.release(reason), self.listener)
            self.release_waiting(reason)
            raise self.claimant.refusal(task_id) from None
        finally:
            self.heartbeat.watch(*self.waiting)
        record = self._final_record(claim)
        if record is not None:
            self.listener.finished(record)
            if record.status == TaskStatus.SUCCEEDED:
                self._refresh_vectors()
        return record

    def execute_together(self, claims: list[Claim]) -> list[WorkResult]:
        """Run small tasks claimed together as one batch (kb_cli/worker/batch.py) and
        end each attempt on its own: one result per task, in claim order, each told to
        the display in its turn once the batch has ended."""
        from kb_cli.worker.batch import Batch, Member

        members, recorders = [], []
        for claim in claims:
            recorder = Recorder(self.listener)
            self._announce(claim, recorder)
            attempt = Attempt(self, claim, recorder)
            members.append(
                Member(claim, attempt, recorder, Pipeline(self.kb, attempt, claim, claim.asked))
            )
            recorders.append(recorder)
        self.heartbeat.watch(*claims, *self.waiting)
        try:
            Batch(members, self.end_attempt).run()
            self._models_written.update(m.pipeline.model for m in members if m.pipeline.model)
        except ActorDisabled:
            reason = f"user {self.kb.actor.name} is disabled"
            for member, recorder in zip(members, recorders, strict=True):
                if not member.ended:
                    self._told(member.claim.task.id, member.claim.release(reason), recorder)
                recorder.tell()
            self.release_waiting(reason)
            raise self.claimant.refusal(claims[0].task.id) from None
        except ClaimStranded:
            for recorder in recorders:
                recorder.tell()
            raise
        finally:
            self.heartbeat.watch(*self.waiting)
        results = []
        with self.listener.held():
            for claim, recorder in zip(claims, recorders, strict=True):
                recorder.tell()
                record = self._final_record(claim)
                if record is not None:
                    self.listener.finished(record)
                results.append(WorkResult(True, self.options.worker_id, claim.task.id, record))
        if any(r.task is not None and r.task.status == TaskStatus.SUCCEEDED for r in results):
            self._refresh_vectors()
        return results

    def _final_record(self, claim: Claim) -> TaskRecord | None:
        """The task's record as the attempt left it; None when the task is gone."""
        final = claim.final_row
        if final is None:  # the claim was lost: someone else wrote the last state
            with self.kb.db.read() as conn:
                final = queries.get_task(conn, claim.task.id)
        # ... and None when its document was deleted since: no task to show
        return None if final is None else TaskRecord.from_row(final)

    def _refresh_vectors(self) -> None:
        """After a task's chunks are committed, with no transaction open: let the vector
        index catch up with them when it is due (VectorIndex.refresh). A failure there
        fails no task: search reads every vector until the index is current."""
        if not self._models_written:
            return
        # After its first task, then at most every few seconds: a drain of thousands of
        # tiny documents pays for the look once in a while, not once a task.
        now = time.monotonic()
        if self._vectors_checked is not None and now - self._vectors_checked < REFRESH_SECONDS:
            return
        self._vectors_checked = now
        for model in sorted(self._models_written):
            self.kb.vectors.refresh(self.kb.db, model)

    def _run_attempt(self, claim: Claim) -> None:
        """The stages and the ending of one attempt; ActorDisabled goes to the caller,
        which releases the task."""
        task_id = claim.task.id
        try:
            attempt = Attempt(self, claim)
            pipeline = Pipeline(self.kb, attempt, claim, claim.asked)
            rows = pipeline.run(claim.document, claim.task.document_id)
            self._models_written.update([pipeline.model] if pipeline.model else [])
            attempt.report(Stage.FINALIZING, 0, 1)
            claim.complete(rows)
            self.listener.progress(task_id, Stage.FINALIZING, 1, 1)
        except Exception as error:
            self.end_attempt(claim, self.listener, error)

    def end_attempt(self, claim: Claim, listener: WorkerListener, error: Exception) -> None:
        """End an attempt its stages or its completion stopped with `error`: left alone
        (its claim lost), released (a stop), failed or waiting for a retry. ActorDisabled
        and ClaimStranded (the database is away) go to the caller."""
        task_id = claim.task.id
        if isinstance(error, ActorDisabled):
            raise error
        if isinstance(error, ClaimLost):
            listener.lost(task_id)
        elif isinstance(error, StopRequested):
            self._told(task_id, claim.release(), listener)
        elif isinstance(error, ModelChanged):
            self._told(task_id, claim.release(str(error)), listener)
        elif isinstance(error, TaskFailure):
            self._told(task_id, claim.fail(error.code, error.detail), listener, released=False)
        elif isinstance(error, StorageUnavailable):
            self.kb.db.release_space()
            moved = claim.fail(ErrorCode.STORAGE_UNAVAILABLE, error_detail(error))
            self._told(task_id, moved, listener, released=False)
        elif isinstance(error, DatabaseUnavailable):
            # Not the task's fault, and nothing can be written now: leave the claim to
            # expire, so that another worker (or this one, restarted) takes it over.
            raise ClaimStranded(
                f"{error.message}; task {task_id} stays claimed until its lease "
                "expires, then another worker takes it over",
                task_id,
            ) from error
        else:  # a bug or an unforeseen input: fail, do not hang
            moved = claim.fail(ErrorCode.INTERNAL_ERROR, describe_error(error))
            self._told(task_id, moved, listener, released=False)

    @staticmethod
    def _told(task_id: str, moved: object, listener: WorkerListener, released: bool = True) -> None:
        """Tell the listener how an attempt's ending went: released, or the claim lost
        (a failure is told by the task's final record)."""
        if not moved:
            listener.lost(task_id)
        elif released:
            listener.released(task_id)


class Attempt:
    """The pipeline's reporter for one claim: each progress step is shown, written now
    and then, paused on (--stage-delay), and a safe point for a stop or a lost claim."""

    def __init__(
        self, worker: Worker, claim: Claim, listener: WorkerListener | None = None
    ) -> None:
        self.claim = claim
        self.worker = worker
        self.listener = listener or worker.listener
        self.stop = worker.stop
        self.stage_delay = worker.options.stage_delay

    def report(self, stage: Stage, done: int, total: int) -> None:
        self.checkpoint()
        self.claim.progress(stage, done, total)
        self.listener.progress(self.claim.task.id, stage, done, total)
        if self.stage_delay > 0:
            self.stop.wait(self.stage_delay)
        self.checkpoint()

    def reused(self, chunks: int) -> None:
        self.checkpoint()
        self.claim.note_reuse(chunks)
        task = self.claim.task
        self.listener.reused(task.id, task.revision, chunks)

    def read_by_ocr(self, pages: int) -> None:
        """Pages read by OCR in this parse, in the task's history; the engine is named
        in the worker's log on its first use."""
        from kb_cli.parsers import ocr

        engine = ocr.engine_version()
        self.checkpoint()
        self.claim.note_ocr(pages, engine)
        first_use = not self.worker.ocr_announced
        self.worker.ocr_announced = True
        self.listener.read_by_ocr(self.claim.task.id, pages, engine if first_use else None)

    def checkpoint(self) -> None:
        if self.claim.lost.is_set():
            raise ClaimLost()
        if self.claim.disabled.is_set():
            raise ActorDisabled()
        if self.stop.is_set():
            raise StopRequested()
