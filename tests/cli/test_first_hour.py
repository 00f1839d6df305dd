"""What a new user meets in the first hour: `status --wait` exit codes, messages that say
what to do next, read-only commands that create nothing, help that shows the way."""

from __future__ import annotations

import pytest

from kb_cli.console import waiting
from tests.helpers import ON_POSTGRES


def upload(invoke, tmp_path, name="a.md", text="# Title\n\nSome words to index.\n", *flags):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = invoke("upload", str(path), *flags, "--json")
    assert result.code == 0, result.stderr
    return result.record


# --- status --wait ----------------------------------------------------------------------


def test_wait_exits_0_when_the_task_succeeded(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "# T\n\nwords\n", "--submit")
    assert invoke("work").code == 0
    result = invoke("status", task["task_id"], "--wait", "--json")
    assert result.code == 0 and result.record["status"] == "succeeded"


def test_wait_exits_8_when_the_task_failed_and_still_prints_it(invoke, tmp_path):
    task = upload(invoke, tmp_path, "bad.pdf", b"%PDF-1.4 broken", "--submit")
    invoke("work")
    result = invoke("status", task["document_id"], "--wait", "--json")
    assert result.code == 8
    assert result.record["status"] == "failed" and result.record["error_code"] == "parse_error"
    assert result.error == {
        "error": "task_unsuccessful",
        "message": f"task {task['task_id'][:8]} failed with parse_error; after a fix: "
        f"kb retry {task['task_id'][:8]}",
    }


def test_wait_exits_8_when_the_task_was_cancelled(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "# T\n\nwords\n", "--submit")
    assert invoke("cancel", task["task_id"]).code == 0
    result = invoke("status", task["task_id"], "--wait")
    assert result.code == 8
    assert "cancelled" in result.stdout
    assert f"kb submit {task['document_id'][:8]}" in result.stderr


def test_wait_times_out_with_exit_7(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "# T\n\nwords\n", "--submit")
    result = invoke("status", task["task_id"], "--wait", "--timeout", "0.3", "--json")
    assert result.code == 7 and result.record["status"] == "queued"


def test_wait_says_when_no_worker_has_claimed_the_task(invoke, tmp_path, monkeypatch):
    monkeypatch.setattr(waiting, "NO_WORKER_HINT_SECONDS", 0.3)
    task = upload(invoke, tmp_path, "a.md", "# T\n\nwords\n", "--submit")
    result = invoke("status", task["task_id"], "--wait", "--timeout", "1")
    assert result.code == 7
    [hint] = [line for line in result.stderr.splitlines() if "no worker" in line]
    assert "kb work --loop" in hint and task["task_id"] in hint


# --- messages that say what to do next --------------------------------------------------


def test_a_short_prefix_is_told_its_minimum_length(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "# T\n\nwords\n", "--submit")
    result = invoke("status", task["task_id"][:5])
    assert result.code == 3 and "at least 6 characters" in result.stderr


def test_cancel_takes_a_document_id_for_its_latest_task(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "# T\n\nwords\n", "--submit")
    result = invoke("cancel", task["document_id"][:8], "--json")
    assert result.code == 0
    assert result.record["task_id"] == task["task_id"] and result.record["status"] == "cancelled"


@pytest.mark.parametrize(
    ("prepare", "command", "hint"),
    [
        ("draft", "publish", "submit it first: kb submit"),
        ("processing", "publish", "kb status {doc} --wait"),
        ("processing", "submit", "kb status {doc} --wait"),
        ("review_pending", "submit", "publishes it (kb publish {doc})"),
        ("failed", "submit", "then: kb retry"),
        ("published", "publish", "kb upload FILE --replace"),
    ],
)
def test_refusals_name_the_next_step(invoke, tmp_path, prepare, command, hint):
    name, text = ("bad.pdf", b"%PDF-1.4 broken") if prepare == "failed" else ("a.md", "# T\n\nw\n")
    document = upload(invoke, tmp_path, name, text)
    doc = document["document_id"]
    if prepare != "draft":
        invoke("submit", doc)
    if prepare in ("review_pending", "published", "failed"):
        invoke("work")
    if prepare == "published":
        invoke("publish", doc)
    result = invoke(command, doc)
    assert result.code == 4
    assert hint.format(doc=doc) in result.stderr


def test_cancel_of_a_finished_task_names_the_cancellable_statuses(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "# T\n\nwords\n", "--submit")
    invoke("work")
    result = invoke("cancel", task["task_id"])
    assert result.code == 4 and "only queued, running or retry_wait" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--error-code", "bogus"),
        ("status", "--status", "bogus"),
        ("retry", "--all-failed", "--error-code", "bogus"),
        ("search", "x", "--mode", "bogus"),
        ("user", "add", "x", "--role", "bogus"),
    ],
)
def test_every_invalid_filter_value_is_a_usage_error_listing_the_choices(invoke, args):
    result = invoke(*args)
    assert result.code == 2 and "is not one of" in result.stderr


# --- read-only commands create nothing --------------------------------------------------


@pytest.mark.skipif(ON_POSTGRES, reason="about a SQLite home that does not exist")
@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("status",), 0),
        (("status", "--json"), 0),
        (("search", "anything"), 0),
        (("status", "00000000-0000"), 3),
        (("history", "00000000-0000"), 3),
        (("doctor",), 3),
        (("eval", "questions.jsonl"), 3),
    ],
)
def test_read_only_commands_leave_no_home_behind(invoke, tmp_path, args, code):
    (tmp_path / "questions.jsonl").write_text('{"question": "q", "expected": ["a.md"]}\n')
    home = tmp_path / "never-created"
    result = invoke("--home", str(home), *args)
    assert result.code == code, result.stderr
    assert not home.exists()
    assert result.stdout == ""
    if "--json" not in args:
        assert "no knowledge base in this home yet" in result.stderr
        assert "kb upload FILE" in result.stderr


# --- help --------------------------------------------------------------------------------


@pytest.mark.parametrize("group", [(), ("user",), ("db",), ("base",)])
def test_every_group_has_an_example(invoke, group):
    result = invoke(*group, "--help")
    assert result.code == 0 and "Example" in result.stdout


COMMANDS = [
    "upload",
    "submit",
    "status",
    "cancel",
    "retry",
    "work",
    "publish",
    "search",
    "eval",
    "reindex",
    "history",
    "doctor",
    "demo",
    "user add",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(invoke, command):
    result = invoke(*command.split(), "--help")
    assert result.code == 0
    assert "Example" in result.stdout and "Usage" in result.stdout


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("upload", "{FILE...}"),
        ("submit", "{DOCUMENT_ID}"),
        ("publish", "[DOCUMENT_ID]"),  # or --all-reviewed
        ("status", "[ID]"),
        ("cancel", "{ID}"),
        ("retry", "[ID]"),
        ("history", "{ID}"),
        ("work", "[TASK_ID]"),
        ("search", "{QUERY}"),
        ("eval", "{QUESTIONS_FILE}"),
        ("user add", "{NAME}"),
    ],
)
def test_usage_lines_name_their_arguments_alike(invoke, command, usage):
    """Upper case, {required} and [optional], as the help's own convention."""
    result = invoke(*command.split(), "--help")
    [line] = [line for line in result.stdout.splitlines() if "Usage:" in line]
    assert line.split()[-1] == usage


def test_roles_are_listed_as_choices(invoke):
    result = invoke("user", "add", "--help")
    words = " ".join(result.stdout.replace("│", " ").split())
    assert "viewer, editor, reviewer, worker, admin" in words
