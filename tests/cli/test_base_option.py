"""`--base NAME` on the bulk and listing verbs: the verb acts on that base only. A
listing lists it, a bulk verb takes only its documents, an id of another base is not
found, and a worker claims only its tasks; a base the caller may not read is refused as
one that does not exist."""

from __future__ import annotations

import pytest

from tests.helpers import check_error, db_rows

BASES = ("hr", "finance")


def _two_bases(invoke, root):
    """In each of hr and finance: a published document and one waiting for review."""
    ids = {}
    for base in BASES:
        assert invoke("base", "create", base, "--json").code == 0
        for name in ("published", "waiting"):
            path = root / f"{base}-{name}.md"
            path.write_text(f"# {base} {name}\n\nA note of {base} about {name} things.\n")
            task = invoke("upload", str(path), "--base", base, "--submit", "--json").record
            ids[base, name] = task["document_id"]
    assert invoke("work", "--drain", "--json").code == 0
    for base in BASES:
        assert invoke("publish", ids[base, "published"], "--json").code == 0
    return ids


@pytest.fixture(scope="module")
def two_bases(build_home):
    return build_home(_two_bases)


def _statuses(invoke, *options: str) -> dict[str, str]:
    result = invoke("status", *options, "--json")
    assert result.code == 0, result.stderr
    return {record["document_id"]: record["status"] for record in result.records}


def test_status_lists_the_bases_named(invoke, enter_home, two_bases):
    ids = enter_home(two_bases)
    assert set(_statuses(invoke, "--base", "hr")) == {
        ids["hr", n] for n in ("published", "waiting")
    }
    assert set(_statuses(invoke, "--base", "hr", "--base", "finance")) == set(ids.values())
    listed = invoke("status", "--base", "finance", "--status", "review_pending", "--json")
    assert [record["document_id"] for record in listed.records] == [ids["finance", "waiting"]]
    # An id of another base is not found; of the base named, it is shown.
    check_error(
        invoke("status", ids["hr", "waiting"], "--base", "finance", "--json"), 3, "not_found"
    )
    shown = invoke("status", ids["hr", "waiting"], "--base", "hr", "--json")
    assert shown.record["document_id"] == ids["hr", "waiting"]


def test_publish_all_reviewed_publishes_the_base_named_only(invoke, enter_home, two_bases):
    ids = enter_home(two_bases, writes=True)
    published = invoke("publish", "--all-reviewed", "--base", "hr", "--json")
    assert [record["document_id"] for record in published.records] == [ids["hr", "waiting"]]
    assert _statuses(invoke)[ids["finance", "waiting"]] == "review_pending"
    nothing = invoke("publish", "--all-reviewed", "--base", "hr", "--json")
    assert nothing.code == 0 and nothing.stdout == ""


@pytest.mark.parametrize(
    "verb",
    [("reject", "waiting", "--reason", "wrong year"), ("unpublish", "published")],
    ids=["reject", "unpublish"],
)
def test_reject_and_unpublish_refuse_a_document_of_another_base(
    invoke, enter_home, two_bases, verb
):
    ids = enter_home(two_bases, writes=True)
    command, which, *options = verb
    document_id = ids["hr", which]
    before = _statuses(invoke)
    refused = invoke(command, document_id, *options, "--base", "finance", "--json")
    error = check_error(refused, 3, "not_found")
    assert "in base finance" in error["message"]
    assert _statuses(invoke) == before  # nothing changed
    done = invoke(command, document_id, *options, "--base", "hr", "--json")
    assert done.code == 0, done.stderr
    assert done.record["status"] == ("draft" if command == "reject" else "archived")


