"""Small tasks claimed together run together (kb_cli/worker/batch.py): their texts are
embedded in one call and their completions written in one transaction, each task still
moved on its own claim. A task cancelled, taken over or failing in the batch ends in
its own way, with its own events; its neighbours succeed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kb_cli import queries
from kb_cli.clock import ManualClock
from kb_cli.config import WorkerOptions
from kb_cli.db import Database
from kb_cli.services import documents as docs
from kb_cli.services import tasks
from kb_cli.worker import Worker
from kb_cli.worker.claim import Claimant, take
from tests.helpers import db_rows, file_store_only

LEASE = 30.0


@pytest.fixture
def clock(kb) -> ManualClock:
    kb.clock = ManualClock()
    return kb.clock


def queue(kb, tmp_path: Path, texts: list[str]) -> list[str]:
    """Documents submitted in this order (oldest first is claim order)."""
    task_ids = []
    for i, text in enumerate(texts):
        path = tmp_path / f"note-{i}.txt"
        path.write_text(text)
        [task] = docs.upload_files(kb, [path], submit=True)
        task_ids.append(task.task_id)
        kb.clock.advance(0.001)
    return task_ids


def notes(count: int) -> list[str]:
    return [f"Tiny note {i} about invoices and ledgers.\n" for i in range(count)]


def claimed_together(kb, count: int) -> tuple[Worker, list]:
    worker = Worker(kb, WorkerOptions(worker_id="a", lease_seconds=LEASE))
    first = worker.claim(limit=count)
    assert first is not None
    claims = [first, *worker.waiting]
    worker.waiting.clear()
    assert len(claims) == count
    return worker, claims


def actions_of(kb, entity_id: str) -> list[str]:
    with kb.db.read() as conn:
        return [event.action for event in queries.list_audit_events(conn, [entity_id])]


def topics_of(task_id: str) -> list[str]:
    rows = db_rows("SELECT topic FROM outbox_events WHERE task_id = :t ORDER BY id", t=task_id)
    return [row["topic"] for row in rows]


def chunks_of(task_id: str) -> int:
    return db_rows("SELECT count(*) AS n FROM chunks WHERE task_id = :t", t=task_id)[0]["n"]


def assert_succeeded(kb, task_id: str) -> None:
    record = tasks.get_task(kb, task_id)
    assert (record.status, record.stage, record.completed, record.total) == (
        "succeeded",
        "finalizing",
        1,
        1,
    )
    assert record.lease_expires_at is None
    assert actions_of(kb, task_id) == ["submit", "claim", "complete"]
    assert actions_of(kb, record.document_id)[-1] == "complete"
    assert docs.document_record_for(kb, record.document_id).status == "review_pending"
    assert topics_of(task_id)[-2:] == ["task.succeeded", "document.review_pending"]
    assert chunks_of(task_id) == 1


def test_a_batch_completes_each_task_on_its_own_claim_in_one_transaction(
    kb, clock, tmp_path, monkeypatch
):
    task_ids = queue(kb, tmp_path, notes(4))
    worker, claims = claimed_together(kb, 4)
    assert kb.embedder is not None
    kb.embedder.embed(["loaded before the clock starts"])  # no stage outlasts the throttle
    kinds: list[str] = []
    monkeypatch.setattr(Database, "on_transaction", lambda kind, _seconds: kinds.append(kind))
    results = worker.execute_together(claims)
    monkeypatch.setattr(Database, "on_transaction", None)
    assert [r.task_id for r in results] == task_ids
    assert [r.task.status for r in results] == ["succeeded"] * 4
    assert kinds.count("write") == 1  # one completion for the four, no other write
    for task_id in task_ids:
        assert_succeeded(kb, task_id)
    vectors = db_rows("SELECT embedding_dim FROM chunks")
    dims = {row["embedding_dim"] for row in vectors}
    assert len(vectors) == 4 and len(dims) == 1 and dims != {None}


def test_a_task_cancelled_in_the_batch_loses_only_itself(kb, clock, tmp_path):
    task_ids = queue(kb, tmp_path, notes(3))
    worker, claims = claimed_together(kb, 3)
    tasks.cancel_task(kb, task_ids[1])  # claimed, its batch not yet written
    results = worker.execute_together(claims)
    assert [r.task.status for r in results] == ["succeeded", "cancelled", "succeeded"]
    assert_succeeded(kb, task_ids[0])
    assert_succeeded(kb, task_ids[2])
    assert actions_of(kb, task_ids[1]) == ["submit", "claim", "cancel"]
    assert topics_of(task_ids[1])[-1] == "task.cancelled"
    assert chunks_of(task_ids[1]) == 0
    cancelled = tasks.get_task(kb, task_ids[1])
    assert docs.document_record_for(kb, cancelled.document_id).status == "draft"


def test_a_task_taken_over_in_the_batch_is_left_to_its_new_worker(kb, clock, tmp_path):
    task_ids = queue(kb, tmp_path, notes(3))
    worker, claims = claimed_together(kb, 3)
    clock.advance(LEASE + 1)  # the leases ran out; b takes the second task over
    options = WorkerOptions(worker_id="b", lease_seconds=LEASE)
    [rescue] = take(Claimant(kb, options, threading.Event()), task_ids[1]).claims
    assert rescue.reclaimed_from == "a"
    results = worker.execute_together(claims)
    assert [r.task.status for r in results] == ["succeeded", "running", "succeeded"]
    taken = tasks.get_task(kb, task_ids[1])
    assert (taken.worker_id, taken.attempt) == ("b", 2)
    assert actions_of(kb, task_ids[1]) == ["submit", "claim", "reclaim"]
    assert chunks_of(task_ids[1]) == 0
    rescue.complete([])  # b's claim still holds
    assert tasks.get_task(kb, task_ids[1]).status == "succeeded"
    for task_id in (task_ids[0], task_ids[2]):
        assert tasks.get_task(kb, task_id).worker_id == "a"
        assert chunks_of(task_id) == 1


@file_store_only("changes a stored object's file behind kb's back")
def test_a_task_that_fails_in_the_batch_fails_alone(kb, clock, tmp_path):
    # The second has no indexable text (empty_document: failed); the third's stored
    # object was changed behind kb's back (object_read_error: waits for a retry).
    task_ids = queue(kb, tmp_path, [notes(1)[0], " \n\n  \n", *notes(2)])
    worker, claims = claimed_together(kb, 4)
    tampered = claims[2].document
    assert tampered is not None
    path = kb.store.local_path(tampered.object_key)
    assert path is not None
    path.write_text("Not what was uploaded.\n")
    results = worker.execute_together(claims)
    statuses = [r.task.status for r in results]
    assert statuses == ["succeeded", "failed", "retry_wait", "succeeded"]
    assert results[1].task.error_code == "empty_document"
    assert results[2].task.error_code == "object_read_error"
    assert actions_of(kb, task_ids[1]) == ["submit", "claim", "fail"]
    assert actions_of(kb, task_ids[2]) == ["submit", "claim", "retry_wait"]
    assert topics_of(task_ids[1])[-1] == "task.failed"
    failed = tasks.get_task(kb, task_ids[1])
    assert docs.document_record_for(kb, failed.document_id).status == "failed"
    assert chunks_of(task_ids[1]) == chunks_of(task_ids[2]) == 0
    assert_succeeded(kb, task_ids[0])
    assert_succeeded(kb, task_ids[3])


def test_a_stop_in_a_batch_gives_back_what_did_not_complete(kb, clock, tmp_path):
    task_ids = queue(kb, tmp_path, notes(3))
    worker, claims = claimed_together(kb, 3)
    worker.stop.set()  # seen at the first safe point of each task
    results = worker.execute_together(claims)
    assert [r.task.status for r in results] == ["queued"] * 3
    for task_id in task_ids:
        record = tasks.get_task(kb, task_id)
        assert (record.attempt, record.worker_id) == (0, None)
        assert actions_of(kb, task_id) == ["submit", "claim", "release"]
        assert chunks_of(task_id) == 0


def test_a_drain_runs_small_tasks_in_batches_with_one_record_each(kb, clock, tmp_path):
    task_ids = queue(kb, tmp_path, notes(40))
    results = list(Worker(kb, WorkerOptions(worker_id="a")).run(max_tasks=None))
    assert [r.task_id for r in results if r.claimed] == task_ids  # claim order
    assert all(r.task.status == "succeeded" for r in results if r.claimed)
    assert not results[-1].claimed
    for task_id in task_ids:
        assert_succeeded(kb, task_id)
