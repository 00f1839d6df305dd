"""What a reader of `kb search` sees: one hit for a text several files hold (naming the
others), no second hit for the sentence two overlapping chunks share, and on every hit
the file of the revision it serves, through replaces with another name and type."""

from __future__ import annotations

from kb_cli.chunking import chunk_blocks
from kb_cli.parsers import text as text_parser
from tests.helpers import db_rows, hits, ingest, publish

POLICY = (
    "# Receipts\n\nKeep every receipt for seven years. The finance team audits receipts "
    "each spring.\n"
)
GUIDE = "# Filing guide\n\nA receipt goes into the finance portal within a week of the trip.\n"


def test_copies_in_several_files_are_one_hit_that_names_the_others(invoke, tmp_path):
    ids = {}
    for name in ("policy.md", "policy-copy.md", "policy-old.md"):
        ids[name] = ingest(invoke, tmp_path, name, POLICY)["document_id"]
    ids["guide.md"] = ingest(invoke, tmp_path, "guide.md", GUIDE)["document_id"]
    for document_id in ids.values():
        publish(invoke, document_id)
    found = hits(invoke, "how long do I keep a receipt for finance?")
    copies = [hit for hit in found if "seven years" in hit["text"]]
    assert len(copies) == 1, found
    [copy] = copies
    named = {other["filename"] for other in copy["also_in"]} | {copy["filename"]}
    assert named == {"policy.md", "policy-copy.md", "policy-old.md"}
    assert {other["document_id"] for other in copy["also_in"]} < set(ids.values())
    assert "guide.md" in [hit["filename"] for hit in found[:2]]
    plain = invoke("search", "how long do I keep a receipt for finance?")
    assert "also_in=" in plain.stdout


def test_overlapping_neighbours_never_show_the_same_sentence_twice(invoke, tmp_path):
    # The sentence ends a chunk, so the next chunk starts with it (the overlap).
    fillers = [f"Paragraph {n} of the travel rules covers ordinary bookings " * 3 for n in range(8)]
    stamp = "Refunds for cancelled trains need the conductor stamp."
    text = "\n\n".join(["# Rules", *fillers[:5], stamp, *fillers[5:]]) + "\n"
    chunks = [chunk.text for chunk in chunk_blocks(text_parser._sections(text.split("\n"), True))]
    assert sum("conductor stamp" in chunk for chunk in chunks) == 2  # the case under test
    publish(invoke, ingest(invoke, tmp_path, "rules.md", text)["document_id"])
    found = hits(invoke, "conductor stamp refunds")
    shown = [hit for hit in found if "conductor" in hit["snippet"]]
    assert len(shown) == 1, [(hit["chunk_index"], hit["snippet"]) for hit in found]


def test_after_a_replace_every_hit_names_the_file_it_came_from(invoke, tmp_path):
    first = tmp_path / "a.md"
    first.write_text("# Lockers\n\nLocker keys are returned to the front desk.\n")
    document_id = invoke("upload", str(first), "--submit", "--json").record["document_id"]
    assert invoke("work", "--json").code == 0
    publish(invoke, document_id)
    second = tmp_path / "b.txt"
    second.write_text("Locker keys are now returned to the security office.\n")
    replaced = invoke("upload", str(second), "--replace", document_id)
    assert replaced.code == 0, replaced.stderr
    assert "a.md (text/markdown) -> b.txt (text/plain)" in replaced.stderr
    [event] = [
        e for e in invoke("history", document_id, "--json").records if e["action"] == "replace"
    ]
    assert "a.md" in event["detail"] and "b.txt" in event["detail"]
    # Revision 1 is still served: its hits name a.md, not the candidate's b.txt.
    [hit] = hits(invoke, "locker keys")
    assert (hit["filename"], hit["content_type"], hit["revision"]) == ("a.md", "text/markdown", 1)
    assert "front desk" in hit["text"]
    status = invoke("status", document_id, "--json").record
    assert status["filename"] == "b.txt"
    assert status["published_file"] == {"filename": "a.md", "content_type": "text/markdown"}
    assert 'published_file="a.md"' in invoke("status", document_id).stdout
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        '{"question": "locker keys", "expected": ["a.md"], "answer": "front desk"}\n'
    )
    *_, summary = invoke("eval", str(questions), "--json").records
    assert summary["hit_at_1"] == 1.0 and summary["passage_hit_at_1"] == 1.0
    # Once revision 2 is published, its hits name b.txt and the status shows one file.
    assert invoke("submit", document_id, "--json").code == 0
    assert invoke("work", "--json").code == 0
    publish(invoke, document_id)
    [hit] = hits(invoke, "locker keys")
    assert (hit["filename"], hit["content_type"], hit["revision"]) == ("b.txt", "text/plain", 2)
    assert "published_file" not in invoke("status", document_id, "--json").record
    same = invoke("upload", str(second), "--replace", document_id)
    assert same.code == 0 and "differs" not in same.stderr
    files = "SELECT revision FROM document_revisions WHERE document_id = :id ORDER BY revision"
    assert [row["revision"] for row in db_rows(files, id=document_id)] == [1, 2, 3]
    assert invoke("delete", document_id, "--yes", "--json").code == 0
    assert db_rows(files, id=document_id) == []  # the files of its revisions go with it
