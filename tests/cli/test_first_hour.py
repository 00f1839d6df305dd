"""What a new user meets in the first hour: `status --wait` exit codes, messages that say
what to do next, read-only commands that create nothing, help that shows the way."""

from __future__ import annotations

import pytest

from kb_cli.console import waiting
from tests.helpers import ON_POSTGRES, file_store_only


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
    result = invoke("status", task["task_id"], "--wait", "--timeout", "0.6")  # past 0.3 s
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


# --- only the commands that put something in a home create one -------------------------


NO_HOME_COMMANDS = [
    ("status",),
    ("status", "--json"),
    ("search", "anything"),
    ("status", "00000000-0000"),
    ("history", "00000000-0000"),
    ("doctor",),
    ("eval", "questions.jsonl"),
    ("work", "--drain"),
    ("work", "--loop"),
    ("base", "list"),
    ("user", "list"),
    ("events",),
    ("publish", "--all-reviewed"),
    ("retry", "--all-failed"),
    ("cancel", "00000000-0000"),
    ("delete", "--status", "failed", "--dry-run"),
]


@pytest.mark.skipif(ON_POSTGRES, reason="about a SQLite home that does not exist")
@pytest.mark.parametrize("args", NO_HOME_COMMANDS, ids=" ".join)
def test_commands_that_store_nothing_refuse_a_missing_home_and_create_none(invoke, tmp_path, args):
    (tmp_path / "questions.jsonl").write_text('{"question": "q", "expected": ["a.md"]}\n')
    home = tmp_path / "never-created"
    result = invoke("--home", str(home), *args)
    assert result.code == 2, result.stderr
    assert not home.exists()
    assert result.stdout == ""
    message = result.error["message"] if "--json" in args else result.stderr
    assert f"no knowledge base in {home}" in message
    assert "--home DIR or KB_HOME" in message and "kb upload FILE" in message


@pytest.mark.empty_database
@pytest.mark.parametrize("args", [("work", "--drain"), ("status",)], ids=" ".join)
def test_an_empty_database_is_refused_on_either_engine(invoke, args):
    """On PostgreSQL there is no home: a database without kb's tables is the same case."""
    result = invoke(*args)
    assert result.code == 2 and "no knowledge base in" in result.stderr
    assert (" database " in result.stderr) == ON_POSTGRES


@pytest.mark.skipif(ON_POSTGRES, reason="about a SQLite home that does not exist")
def test_an_upload_creates_the_home_and_says_so_once(invoke, tmp_path, monkeypatch):
    (tmp_path / "a.md").write_text("# A\n\nwords\n")
    (tmp_path / "b.md").write_text("# B\n\nother words\n")
    monkeypatch.delenv("KB_HOME")
    first = invoke("upload", "a.md")
    assert first.code == 0, first.stderr
    assert "created a new knowledge base in ./.kb" in first.stderr
    assert (tmp_path / ".kb" / "kb.sqlite3").exists()
    again = invoke("upload", "b.md")
    assert again.code == 0 and "created" not in again.stderr


@pytest.mark.skipif(ON_POSTGRES, reason="about a SQLite home that does not exist")
def test_a_home_under_a_missing_directory_is_a_usage_error_and_creates_nothing(invoke, tmp_path):
    """docs/operations.md: a missing directory is exit 2; a typo in --home must not
    build a tree of directories."""
    (tmp_path / "f.md").write_text("# F\n\nwords\n")
    home = tmp_path / "nonexistent" / "dir" / "x"
    result = invoke("--home", str(home), "upload", "f.md")
    assert result.code == 2 and "its parent directory does not exist" in result.stderr
    assert not (tmp_path / "nonexistent").exists()


@file_store_only("points a worker at another directory")
def test_a_worker_on_another_object_store_is_refused_before_it_claims(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "# A\n\nwords\n", "--submit")
    other = tmp_path / "other-objects"
    result = invoke("--object-store", str(other), "work", "--drain")
    assert result.code == 2, result.stderr
    assert f"the object store {other} is not this knowledge base's" in result.stderr
    assert "(its objects are in " in result.stderr and "OBJECT_STORE_ROOT" in result.stderr
    still = invoke("status", task["task_id"], "--json").record
    assert (still["status"], still["attempt"]) == ("queued", 0)  # no attempt burnt
    assert invoke("work", "--drain").code == 0  # the right store works


