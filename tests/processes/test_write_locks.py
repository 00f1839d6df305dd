"""No write transaction grows with the document: a large document's chunks go in
bounded batches, so uploads and other workers keep going while it is indexed."""

from __future__ import annotations

import json

import pytest

from kb_cli.services import doctor
from tests.helpers import db_rows, kb_env, later, run_kb, start_kb, wait_until, work_later

SECTIONS = 20_000  # one chunk each; the 300,000 is the benchmark's size


def chunk_count(task_id: str) -> int:
    [row] = db_rows("SELECT count(*) AS n FROM chunks WHERE task_id = :id", id=task_id)
    return row["n"]


def task_status(task_id: str) -> dict:
    [row] = db_rows("SELECT status, stage FROM ingestion_tasks WHERE id = :id", id=task_id)
    return row


@pytest.mark.slow
def test_uploads_and_another_worker_proceed_while_a_large_document_is_indexed(tmp_path):
    big = tmp_path / "big.md"
    big.write_text("".join(f"# Section {i}\n\nzebrafish{i} notes\n\n" for i in range(SECTIONS)))
    env = kb_env(KB_EMBEDDINGS="none", KB_CHUNK_BATCH="200", KB_BUSY_TIMEOUT="1")
    task = run_kb("upload", str(big), "--submit", "--json", env=env).record
    # A pause after each batch (0.1 s, 100 batches) keeps it indexing while we look.
    indexer = start_kb("work", task["task_id"], "--json", "--stage-delay", "0.1", env=env)

    def batches_landed() -> bool:  # batches land before the completion
        if chunk_count(task["task_id"]):
            return True
        assert indexer.poll() is None, indexer.communicate()
        return False

    wait_until(batches_landed, timeout=120, message="no batch of chunks landed in 120 s")
    assert task_status(task["task_id"]) == {"status": "running", "stage": "indexing"}

    # Meanwhile: uploads (a busy timeout of 1 s) and another worker's whole task.
    small = tmp_path / "small.txt"
    small.write_text("a small document about otters")
    uploads = [run_kb("upload", str(small), "--submit", "--json", env=env) for _ in range(3)]
    assert [u.code for u in uploads] == [0, 0, 0], uploads[-1].stderr
    other = run_kb("work", "--json", env=env)
    assert other.code == 0 and other.record["task"]["status"] == "succeeded", other.stderr
    assert task_status(task["task_id"])["status"] == "running"  # still indexing
    assert run_kb("search", "zebrafish7", "--json", env=env).stdout == ""  # not published
    doctor = run_kb("doctor", "--json", env=env)
    assert json.loads(doctor.stdout)["problems"] == []  # batches of a running task are fine

    out, err = indexer.communicate(timeout=300)
    assert indexer.returncode == 0, err
    assert json.loads(out)["task"]["status"] == "succeeded"
    assert chunk_count(task["task_id"]) == SECTIONS


@pytest.mark.slow
@pytest.mark.parametrize("cleanup", ["next claim", "doctor --repair"])
def test_batches_of_a_killed_run_are_removed(tmp_path, cleanup, monkeypatch):
    big = tmp_path / "big.md"
    big.write_text("".join(f"# Part {i}\n\nheron{i} notes\n\n" for i in range(3_000)))
    monkeypatch.setenv("KB_EMBEDDINGS", "none")  # for the in-process rescuer too
    monkeypatch.setenv("KB_CHUNK_BATCH", "100")
    env = kb_env()
    task = run_kb("upload", str(big), "--submit", "--json", env=env).record
    victim = start_kb("work", "--json", "--stage-delay", "0.1", env=env)

    def three_batches_landed() -> bool:
        if chunk_count(task["task_id"]) >= 300:
            return True
        assert victim.poll() is None
        return False

    wait_until(three_batches_landed, timeout=60, message="300 chunks did not land in 60 s")
    victim.kill()  # SIGKILL: no chance to clean up
    victim.communicate(timeout=10)
    left = chunk_count(task["task_id"])
    assert 0 < left < 3_000
    past_the_lease = 61  # on the clock of the doctor and of the next worker
    if cleanup == "doctor --repair":
        assert doctor.check(later(past_the_lease), repair=True).ok
        assert chunk_count(task["task_id"]) == 0
    finished = work_later(past_the_lease, "finisher")
    assert finished.task.status == "succeeded"
    assert chunk_count(task["task_id"]) == 3_000
    assert json.loads(run_kb("doctor", "--json", env=env).stdout)["problems"] == []
