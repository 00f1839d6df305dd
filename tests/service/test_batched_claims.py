"""Small tasks claimed several at a time (kb_cli/worker/claim.py `take` with a limit):
each claim is its own guarded write with its own attempt and lease, a cancel of a task
that waits for its turn wins, and a stop gives the waiting tasks back."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kb_cli import queries
from kb_cli.clock import ManualClock
from kb_cli.config import WorkerOptions
from kb_cli.errors import ClaimLost
from kb_cli.lifecycle import ErrorCode
from kb_cli.services import documents as docs
from kb_cli.services import tasks
from kb_cli.worker import Worker
from kb_cli.worker.claim import BATCH_BYTES, Claimant, take
from tests.helpers import db_rows

LEASE = 30.0


@pytest.fixture
def clock(kb) -> ManualClock:
    kb.clock = ManualClock()
    return kb.clock


def queue_tiny(kb, tmp_path: Path, count: int) -> list[str]:
    """Tiny documents submitted in this order (the clock moves between them, so that
    claim order, oldest first, is this order)."""
    task_ids = []
    for i in range(count):
        path = tmp_path / f"tiny-{i}.txt"
        path.write_text(f"Tiny note {i} about invoices.\n")
        [task] = docs.upload_files(kb, [path], submit=True)
        task_ids.append(task.task_id)
        kb.clock.advance(0.001)
    return task_ids


def claimant(kb, name: str, stop: threading.Event | None = None) -> Claimant:
    options = WorkerOptions(worker_id=name, lease_seconds=LEASE)
    return Claimant(kb, options, stop or threading.Event())


def actions_of(kb, task_id: str) -> list[str]:
    with kb.db.read() as conn:
        return [event.action for event in queries.list_audit_events(conn, [task_id])]


def test_one_claim_takes_several_small_tasks_each_with_its_own_claim(kb, clock, tmp_path):
    task_ids = queue_tiny(kb, tmp_path, 5)
    taken = take(claimant(kb, "a"), None, limit=3)
    assert [claim.task.id for claim in taken.claims] == task_ids[:3]  # oldest first
    for claim in taken.claims:
        record = tasks.get_task(kb, claim.task.id)
        assert (record.status, record.worker_id, record.attempt) == ("running", "a", 1)
        assert claim.fence == ("a", 1)
        assert actions_of(kb, claim.task.id) == ["submit", "claim"]
    assert [tasks.get_task(kb, t).status for t in task_ids[3:]] == ["queued", "queued"]
    other = take(claimant(kb, "b"), None, limit=10)  # the rest, never a held one
    assert [claim.task.id for claim in other.claims] == task_ids[3:]


def test_a_task_claimed_in_a_batch_cannot_be_completed_by_another_claim(kb, clock, tmp_path):
    task_ids = queue_tiny(kb, tmp_path, 2)
    _first, second = take(claimant(kb, "a"), None, limit=2).claims
    clock.advance(LEASE + 1)  # the waiting task's lease ran out: it is claimable again
    rescued = take(claimant(kb, "b"), task_ids[1]).claim
    assert rescued is not None and rescued.reclaimed_from == "a"
    with pytest.raises(ClaimLost):  # the fence: a's claim of it writes nothing more
        second.complete([])
    assert tasks.get_task(kb, task_ids[1]).worker_id == "b"


def test_a_big_document_never_joins_a_batch(kb, clock, tmp_path):
    [small] = queue_tiny(kb, tmp_path, 1)
    big = tmp_path / "big.txt"
    big.write_text("A long policy about invoices and ledgers. " * (BATCH_BYTES // 40 + 10))
    [large] = docs.upload_files(kb, [big], submit=True)
    taken = take(claimant(kb, "a"), None, limit=10)
    assert [claim.task.id for claim in taken.claims] == [small]
    assert tasks.get_task(kb, large.task_id).status == "queued"
    assert [claim.task.id for claim in take(claimant(kb, "b"), None, limit=10).claims] == [
        large.task_id
    ]


def test_a_reclaim_is_never_a_batch_s_extra(kb, clock, tmp_path):
    first, second = queue_tiny(kb, tmp_path, 2)
    assert take(claimant(kb, "gone"), second).claim is not None
    clock.advance(LEASE + 1)
    taken = take(claimant(kb, "a"), None, limit=10)
    assert [claim.task.id for claim in taken.claims] == [first]
    again = take(claimant(kb, "b"), None, limit=10)
    assert [(c.task.id, c.reclaimed_from) for c in again.claims] == [(second, "gone")]


def test_a_cancel_of_a_task_waiting_in_a_batch_wins(kb, clock, tmp_path):
    task_ids = queue_tiny(kb, tmp_path, 3)
    worker = Worker(kb, WorkerOptions(worker_id="a", lease_seconds=LEASE))
    first = worker.claim(limit=3)
    assert first is not None and [c.task.id for c in worker.waiting] == task_ids[1:]
    tasks.cancel_task(kb, task_ids[1])  # claimed, waiting for its turn
    records = [worker.execute(first)]
    records += [worker.execute(claim) for claim in list(worker.waiting)]
    assert [r.status for r in records] == ["succeeded", "cancelled", "succeeded"]
    cancelled = tasks.get_task(kb, task_ids[1])
    assert docs.document_record_for(kb, cancelled.document_id).status == "draft"
    assert db_rows("SELECT count(*) AS n FROM chunks WHERE task_id = :t", t=task_ids[1]) == [
        {"n": 0}
    ]
    assert actions_of(kb, task_ids[1]) == ["submit", "claim", "cancel"]


def test_a_stop_gives_the_waiting_tasks_back_one_record_each(kb, clock, tmp_path):
    task_ids = queue_tiny(kb, tmp_path, 4)
    # The oldest task is a retry: it runs alone (the worker's batches are first
    # attempts), and the three claimed with it wait for their turn.
    [retried] = take(claimant(kb, "z"), task_ids[0]).claims
    retried.fail(ErrorCode.PROVIDER_UNAVAILABLE, "ProviderUnavailable: down")
    clock.advance(3600)
    stop = threading.Event()
    worker = Worker(kb, WorkerOptions(worker_id="a", lease_seconds=LEASE), stop=stop)
    results = []
    for result in worker.run(max_tasks=None):
        results.append(result)
        stop.set()  # after the first task: the other three were claimed with it
    assert [r.task_id for r in results] == task_ids
    assert [r.claimed for r in results] == [True] * 4
    assert [r.task.status for r in results] == ["succeeded", "queued", "queued", "queued"]
    for task_id in task_ids[1:]:
        record = tasks.get_task(kb, task_id)
        assert (record.status, record.attempt, record.worker_id) == ("queued", 0, None)
        assert actions_of(kb, task_id) == ["submit", "claim", "release"]
    assert worker.waiting == []
    rest = list(Worker(kb, WorkerOptions(worker_id="b")).run(max_tasks=None))
    assert [r.task.status for r in rest if r.claimed] == ["succeeded"] * 3


def test_a_stage_delay_or_max_tasks_bounds_the_batch(kb, clock, tmp_path):
    queue_tiny(kb, tmp_path, 5)
    watched = Worker(kb, WorkerOptions(worker_id="w", stage_delay=0.01))
    assert watched._batch_limit(None, 0) == 1  # a watched task runs alone
    counted = Worker(kb, WorkerOptions(worker_id="c"))
    assert counted._batch_limit(3, 1) == 2
    results = list(counted.run(max_tasks=2))
    assert len(results) == 2 and counted.waiting == []
    statuses = [row["status"] for row in db_rows("SELECT status FROM ingestion_tasks")]
    assert sorted(statuses) == ["queued"] * 3 + ["succeeded"] * 2
