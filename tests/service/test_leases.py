"""Leases, reclaims and the fence, on a real database with a clock the test moves:
time passes by `advance`, never by sleeping past a lease."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from kb_cli import queries
from kb_cli.clock import ManualClock
from kb_cli.config import WorkerOptions
from kb_cli.db import format_stamp
from kb_cli.errors import ClaimLost
from kb_cli.lifecycle import ErrorCode
from kb_cli.services import doctor, tasks
from kb_cli.services import documents as docs
from kb_cli.worker import Attempt, Worker
from kb_cli.worker.heartbeat import Heartbeat
from tests.helpers import wait_until

LEASE = 30.0


@pytest.fixture
def clock(kb) -> ManualClock:
    kb.clock = ManualClock()
    return kb.clock


def submitted(kb, tmp_path: Path) -> str:
    path = tmp_path / "policy.txt"
    path.write_text("Invoices are kept for ten years. " * 40)
    [task] = docs.upload_files(kb, [path], submit=True)
    return task.task_id


def worker(kb, name: str, **options) -> Worker:
    return Worker(kb, WorkerOptions(worker_id=name, lease_seconds=LEASE, **options))


def test_a_claim_is_not_taken_over_while_its_lease_runs(kb, clock, tmp_path):
    submitted(kb, tmp_path)
    assert worker(kb, "a").claim() is not None
    clock.advance(LEASE - 1)
    assert worker(kb, "b").claim() is None


def test_an_expired_claim_is_reclaimed_and_the_old_worker_writes_nothing(kb, clock, tmp_path):
    task_id = submitted(kb, tmp_path)
    old = worker(kb, "old").claim()
    assert old is not None
    clock.advance(LEASE + 1)
    rescuer = worker(kb, "rescuer")
    new = rescuer.claim()
    assert new is not None and new.reclaimed_from == "old" and new.task.attempt == 2
    with pytest.raises(ClaimLost):  # the fence: old's completion changes nothing
        old.complete([])
    assert old.fail(ErrorCode.PARSE_ERROR, "late") is None
    record = rescuer.execute(new)
    assert record.status == "succeeded" and record.worker_id == "rescuer"
    with kb.db.read() as conn:
        actions = [e.action for e in queries.list_audit_events(conn, [task_id])]
    assert actions == ["submit", "claim", "reclaim", "complete"]


def test_a_worker_lost_too_often_fails_the_task(kb, clock, tmp_path):
    task_id = submitted(kb, tmp_path)
    for name in ("first", "second"):
        assert worker(kb, name, max_attempts=2).claim() is not None
        clock.advance(LEASE + 1)
    assert worker(kb, "third", max_attempts=2).claim() is None
    record = tasks.get_task(kb, task_id)
    assert (record.status, record.error_code, record.attempt) == ("failed", "worker_lost", 2)
    assert docs.document_record_for(kb, record.document_id).status == "failed"


def test_doctor_sees_an_expired_lease_only_once_it_expired_and_requeues_it(kb, clock, tmp_path):
    task_id = submitted(kb, tmp_path)
    assert worker(kb, "gone").claim() is not None
    assert doctor.check(kb).ok
    clock.advance(LEASE + 1)
    [problem] = doctor.check(kb).problems
    assert (problem.kind, problem.id) == ("expired_lease", task_id)
    report = doctor.check(kb, repair=True)
    assert report.ok and [fix.kind for fix in report.repaired] == ["expired_lease"]
    record = tasks.get_task(kb, task_id)
    assert (record.status, record.attempt, record.worker_id) == ("queued", 1, None)


def test_a_heartbeat_keeps_the_claim_across_many_leases(kb, clock, tmp_path):
    task_id = submitted(kb, tmp_path)
    holder = worker(kb, "holder").claim()
    assert holder is not None
    heartbeat = Heartbeat(interval=0.01)
    heartbeat.watch(holder)
    try:
        for _ in range(5):
            clock.advance(LEASE * 0.6)
            renewed_until = format_stamp(clock.now() + timedelta(seconds=LEASE * 0.5))
            wait_until(lambda until=renewed_until: lease_of(kb, task_id) > until, message="no beat")
            assert worker(kb, "thief").claim() is None
    finally:
        heartbeat.close()
    assert not holder.lost.is_set()


def lease_of(kb, task_id: str) -> str:
    with kb.db.read() as conn:
        return queries.existing_task(conn, task_id).lease_expires_at


def test_a_renewal_after_a_reclaim_marks_the_claim_lost(kb, clock, tmp_path):
    submitted(kb, tmp_path)
    stale = worker(kb, "stale").claim()
    assert stale is not None
    clock.advance(LEASE + 1)
    assert worker(kb, "new").claim() is not None
    stale.renew_lease()
    assert stale.lost.is_set()
    with pytest.raises(ClaimLost):
        Attempt(worker(kb, "stale"), stale).checkpoint()


def test_the_retry_time_follows_the_clock(kb, clock, tmp_path):
    task_id = submitted(kb, tmp_path)
    claim = worker(kb, "w", backoff_seconds=10).claim()
    assert claim is not None
    claim.fail(ErrorCode.PROVIDER_UNAVAILABLE, "down")
    record = tasks.get_task(kb, task_id)
    assert record.status == "retry_wait"
    clock.advance(4.9)  # less than 10 s x the smallest jitter (0.5)
    assert worker(kb, "early").claim() is None
    clock.advance(10.2)  # more than 10 s x the largest jitter (1.5)
    retried = worker(kb, "later").claim()
    assert retried is not None and retried.task.attempt == 2
