"""Workers as real processes on one database file: races, drains, persistence."""

from __future__ import annotations

import json
import signal
import time

import sqlalchemy

from tests.helpers import (
    db_rows,
    kb_env,
    run_in_process,
    run_kb,
    start_kb,
    wait_until,
    write_lock_held,
)


def upload(tmp_path, count: int, prefix: str = "doc") -> list[dict]:
    paths = []
    for i in range(count):
        path = tmp_path / f"{prefix}{i}.txt"
        path.write_text(f"Document {i} talks about topic{i} and the retention policy.\n")
        paths.append(str(path))
    result = run_in_process("upload", *paths, "--submit", "--json")  # the scene only
    assert result.code == 0, result.stderr
    return result.records


def test_only_one_worker_can_claim_a_queued_task(tmp_path):
    [task] = upload(tmp_path, 1)
    racers = [
        start_kb("work", task["task_id"], "--worker-id", name, "--json", "--stage-delay", "0.05")
        for name in ("A", "B", "C")
    ]
    outcomes = [racer.communicate(timeout=60) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0, 0]
    lines = [json.loads(out) for out, _ in outcomes]
    winners = [line for line in lines if line["claimed"]]
    assert len(winners) == 1
    assert winners[0]["task"]["status"] == "succeeded" and winners[0]["task"]["attempt"] == 1
    for line, (_, err) in zip(lines, outcomes, strict=True):
        if line["claimed"]:
            assert f"claimed task={task['task_id']} worker={line['worker_id']}" in err
        else:
            assert line["task"] is None
            assert f"claim missed task={task['task_id']} worker={line['worker_id']}" in err
    final = run_in_process("status", task["task_id"], "--json").record
    assert final["attempt"] == 1 and final["worker_id"] == winners[0]["worker_id"]


def test_separate_worker_process_persists_chunks_the_cli_can_read(tmp_path, kb_home):
    [task] = upload(tmp_path, 1)
    worker = run_kb("work", "--json")
    assert worker.code == 0 and worker.record["task"]["status"] == "succeeded"
    document = run_in_process("status", task["document_id"], "--json").record
    assert document["status"] == "review_pending"
    assert document["latest_task"]["task_id"] == task["task_id"]
    [row] = db_rows(
        "SELECT count(*) AS n FROM chunks WHERE document_id = :id", id=task["document_id"]
    )
    assert row["n"] >= 1
    assert run_in_process("publish", task["document_id"], "--json").code == 0
    hits = run_in_process("search", "topic0", "--json").records
    assert [hit["document_id"] for hit in hits] == [task["document_id"]]


def test_four_drain_workers_process_fifty_documents_exactly_once(tmp_path):
    tasks = upload(tmp_path, 50)
    workers = [start_kb("work", "--drain", "--worker-id", f"w{i}", "--json") for i in range(4)]
    outputs = [worker.communicate(timeout=120) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0, 0, 0]
    claims = []
    for out, err in outputs:
        assert "database is locked" not in err and "Traceback" not in err
        records = [json.loads(line) for line in out.splitlines()]
        claims += [record["task_id"] for record in records if record["claimed"]]
    assert sorted(claims) == sorted(task["task_id"] for task in tasks)
    statuses = run_in_process("status", "--json").records
    assert {doc["status"] for doc in statuses} == {"review_pending"}
    assert {doc["latest_task"]["attempt"] for doc in statuses} == {1}


