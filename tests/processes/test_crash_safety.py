"""Real worker processes under real signals: SIGKILL, SIGSTOP/SIGCONT, SIGINT, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from kb_cli.services import doctor, documents
from kb_cli.worker import Worker, WorkerOptions
from tests.helpers import (
    ON_POSTGRES,
    db_rows,
    file_store_only,
    later,
    run_in_process,
    run_kb,
    start_kb,
    wait_until,
    work_later,
    write_lock_held,
)

STAGES = ["download", "parse", "embedding", "indexing", "finalizing"]


def submit_text(tmp_path: Path, name: str = "doc.txt", paragraphs: int = 1) -> dict:
    path = tmp_path / name
    path.write_text("\n\n".join(f"Paragraph {i} " + "lorem ipsum " * 90 for i in range(paragraphs)))
    return run_in_process("upload", str(path), "--submit", "--json").record  # the scene only


def task_row(kb_home: Path, task_id: str) -> dict:
    [row] = db_rows("SELECT * FROM ingestion_tasks WHERE id = :id", id=task_id)
    return row


def chunk_count(kb_home: Path, task_id: str) -> int:
    [row] = db_rows("SELECT count(*) AS n FROM chunks WHERE task_id = :id", id=task_id)
    return row["n"]


def wait_for_stage(kb_home: Path, task_id: str, stage: str) -> None:
    wait_until(
        lambda: (
            (row := task_row(kb_home, task_id))["status"] == "running" and row["stage"] == stage
        ),
        interval=0.02,
    )


def _matches(row: dict, wanted: dict) -> bool:
    return all(row[key] == value for key, value in wanted.items())


def doctor_is_clean() -> None:
    report = doctor.check(Kb.open(resolve_settings()))
    assert report.ok, report.problems


# One stage runs by default; every stage with `-m slow` (as .ci/run does).
EVERY_STAGE_SLOW = [
    stage if stage == "parse" else pytest.param(stage, marks=pytest.mark.slow) for stage in STAGES
]


# The killed worker's lease (60 s by default) runs out on the rescuer's clock, which is
# this far ahead: nothing sleeps through a lease.
PAST_THE_LEASE = 61


@pytest.mark.parametrize("stage", EVERY_STAGE_SLOW)
def test_killed_worker_is_reclaimed_after_its_lease(tmp_path, kb_home, stage, capsys):
    task = submit_text(tmp_path)
    victim = start_kb("work", "--worker-id", "victim", "--stage-delay", "0.15")
    wait_for_stage(kb_home, task["task_id"], stage)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=10)
    assert task_row(kb_home, task["task_id"])["status"] == "running"  # stuck, for now
    assert work_later(1, "early").claimed is False  # the lease still runs
    capsys.readouterr()
    rescued = work_later(PAST_THE_LEASE, "rescuer")
    log = capsys.readouterr().err
    assert f"reclaimed task={task['task_id']} from=victim worker=rescuer" in log
    final = rescued.task
    assert final.status == "succeeded" and final.attempt == 2
    indexes = [r["chunk_index"] for r in db_rows("SELECT chunk_index FROM chunks ORDER BY 1")]
    assert indexes == list(range(len(indexes))) and indexes  # no duplicates
    history = run_in_process("status", task["task_id"], "--json").record
    assert history["worker_id"] == "rescuer"
    doctor_is_clean()


@pytest.mark.slow
def test_worker_lost_too_often_ends_failed(tmp_path, kb_home):
    task = submit_text(tmp_path)
    victim = start_kb("work", "--stage-delay", "0.15", "--max-attempts", "2")
    running = {"status": "running", "attempt": 1}
    wait_until(lambda: _matches(task_row(kb_home, task["task_id"]), running), interval=0.02)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=10)
    # A second worker reclaims it and is lost as well: it claims and never finishes.
    second = later(PAST_THE_LEASE)
    assert Worker(second, WorkerOptions(worker_id="second", max_attempts=2)).claim() is not None
    final = work_later(2 * PAST_THE_LEASE, "third", task["task_id"], max_attempts=2)
    assert final.claimed is False
    row = task_row(kb_home, task["task_id"])
    assert row["status"] == "failed" and row["error_code"] == "worker_lost"
    assert run_kb("status", task["document_id"], "--json").record["status"] == "failed"
    doctor_is_clean()


@pytest.mark.slow
def test_a_stopped_worker_whose_lease_was_stolen_writes_nothing(tmp_path, kb_home):
    task = submit_text(tmp_path, paragraphs=6)
    sleeper = start_kb(
        "work", "--worker-id", "sleeper", "--lease-seconds", "3", "--stage-delay", "0.2", "--json"
    )
    wait_for_stage(kb_home, task["task_id"], "embedding")
    sleeper.send_signal(signal.SIGSTOP)
    try:
        thief = work_later(4, "thief")  # the sleeper's lease has run out for the thief
        assert thief.task.status == "succeeded"
        before = task_row(kb_home, task["task_id"])
        chunks_before = chunk_count(kb_home, task["task_id"])
    finally:
        sleeper.send_signal(signal.SIGCONT)
    _, err = sleeper.communicate(timeout=30)
    assert sleeper.returncode == 0, err
    assert "claim lost" in err
    assert task_row(kb_home, task["task_id"]) == before
    assert chunk_count(kb_home, task["task_id"]) == chunks_before
    late = db_rows(
        "SELECT id FROM audit_events WHERE detail LIKE 'worker sleeper%' AND at > :at",
        at=before["updated_at"],
    )
    assert late == []
    doctor_is_clean()


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("stage", EVERY_STAGE_SLOW)
def test_signal_releases_the_task_cleanly(tmp_path, kb_home, stage, signum):
    task = submit_text(tmp_path)
    worker = start_kb("work", "--worker-id", "polite", "--stage-delay", "0.15")
    wait_for_stage(kb_home, task["task_id"], stage)
    worker.send_signal(signum)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert f"released task={task['task_id']}" in err
    row = task_row(kb_home, task["task_id"])
    # A release gives its attempt back (docs/workers.md): a stop is no attempt.
    assert row["status"] == "queued" and row["worker_id"] is None and row["attempt"] == 0
    assert chunk_count(kb_home, task["task_id"]) == 0
    assert run_in_process("status", task["document_id"], "--json").record["status"] == "processing"
    doctor_is_clean()
    finished = run_in_process("work", "--json").record["task"]
    assert finished["status"] == "succeeded" and finished["attempt"] == 1


def test_second_signal_exits_at_once(tmp_path, kb_home):
    task = submit_text(tmp_path)
    # Ten steps of 0.5 s: still at its start when it is stopped a moment after its claim.
    # (The process runs its handlers once the main thread's pause ends: the 5 s this
    # delay used to be were 5 s to exit.)
    worker = start_kb("work", "--stage-delay", "0.5", "--lease-seconds", "30")
    wait_for_stage(kb_home, task["task_id"], "download")
    # Both signals are pending when the process resumes, so the second arrives before
    # the worker reaches its next safe point.
    worker.send_signal(signal.SIGSTOP)
    wait_until(
        lambda: Path(f"/proc/{worker.pid}/stat").read_text().split(") ")[1][0] == "T",
        interval=0.02,
    )
    worker.send_signal(signal.SIGINT)
    worker.send_signal(signal.SIGTERM)
    worker.send_signal(signal.SIGCONT)
    worker.communicate(timeout=10)
    assert worker.returncode == 128 + signal.SIGTERM
    assert task_row(kb_home, task["task_id"])["status"] == "running"  # the lease will expire


@file_store_only("hides the object by renaming its file, then puts it back")
def test_transient_read_error_waits_then_succeeds(tmp_path, kb_home):
    task = submit_text(tmp_path)
    objects = [p for p in (kb_home / "objects").rglob("*") if p.is_file()]
    [stored] = objects
    hidden = stored.with_name("hidden")
    os.rename(stored, hidden)
    first = run_kb("work", "--json", "--backoff-seconds", "0.2")
    waiting = first.record["task"]
    assert waiting["status"] == "retry_wait" and waiting["error_code"] == "object_read_error"
    assert waiting["retry_at"] and "/" not in waiting["error_detail"]
    assert run_in_process("status", task["document_id"], "--json").record["status"] == "processing"
    os.rename(hidden, stored)
    second = work_later(1, "second").task  # 0.2 s x jitter (at most 1.5) has passed
    assert second.status == "succeeded" and second.attempt == 2
    assert second.error_code is None and second.retry_at is None


def test_damaged_pdf_fails_once_without_automatic_retry(tmp_path, kb_home):
    path = tmp_path / "bad.pdf"
    path.write_bytes(b"%PDF-1.4\nnot really")
    task = run_in_process("upload", str(path), "--submit", "--json").record
    first = run_kb("work", "--json", "--backoff-seconds", "0").record["task"]
    assert first["status"] == "failed" and first["error_code"] == "parse_error"
    assert first["stage"] == "parse" and first["attempt"] == 1
    again = run_kb("work", "--json").record
    assert again["claimed"] is False
    assert task_row(kb_home, task["task_id"])["attempt"] == 1


@pytest.mark.slow
def test_eight_workers_drain_many_documents_exactly_once(tmp_path, kb_home):
    count = 1000 if ON_POSTGRES else 300
    paths = []
    for i in range(count):
        path = tmp_path / f"d{i}.md"
        path.write_text(f"# Note {i}\n\nBody of note {i}.\n")
        paths.append(str(path))
    submitted = run_kb("upload", *paths, "--submit", "--json").records
    workers = [start_kb("work", "--drain", "--worker-id", f"w{i}", "--json") for i in range(8)]
    outputs = [worker.communicate(timeout=300) for worker in workers]
    claimed = []
    for worker, (out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
        assert "locked" not in err and "Traceback" not in err
        claimed += [r["task_id"] for r in map(json.loads, out.splitlines()) if r["claimed"]]
    assert sorted(claimed) == sorted(task["task_id"] for task in submitted)
    rows = db_rows("SELECT status, attempt, count(*) AS n FROM ingestion_tasks GROUP BY 1, 2")
    assert rows == [{"status": "succeeded", "attempt": 1, "n": count}]
    doctor_is_clean()


@file_store_only("plants an orphan file dated an hour back (test_s3_store.py: the bucket's)")
def test_doctor_finds_and_repairs_what_is_safe(tmp_path, kb_home):
    task = submit_text(tmp_path)
    victim = start_kb("work", "--stage-delay", "0.15")
    wait_for_stage(kb_home, task["task_id"], "parse")
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=10)
    orphan = kb_home / "objects" / "ab" / "abandoned"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"left behind")
    os.utime(orphan, (time.time() - 3600, time.time() - 3600))
    found = run_in_process("doctor", "--json")  # now: the lease still runs
    assert found.code == 4 and found.error["error"] == "conflict"
    assert {p["kind"] for p in json.loads(found.stdout)["problems"]} == {"orphan_object"}
    kinds = {p.kind for p in doctor.check(later(PAST_THE_LEASE)).problems}
    assert kinds == {"expired_lease", "orphan_object"}
    report = doctor.check(later(PAST_THE_LEASE), repair=True)
    assert report.ok and {p.kind for p in report.repaired} == kinds
    assert not orphan.exists()
    assert task_row(kb_home, task["task_id"])["status"] == "queued"
    doctor_is_clean()


@pytest.mark.skipif(not ON_POSTGRES, reason="a PostgreSQL server connection")
def test_worker_that_loses_its_database_connection_exits_and_is_reclaimed(tmp_path, kb_home):
    from sqlalchemy import create_engine, text

    task = submit_text(tmp_path, paragraphs=4)
    worker = start_kb("work", "--worker-id", "cut-off", "--stage-delay", "0.3")
    wait_for_stage(kb_home, task["task_id"], "embedding")
    database = os.environ["DATABASE_URL"].rsplit("/", 1)[1]
    admin = create_engine(os.environ["KB_TEST_POSTGRES_URL"], isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false"))
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"),
            {"name": database},
        )
        try:
            _, err = worker.communicate(timeout=30)
        finally:
            conn.execute(text(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true"))
    admin.dispose()
    assert worker.returncode == 1
    assert "database server" in err and "Traceback" not in err
    assert "lease expires" in err
    assert task_row(kb_home, task["task_id"])["status"] == "running"
    rescued = work_later(PAST_THE_LEASE, "rescuer").task
    assert rescued.status == "succeeded" and rescued.attempt == 2


@pytest.mark.skipif(not ON_POSTGRES, reason="a PostgreSQL server connection")
def test_a_connection_the_server_dropped_while_idle_is_replaced(kb, tmp_path):
    """A server restart or an idle timeout between two tasks: the next transaction
    connects anew instead of stopping the worker."""
    from sqlalchemy import create_engine, text

    with kb.db.read() as conn:  # leaves one idle connection in this thread's pool
        backend = conn.execute("SELECT pg_backend_pid()").scalar()
    admin = create_engine(os.environ["KB_TEST_POSTGRES_URL"], isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": backend})
    admin.dispose()
    with kb.db.write() as conn:
        assert conn.execute("SELECT pg_backend_pid()").scalar() != backend
        assert conn.execute("SELECT count(*) FROM documents").scalar() == 0


def test_a_connection_interrupted_while_rolling_back_is_not_reused(kb, tmp_path, monkeypatch):
    """Ctrl-C between BEGIN and ROLLBACK must not leave an open transaction in the pool,
    where the next unrelated write would either fail or commit the half-done one."""
    path = tmp_path / "a.txt"
    path.write_text("Words about ledgers.")
    [doc] = documents.upload_files(kb, [path])

    def interrupted(raw) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(kb.db.engine, "rollback", interrupted)
    with pytest.raises(KeyboardInterrupt), kb.db.write() as conn:
        conn.execute("UPDATE documents SET filename = 'half-done.txt'")
        raise RuntimeError("the command failed")
    monkeypatch.undo()
    with kb.db.write() as conn:
        conn.execute("UPDATE documents SET version = version")
    with kb.db.read() as conn:
        assert conn.execute("SELECT filename FROM documents").scalars() == [doc.filename]


@pytest.mark.slow
def test_two_workers_reclaiming_the_same_task_by_name_only_one_wins(tmp_path, kb_home):
    task = submit_text(tmp_path)
    victim = start_kb("work", "--worker-id", "victim", "--stage-delay", "0.15")
    wait_for_stage(kb_home, task["task_id"], "parse")
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=10)
    results: dict[str, Any] = {}

    def race(name: str) -> None:
        results[name] = work_later(PAST_THE_LEASE, name, task["task_id"])

    with write_lock_held(task["task_id"]):  # both claimers queue behind this lock
        racers = [threading.Thread(target=race, args=(name,), daemon=True) for name in ("r1", "r2")]
        for racer in racers:
            racer.start()
        time.sleep(1.5)
    for racer in racers:
        racer.join(60)
    outcomes = list(results.values())
    assert sorted(result.claimed for result in outcomes) == [False, True]
    [winner] = [result for result in outcomes if result.claimed]
    assert winner.task.status == "succeeded" and winner.task.attempt == 2
    reclaims = db_rows("SELECT id FROM audit_events WHERE action = 'reclaim'")
    assert len(reclaims) == 1
    doctor_is_clean()
