"""Stdout is the script's, whatever stderr is: every command and subcommand, found by
walking the Typer app, run as a real `kb` process with stdout and stderr each a
pseudo-terminal or a pipe, with and without --json. Records go to stdout only; with
--json stdout holds JSON objects and nothing else; piped, one line per record; live
displays (bars, spinners) only on a stderr that is a terminal, never on stdout.

The commands people watch (sync, work, status, search, events, doctor, reparse) run in
the default group; the full walk is `slow`."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import SAMPLES, run_in_process
from tests.loopback import JsonHandler, serving
from tests.terminal import ANSI, run_with_streams

# What only a live display writes: cursor hidden or shown, moved, a line erased, or a
# line drawn again over itself after a carriage return.
LIVE_DISPLAY = re.compile(r"\x1b\[\?25[lh]|\x1b\[\d*[ABCDEFGHJK]|\r(?!\n)")
CELLS = list(itertools.product((True, False), repeat=2))  # (stdout a tty, stderr a tty)
DEFAULT_GROUP = {"sync", "work", "status", "search", "events", "doctor", "reparse"}
TEXT = "# Invoices\n\nInvoices are kept for seven years. Backups run every night.\n"


@dataclass
class Invocation:
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    interrupt_when: Callable[[str], bool] | None = None
    # A record of these commands takes more than one plain line (a new user's token).
    plain_lines_per_record: int = 1
    # Plain output is a text, not lines of records (`kb diff`'s unified diff): its
    # lines are not counted, the rest is checked.
    plain_is_text: bool = False


def _record(*args: str, token: str | None = None) -> dict:
    result = run_in_process(*args, "--json", env=_env(token))
    assert result.code == 0, result.stderr
    return result.records[0]


def _env(token: str | None) -> dict[str, str] | None:
    return None if token is None else {**os.environ, "KB_TOKEN": token}


def _file(tmp_path: Path, name: str, text: str = TEXT) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _draft(tmp_path: Path, n: int) -> str:
    return _record("upload", _file(tmp_path, f"draft-{n}.md"))["document_id"]


def _queued(tmp_path: Path, n: int) -> dict:
    return _record("upload", _file(tmp_path, f"queued-{n}.md"), "--submit")


def _reviewed(tmp_path: Path, n: int) -> str:
    task = _queued(tmp_path, n)
    assert run_in_process("work", task["task_id"]).code == 0
    return task["document_id"]


def _published(tmp_path: Path, n: int) -> str:
    document_id = _reviewed(tmp_path, n)
    _record("publish", document_id)
    return document_id


def _admin(tmp_path: Path) -> str:
    """The admin's token (made once per test home): the user commands need one."""
    saved = tmp_path / "admin-token"
    if not saved.exists():
        saved.write_text(_record("user", "add", "root", "--role", "admin")["token"])
    return saved.read_text()


def _as_admin(tmp_path: Path, *args: str) -> Invocation:
    return Invocation(list(args), {"KB_TOKEN": _admin(tmp_path)})


def _user(tmp_path: Path, n: int) -> str:
    name = f"user{n}"
    _record("user", "add", name, "--role", "editor", token=_admin(tmp_path))
    return name


def _sync(tmp_path: Path, n: int) -> Invocation:
    source = tmp_path / f"source-{n}"
    for folder in ("policies", "it"):
        (source / folder).mkdir(parents=True)
        _file(source / folder, "README.md", f"# {folder}\n\nWho to ask.\n")
    _file(source, "invoices.md")
    _record("base", "create", f"synced-{n}")
    return Invocation(["sync", str(source), "--base", f"synced-{n}"])


def _several(tmp_path: Path, n: int) -> None:
    """A published, a reviewed and a failed document, once per test home."""
    if n == 0:
        _published(tmp_path, 100)
        _reviewed(tmp_path, 101)
        failed = _record("upload", str(SAMPLES / "damaged.pdf"), "--submit")
        assert run_in_process("work", failed["task_id"]).code == 0


def _relay(tmp_path: Path, n: int) -> Invocation:
    _queued(tmp_path, n)  # one more event to deliver: task.queued
    url = f"http://127.0.0.1:{RECEIVER_PORT[0]}/hook"
    return Invocation(["relay", "--webhook", url], interrupt_when=lambda out: "\n" in out)


