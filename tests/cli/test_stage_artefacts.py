"""Stage artefacts: a revision's parse is kept in the database between attempts, so that
a retry after a later stage failed starts at the embedding stage; a new file or parser
parses again; the kept parse goes when nothing can reuse it, and doctor knows it.
The embedding provider is a real HTTP server on loopback."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kb_cli import artefacts, queries
from kb_cli.config import WorkerOptions
from kb_cli.worker.claim import Claimant, take
from tests.docgen import make_pdf, paged_text
from tests.helpers import db_rows
from tests.loopback import FlakyEmbeddings, serving


@pytest.fixture
def provider(monkeypatch):
    FlakyEmbeddings.failures_left = 0
    with serving(FlakyEmbeddings) as port:
        monkeypatch.setenv("KB_EMBEDDINGS", "openai")
        monkeypatch.setenv("KB_EMBEDDING_URL", f"http://127.0.0.1:{port}/v1")
        monkeypatch.setenv("KB_EMBEDDING_MODEL", "tiny-embed")
        yield FlakyEmbeddings


def _artefacts(document_id: str) -> list[dict]:
    return db_rows(
        "SELECT revision, sha256, parser_key, chunks FROM parse_artefacts WHERE document_id = :id",
        id=document_id,
    )


def _upload_pdf(invoke, tmp_path: Path, name: str, seed: str) -> dict:
    path = tmp_path / name
    path.write_bytes(make_pdf(paged_text(6, seed=seed)))
    return invoke("upload", str(path), "--submit", "--json").record


def _fail_at_embedding(invoke, provider, task: dict, *options: str) -> dict:
    """One attempt that parses, then finds the provider down."""
    provider.failures_left = 1
    worked = invoke("work", task["task_id"], "--json", *options)
    assert worked.code == 0, worked.stderr
    record = invoke("status", task["task_id"], "--json").record
    assert record["error_code"] == "provider_unavailable" and record["stage"] == "embedding"
    return record


@pytest.mark.parametrize("how", ["automatic retry", "kb retry"])
def test_a_retry_after_the_provider_failed_does_not_parse_again(
    invoke, kb, tmp_path, provider, how
):
    task = _upload_pdf(invoke, tmp_path, "manual.pdf", "retry")
    document_id = task["document_id"]
    options = ("--backoff-seconds", "0") if how == "automatic retry" else ("--max-attempts", "1")
    failed = _fail_at_embedding(invoke, provider, task, *options)
    assert failed["status"] == ("retry_wait" if how == "automatic retry" else "failed")
    [kept] = _artefacts(document_id)
    assert kept["revision"] == 1 and kept["chunks"] >= 1
    if how == "kb retry":
        assert invoke("retry", task["task_id"], "--json").code == 0

    # Without its stored file, only the kept parse can make this attempt succeed.
    document = invoke("status", document_id, "--json").record
    with kb.db.read() as conn:
        kb.store.delete(queries.existing_document(conn, document_id).object_key)
    worked = invoke("work", task["task_id"], "--json")
    assert worked.code == 0, worked.stderr
    final = worked.record["task"]
    assert final["status"] == "succeeded", final
    assert f"reused parse task={task['task_id']} revision=1 chunks={kept['chunks']}" in (
        worked.stderr
    )
    assert "stage=download" not in worked.stderr and "stage=parse" not in worked.stderr
    trail = invoke("history", task["task_id"], "--json").records
    [reuse] = [event for event in trail if event["action"] == "reuse_parse"]
    assert "parse of revision 1 reused" in reuse["detail"]
    assert reuse["from_status"] is None and reuse["to_status"] is None  # no state change
    # The chunks are the result now: nothing keeps the parse any longer.
    assert _artefacts(document_id) == []
    assert document["sha256"] == kept["sha256"]
    chunks = db_rows("SELECT text FROM chunks WHERE document_id = :id", id=document_id)
    assert len(chunks) == kept["chunks"]
    assert any("retry page marker p6" in chunk["text"] for chunk in chunks)


def test_a_replaced_file_is_parsed_again(invoke, tmp_path, provider):
    task = _upload_pdf(invoke, tmp_path, "manual.pdf", "first")
    document_id = task["document_id"]
    _fail_at_embedding(invoke, provider, task, "--max-attempts", "1")
    assert len(_artefacts(document_id)) == 1
    second = tmp_path / "second.pdf"
    second.write_bytes(make_pdf(paged_text(6, seed="second")))
    assert invoke("upload", str(second), "--replace", document_id, "--json").code == 0
    assert _artefacts(document_id) == []  # superseded with its file
    assert invoke("retry", task["task_id"], "--json").code == 0
    worked = invoke("work", task["task_id"], "--json")
    assert worked.record["task"]["status"] == "succeeded"
    assert "reused parse" not in worked.stderr and "stage=parse" in worked.stderr
    texts = [row["text"] for row in db_rows("SELECT text FROM chunks")]
    assert any("second page marker" in text for text in texts)
    assert not any("first page marker" in text for text in texts)


def test_a_new_parser_version_parses_again(invoke, tmp_path, provider, monkeypatch):
    task = _upload_pdf(invoke, tmp_path, "manual.pdf", "version")
    _fail_at_embedding(invoke, provider, task, "--backoff-seconds", "0")
    [old] = _artefacts(task["document_id"])
    monkeypatch.setattr(artefacts, "PARSER_VERSION", artefacts.PARSER_VERSION + 1)
    provider.failures_left = 1
    again = invoke("work", task["task_id"], "--json", "--backoff-seconds", "0")
    assert "reused parse" not in again.stderr and "stage=parse" in again.stderr
    [new] = _artefacts(task["document_id"])
    assert new["parser_key"] != old["parser_key"]
    assert new["parser_key"] == artefacts.parser_key("application/pdf")


def test_nothing_is_kept_after_success_publish_or_reject(invoke, tmp_path, provider):
    published = _upload_pdf(invoke, tmp_path, "published.pdf", "kept")
    rejected = _upload_pdf(invoke, tmp_path, "rejected.pdf", "turned")
    assert invoke("work", "--drain", "--json").code == 0
    assert db_rows("SELECT document_id FROM parse_artefacts") == []
    assert invoke("publish", published["document_id"], "--json").code == 0
    reason = ("--reason", "wrong version")
    assert invoke("reject", rejected["document_id"], *reason, "--json").code == 0
    assert db_rows("SELECT document_id FROM parse_artefacts") == []
    assert invoke("doctor", "--json").record["ok"] is True


def test_a_delete_removes_the_kept_parse(invoke, tmp_path, provider):
    task = _upload_pdf(invoke, tmp_path, "manual.pdf", "deleted")
    _fail_at_embedding(invoke, provider, task, "--max-attempts", "1")
    assert len(_artefacts(task["document_id"])) == 1
    assert invoke("doctor", "--json").record["ok"] is True  # reusable: not stray
    assert invoke("delete", task["document_id"], "--yes", "--json").code == 0
    assert _artefacts(task["document_id"]) == []


def test_doctor_finds_and_repairs_a_stray_kept_parse(invoke, kb, tmp_path, provider):
    keep = _upload_pdf(invoke, tmp_path, "failed.pdf", "waiting")
    _fail_at_embedding(invoke, provider, keep, "--max-attempts", "1")
    done = _upload_pdf(invoke, tmp_path, "done.pdf", "done")
    assert invoke("work", done["task_id"], "--json").code == 0
    publish = invoke("publish", done["document_id"], "--json")
    assert publish.code == 0
    with kb.db.write() as conn:  # what a crash between two writes could leave
        stray = queries.existing_document(conn, done["document_id"])
        queries.put_artefact(
            conn,
            document_id=stray.id,
            revision=stray.revision,
            sha256=stray.sha256,
            parser_key="v0",
            chunks=1,
            payload=artefacts.encode([]),
            task_id=done["task_id"],
            created_at="2026-01-01T00:00:00.000000Z",
        )
    report = invoke("doctor", "--json")
    assert report.code == 4
    [problem] = report.record["problems"]
    assert (problem["kind"], problem["id"]) == ("stray_artefact", done["document_id"])
    assert "published" in problem["detail"]
    repaired = invoke("doctor", "--repair", "--json")
    assert [fix["kind"] for fix in repaired.record["repaired"]] == ["stray_artefact"]
    assert _artefacts(done["document_id"]) == []
    assert len(_artefacts(keep["document_id"])) == 1  # still reusable, left alone
    assert invoke("doctor", "--json").record["ok"] is True


def test_a_reclaim_after_a_lost_worker_starts_at_the_embedding_stage(
    invoke, kb, tmp_path, provider
):
    task = _upload_pdf(invoke, tmp_path, "manual.pdf", "reclaimed")
    _fail_at_embedding(invoke, provider, task, "--backoff-seconds", "0")
    # A worker takes the task and dies before its first heartbeat.
    dead = Claimant(kb, WorkerOptions(worker_id="dead", lease_seconds=0.2), threading.Event())
    assert take(dead, task["task_id"]).claim is not None
    time.sleep(0.4)
    worked = invoke("work", "--json")
    assert worked.record["task"]["status"] == "succeeded"
    assert f"reclaimed task={task['task_id']} from=dead" in worked.stderr
    assert f"reused parse task={task['task_id']}" in worked.stderr
    assert "stage=parse" not in worked.stderr
