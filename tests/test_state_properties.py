"""Random sequences of lifecycle operations keep every invariant after every step."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kb_cli import queries
from kb_cli.config import resolve_settings
from kb_cli.errors import ConflictError
from kb_cli.lifecycle import ErrorCode, Stage, TaskStatus
from kb_cli.services import doctor, tasks
from kb_cli.services import documents as docs
from kb_cli.services.context import Kb
from kb_cli.worker import ClaimLost, TaskFailure, Worker, WorkerOptions, _Run

WORKERS = ("w1", "w2")


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        root = Path(self.dir.name)
        self.kb = Kb.open(
            resolve_settings(str(root / "home"), None, str(root / "objects")), actor="prop"
        )
        if not self.kb.db.is_sqlite:  # one PostgreSQL database for every example: empty it
            with self.kb.db.write() as conn:
                for table in (
                    "chunks",
                    "audit_events",
                    "outbox_events",
                    "ingestion_tasks",
                    "documents",
                ):
                    conn.execute(f"DELETE FROM {table}")
        self.files = root
        self.documents: list[str] = []
        self.runs: dict[str, _Run] = {}  # task id -> the run that believes it owns it
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

    # --- workers, one step at a time ----------------------------------------------

    @rule(worker=st.sampled_from(WORKERS))
    def claim(self, worker: str) -> None:
        agent = Worker(self.kb, WorkerOptions(worker_id=worker, lease_seconds=30))
        claim = agent._claim(None)
        if claim is not None:
            self.runs[claim.task.id] = _Run(agent, claim)

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99), stage=st.sampled_from(list(Stage)))
    def progress(self, pick: int, stage: Stage) -> None:
        run = self._run(pick)
        run._write_interval = 0
        self._lost_ok(run, lambda: run.report(stage, 1, 2))

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99))
    def index_and_complete(self, pick: int) -> None:
        run = self._run(pick)

        def finish() -> None:
            document = run.claim.document
            path = run._download(document)
            chunks = run._parse(path, document.content_type)
            run._finalize(run._index(chunks, run._embed(chunks)))

        self._lost_ok(run, finish, done=True)

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99))
    def index_only(self, pick: int) -> None:
        run = self._run(pick)
        document = run.claim.document
        self._lost_ok(
            run,
            lambda: run._index(
                chunks := run._parse(run._download(document), document.content_type),
                [None] * len(chunks),
            ),
        )

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99), code=st.sampled_from(list(ErrorCode)))
    def fail(self, pick: int, code: ErrorCode) -> None:
        run = self._run(pick)
        run.fail(code, f"{code} happened")
        self.runs.pop(run.task_id, None)

    @precondition(lambda self: self.runs)
    @rule(pick=st.integers(0, 99))
    def release(self, pick: int) -> None:
        run = self._run(pick)
        run.release()
        self.runs.pop(run.task_id, None)

    @rule()
    def expire_leases(self) -> None:
        with self.kb.db.write() as conn:
            conn.execute(
                "UPDATE ingestion_tasks SET lease_expires_at = '2000-01-01T00:00:00.000000Z'"
                " WHERE status = 'running'"
            )

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

    # --- helpers -----------------------------------------------------------------------

    def _document(self, pick: int) -> str:
        return self.documents[pick % len(self.documents)]

    def _latest_task(self, pick: int) -> str | None:
        with self.kb.db.read() as conn:
            return queries.get_document(conn, self._document(pick)).latest_task_id

    def _run(self, pick: int) -> _Run:
        return list(self.runs.values())[pick % len(self.runs)]

    def _lost_ok(self, run: _Run, action, done: bool = False) -> None:
        try:
            action()
        except ClaimLost:
            self.runs.pop(run.task_id, None)
            return
        except TaskFailure as failure:  # as the worker does: record it (fenced)
            run.fail(failure.code, failure.detail)
            self.runs.pop(run.task_id, None)
            return
        if done:
            self.runs.pop(run.task_id, None)

    def _conflict_ok(self, action, *args) -> None:
        with contextlib.suppress(ConflictError):
            action(self.kb, *args)


Lifecycle.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
test_lifecycle_invariants = Lifecycle.TestCase