class _Accepting(JsonHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_json(200, {})


RECEIVER_PORT: list[int] = []  # the webhook of this test process (receiver fixture)


@pytest.fixture(scope="module")
def receiver():
    with serving(_Accepting) as port:
        RECEIVER_PORT.append(port)
        yield
        RECEIVER_PORT.remove(port)


def _upload(tmp_path: Path, n: int) -> Invocation:
    folder = tmp_path / f"upload-{n}"
    folder.mkdir()
    files = [_file(folder, f"note-{i:02}.md", f"# Note {i}\n\nWords {i}.\n") for i in range(20)]
    return Invocation(["upload", *files, "--submit"])  # 20 files: a bar on a terminal


def _retry(tmp_path: Path, n: int) -> Invocation:
    path = tmp_path / f"broken-{n}.pdf"
    path.write_bytes(b"%PDF-1.4 broken")
    task = _record("upload", str(path), "--submit")
    assert run_in_process("work", task["task_id"]).code == 0
    return Invocation(["retry", task["document_id"]])


def _eval(tmp_path: Path, n: int) -> Invocation:
    _published(tmp_path, n)
    questions = tmp_path / f"questions-{n}.jsonl"
    questions.write_text(
        json.dumps({"question": "How long are invoices kept?", "expected": [f"queued-{n}.md"]})
        + "\n"
    )
    return Invocation(["eval", str(questions)])


# Each command's representative invocation, made for one cell (`n`) in the test's home.
SCENES: dict[str, Callable[[Path, int], Invocation]] = {
    "upload": _upload,
    "submit": lambda tmp, n: Invocation(["submit", _draft(tmp, n)]),
    "status": lambda tmp, n: (_several(tmp, n), Invocation(["status"]))[1],
    "cancel": lambda tmp, n: Invocation(["cancel", _queued(tmp, n)["task_id"]]),
    "retry": _retry,
    "work": lambda tmp, n: (_queued(tmp, n), Invocation(["work", "--worker-id", "A"]))[1],
    "publish": lambda tmp, n: Invocation(["publish", _reviewed(tmp, n)]),
    "reject": lambda tmp, n: Invocation(["reject", _reviewed(tmp, n), "--reason", "wrong year"]),
    "unpublish": lambda tmp, n: Invocation(["unpublish", _published(tmp, n)]),
    "delete": lambda tmp, n: Invocation(["delete", _draft(tmp, n)]),
    "sync": _sync,
    "reparse": lambda tmp, n: (
        _several(tmp, n),
        Invocation(["reparse", "--base", "default", "--dry-run"]),
    )[1],
    "search": lambda tmp, n: (
        _several(tmp, n),
        # A hit piped is its line and its snippet's (console/answers.py).
        Invocation(["search", "How long are invoices kept?"], plain_lines_per_record=2),
    )[1],
    "eval": _eval,
    "reindex": lambda tmp, n: (_several(tmp, n), Invocation(["reindex", "--embeddings"]))[1],
    "doctor": lambda tmp, n: (_several(tmp, n), Invocation(["doctor"]))[1],
    "history": lambda tmp, n: Invocation(["history", _published(tmp, n)]),
    "events": lambda tmp, n: (_several(tmp, n), Invocation(["events"]))[1],
    "relay": _relay,
    # Prints where it listens (one record), then serves until Ctrl-C.
    "serve": lambda tmp, n: Invocation(
        ["serve", "--port", "0"], interrupt_when=lambda out: "\n" in out
    ),
    "demo": lambda tmp, n: Invocation(["demo"]),
    "user add": lambda tmp, n: Invocation(
        ["user", "add", f"new{n}", "--role", "editor"],
        {"KB_TOKEN": _admin(tmp)},
        plain_lines_per_record=2,  # the user, then its token
    ),
    "user list": lambda tmp, n: _as_admin(tmp, "user", "list"),
    "user disable": lambda tmp, n: _as_admin(tmp, "user", "disable", _user(tmp, n)),
    "user enable": lambda tmp, n: _as_admin(tmp, "user", "enable", _user(tmp, n)),
    "user token": lambda tmp, n: Invocation(
        ["user", "token", _user(tmp, n)], {"KB_TOKEN": _admin(tmp)}, plain_lines_per_record=2
    ),
    "user teams": lambda tmp, n: _as_admin(tmp, "user", "teams", _user(tmp, n), "--add", "ops"),
    "base create": lambda tmp, n: Invocation(["base", "create", f"made-{n}"]),
    "base list": lambda tmp, n: Invocation(["base", "list"]),
    "base show": lambda tmp, n: Invocation(["base", "show", "default"]),
    "base grant": lambda tmp, n: _as_admin(tmp, "base", "grant", "default", _user(tmp, n)),
    "base move": lambda tmp, n: (
        _record("base", "create", f"moved-{n}"),
        Invocation(["base", "move", _draft(tmp, n), f"moved-{n}"]),
    )[1],
    "base revoke": lambda tmp, n: _revoke(tmp, n),
    "db upgrade": lambda tmp, n: Invocation(["db", "upgrade"]),
    # The pager stands aside (`cat`): what is checked is which stream gets what.
    "show": lambda tmp, n: Invocation(["show", _reviewed(tmp, n), "--chunks"], {"PAGER": "cat"}),
    "diff": lambda tmp, n: Invocation(
        ["diff", _reviewed(tmp, n)], {"PAGER": "cat"}, plain_is_text=True
    ),
    "export": lambda tmp, n: Invocation(
        ["export", _published(tmp, n), "--output", str(tmp / f"exported-{n}.md")]
    ),
}


def _revoke(tmp_path: Path, n: int) -> Invocation:
    name = _user(tmp_path, n)
    _record("base", "grant", "default", name, token=_admin(tmp_path))
    return _as_admin(tmp_path, "base", "revoke", "default", name)


def _commands() -> list[str]:
    """Every command and subcommand the app registers (groups are not run themselves)."""
    import typer

    from kb_cli.cli import app

    def walk(command, path: tuple[str, ...]):
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            yield " ".join(path)
            return
        for name, sub in subcommands.items():
            yield from walk(sub, (*path, name))

    return list(walk(typer.main.get_command(app), ()))


COMMANDS = _commands()


def test_every_command_has_a_scene():
    assert sorted(SCENES) == sorted(COMMANDS)
    assert set(COMMANDS) >= DEFAULT_GROUP


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(command, marks=() if command in DEFAULT_GROUP else pytest.mark.slow)
        for command in COMMANDS
    ],
)
def test_records_go_to_stdout_only_whatever_stderr_is(tmp_path, receiver, command):
    runs = _run_every_cell(tmp_path, command)
    # Where nothing is a terminal nothing is drawn: the records a script gets.
    expected = len(runs[(False, False, True)][1].stdout.splitlines())
    for (stdout_tty, stderr_tty, as_json), (invocation, run) in runs.items():
        where = _cell_name(command, stdout_tty, stderr_tty, as_json)
        assert run.code == 0, (where, run.stderr)
        if not stderr_tty:
            assert "\x1b" not in run.stderr, where  # no live display, no colour
        assert not LIVE_DISPLAY.search(run.stdout), (where, run.stdout)
        # A record drawn on a terminal is wrapped at its width: read as one line.
        drawn = ANSI.sub("", run.stderr).replace("\n", "")
        lines = run.stdout.splitlines()
        if as_json:
            _assert_json_lines(run.stdout, where)
            assert len(lines) == expected, (where, run.stdout, run.stderr)
            assert '{"' not in drawn, (where, run.stderr)  # no record, no JSON at all
        elif not stdout_tty:  # one plain line per record, not one wrapped
            assert "\x1b" not in run.stdout, where
            per_record = invocation.plain_lines_per_record
            if not invocation.plain_is_text:
                assert len(lines) == per_record * expected, (where, run.stdout, run.stderr)
            leaked = [line for line in lines if line[:60] in drawn]
            assert not leaked, (where, leaked)


