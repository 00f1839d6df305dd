"""Taking things out: reject, unpublish, delete, through the CLI in process."""

from __future__ import annotations

import pytest

from tests.helpers import (
    assert_doc_record,
    check_error,
    db_rows,
    hits,
    ingest,
    object_keys,
    publish,
)

POLICY = "Invoices are kept for ten years in the finance archive."
NEW_POLICY = "Invoices are kept for seven years after the audit closes."


def document_of(invoke, task: dict) -> dict:
    record = invoke("status", task["document_id"], "--json").record
    assert_doc_record(record)
    return record


def doctor_is_clean(invoke) -> None:
    result = invoke("doctor", "--json")
    assert result.code == 0, result.stdout


def chunks_of(document_id: str) -> list[dict]:
    return db_rows("SELECT revision FROM chunks WHERE document_id = :id", id=document_id)


# --- reject ---------------------------------------------------------------------------------


def test_reject_sends_a_new_document_back_to_draft_with_its_reason(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "policy.md", POLICY)
    doc = task["document_id"]
    rejected = invoke("reject", doc, "--reason", "wrong  retention\nperiod", "--json").record
    assert_doc_record(rejected)
    assert rejected["status"] == "draft" and rejected["rejected_reason"] == "wrong retention period"
    assert rejected["published_revision"] is None and chunks_of(doc) == []
    assert hits(invoke, "invoices") == []
    [event] = [e for e in invoke("history", doc, "--json").records if e["action"] == "reject"]
    assert (event["from_status"], event["to_status"]) == ("review_pending", "draft")
    assert "wrong retention period" in event["detail"]
    doctor_is_clean(invoke)
    # Submitted again, the rejection is history, not the document's state.
    assert invoke("submit", doc, "--json").code == 0
    assert invoke("work", "--json").code == 0
    again = document_of(invoke, task)
    assert again["status"] == "review_pending" and again["rejected_reason"] is None
    doctor_is_clean(invoke)


def test_rejecting_a_replacement_keeps_serving_the_published_revision(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "policy.md", POLICY)
    doc = task["document_id"]
    publish(invoke, doc)
    replacement = tmp_path / "policy-v2.md"
    replacement.write_text(NEW_POLICY)
    assert invoke("upload", str(replacement), "--replace", doc, "--json").code == 0
    assert invoke("submit", doc, "--json").code == 0
    assert invoke("work", "--json").code == 0
    rejected = invoke("reject", doc, "--reason", "not approved yet", "--json").record
    assert (rejected["status"], rejected["revision"], rejected["published_revision"]) == (
        "published",
        2,
        1,
    )
    assert {row["revision"] for row in chunks_of(doc)} == {1}
    [hit] = hits(invoke, "invoices kept")
    assert hit["revision"] == 1 and "ten years" in hit["text"]
    doctor_is_clean(invoke)


def test_reject_refuses_what_is_not_waiting_for_review_and_a_bad_reason(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "policy.md", POLICY)
    doc = task["document_id"]
    check_error(invoke("reject", doc, "--reason", "  ", "--json"), 2, "usage")
    check_error(invoke("reject", doc, "--reason", "x" * 501, "--json"), 2, "usage")
    check_error(invoke("reject", doc, "--json"), 2, "usage")  # --reason is required
    publish(invoke, doc)
    refused = check_error(invoke("reject", doc, "--reason", "late", "--json"), 4, "conflict")
    assert "published" in refused["message"]
    check_error(invoke("reject", "0" * 36, "--reason", "x", "--json"), 3, "not_found")


# --- unpublish ------------------------------------------------------------------------------


def test_unpublish_stops_serving_at_once_and_publish_brings_it_back(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "policy.md", POLICY)
    doc = task["document_id"]
    publish(invoke, doc)
    assert len(hits(invoke, "invoices")) == 1
    archived = invoke("unpublish", doc, "--json").record
    assert (archived["status"], archived["published_revision"]) == ("archived", None)
    assert archived["archived_revision"] == 1
    assert hits(invoke, "invoices") == []
    assert chunks_of(doc)  # kept, for publishing again
    doctor_is_clean(invoke)
    check_error(invoke("unpublish", doc, "--json"), 4, "conflict")  # nothing is served
    back = invoke("publish", doc, "--json").record
    assert (back["status"], back["published_revision"], back["archived_revision"]) == (
        "published",
        1,
        None,
    )
    [hit] = hits(invoke, "invoices")
    assert hit["document_id"] == doc
    trail = invoke("history", doc, "--json").records
    events = [e["action"] for e in trail if e["action"] != "refused"]
    assert events[-2:] == ["unpublish", "publish"]
    doctor_is_clean(invoke)


