"""An idle `kb work --loop` (and `kb events --follow`) is woken by the commit that
queues a task (writes an event), not by its poll.

The fallback poll is set to 30 s here, so a claim within a few seconds can only come
from the wake-up (LISTEN/NOTIFY on PostgreSQL, PRAGMA data_version on SQLite). No
timing asserts beyond that: the measured latency is in benchmarks/ (case 14)."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import (
    ON_POSTGRES,
    db_execute,
    db_rows,
    finish,
    kb_env,
    kb_json,
    run_kb,
    start_kb,
    wait_until,
)

LONG_POLL = "30"


def idle_worker(*extra: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A looping worker that has looked once, found nothing, and is now waiting."""
    proc = start_kb("work", "--loop", "--json", "--worker-id", "idle", *extra, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "no claimable task" in line, line
    return proc


def task_status(task_id: str) -> str:
    [row] = db_rows("SELECT status FROM ingestion_tasks WHERE id = :id", id=task_id)
    return row["status"]


def stop_at_once(proc: subprocess.Popen, signum: int = signal.SIGTERM) -> None:
    """An idle worker stops as soon as it is told (well within the 30 s poll)."""
    proc.send_signal(signum)
    result = finish(proc, timeout=10)
    assert result.code == 0, result.stderr


def upload(tmp_path: Path, name: str, text: str = "wake me up") -> dict:
    path = tmp_path / name
    path.write_text(text)
    [document] = kb_json("upload", path)
    return document


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_idle_worker_claims_a_submitted_task_long_before_its_poll(tmp_path, signum):
    document = upload(tmp_path, "a.txt")
    worker = idle_worker("--poll-seconds", LONG_POLL)
    try:
        [task] = kb_json("submit", document["document_id"])
        wait_until(lambda: task_status(task["task_id"]) == "succeeded", timeout=10)
    finally:
        stop_at_once(worker, signum)


def test_a_retried_task_wakes_an_idle_worker(tmp_path):
    document = upload(tmp_path, "b.txt")
    [task] = kb_json("submit", document["document_id"])
    db_execute(
        "UPDATE ingestion_tasks SET status = 'failed', error_code = 'parse_error' WHERE id = :id",
        id=task["task_id"],
    )
    db_execute("UPDATE documents SET status = 'failed' WHERE id = :id", id=task["document_id"])
    worker = idle_worker("--poll-seconds", LONG_POLL)
    try:
        kb_json("retry", task["task_id"])
        wait_until(lambda: task_status(task["task_id"]) == "succeeded", timeout=10)
    finally:
        stop_at_once(worker)


def test_a_task_queued_without_a_wake_up_is_found_by_the_fallback_poll(tmp_path):
    """A change made behind kb's back sends no notification (as a lost one would): the
    poll finds it."""
    document = upload(tmp_path, "c.txt")
    [task] = kb_json("submit", document["document_id"])
    db_execute("UPDATE ingestion_tasks SET status = 'cancelled' WHERE id = :id", id=task["task_id"])
    worker = idle_worker("--poll-seconds", "0.5")
    try:
        db_execute(
            "UPDATE ingestion_tasks SET status = 'queued' WHERE id = :id", id=task["task_id"]
        )
        wait_until(lambda: task_status(task["task_id"]) == "succeeded", timeout=15)
    finally:
        stop_at_once(worker)


def test_with_wake_ups_off_an_idle_worker_polls(tmp_path):
    """KB_WAKE=poll (for a connection pooler that cannot keep a LISTEN)."""
    document = upload(tmp_path, "p.txt")
    worker = idle_worker("--poll-seconds", "0.5", env=kb_env(KB_WAKE="poll"))
    try:
        [task] = kb_json("submit", document["document_id"])
        wait_until(lambda: task_status(task["task_id"]) == "succeeded", timeout=15)
    finally:
        stop_at_once(worker)
    refused = run_kb("work", "--loop", "--json", env=kb_env(KB_WAKE="sometimes"))
    assert refused.code == 2 and "KB_WAKE must be commit or poll" in refused.stderr


@pytest.mark.skipif(not ON_POSTGRES, reason="the listener's connection is PostgreSQL's")
def test_the_listener_reconnects_after_losing_its_connection(tmp_path):
    document = upload(tmp_path, "d.txt")
    worker = idle_worker("--poll-seconds", LONG_POLL)
    try:
        listening = "SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN kb_tasks'"
        wait_until(lambda: db_rows(listening), timeout=10)
        db_rows(f"SELECT pg_terminate_backend(pid) FROM ({listening}) AS l")
        wait_until(lambda: db_rows(listening), timeout=10, message="no new LISTEN connection")
        [task] = kb_json("submit", document["document_id"])
        wait_until(lambda: task_status(task["task_id"]) == "succeeded", timeout=10)
    finally:
        stop_at_once(worker)


def test_a_retry_wait_task_is_claimed_at_its_retry_time_not_at_the_poll(tmp_path):
    document = upload(tmp_path, "e.txt")
    [task] = kb_json("submit", document["document_id"])
    retry_at = datetime.now(UTC) + timedelta(seconds=2)
    stamp = retry_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    db_execute(
        "UPDATE ingestion_tasks SET status = 'retry_wait', retry_at = :at, attempt = 1, "
        "error_code = 'provider_unavailable' WHERE id = :id",
        id=task["task_id"],
        at=stamp,
    )
    worker = idle_worker("--poll-seconds", LONG_POLL)
    try:
        wait_until(lambda: task_status(task["task_id"]) == "succeeded", timeout=15)
    finally:
        stop_at_once(worker)
    [claim] = db_rows(
        "SELECT at FROM audit_events WHERE entity_id = :id AND action = 'claim'",
        id=task["task_id"],
    )
    assert claim["at"] >= stamp  # not before its time


def lines_of(stream) -> list[str]:
    """The lines a stream has printed so far, read by a thread as they come."""
    lines: list[str] = []

    def read() -> None:
        for line in stream:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_events_follow_prints_each_new_event_until_stopped(tmp_path, signum):
    first = upload(tmp_path, "f.txt")
    kb_json("submit", first["document_id"])
    follower = start_kb("events", "--follow", "--json")
    printed = lines_of(follower.stdout)
    wait_until(lambda: len(printed) == 1, timeout=10)
    second = upload(tmp_path, "g.txt")
    [task] = kb_json("submit", second["document_id"])
    wait_until(lambda: len(printed) == 2, timeout=10)
    kb_json("cancel", task["task_id"])
    wait_until(lambda: len(printed) == 3, timeout=10)
    follower.send_signal(signum)
    assert follower.wait(timeout=10) == 0
    events = [json.loads(line) for line in printed]
    assert [e["type"] for e in events] == ["task.queued", "task.queued", "task.cancelled"]
    assert events[1]["task_id"] == events[2]["task_id"] == task["task_id"]