def test_delete_keeps_its_ids_to_the_base(invoke, enter_home, two_bases):
    ids = enter_home(two_bases, writes=True)
    hr, finance = ids["hr", "waiting"], ids["finance", "waiting"]
    check_error(invoke("delete", hr, finance, "--base", "hr", "--json"), 3, "not_found")
    assert {hr, finance} <= set(_statuses(invoke))  # all or nothing: both still there
    deleted = invoke("delete", hr, "--base", "hr", "--json")
    assert [(r["document_id"], r["deleted"]) for r in deleted.records] == [(hr, True)]


def test_events_of_the_bases_named(invoke, enter_home, two_bases):
    enter_home(two_bases)
    every = invoke("events", "--json").records
    hr = invoke("events", "--base", "hr", "--json").records
    both = invoke("events", "--base", "hr", "--base", "finance", "--json").records
    assert hr and {event["base"] for event in hr} == {"hr"}
    assert [e for e in every if e["base"] == "hr"] == hr
    assert [e for e in every if e["base"] in BASES] == both
    assert {event["base"] for event in both} == set(BASES)


def _queue(invoke, tmp_path, base: str, name: str) -> dict:
    path = tmp_path / name
    path.write_text(f"# {name}\n\nWhat {base} keeps.\n")
    return invoke("upload", str(path), "--base", base, "--submit", "--json").record


def _task_status(task: dict) -> str:
    [row] = db_rows("SELECT status FROM ingestion_tasks WHERE id = :id", id=task["task_id"])
    return row["status"]


def test_a_worker_kept_to_a_base_claims_only_its_tasks(invoke, tmp_path):
    for base in BASES:
        assert invoke("base", "create", base, "--json").code == 0
    older = _queue(invoke, tmp_path, "finance", "ledger.md")  # first in claim order
    own = _queue(invoke, tmp_path, "hr", "leave.md")
    claimed = invoke("work", "--base", "hr", "--json").record
    assert claimed["task_id"] == own["task_id"] and claimed["task"]["status"] == "succeeded"
    assert _task_status(older) == "queued"
    # A task of another base, named: not found, and left as it was.
    refused = invoke("work", older["task_id"], "--base", "hr", "--json")
    assert "in base hr" in check_error(refused, 3, "not_found")["message"]
    drained = invoke("work", "--drain", "--base", "hr", "--json").records
    assert [line["claimed"] for line in drained] == [False]
    assert _task_status(older) == "queued"
    lines = invoke("work", "--drain", "--base", "hr", "--base", "finance", "--json").records
    assert [line["task_id"] for line in lines if line["claimed"]] == [older["task_id"]]


def test_a_task_moves_with_its_document_to_another_base(invoke, tmp_path):
    for base in BASES:
        assert invoke("base", "create", base, "--json").code == 0
    task = _queue(invoke, tmp_path, "hr", "handbook.md")
    assert invoke("base", "move", task["document_id"], "finance", "--json").code == 0
    assert invoke("work", "--base", "hr", "--json").record["claimed"] is False
    moved = invoke("work", "--base", "finance", "--json").record
    assert moved["task_id"] == task["task_id"] and moved["task"]["status"] == "succeeded"


def test_a_base_the_caller_may_not_read_is_refused_as_missing(invoke, tmp_path):
    admin = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    viewer = invoke(
        "user", "add", "sam", "--role", "viewer", "--team", "sales", "--json", token=admin
    ).record["token"]
    assert invoke("base", "create", "hr", "--team", "hr", "--json", token=admin).code == 0
    for command in (("status",), ("events",), ("publish", "--all-reviewed")):
        refused = invoke(*command, "--base", "hr", "--json", token=viewer)
        code = 5 if command[0] == "publish" else 3  # a viewer may not publish at all
        check_error(refused, code, "forbidden" if code == 5 else "not_found")
    trail = invoke("history", "base:hr", "--json", token=admin).records
    refusals = [event["detail"] for event in trail if event["action"] == "refused"]
    assert refusals == [
        "status: base hr is not readable by sam",
        "events: base hr is not readable by sam",
        "publish: role viewer may not run publish",
    ]