def test_unpublishing_a_document_under_revision_keeps_its_status(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "policy.md", POLICY)
    doc = task["document_id"]
    publish(invoke, doc)
    replacement = tmp_path / "v2.md"
    replacement.write_text(NEW_POLICY)
    assert invoke("upload", str(replacement), "--replace", doc, "--json").code == 0
    assert len(hits(invoke, "invoices")) == 1  # the old revision is still served
    record = invoke("unpublish", doc, "--json").record
    assert (record["status"], record["published_revision"]) == ("draft", None)
    assert hits(invoke, "invoices") == []
    doctor_is_clean(invoke)
    check_error(invoke("publish", doc, "--json"), 4, "conflict")  # a draft is reviewed first


def test_an_archived_document_can_be_replaced_and_reprocessed(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "policy.md", POLICY)
    doc = task["document_id"]
    publish(invoke, doc)
    invoke("unpublish", doc, "--json")
    replacement = tmp_path / "v2.md"
    replacement.write_text(NEW_POLICY)
    record = invoke("upload", str(replacement), "--replace", doc, "--json").record
    assert (record["status"], record["revision"]) == ("draft", 2)
    assert invoke("submit", doc, "--json").code == 0
    assert invoke("work", "--json").code == 0
    publish(invoke, doc)
    [hit] = hits(invoke, "invoices")
    assert hit["revision"] == 2 and {row["revision"] for row in chunks_of(doc)} == {2}
    doctor_is_clean(invoke)


# --- delete ---------------------------------------------------------------------------------


def test_delete_removes_everything_and_history_remains(invoke, tmp_path, kb_home):
    task = ingest(invoke, tmp_path, "policy.md", POLICY)
    doc = task["document_id"]
    publish(invoke, doc)
    assert len(object_keys()) == 1
    planned = invoke("delete", doc, "--dry-run", "--json").record
    assert planned == {
        "document_id": doc,
        "filename": "policy.md",
        "base": "default",
        "status": "published",
        "chunks": 1,
        "tasks": 1,
        "deleted": False,
    }
    assert len(hits(invoke, "invoices")) == 1  # a dry run changes nothing
    deleted = invoke("delete", doc[:8], "--json").record
    assert deleted == {**planned, "deleted": True}
    assert hits(invoke, "invoices") == []
    check_error(invoke("status", doc, "--json"), 3, "not_found")
    check_error(invoke("status", task["task_id"], "--json"), 3, "not_found")
    check_error(invoke("delete", doc, "--json"), 3, "not_found")
    for table in ("documents", "chunks", "ingestion_tasks"):
        assert db_rows(f"SELECT * FROM {table}") == [], table
    assert object_keys() == []
    trail = invoke("history", doc, "--json").records
    actions = [event["action"] for event in trail]
    assert actions[0] == "upload" and actions[-1] == "delete"
    assert "claim" in actions  # the tasks' events stay with the document's
    doctor_is_clean(invoke)


def test_delete_cancels_an_active_task_first(invoke, tmp_path):
    path = tmp_path / "queued.md"
    path.write_text(POLICY)
    task = invoke("upload", str(path), "--submit", "--json").record
    assert invoke("delete", task["document_id"], "--json").record["deleted"] is True
    trail = invoke("history", task["document_id"], "--json").records
    cancel = [e for e in trail if e["action"] == "cancel"]
    assert [(e["entity_id"], e["to_status"]) for e in cancel] == [(task["task_id"], "cancelled")]
    assert invoke("work", "--json").record["claimed"] is False
    doctor_is_clean(invoke)


