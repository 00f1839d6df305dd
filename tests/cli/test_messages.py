"""Messages that say a thing once and what to do next: conflicts of publish and submit,
a task id or a file name given where a document id is wanted (hints never name what the
caller cannot read)."""

from __future__ import annotations

from tests.helpers import ingest


def upload(invoke, tmp_path, name: str = "a.md", *flags: str, token: str | None = None) -> dict:
    path = tmp_path / name
    path.write_text("# Title\n\nSome words to index.\n", encoding="utf-8")
    result = invoke("upload", str(path), *flags, "--json", token=token)
    assert result.code == 0, result.stderr
    return result.record


def error_of(result, code: int, error: str) -> str:
    assert result.code == code, (result.code, result.stderr)
    assert result.error["error"] == error and result.stdout == ""
    return result.error["message"]


def test_a_conflict_names_the_status_once_and_the_next_step(invoke, tmp_path):
    doc = ingest(invoke, tmp_path, "a.md", "# T\n\nwords\n")["document_id"]
    assert invoke("publish", doc).code == 0
    message = error_of(invoke("publish", doc, "--json"), 4, "conflict")
    assert message == (
        f"cannot publish document {doc}: it is already published; "
        f"to change it: kb upload FILE --replace {doc}"
    )
    message = error_of(invoke("submit", doc, "--json"), 4, "conflict")
    assert message == (
        f"cannot submit document {doc}: it is published; "
        f"to change it: kb upload FILE --replace {doc}"
    )
    queued = upload(invoke, tmp_path, "b.md", "--submit")["document_id"]
    message = error_of(invoke("submit", queued, "--json"), 4, "conflict")
    assert message.startswith(f"cannot submit document {queued}: it is already processing; ")
    for refusal in (message, error_of(invoke("publish", queued, "--json"), 4, "conflict")):
        assert refusal.count("it is") == 1 and refusal.count("processing") == 1


def test_a_task_id_for_a_document_points_at_its_document_with_the_same_verb(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "--submit")
    task_id, document_id = task["task_id"], task["document_id"]
    for ref in (task_id, task_id[:8]):
        message = error_of(invoke("publish", ref, "--json"), 3, "not_found")
        assert message == (
            f"no document with id {ref!r}; {task_id} is a task: did you mean its document "
            f"{document_id} (kb publish {document_id})?"
        )
    message = error_of(invoke("delete", task_id, "--yes", "--json"), 3, "not_found")
    assert message.endswith(f"did you mean its document {document_id} (kb delete {document_id})?")
    # A command that takes more than the id: its document, and no command to copy.
    message = error_of(invoke("reject", task_id, "--reason", "x", "--json"), 3, "not_found")
    assert message.endswith(f"did you mean its document {document_id}?")


def test_a_document_id_for_a_task_points_at_its_latest_task(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "--submit")
    message = error_of(invoke("work", task["document_id"], "--json"), 3, "not_found")
    assert f"did you mean its latest task {task['task_id']}?" in message


def test_a_file_name_for_a_document_names_its_id_when_only_one_has_it(invoke, tmp_path):
    document = upload(invoke, tmp_path, "travel-policy.md")
    for ref in ("travel-policy.md", f"docs/{document['filename']}"):
        message = error_of(invoke("submit", ref, "--json"), 3, "not_found")
        assert message.endswith(
            f"; the document named travel-policy.md is {document['document_id']}"
        )
    upload(invoke, tmp_path, "travel-policy.md")
    message = error_of(invoke("status", "travel-policy.md", "--json"), 3, "not_found")
    assert message.endswith(
        "; more than one document is named travel-policy.md: kb status lists their ids"
    )
    message = error_of(invoke("publish", "nothing.md", "--json"), 3, "not_found")
    assert message == "no document with id 'nothing.md'"


def test_hints_never_name_a_document_the_caller_cannot_read(invoke, tmp_path):
    admin = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    editor = invoke("user", "add", "ed", "--role", "editor", "--json", token=admin).record["token"]
    assert invoke("base", "create", "secret", "--team", "board", token=admin).code == 0
    hidden = upload(invoke, tmp_path, "plans.md", "--base", "secret", "--submit", token=admin)
    for ref in (hidden["task_id"], "plans.md"):
        message = error_of(invoke("submit", ref, "--json", token=editor), 3, "not_found")
        assert message == f"no document with id {ref!r}"
        shown = error_of(invoke("submit", ref, "--json", token=admin), 3, "not_found")
        assert hidden["document_id"] in shown  # the admin reads every base