def test_cancel_from_another_process_stops_a_running_worker(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text("\n\n".join(f"Paragraph {i} " + "word " * 200 for i in range(10)))
    [task] = run_in_process("upload", str(path), "--submit", "--json").records
    # A pause long enough for two `kb` processes to start between two steps: a faster
    # worker than the test's status polls once finished first.
    worker = start_kb("work", "--stage-delay", "1", "--json")
    wait_until(
        lambda: run_in_process("status", task["task_id"], "--json").record["status"] == "running",
        timeout=20,
        message="the worker never started the task",
    )
    cancelled = run_kb("cancel", task["task_id"][:8], "--json")
    assert cancelled.code == 0 and cancelled.record["status"] == "cancelled"
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert json.loads(out)["task"]["status"] == "cancelled"
    document = run_in_process("status", task["document_id"], "--json").record
    assert document["status"] == "draft"


def test_a_locked_database_is_busy_and_changes_nothing(tmp_path, kb_home):
    [task] = upload(tmp_path, 1)
    with write_lock_held(task["task_id"]):
        result = run_kb("cancel", task["task_id"], "--json", env=kb_env(KB_BUSY_TIMEOUT="0.2"))
    assert result.code == 7 and result.error["error"] == "busy"
    assert run_in_process("status", task["task_id"], "--json").record["status"] == "queued"


def test_a_missed_claim_by_prefix_logs_the_full_task_id(tmp_path):
    [task] = upload(tmp_path, 1)
    assert run_in_process("work").code == 0
    missed = run_kb("work", task["task_id"][:8], "--json")
    assert missed.code == 0 and missed.record["claimed"] is False
    assert missed.record["task_id"] == task["task_id"]
    assert f"claim missed task={task['task_id']} worker=" in missed.stderr


def test_a_signal_gives_back_the_small_tasks_a_worker_claimed_ahead(tmp_path):
    """A drain claims tiny tasks several at a time; SIGTERM while it holds some gives
    each one back (queued, attempt 0), one JSON line per task, none left running."""
    tasks = upload(tmp_path, 80)
    out_path, err_path = tmp_path / "out.jsonl", tmp_path / "err.log"
    with out_path.open("w") as out, err_path.open("w") as err:
        worker = start_kb("work", "--drain", "--worker-id", "W", "--json", stdout=out, stderr=err)
        held = 0
        try:
            while held < 2 and worker.poll() is None:  # paused while it holds a batch
                time.sleep(0.05)
                worker.send_signal(signal.SIGSTOP)
                held = _running_count()
                if held < 2:
                    worker.send_signal(signal.SIGCONT)
            worker.send_signal(signal.SIGTERM)
        finally:
            worker.send_signal(signal.SIGCONT)
        assert worker.wait(timeout=60) == 0, err_path.read_text()[-2000:]
    assert held >= 2, "the worker never held two claims at once"
    rows = db_rows("SELECT id, status, attempt, worker_id FROM ingestion_tasks")
    assert {row["status"] for row in rows} <= {"succeeded", "queued"}
    released = [row for row in rows if row["status"] == "queued"]
    assert released and all(row["attempt"] == 0 and row["worker_id"] is None for row in released)
    lines = [json.loads(line) for line in out_path.read_text().splitlines()]
    claimed = {line["task_id"]: line["task"]["status"] for line in lines if line["claimed"]}
    claims = db_rows("SELECT DISTINCT entity_id FROM audit_events WHERE action = 'claim'")
    assert sorted(claimed) == sorted(row["entity_id"] for row in claims)  # one line each
    assert {claimed[row["id"]] for row in released if row["id"] in claimed} <= {"queued"}
    log = err_path.read_text()
    assert log.count("released task=") == sum(s == "queued" for s in claimed.values())
    finished = run_in_process("work", "--drain", "--json")
    assert finished.code == 0
    assert {row["status"] for row in db_rows("SELECT status FROM ingestion_tasks")} == {"succeeded"}
    assert len(rows) == len(tasks)


def _running_count() -> int:
    """Tasks running now; 0 when the worker was stopped in the middle of updating
    SQLite's shared write-ahead-log index (a read then fails "locking protocol"): the
    caller lets it go on and looks again."""
    try:
        [row] = db_rows("SELECT count(*) AS n FROM ingestion_tasks WHERE status = 'running'")
    except sqlalchemy.exc.OperationalError as error:
        if "locking protocol" not in str(error):
            raise
        return 0
    return int(row["n"])