def _cell_name(command: str, stdout_tty: bool, stderr_tty: bool, as_json: bool) -> str:
    streams = f"stdout {'tty' if stdout_tty else 'pipe'}, stderr {'tty' if stderr_tty else 'pipe'}"
    return f"kb {command}{' --json' if as_json else ''}: {streams}"


def _run_every_cell(tmp_path: Path, command: str) -> dict:
    runs = {}
    for n, ((stdout_tty, stderr_tty), as_json) in enumerate(
        itertools.product(CELLS, (False, True))
    ):
        invocation = SCENES[command](tmp_path, n)
        args = [*invocation.args, *(["--json"] if as_json else [])]
        runs[(stdout_tty, stderr_tty, as_json)] = (
            invocation,
            run_with_streams(
                *args,
                stdout_tty=stdout_tty,
                stderr_tty=stderr_tty,
                env=invocation.env,
                timeout=120,
                interrupt_when=invocation.interrupt_when,
            ),
        )
    return runs


def _assert_json_lines(stdout: str, where: str) -> None:
    assert "\x1b" not in stdout, where
    assert stdout == "" or stdout.endswith("\n"), where
    for line in stdout.splitlines():
        assert isinstance(json.loads(line), dict), (where, line)


def _json_objects(text: str) -> list[str]:
    found = []
    for line in ANSI.sub("", text).splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(line)
    return found
