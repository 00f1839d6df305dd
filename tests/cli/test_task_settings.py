"""What a task was asked is what it does: the settings that decide a document's chunks
(KB_CHUNK_CHARS, KB_OCR, KB_PDF_BACKEND) given to the command that queues it travel
with the task, whichever worker runs it; the history says them; a task that carries
none (one queued before tasks carried settings) runs with the worker's own; a worker's
limit given to a queuing command is named, not ignored in silence. The embedding
provider is a real HTTP server on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docgen import make_pdf, paged_text
from tests.helpers import check_error, db_execute, db_rows
from tests.loopback import FlakyEmbeddings, serving

PARAGRAPH = (
    "Invoices are kept for seven years in the archive of the finance team. "
    "Backups of the archive run every night in the primary region, and a copy "
    "goes to the second region once a week. "
)


def _long_note(tmp_path: Path, name: str = "policy.md") -> Path:
    """A note of ten paragraphs of about 600 characters: chunks of 1,000 characters
    hold more than one paragraph, chunks of 400 cannot hold one whole."""
    path = tmp_path / name
    sections = [f"Section {n}. " + PARAGRAPH * 3 for n in range(10)]
    path.write_text("# Retention policy\n\n" + "\n\n".join(sections) + "\n", encoding="utf-8")
    return path


def _chunk_lengths(document_id: str, revision: int) -> list[int]:
    rows = db_rows(
        "SELECT text FROM chunks WHERE document_id = :id AND revision = :revision "
        "ORDER BY chunk_index",
        id=document_id,
        revision=revision,
    )
    return [len(row["text"]) for row in rows]


def _details(invoke, document_id: str, action: str) -> list[str]:
    trail = invoke("history", document_id, "--json").records
    return [event["detail"] for event in trail if event["action"] == action]


def _queue(invoke, monkeypatch, tmp_path: Path, how: str) -> dict:
    """Queue a task for the note with KB_CHUNK_CHARS=400 given to the queuing command
    `how`; the task record."""
    note = _long_note(tmp_path)
    if how == "reparse":  # a published revision of 1,000-character chunks first
        task = invoke("upload", str(note), "--submit", "--json").record
        assert invoke("work", task["task_id"], "--json").code == 0
        assert invoke("publish", task["document_id"], "--json").code == 0
        assert max(_chunk_lengths(task["document_id"], 1)) > 400
    elif how == "submit":
        document = invoke("upload", str(note), "--json").record
    monkeypatch.setenv("KB_CHUNK_CHARS", "400")
    if how == "upload --submit":
        queued = invoke("upload", str(note), "--submit", "--json").record
    elif how == "submit":
        queued = invoke("submit", document["document_id"], "--json").record
    elif how == "reparse":
        done = invoke("reparse", task["document_id"], "--json").record
        queued = {"task_id": done["task_id"], "document_id": done["document_id"]}
    else:
        queued = invoke("sync", str(tmp_path), "--include", note.name, "--json").records[0]
        queued = {"document_id": queued["document_id"]}
    monkeypatch.delenv("KB_CHUNK_CHARS")
    return queued


@pytest.mark.parametrize("how", ["reparse", "upload --submit", "submit", "sync"])
def test_smaller_chunks_asked_when_queued_are_made_by_a_worker_not_set_so(
    invoke, monkeypatch, tmp_path, how
):
    queued = _queue(invoke, monkeypatch, tmp_path, how)
    document_id = queued["document_id"]
    monkeypatch.setenv("KB_CHUNK_CHARS", "2000")  # the worker's own, for every other task
    worked = invoke("work", "--json").record
    assert worked["task"]["status"] == "succeeded", worked
    revision = worked["task"]["revision"]
    lengths = _chunk_lengths(document_id, revision)
    assert len(lengths) > 10 and max(lengths) <= 400, lengths
    [submitted] = _details(invoke, worked["task_id"], "submit")
    assert submitted.endswith(f"revision {revision}; settings KB_CHUNK_CHARS=400"), submitted


def test_a_task_that_carries_no_settings_runs_with_the_worker_s(invoke, monkeypatch, tmp_path):
    """A task queued before tasks carried settings (NULL) is chunked as the worker is
    set, as every task was."""
    monkeypatch.setenv("KB_CHUNK_CHARS", "400")
    task = invoke("upload", str(_long_note(tmp_path)), "--submit", "--json").record
    monkeypatch.delenv("KB_CHUNK_CHARS")
    db_execute("UPDATE ingestion_tasks SET settings = NULL WHERE id = :id", id=task["task_id"])
    assert invoke("work", "--json").record["task"]["status"] == "succeeded"
    assert max(_chunk_lengths(task["document_id"], 1)) > 400  # the worker's 1,000


@pytest.fixture
def provider(monkeypatch):
    FlakyEmbeddings.failures_left = 0
    with serving(FlakyEmbeddings) as port:
        monkeypatch.setenv("KB_EMBEDDINGS", "openai")
        monkeypatch.setenv("KB_EMBEDDING_URL", f"http://127.0.0.1:{port}/v1")
        monkeypatch.setenv("KB_EMBEDDING_MODEL", "tiny-embed")
        yield FlakyEmbeddings


def _fail_at_embedding(invoke, provider, task: dict) -> None:
    """One attempt that parses (its parse kept), then fails: the provider is down."""
    provider.failures_left = 1
    assert invoke("work", task["task_id"], "--max-attempts", "1", "--json").code == 0
    record = invoke("status", task["task_id"], "--json").record
    assert (record["status"], record["error_code"]) == ("failed", "provider_unavailable")
    [kept] = db_rows("SELECT parser_key FROM parse_artefacts")
    return kept["parser_key"]


def test_a_retry_asked_for_other_chunks_parses_again(invoke, monkeypatch, tmp_path, provider):
    task = invoke("upload", str(_long_note(tmp_path)), "--submit", "--json").record
    assert "chunks=1000/" in _fail_at_embedding(invoke, provider, task)
    monkeypatch.setenv("KB_CHUNK_CHARS", "400")
    assert invoke("retry", task["task_id"], "--json").code == 0
    monkeypatch.delenv("KB_CHUNK_CHARS")
    worked = invoke("work", task["task_id"], "--json")
    assert worked.record["task"]["status"] == "succeeded", worked.stderr
    assert "reused parse" not in worked.stderr  # the kept parse was of 1,000 characters
    assert max(_chunk_lengths(task["document_id"], 1)) <= 400
    assert _details(invoke, task["task_id"], "retry") == [
        "was provider_unavailable; settings KB_CHUNK_CHARS=400"
    ]


def test_a_retry_keeps_what_the_task_was_asked(invoke, monkeypatch, tmp_path, provider):
    monkeypatch.setenv("KB_CHUNK_CHARS", "400")
    task = invoke("upload", str(_long_note(tmp_path)), "--submit", "--json").record
    monkeypatch.delenv("KB_CHUNK_CHARS")
    assert "chunks=400/" in _fail_at_embedding(invoke, provider, task)
    assert invoke("retry", task["task_id"], "--json").code == 0  # given nothing
    worked = invoke("work", task["task_id"], "--json")
    assert worked.record["task"]["status"] == "succeeded", worked.stderr
    assert f"reused parse task={task['task_id']}" in worked.stderr  # of the same settings
    assert max(_chunk_lengths(task["document_id"], 1)) <= 400


def test_the_pdf_settings_travel_with_the_task(invoke, monkeypatch, tmp_path, provider):
    path = tmp_path / "manual.pdf"
    path.write_bytes(make_pdf(paged_text(3, seed="pdf settings")))
    monkeypatch.setenv("KB_PDF_BACKEND", "pypdf")
    monkeypatch.setenv("KB_OCR", "off")
    task = invoke("upload", str(path), "--submit", "--json").record
    monkeypatch.setenv("KB_PDF_BACKEND", "pdfium")  # the worker's own
    monkeypatch.setenv("KB_OCR", "force")
    assert _fail_at_embedding(invoke, provider, task).endswith(";pdf=pypdf;ocr=off")
    [submitted] = _details(invoke, task["task_id"], "submit")
    assert submitted.endswith("; settings KB_OCR=off, KB_PDF_BACKEND=pypdf"), submitted


def test_a_worker_s_limit_given_to_a_queuing_command_is_refused(invoke, monkeypatch, tmp_path):
    monkeypatch.setenv("KB_PARSE_TIMEOUT", "600")  # the default: nothing to refuse
    quiet = invoke("upload", str(_long_note(tmp_path, "a.md")), "--submit", "--json")
    assert quiet.code == 0 and quiet.stderr == ""
    draft = invoke("upload", str(_long_note(tmp_path, "draft.md")), "--json").record
    monkeypatch.setenv("KB_PARSE_TIMEOUT", "900")
    monkeypatch.setenv("KB_MAX_PAGES", "20000")
    (tmp_path / "b.md").write_text("# B\n\nAnother note.\n")
    before = db_rows("SELECT id FROM ingestion_tasks")
    for args in [
        ("upload", str(tmp_path / "b.md"), "--submit"),
        ("submit", draft["document_id"]),
        ("retry", "--all-failed"),
        ("reparse", quiet.record["document_id"]),
        ("sync", str(tmp_path), "--base", "default"),
    ]:
        refused = invoke(*args, "--json")
        assert check_error(refused, 2, "usage")["message"] == (
            "KB_MAX_PAGES and KB_PARSE_TIMEOUT: a worker's limits, which a task does not "
            "carry (the worker that runs it uses its own): set them where kb work runs, and "
            "run this command without them"
        ), args
        assert refused.stdout == "", args
    assert db_rows("SELECT id FROM ingestion_tasks") == before  # nothing queued
    assert len(invoke("status", "--json").records) == 2  # nothing stored
    # what queues nothing is not refused: a draft upload, a dry run, a worker
    assert invoke("upload", str(tmp_path / "b.md"), "--json").code == 0
    assert invoke("sync", str(tmp_path), "--dry-run", "--json").code == 0
    assert invoke("work", "--json").code == 0


@pytest.mark.empty_database
def test_a_pdf_backend_that_is_none_is_refused_before_anything_is_made(
    invoke, monkeypatch, tmp_path, kb_home
):
    monkeypatch.setenv("KB_PDF_BACKEND", "pdfminer")
    refused = invoke("upload", str(_long_note(tmp_path)), "--submit", "--json")
    assert (
        "KB_PDF_BACKEND must be auto, pypdf or pdfium"
        in check_error(refused, 2, "usage")["message"]
    )
    assert not kb_home.exists()
