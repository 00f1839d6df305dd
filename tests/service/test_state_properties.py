"""Random sequences of lifecycle operations keep every invariant after every step."""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kb_cli import queries
from kb_cli.app import Kb
from kb_cli.clock import ManualClock
from kb_cli.config import WorkerOptions, resolve_settings
from kb_cli.errors import ClaimLost, ConflictError, TaskFailure
from kb_cli.lifecycle import (
    DOCUMENT_TRANSITIONS,
    TASK_TRANSITIONS,
    DocStatus,
    ErrorCode,
    Stage,
    TaskStatus,
)
from kb_cli.services import doctor, removal, review, tasks
from kb_cli.services import documents as docs
from kb_cli.worker import Attempt, Claim, Pipeline, Worker

WORKERS = ("w1", "w2")
LEASE_SECONDS = 30


@dataclass
class Run:
    """One worker's attempt at one task, driven a step at a time."""

    claim: Claim
    attempt: Attempt
    pipeline: Pipeline

    @property
    def task_id(self) -> str:
        return self.claim.task.id


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        root = Path(self.dir.name)
        self.kb = Kb.open(
            resolve_settings(str(root / "home"), None, str(root / "objects")), actor="prop"
        )
        self.clock = self.kb.clock = ManualClock()
        if not self.kb.db.is_sqlite:  # one PostgreSQL database for every example: empty it
            with self.kb.db.write() as conn:
                for table in (
                    "deleted_documents",
                    "chunks",
                    "audit_events",
                    "outbox_events",
                    "ingestion_tasks",
                    "documents",
                ):
                    conn.execute(f"DELETE FROM {table}")
        self.files = root
        self.documents: list[str] = []
        self.runs: dict[str, Run] = {}  # task id -> the run that believes it owns it
        self.counter = 0

    def teardown(self) -> None:
        self.kb.db.close()
        self.dir.cleanup()

    def _file(self) -> Path:
        self.counter += 1
        path = self.files / f"f{self.counter}.txt"
        path.write_text(f"Body {self.counter}. " * 50)
        return path

    # --- people -------------------------------------------------------------------

    @rule()
    def upload(self) -> None:
        [record] = docs.upload_files(self.kb, [self._file()])
        self.documents.append(record.document_id)

    @precondition(lambda self: self.documents)
    @rule(pick=st.integers(0, 99))
    def submit(self, pick: int) -> None:
        self._conflict_ok(docs.submit_document, self._document(pick))

    @precondition(lambda self: self.documents)
    @rule(pick=st.integers(0, 99))
    def cancel(self, pick: int) -> None:
        task_id = self._latest_task(pick)
        if task_id:
            self._conflict_ok(tasks.cancel_task, task_id)

    @precondition(lambda self: self.documents)
    @rule(pick=st.integers(0, 99))
    def retry(self, pick: int) -> None:
        task_id = self._latest_task(pick)
        if task_id:
            self._conflict_ok(tasks.retry_task, task_id)

    @precondition(lambda self: self.documents)
    @rule(pick=st.integers(0, 99))
    def publish(self, pick: int) -> None:
        self._conflict_ok(docs.publish_document, self._document(pick))

    @precondition(lambda self: self.documents)
    @rule(pick=st.integers(0, 99))
    def replace(self, pick: int) -> None:
        self._conflict_ok(docs.replace_file, self._file(), self._document(pick))

    @precondition(lambda self: self.documents)
    @rule(pick=st.integers(0, 99))
    def reject(self, pick: int) -> None:
        self._conflict_ok(review.reject_document, self._document(pick), "not this one")

    @precondition(lambda self: self.documents)
    @rule(pick=st.integers(0, 99))
    def unpublish(self, pick: int) -> None:
        self._conflict_ok(review.unpublish_document, self._document(pick))

    @precondition(lambda self: self.documents)
    @rule(pick=st.integers(0, 99))
    def delete(self, pick: int) -> None:
        document_id = self.documents.pop(pick % len(self.documents))
        removal.delete(self.kb, removal.plan(self.kb, [document_id]))

    # --- workers, one step at a time ----------------------------------------------

    @rule(worker=st.sampled_from(WORKERS))
    def claim(self, worker: str) -> None:
        agent = Worker(self.kb, WorkerOptions(worker_id=worker, lease_seconds=LEASE_SECONDS))
        claim = agent.claim(None)
        if claim is not None:
            attempt = Attempt(agent, claim)
            self.runs[claim.task.id] = Run(claim, attempt, Pipeline(self.kb, attempt, claim))

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99), stage=st.sampled_from(list(Stage)))
    def progress(self, pick: int, stage: Stage) -> None:
        run = self._run(pick)
        self._lost_ok(run, lambda: run.attempt.report(stage, 1, 2))

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99))
    def index_and_complete(self, pick: int) -> None:
        run = self._run(pick)

        def finish() -> None:
            run.claim.complete(run.pipeline.run(run.claim.document, run.claim.task.document_id))

        self._lost_ok(run, finish, done=True)

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99))
    def index_only(self, pick: int) -> None:
        run = self._run(pick)
        document = run.claim.document
        pipeline = run.pipeline
        self._lost_ok(
            run,
            lambda: pipeline.index(
                chunks := pipeline.parse(pipeline.download(document), document.content_type),
                [None] * len(chunks),
            ),
        )

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99), code=st.sampled_from(list(ErrorCode)))
    def fail(self, pick: int, code: ErrorCode) -> None:
        run = self._run(pick)
        run.claim.fail(code, f"{code} happened")
        self.runs.pop(run.task_id, None)

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99))
    def release(self, pick: int) -> None:
        run = self._run(pick)
        run.claim.release()
        self.runs.pop(run.task_id, None)

    @rule()
    def expire_leases(self) -> None:
        self.clock.advance(LEASE_SECONDS + 1)

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        report = doctor.check(self.kb)
        real = [p for p in report.problems if p.kind != "expired_lease"]
        assert not real, real
        with self.kb.db.read() as conn:
            for task in conn.execute("SELECT * FROM ingestion_tasks"):
                if task.status == TaskStatus.RUNNING:
                    assert task.worker_id and task.lease_expires_at and task.attempt >= 1
                else:
                    assert task.lease_expires_at is None
                if task.status == TaskStatus.QUEUED:
                    assert (task.stage, task.completed, task.total) == ("download", 0, 0)
                    assert task.error_code is None
                if task.status == TaskStatus.FAILED:
                    assert task.error_code is not None

    @invariant()
    def every_move_is_in_its_table(self) -> None:
        """Each state change recorded is a legal move of its machine, deleted documents'
        included (their events outlive them)."""
        with self.kb.db.read() as conn:
            documents = set(conn.execute("SELECT id FROM documents").scalars())
            documents |= set(conn.execute("SELECT id FROM deleted_documents").scalars())
            events = conn.execute(
                "SELECT entity_id, from_status, to_status FROM audit_events"
                " WHERE to_status IS NOT NULL"
            ).all()
        for event in events:
            if event.entity_id in documents:
                old = event.from_status and DocStatus(event.from_status)
                assert (old or None, DocStatus(event.to_status)) in DOCUMENT_TRANSITIONS, event
            else:
                old = event.from_status and TaskStatus(event.from_status)
                assert (old or None, TaskStatus(event.to_status)) in TASK_TRANSITIONS, event

    # --- helpers -----------------------------------------------------------------------

    def _document(self, pick: int) -> str:
        return self.documents[pick % len(self.documents)]

    def _latest_task(self, pick: int) -> str | None:
        with self.kb.db.read() as conn:
            return queries.get_document(conn, self._document(pick)).latest_task_id

    def _run(self, pick: int) -> Run:
        return list(self.runs.values())[pick % len(self.runs)]

    def _lost_ok(self, run: Run, action, done: bool = False) -> None:
        try:
            action()
        except ClaimLost:
            self.runs.pop(run.task_id, None)
            return
        except TaskFailure as failure:  # as the worker does: record it (fenced)
            run.claim.fail(failure.code, failure.detail)
            self.runs.pop(run.task_id, None)
            return
        if done:
            self.runs.pop(run.task_id, None)

    def _conflict_ok(self, action, *args) -> None:
        with contextlib.suppress(ConflictError):
            action(self.kb, *args)


HYPOTHESIS = {
    "stateful_step_count": 30,
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}


class TestLifecycleInvariants(Lifecycle.TestCase):
    settings = settings(max_examples=25, **HYPOTHESIS)


@pytest.mark.slow
class TestLifecycleInvariantsAtFullSize(Lifecycle.TestCase):
    settings = settings(max_examples=200, **HYPOTHESIS)