# --- help --------------------------------------------------------------------------------


def _commands_and_groups() -> list[tuple[str, ...]]:
    """Every command and group the app registers, at any depth (kb itself first), as
    the words that name it: a new command is checked here without being listed."""
    import typer

    from kb_cli.cli import app

    def walk(command, path: tuple[str, ...]):
        yield path
        for name, sub in getattr(command, "commands", {}).items():  # a group's
            yield from walk(sub, (*path, name))

    return list(walk(typer.main.get_command(app), ()))


COMMANDS_AND_GROUPS = _commands_and_groups()


def test_the_walk_reaches_every_level():
    names = {" ".join(path) for path in COMMANDS_AND_GROUPS}
    assert {"", "upload", "work", "sync", "user", "user add", "base grant", "db upgrade"} <= names
    assert len(names) == len(COMMANDS_AND_GROUPS) > 30


@pytest.mark.empty_database  # no home: help must not make one
@pytest.mark.parametrize("path", COMMANDS_AND_GROUPS, ids=lambda path: " ".join(path) or "kb")
def test_every_command_and_group_has_help_with_an_example_and_touches_no_database(
    invoke, kb_home, tmp_path, path
):
    result = invoke(*path, "--help")
    assert result.code == 0, result.stderr
    assert "Usage" in result.stdout and "Example" in result.stdout
    words = " ".join(result.stdout.replace("│", " ").split())
    example = words[words.index("Example") :]
    assert f"kb {' '.join(path)}".strip() in example, example  # an example of this command
    assert not kb_home.exists() and not (tmp_path / ".kb").exists()


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


# --- hints that go all the way ------------------------------------------------------------


def test_uploading_a_folder_again_with_skip_existing_stores_only_what_is_new(invoke, tmp_path):
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text(f"# {name}\n\nwords of {name}\n")
    assert invoke("upload", "a.md", "b.md").code == 0
    (tmp_path / "c.md").write_text("# c\n\nnew words\n")
    again = invoke("upload", "--skip-existing", "a.md", "b.md", "c.md", "--json")
    assert again.code == 0, again.stderr
    assert [record["filename"] for record in again.records] == ["c.md"]
    assert "skipped a.md: same content as a.md" in again.stderr
    assert len(invoke("status", "--json").records) == 3


def test_a_worker_with_nothing_to_claim_gives_the_submit_command_for_drafts(invoke, tmp_path):
    draft = upload(invoke, tmp_path)
    result = invoke("work", "--drain")
    assert result.code == 0
    assert f"1 draft waits to be submitted: kb submit {draft['document_id'][:8]}" in result.stderr


def test_waiting_on_a_draft_gives_the_submit_command(invoke, tmp_path):
    draft = upload(invoke, tmp_path)
    result = invoke("status", draft["document_id"], "--wait")
    assert result.code == 4 and f"kb submit {draft['document_id']}" in result.stderr


def test_nothing_to_retry_is_said_like_nothing_to_publish(invoke, tmp_path):
    upload(invoke, tmp_path)
    retried = invoke("retry", "--all-failed")
    assert retried.code == 0 and "nothing to retry: no failed task you may retry" in retried.stderr
    published = invoke("publish", "--all-reviewed")
    assert published.code == 0 and "nothing to publish" in published.stderr


def test_an_option_cut_short_suggests_the_whole_one(invoke):
    result = invoke("publish", "--all")
    assert result.code == 2 and "did you mean --all-reviewed?" in result.stderr


def test_cancelling_an_ended_task_says_it_in_plain_words(invoke, tmp_path):
    task = upload(invoke, tmp_path, "a.md", "# A\n\nwords\n", "--submit")
    assert invoke("work").code == 0
    result = invoke("cancel", task["task_id"])
    assert result.code == 4 and "it already succeeded" in result.stderr
    assert "it is succeeded" not in result.stderr


@file_store_only("removes an object file")
def test_doctor_problems_name_the_file_and_the_next_step(invoke, tmp_path, kb_home):
    draft = upload(invoke, tmp_path, "lost.md")
    for path in (kb_home / "objects").rglob("*"):
        if path.is_file():
            path.unlink()
    result = invoke("doctor")
    assert result.code == 4
    [line] = [line for line in result.stdout.splitlines() if "missing_object" in line]
    assert "(lost.md)" in line
    assert f"kb upload FILE --replace {draft['document_id'][:8]}" in line
