"""What a person reads at 80 columns without a terminal's live display: help texts,
warnings, and global options typed after the command."""

from __future__ import annotations

import itertools
import re

import pytest
from rich.cells import cell_len

from tests.helpers import file_store_only, kb_env, run_in_process

HELP_COLUMNS = 80
BOX = re.compile(r"[│╭╮╰╯─]")


def _every_command() -> list[list[str]]:
    from kb_cli.cli import app, commandline

    root = commandline.build(app)
    paths: list[list[str]] = [[]]
    for name, command in root.commands.items():
        paths.append([name])
        paths += [[name, sub] for sub in getattr(command, "commands", {})]
    return paths


def _help_words(path: list[str]) -> list[str]:
    """The words of a command's description and its options' help."""
    from kb_cli.cli import app, commandline

    command = commandline.build(app)
    for name in path:
        command = command.commands[name]
    texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
    return [word for text in texts for word in text.split()]


@pytest.mark.parametrize("path", _every_command(), ids=lambda path: " ".join(path) or "kb")
def test_every_help_fits_80_columns_without_a_broken_word_or_a_stray_break(path):
    result = run_in_process(*path, "--help", env=kb_env(COLUMNS=str(HELP_COLUMNS)))
    assert result.code == 0
    lines = result.stdout.splitlines()
    assert all(cell_len(line) <= HELP_COLUMNS for line in lines), result.stdout
    tokens = {token for line in lines for token in BOX.sub(" ", line).split()}
    broken = [word for word in _help_words(path) if word not in tokens]
    assert not broken, result.stdout  # a word wrapped in two is in no line whole
    description = [line.strip() for line in lines[: _first_box(lines)]]
    for line, following in itertools.pairwise(description):
        if line and following:  # inside a paragraph the next word did not fit here
            assert len(line) + 1 + len(following.split()[0]) > HELP_COLUMNS - 2, (line, following)


def _first_box(lines: list[str]) -> int:
    return next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))


@file_store_only("looks for the file in the other home's object directory")
def test_global_options_after_the_command_are_the_same_as_before_it(tmp_path):
    other = tmp_path / "other"
    database = f"sqlite:///{other / 'kb.sqlite3'}"
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nwords\n")
    args = ("--home", str(other), "--database-url", database)
    uploaded = run_in_process("upload", str(note), *args, "--json")
    assert uploaded.code == 0, uploaded.stderr
    assert list((other / "objects").rglob("*")), "the file went to the other home's store"
    after = run_in_process("status", *args, "--json")
    before = run_in_process(*args, "status", "--json")
    assert after.records == before.records and len(after.records) == 1
    assert run_in_process("status", "--json").records == []  # the usual home has none


def test_an_unknown_option_says_where_global_options_go():
    result = run_in_process("status", "--hme", "x", "--json")
    assert result.code == 2 and result.error["error"] == "usage"
    message = result.error["message"]
    assert "--hme" in message and "--home" in message and "before or after the command" in message


@pytest.mark.empty_database  # the first upload says it created the knowledge base
def test_the_same_file_twice_warns_and_stores_both(tmp_path):
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nwords\n")
    result = run_in_process("upload", str(note), str(note), "--json")
    assert result.code == 0
    first, second = result.records  # stdout: only the records
    warning, created = result.stderr.splitlines()
    assert created.startswith("kb: created a new knowledge base in ")
    assert warning.startswith("kb: warning: note.md has the same content as note.md")
    assert "in this upload" in warning and second["document_id"][:8] in warning
    assert first["sha256"] == second["sha256"]


def test_content_already_in_the_base_warns_with_the_document_it_repeats(tmp_path):
    note, copy = tmp_path / "note.md", tmp_path / "copy of note.md"
    note.write_text("# Note\n\nwords\n")
    copy.write_text("# Note\n\nwords\n")
    earlier = run_in_process("upload", str(note), "--json").record
    result = run_in_process("upload", str(copy), "--submit", "--json")
    assert result.code == 0 and result.record["status"] == "queued"
    [warning] = result.stderr.splitlines()
    assert "copy of note.md has the same content as note.md" in warning
    assert earlier["document_id"][:8] in warning and "already in this base" in warning


def test_the_same_content_in_another_base_is_no_duplicate(tmp_path):
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nwords\n")
    assert run_in_process("base", "create", "other").code == 0
    assert run_in_process("upload", str(note), "--json").code == 0
    result = run_in_process("upload", str(note), "--base", "other", "--json")
    assert result.code == 0 and result.stderr == ""


def test_an_unsupported_file_still_stores_nothing_even_beside_a_duplicate(tmp_path):
    note, bad = tmp_path / "note.md", tmp_path / "tool.exe"
    note.write_text("words")
    bad.write_bytes(b"MZ")
    result = run_in_process("upload", str(note), str(note), str(bad), "--json")
    assert result.code == 6 and result.error["error"] == "invalid_input"
    assert "warning" not in result.stderr
    assert run_in_process("status", "--json").records == []


def test_plain_task_lines_name_the_file_last(tmp_path):
    note = tmp_path / "note.md"
    note.write_text("words")
    result = run_in_process("upload", str(note), "--submit")
    assert result.code == 0
    [line] = result.stdout.splitlines()
    assert line.startswith("task ") and line.endswith(' file="note.md"')
