"""A base named by mistake makes nothing: no home, no database, no base, no stored
object; the refusal says how a base is made (`kb base create NAME`) and, where the
caller may read a base of a near name, suggests it, never one the caller may not read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import check_error, object_keys

CREATE_HINT = "kb base create team"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAbout invoices.\n")
    return folder


@pytest.mark.empty_database
@pytest.mark.parametrize("command", ["sync", "upload", "upload --submit"])
def test_a_command_that_would_make_the_home_names_a_missing_base_and_makes_nothing(
    invoke, kb_home, tmp_path, command
):
    folder = _folder(tmp_path)
    verb, *options = command.split()
    source = folder if verb == "sync" else folder / "a.md"
    refused = invoke(verb, str(source), *options, "--base", "team", "--json")
    error = check_error(refused, 3, "not_found")
    assert "no knowledge base named 'team'" in error["message"]
    assert CREATE_HINT in error["message"]
    assert not kb_home.exists()  # no home, no database file, no objects
    # No tables either (on PostgreSQL the database is the server's): still no knowledge
    # base, and the default base's upload still makes it.
    check_error(invoke("status", "--json"), 2, "usage")
    assert invoke("upload", str(folder / "a.md"), "--json").code == 0


@pytest.mark.empty_database
def test_a_command_that_stores_nothing_names_the_base_to_make_where_there_is_none(invoke, kb_home):
    refused = invoke("search", "invoices", "--base", "team", "--json")
    error = check_error(refused, 2, "usage")  # no knowledge base at all: as without --base
    assert f"`{CREATE_HINT}` creates a new one with that base" in error["message"]
    assert not kb_home.exists()


@pytest.mark.empty_database
def test_a_near_name_of_the_default_base_is_suggested_where_there_is_none(
    invoke, kb_home, tmp_path
):
    refused = invoke("upload", str(_folder(tmp_path) / "a.md"), "--base", "defualt", "--json")
    error = check_error(refused, 3, "not_found")
    assert "did you mean default?" in error["message"]
    assert not kb_home.exists()


COMMANDS = (
    "upload",
    "sync",
    "search",
    "eval",
    "status",
    "events",
    "work",
    "publish",
    "reject",
    "unpublish",
    "delete",
    "reparse",
)


def _commands(folder: Path, questions: Path) -> dict[str, list[str]]:
    """Every command that takes --base, each naming `teams` where `team` exists."""
    return {
        "upload": ["upload", str(folder / "a.md")],
        "sync": ["sync", str(folder)],
        "search": ["search", "invoices"],
        "eval": ["eval", str(questions)],
        "status": ["status"],
        "events": ["events"],
        "work": ["work"],
        "publish": ["publish", "--all-reviewed"],
        "reject": ["reject", "ffffffff", "--reason", "no"],
        "unpublish": ["unpublish", "ffffffff"],
        "delete": ["delete"],
        "reparse": ["reparse"],
    }


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_with_a_base_suggests_a_near_name(invoke, tmp_path, command):
    assert invoke("base", "create", "team", "--json").code == 0
    questions = tmp_path / "questions.jsonl"
    questions.write_text('{"question": "invoices?", "expected": ["a.md"]}\n')
    keys = object_keys()
    args = _commands(_folder(tmp_path), questions)[command]
    error = check_error(invoke(*args, "--base", "teams", "--json"), 3, "not_found")
    assert error["message"].startswith("no knowledge base named 'teams'; did you mean team?")
    assert "kb base create teams" in error["message"]
    assert object_keys() == keys  # an upload or a sync stored nothing


def test_a_base_the_caller_may_not_read_is_never_suggested(invoke):
    admin = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    viewer = invoke(
        "user", "add", "fiona", "--role", "viewer", "--team", "finance", "--json", token=admin
    ).record["token"]
    assert invoke("base", "create", "sales", "--team", "sales", "--json", token=admin).code == 0
    assert invoke("base", "create", "finance", "--team", "finance", "--json", token=admin).code == 0

    def message(base: str, token: str) -> str:
        refused = invoke("search", "pricing", "--base", base, "--json", token=token)
        return check_error(refused, 3, "not_found")["message"]

    assert "did you mean sales?" in message("sale", admin)  # an admin reads every base
    hidden = message("sale", viewer)
    assert "sales" not in hidden and "kb base create sale" in hidden
    assert "did you mean finance?" in message("finanse", viewer)  # one of her own
    # The base she may not read is refused as one that does not exist, word for word.
    assert message("sales", viewer) == message("sales-nowhere", viewer).replace(
        "sales-nowhere", "sales"
    )
