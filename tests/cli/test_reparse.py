"""`kb reparse`: the stored file parsed again with today's settings as a new revision,
without an upload, through review, the published revision served meanwhile."""

from __future__ import annotations

from tests.helpers import db_rows, object_keys

LONG = "# Retention\n\n" + "\n\n".join(
    f"Paragraph {i} says that invoices are kept for ten years and then destroyed. " * 3
    for i in range(30)
)


def ok(result) -> list[dict]:
    assert result.code == 0, (result.code, result.stderr)
    return result.records


def chunks_of(document_id: str, revision: int) -> int:
    rows = db_rows(
        "SELECT count(*) AS n FROM chunks WHERE document_id = :d AND revision = :r",
        d=document_id,
        r=revision,
    )
    return int(rows[0]["n"])


def published(invoke, tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    task = ok(invoke("upload", str(path), "--submit", "--json"))[0]
    ok(invoke("work", "--drain", "--json"))
    ok(invoke("publish", task["document_id"], "--json"))
    return task["document_id"]


def test_reparse_with_a_changed_chunk_setting(invoke, tmp_path, monkeypatch):
    document_id = published(invoke, tmp_path, "retention.md", LONG)
    before = chunks_of(document_id, 1)
    keys = object_keys()
    monkeypatch.setenv("KB_CHUNK_CHARS", "400")
    planned = ok(invoke("reparse", document_id, "--dry-run", "--json"))
    assert planned[0]["queued"] is False and planned[0]["revision"] == 1
    assert ok(invoke("status", document_id, "--json"))[0]["version"] == 4
    [queued] = ok(invoke("reparse", document_id, "--json"))
    assert queued["queued"] is True and queued["revision"] == 2 and queued["task_id"]
    document = ok(invoke("status", document_id, "--json"))[0]
    assert (document["status"], document["revision"], document["published_revision"]) == (
        "processing", 2, 1,
    )  # fmt: skip
    assert object_keys() == keys, "no upload: the same stored file"
    hits = ok(invoke("search", "invoices destroyed", "--json"))
    assert hits and {hit["revision"] for hit in hits} == {1}
    ok(invoke("work", "--drain", "--json"))
    after = chunks_of(document_id, 2)
    assert after > before, (before, after)
    assert ok(invoke("status", document_id, "--json"))[0]["status"] == "review_pending"
    ok(invoke("publish", document_id, "--json"))
    assert {hit["revision"] for hit in ok(invoke("search", "invoices destroyed", "--json"))} == {2}
    trail = ok(invoke("history", document_id, "--json"))
    assert "reparse" in [event["action"] for event in trail]


def test_bulk_forms_leave_documents_being_worked_on(invoke, tmp_path):
    first = published(invoke, tmp_path, "a.md", "# A\n\nalpha\n")
    waiting = tmp_path / "b.md"
    waiting.write_text("# B\n\nbeta\n", "utf-8")
    second = ok(invoke("upload", str(waiting), "--submit", "--json"))[0]["document_id"]
    ok(invoke("work", "--drain", "--json"))  # b.md is review_pending
    done = {item["document_id"]: item for item in ok(invoke("reparse", "--all", "--json"))}
    assert done[first]["queued"] is True
    assert done[second]["queued"] is False and "review" in done[second]["reason"]
    again = ok(invoke("reparse", "--base", "default", "--json"))
    assert {item["queued"] for item in again} == {False}


def test_reparse_is_an_editors(invoke, tmp_path):
    admin = ok(invoke("user", "add", "root", "--role", "admin", "--json"))[0]["token"]
    viewer = ok(invoke("user", "add", "vic", "--role", "viewer", "--json", token=admin))[0]
    path = tmp_path / "a.md"
    path.write_text("a\n", "utf-8")
    document_id = ok(invoke("upload", str(path), "--json", token=admin))[0]["document_id"]
    refused = invoke("reparse", document_id, "--json", token=viewer["token"])
    assert refused.code == 5
    refused = invoke("reparse", "--all", "--json", token=viewer["token"])
    assert refused.code == 5
    refused = invoke("reparse", document_id, "--all", "--json", token=admin)
    assert refused.code == 2
