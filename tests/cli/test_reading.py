"""What a reviewer reads before publishing: `kb show` (a revision's text, its chunks),
`kb diff` (what the pending revision changes against the served one) and `kb export`
(the stored original, byte for byte), under the read rules of `kb status`."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.docgen import make_pdf
from tests.helpers import db_rows, file_store_only, ingest, publish

FIRST = "# Travel\n\n## Meals\n\nMeals are paid up to 50 euros a day.\n\n## Hotels\n\nUp to 120.\n"
SECOND = (
    "# Travel\n\n## Meals\n\nMeals are paid up to 60 euros a day.\n\n## Hotels\n\nUp to 120.\n\n"
    "## Taxis\n\nTaxis need a receipt.\n"
)


def ok(result) -> list[dict]:
    assert result.code == 0, (result.code, result.stderr)
    return result.records


def served_and_pending(invoke, tmp_path: Path) -> str:
    """A document served at revision 1 with revision 2 waiting for review."""
    document_id = ingest(invoke, tmp_path, "travel.md", FIRST)["document_id"]
    publish(invoke, document_id)
    second = tmp_path / "v2" / "travel.md"
    second.parent.mkdir()
    second.write_text(SECOND, encoding="utf-8")
    ok(invoke("upload", str(second), "--replace", document_id, "--json"))
    ok(invoke("submit", document_id, "--json"))
    ok(invoke("work", "--json"))
    return document_id


def test_show_reads_the_pending_revision_by_default_and_any_kept_one(invoke, tmp_path):
    document_id = served_and_pending(invoke, tmp_path)
    [pending] = ok(invoke("show", document_id, "--json"))
    assert (pending["revision"], pending["role"]) == (2, "pending")
    assert "## Taxis\nTaxis need a receipt." in pending["text"]
    assert "## Meals\nMeals are paid up to 60 euros a day." in pending["text"]
    [served] = ok(invoke("show", document_id, "--revision", "published", "--json"))
    assert (served["revision"], served["role"]) == (1, "published")
    assert "Taxis" not in served["text"] and "50 euros" in served["text"]
    assert ok(invoke("show", document_id, "--revision", "1", "--json"))[0] == served
    plain = invoke("show", document_id)
    assert plain.code == 0 and plain.stdout.splitlines()[0].startswith(f"document {document_id}")
    assert "Meals are paid up to 60 euros a day." in plain.stdout


def test_show_chunks_lists_each_with_its_place(invoke, tmp_path):
    document_id = served_and_pending(invoke, tmp_path)
    chunks = ok(invoke("show", document_id, "--chunks", "--json"))
    assert [c["chunk_index"] for c in chunks] == list(range(len(chunks)))
    assert {c["heading"] for c in chunks} == {"Travel", "Meals", "Hotels", "Taxis"}
    for chunk in chunks:
        assert chunk["length"] == len(chunk["text"]) and chunk["revision"] == 2
        assert set(chunk) == {
            "document_id", "revision", "chunk_index", "page", "page_end", "heading",
            "length", "text",
        }  # fmt: skip
    plain = invoke("show", document_id, "--chunks").stdout.splitlines()
    assert plain[0].startswith('chunk=0 heading="Travel" length=')  # one line a chunk


def test_show_marks_the_pages_of_a_pdf(invoke, tmp_path):
    pdf = tmp_path / "policy.pdf"
    pdf.write_bytes(make_pdf(["Receipts are kept.", "Trains are second class."]))
    document_id = ok(invoke("upload", str(pdf), "--submit", "--json"))[0]["document_id"]
    ok(invoke("work", "--json"))
    [shown] = ok(invoke("show", document_id, "--json"))
    assert shown["text"].startswith("[pages 1-2]\nReceipts are kept.")


def test_a_revision_whose_text_is_gone_or_absent_is_refused(invoke, tmp_path):
    document_id = served_and_pending(invoke, tmp_path)
    gone = invoke("show", document_id, "--revision", "7", "--json")
    assert gone.code == 3 and "kept: 2 (pending), 1 (published)" in gone.error["message"]
    publish(invoke, document_id)  # revision 1's chunks go
    assert invoke("show", document_id, "--revision", "1", "--json").code == 3
    nothing = invoke("show", document_id, "--revision", "pending", "--json")
    assert nothing.code == 4 and "waits for review" in nothing.error["message"]
    draft = tmp_path / "draft.md"
    draft.write_text("# Draft\n\nNot yet.\n", encoding="utf-8")
    draft_id = ok(invoke("upload", str(draft), "--json"))[0]["document_id"]
    refused = invoke("show", draft_id, "--json")
    assert refused.code == 4 and f"kb submit {draft_id}" in refused.error["message"]
    assert invoke("show", document_id, "--revision", "latest").code == 2


def test_diff_shows_what_the_pending_revision_changes(invoke, tmp_path):
    document_id = served_and_pending(invoke, tmp_path)
    *hunks, summary = ok(invoke("diff", document_id, "--json"))
    assert summary == {
        "document_id": document_id, "filename": "travel.md", "from_revision": 1,
        "to_revision": 2, "hunks": len(hunks), "chunks_added": 2, "chunks_removed": 1,
        "chunks_kept": 2,
    }  # fmt: skip
    lines = [line for hunk in hunks for line in hunk["lines"]]
    assert "-Meals are paid up to 50 euros a day." in lines
    assert "+Meals are paid up to 60 euros a day." in lines
    assert "+## Taxis" in lines and hunks[0]["where"] == "## Meals"
    plain = invoke("diff", document_id).stdout.splitlines()
    assert plain[:2] == ["--- travel.md revision 1", "+++ travel.md revision 2"]
    assert plain[-1] == "chunks: 2 added, 1 removed, 2 kept"
    same = ok(invoke("diff", document_id, "--from", "2", "--to", "pending", "--json"))
    assert same == [{**summary, "from_revision": 2, "hunks": 0, "chunks_added": 0,
                     "chunks_removed": 0, "chunks_kept": 4}]  # fmt: skip


def test_diff_of_a_new_document_adds_everything(invoke, tmp_path):
    document_id = ingest(invoke, tmp_path, "new.md", FIRST)["document_id"]
    *_hunks, summary = ok(invoke("diff", document_id, "--json"))
    assert summary["from_revision"] is None and summary["chunks_removed"] == 0
    assert summary["chunks_added"] == 3 and summary["chunks_kept"] == 0


def test_status_tells_a_reviewer_what_publishing_would_change(invoke, tmp_path):
    """`kb status ID` of a pending change: its chunks and what it replaces, counted as
    `kb diff` counts them; `status --status review_pending` says new or change."""
    document_id = served_and_pending(invoke, tmp_path)
    fresh = ingest(invoke, tmp_path, "new.md", FIRST)["document_id"]
    [record] = ok(invoke("status", document_id, "--json"))
    assert (record["chunks"], record["ocr_pages"]) == (4, 0)
    assert record["change"] == {
        "new": False, "replaces_revision": 1, "chunks_added": 2, "chunks_removed": 1,
        "chunks_kept": 2,
    }  # fmt: skip
    line = invoke("status", document_id).stdout
    assert "chunks=4 ocr_pages=0 change=replaces:1 chunks_added=2 chunks_removed=1" in line
    listed = {
        r["document_id"]: r for r in ok(invoke("status", "--status", "review_pending", "--json"))
    }
    assert listed[document_id]["change"] == record["change"]
    assert listed[fresh]["change"] == {
        "new": True, "replaces_revision": None, "chunks_added": 3, "chunks_removed": 0,
        "chunks_kept": 0,
    }  # fmt: skip
    assert "chunks" not in listed[fresh]  # a listing reads no chunk counts
    # a listing of anything else, and a document with nothing pending, say no change
    everything = ok(invoke("status", "--json"))
    assert all("change" not in r for r in everything)
    publish(invoke, document_id)
    [served] = ok(invoke("status", document_id, "--json"))
    assert "change" not in served and served["chunks"] == 4


def test_export_writes_the_original_byte_for_byte_and_never_overwrites_unasked(invoke, tmp_path):
    document_id = served_and_pending(invoke, tmp_path)
    target = tmp_path / "out" / "copy.md"
    target.parent.mkdir()
    [exported] = ok(invoke("export", document_id, "--output", str(target), "--json"))
    assert target.read_text(encoding="utf-8") == SECOND
    assert exported["sha256"] == hashlib.sha256(SECOND.encode()).hexdigest()
    assert exported["revision"] == 2 and exported["path"] == str(target)
    again = invoke("export", document_id, "--output", str(target), "--json")
    assert again.code == 4 and "--force" in again.error["message"]
    target.write_text("changed", encoding="utf-8")
    ok(invoke("export", document_id, "--output", str(target), "--force", "--json"))
    assert target.read_text(encoding="utf-8") == SECOND
    old = invoke("export", document_id, "--output", str(tmp_path / "x.md"), "--revision", "1")
    assert old.code == 3 and "only the newest file is" in old.stderr
    history = ok(invoke("history", document_id, "--json"))
    assert sum(event["action"] == "export" for event in history) == 2


def test_export_of_several_writes_them_under_their_paths(invoke, tmp_path):
    source = tmp_path / "share"
    (source / "policies").mkdir(parents=True)
    (source / "it").mkdir()
    (source / "policies" / "README.md").write_text("# Policies\n\nRead me.\n", encoding="utf-8")
    (source / "it" / "README.md").write_text("# IT\n\nRead me too.\n", encoding="utf-8")
    ok(invoke("base", "create", "team", "--json"))
    ok(invoke("sync", str(source), "--base", "team", "--json"))
    folder = tmp_path / "exported"
    exported = ok(invoke("export", "--base", "team", "--output", str(folder), "--json"))
    assert {Path(item["path"]).relative_to(folder).as_posix() for item in exported} == {
        "policies/README.md", "it/README.md",
    }  # fmt: skip
    assert (folder / "it" / "README.md").read_text(encoding="utf-8") == "# IT\n\nRead me too.\n"
    ids = [item["document_id"] for item in exported]
    named = tmp_path / "by-id"
    ok(invoke("export", *ids, "--output", str(named), "--json"))
    assert sorted(p.name for p in named.rglob("*.md")) == ["README.md", "README.md"]


@file_store_only("changes a stored object's file behind kb's back")
def test_an_original_that_no_longer_matches_its_hash_is_not_written(invoke, tmp_path, kb_home):
    document_id = ingest(invoke, tmp_path, "a.md", FIRST)["document_id"]
    [row] = db_rows("SELECT object_key FROM documents WHERE id = :id", id=document_id)
    key = row["object_key"]
    stored = next((kb_home / "objects").rglob(key.rsplit("/", 1)[-1]))
    stored.chmod(0o600)
    stored.write_bytes(b"tampered")
    target = tmp_path / "a-copy.md"
    refused = invoke("export", document_id, "--output", str(target), "--json")
    assert refused.code == 1 and "does not match its sha256" in refused.error["message"]
    assert not target.exists() and not list(tmp_path.glob(".a-copy.md*"))


def test_a_reader_without_the_base_finds_nothing_to_read(invoke, tmp_path):
    admin = ok(invoke("user", "add", "root", "--role", "admin", "--json"))[0]["token"]
    ok(invoke("base", "create", "board", "--team", "directors", "--json", token=admin))
    outsider = ok(invoke("user", "add", "olga", "--role", "viewer", "--json", token=admin))[0]
    path = tmp_path / "minutes.md"
    path.write_text("# Minutes\n\nSecret.\n", encoding="utf-8")
    uploaded = invoke("upload", str(path), "--base", "board", "--submit", "--json", token=admin)
    document_id = ok(uploaded)[0]["document_id"]
    ok(invoke("work", "--json", token=admin))
    for args in (["show", document_id], ["diff", document_id],
                 ["export", document_id, "--output", str(tmp_path / "m.md")]):  # fmt: skip
        refused = invoke(*args, "--json", token=outsider["token"])
        assert refused.code == 3 and refused.error["error"] == "not_found", args
    assert not (tmp_path / "m.md").exists()
