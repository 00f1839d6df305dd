"""Deleting documents against real processes: a worker racing the delete, a delete
killed part way and finished by doctor --repair, the confirmation on a terminal."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest

from kb_cli.ranking import SearchMode
from kb_cli.services import doctor, removal, tasks
from kb_cli.services import documents as docs
from kb_cli.services import search as search_service
from kb_cli.worker import Worker, WorkerOptions
from tests.helpers import db_rows, kb_env, object_keys, run_in_process, run_kb, start_kb, wait_until
from tests.terminal import run_in_terminal

SECTIONS = 400


def big_document(tmp_path, name: str = "big.md") -> str:
    path = tmp_path / name
    path.write_text(
        "".join(f"# Part {i}\n\nheron{i} notes about part {i}\n\n" for i in range(SECTIONS))
    )
    return str(path)


def leftovers(document_id: str) -> dict[str, int]:
    return {
        table: db_rows(f"SELECT count(*) AS n FROM {table} WHERE {column} = :id", id=document_id)[
            0
        ]["n"]
        for table, column in (
            ("documents", "id"),
            ("chunks", "document_id"),
            ("ingestion_tasks", "document_id"),
        )
    }


def test_a_delete_wins_against_a_running_worker_process(tmp_path, kb_home):
    env = kb_env(KB_EMBEDDINGS="none", KB_CHUNK_BATCH="20")
    task = run_in_process("upload", big_document(tmp_path), "--submit", "--json", env=env).record
    # Slow enough that the delete process (a second or two to start on a busy machine)
    # always comes while the worker is still writing chunks.
    worker = start_kb("work", "--json", "--stage-delay", "0.3", env=env)
    wait_until(
        lambda: db_rows("SELECT count(*) AS n FROM chunks")[0]["n"] >= 40,
        message="the worker never wrote a chunk batch",
    )
    deleted = run_kb("delete", task["document_id"], "--json", env=env)
    assert deleted.code == 0, deleted.stderr
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "claim lost" in err or '"status": "cancelled"' in out
    assert leftovers(task["document_id"]) == {"documents": 0, "chunks": 0, "ingestion_tasks": 0}
    assert run_in_process("doctor", "--json", env=env).code == 0


@pytest.mark.parametrize(
    "races", [20, pytest.param(100, marks=pytest.mark.slow)], ids=["20 races", "100 races"]
)
def test_search_never_serves_a_chunk_of_a_document_deleted_while_a_worker_runs(kb, tmp_path, races):
    """A worker thread and a delete race at random moments; a reviewer publishes as soon
    as it can. Whatever the order, nothing of the document is left or served."""
    rng = random.Random(7)
    kb.settings = kb.settings.__class__(**{**kb.settings.__dict__, "chunk_batch": 5})
    for race in range(races):
        path = tmp_path / f"doc{race}.md"
        path.write_text("".join(f"# S{i}\n\nosprey{race} fact {i}\n\n" for i in range(30)))
        [task] = docs.upload_files(kb, [path], submit=True)
        worker = Worker(kb, WorkerOptions(worker_id=f"w{race}"))
        thread = threading.Thread(target=lambda w=worker: list(w.run()), daemon=True)
        thread.start()
        time.sleep(rng.uniform(0, 0.03))
        if rng.random() < 0.5:  # sometimes the worker finished and it was published
            thread.join(30)
            if tasks.get_task(kb, task.task_id).status == "succeeded":
                docs.publish_document(kb, task.document_id)
        removal.delete(kb, removal.plan(kb, [task.document_id]))
        thread.join(30)
        assert not thread.is_alive()
        assert leftovers(task.document_id) == {"documents": 0, "chunks": 0, "ingestion_tasks": 0}
        request = search_service.SearchRequest(f"osprey{race}", mode=SearchMode.LEXICAL)
        assert search_service.search(kb, request).hits == []
    assert doctor.check(kb).ok


def test_a_delete_killed_part_way_is_finished_by_doctor_repair(tmp_path, kb_home):
    env = kb_env(KB_EMBEDDINGS="none", KB_CHUNK_BATCH="1")
    task = run_in_process("upload", big_document(tmp_path), "--submit", "--json", env=env).record
    assert run_in_process("work", "--json", env=env).code == 0
    assert run_in_process("publish", task["document_id"], "--json", env=env).code == 0
    total = leftovers(task["document_id"])["chunks"]
    deleter = start_kb("delete", task["document_id"], "--json", env=env)
    wait_until(
        lambda: 0 < leftovers(task["document_id"])["chunks"] < total - 5,
        interval=0.005,
        message="the delete never got under way",
    )
    deleter.send_signal(signal.SIGKILL)
    deleter.communicate(timeout=10)
    left = leftovers(task["document_id"])
    assert left["documents"] == 1 and left["chunks"] > 0  # a crash in the middle
    assert run_in_process("search", "heron1", "--json", env=env).stdout == ""  # nothing served
    assert run_in_process("status", task["document_id"], "--json", env=env).code == 3
    found = run_in_process("doctor", "--json", env=env)
    assert found.code == 4 and '"unfinished_delete"' in found.stdout
    repaired = run_kb("doctor", "--repair", "--json", env=env)
    assert repaired.code == 0, repaired.stdout
    assert leftovers(task["document_id"]) == {"documents": 0, "chunks": 0, "ingestion_tasks": 0}
    assert object_keys() == []
    assert run_in_process("doctor", "--json", env=env).code == 0


@pytest.mark.parametrize(("reply", "deleted"), [("n\n", False), ("y\n", True)])
def test_a_bulk_delete_asks_on_a_terminal(tmp_path, kb_home, reply, deleted):
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text("Some words.")
        assert run_in_process("upload", str(tmp_path / name), "--json").code == 0
    code, screen = run_in_terminal("delete", "--status", "draft", answer=("[y/N]", reply))
    assert "delete 2 documents with their chunks and files? [y/N]" in screen
    documents = db_rows("SELECT id FROM documents")
    if deleted:
        assert code == 0 and documents == [] and "deleted " in screen
    else:
        assert code == 1 and len(documents) == 2 and "nothing deleted" in screen