def test_bulk_delete_by_status_and_base(invoke, tmp_path):
    failed = ingest(invoke, tmp_path, "broken.pdf", "not a pdf at all")
    kept = ingest(invoke, tmp_path, "policy.md", POLICY)
    assert document_of(invoke, failed)["status"] == "failed"
    planned = invoke("delete", "--status", "failed", "--dry-run", "--json").records
    assert [record["document_id"] for record in planned] == [failed["document_id"]]
    assert invoke("delete", "--status", "failed", "--json").records[0]["deleted"] is True
    assert document_of(invoke, kept)["status"] == "review_pending"
    everything = invoke("delete", "--base", "default", "--json").records
    assert [record["document_id"] for record in everything] == [kept["document_id"]]
    assert invoke("delete", "--base", "default", "--json").stdout == ""  # nothing left
    doctor_is_clean(invoke)


def test_delete_refuses_bad_input_and_changes_nothing(invoke, tmp_path):
    task = ingest(invoke, tmp_path, "policy.md", POLICY)
    doc = task["document_id"]
    check_error(invoke("delete", "--json"), 2, "usage")
    check_error(invoke("delete", doc, "--status", "failed", "--json"), 2, "usage")
    check_error(invoke("delete", "--status", "deleting", "--json"), 2, "usage")
    check_error(invoke("delete", "--base", "nowhere", "--json"), 3, "not_found")
    # All or nothing: one unknown id and the known one stays.
    check_error(invoke("delete", doc, "f" * 36, "--json"), 3, "not_found")
    assert document_of(invoke, task)["status"] == "review_pending"


@pytest.mark.parametrize("role", ["viewer", "worker"])
def test_delete_reject_and_unpublish_need_their_roles(invoke, tmp_path, role):
    admin = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    task = ingest(invoke, tmp_path, "policy.md", POLICY, token=admin)
    doc = task["document_id"]
    token = invoke("user", "add", "someone", "--role", role, "--json", token=admin).record["token"]
    for args in (["delete", doc], ["reject", doc, "--reason", "no"], ["unpublish", doc]):
        check_error(invoke(*args, "--json", token=token), 5, "forbidden")
    editor = invoke("user", "add", "ed", "--role", "editor", "--json", token=admin).record["token"]
    check_error(invoke("reject", doc, "--reason", "no", "--json", token=editor), 5, "forbidden")
    assert invoke("delete", doc, "--json", token=editor).record["deleted"] is True


def test_a_document_in_an_unreadable_base_is_not_found_for_delete(invoke, tmp_path):
    admin = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    assert invoke("base", "create", "hr", "--team", "hr", "--json", token=admin).code == 0
    path = tmp_path / "salaries.md"
    path.write_text("Salaries are reviewed in March.")
    upload = ["upload", str(path), "--base", "hr", "--json"]
    doc = invoke(*upload, token=admin).record["document_id"]
    outsider = invoke(
        "user", "add", "out", "--role", "editor", "--team", "sales", "--json", token=admin
    ).record["token"]
    for args in (["delete", doc], ["history", doc], ["status", doc]):
        check_error(invoke(*args, "--json", token=outsider), 3, "not_found")
    assert invoke("delete", doc, "--json", token=admin).record["deleted"] is True
    check_error(invoke("history", doc, "--json", token=outsider), 3, "not_found")
    trail = invoke("history", doc, "--json", token=admin).records
    assert [e["action"] for e in trail if e["action"] != "refused"][-1] == "delete"


def test_doctor_reports_an_archived_document_that_search_would_serve(invoke, tmp_path):
    from sqlalchemy import create_engine, text

    from kb_cli.config import resolve_settings

    task = ingest(invoke, tmp_path, "policy.md", POLICY)
    doc = task["document_id"]
    publish(invoke, doc)
    invoke("unpublish", doc, "--json")
    engine = create_engine(resolve_settings().database_url)
    with engine.begin() as conn:  # what no kb command does: serve an archived revision
        conn.execute(
            text("UPDATE documents SET published_revision = 1 WHERE id = :id"), {"id": doc}
        )
    engine.dispose()
    report = invoke("doctor", "--json")
    assert report.code == 4
    assert [p["kind"] for p in report.record["problems"]] == ["served_while_out"]
