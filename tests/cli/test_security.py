"""Security: the authenticated actor on worker events, inputs bounded before SQL, tokens
that are not UTF-8. (The first-admin race and file names on a terminal need real
processes: tests/processes/test_races.py and test_screens.py.)"""

from __future__ import annotations

import getpass
import json
import os
import random

import pytest

from tests.helpers import db_rows, kb_env, run_in_process

LONG_ID = "a" * 60_000


def add_user(name: str, role: str, token: str | None = None) -> str:
    env = kb_env(KB_TOKEN=token) if token else None
    result = run_in_process("user", "add", name, "--role", role, "--json", env=env)
    assert result.code == 0, result.stderr
    return result.record["token"]


def test_a_worker_cannot_choose_its_audit_actor(tmp_path):
    admin = add_user("boss", "admin")
    robot = add_user("robot", "worker", admin)
    path = tmp_path / "a.txt"
    path.write_text("audited words")
    task = run_in_process(
        "upload", str(path), "--submit", "--json", env=kb_env(KB_TOKEN=admin)
    ).record
    worked = run_in_process("work", "--worker-id", "alice", "--json", env=kb_env(KB_TOKEN=robot))
    assert worked.code == 0, worked.stderr
    events = db_rows(
        "SELECT actor, action, detail FROM audit_events WHERE entity_id = :id ORDER BY at",
        id=task["task_id"],
    )
    worker_events = [e for e in events if e["action"] in ("claim", "complete")]
    assert [e["action"] for e in worker_events] == ["claim", "complete"]
    assert {e["actor"] for e in worker_events} == {"robot"}
    assert all(e["detail"].startswith("worker alice") for e in worker_events)
    assert not [e for e in events if e["actor"] == "alice"]


def test_in_open_mode_the_worker_actor_is_the_os_user(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("open mode words")
    task = run_in_process("upload", str(path), "--submit", "--json").record
    assert run_in_process("work", "--worker-id", "alice", "--json").code == 0
    [claim] = db_rows(
        "SELECT actor, detail FROM audit_events WHERE entity_id = :id AND action = 'claim'",
        id=task["task_id"],
    )
    assert claim["actor"] == getpass.getuser() and claim["detail"] == "worker alice"


@pytest.mark.parametrize("command", ["status", "history", "cancel", "publish"])
def test_an_overlong_id_is_not_found_and_the_refusal_is_audited(command):
    assert run_in_process("db", "upgrade").code == 0  # read-only commands create no database
    result = run_in_process(command, LONG_ID, "--json")
    assert result.code == 3 and result.error["error"] == "not_found", result.stderr
    assert "60000 characters" in result.error["message"]
    refused = db_rows("SELECT entity_id, detail FROM audit_events WHERE action = 'refused'")
    assert len(refused) == 1 and refused[0]["entity_id"] == LONG_ID[:100]


def test_control_characters_in_file_names_are_escaped_in_piped_output(tmp_path):
    """DEL and the C1 controls are escaped as newline and ESC are, in plain lines and
    JSON alike; JSON readers get the name back as it was."""
    name = "a\x7fb \x9b31m \x1b[31m\nforged.txt"
    (tmp_path / name).write_text("control words")
    uploaded = run_in_process("upload", str(tmp_path / name), "--submit")
    assert uploaded.code == 0, uploaded.stderr
    document_id = run_in_process("status", "--json").record["document_id"]
    outputs = [
        uploaded,
        run_in_process("work"),
        run_in_process("status"),
        run_in_process("status", document_id),
        run_in_process("status", "--json"),
        run_in_process("history", document_id),
        run_in_process("events"),
        run_in_process("events", "--json"),
    ]
    for result in outputs:
        assert result.code == 0, result.stderr
        shown = result.stdout + result.stderr
        assert not {"\x7f", "\x9b", "\x1b"} & set(shown), shown
    assert '"a\\u007fb \\u009b31m \\u001b[31m\\nforged.txt"' in outputs[2].stdout
    assert json.loads(outputs[4].stdout)["filename"] == name


# What reorders or hides what a terminal shows: the right-to-left and left-to-right
# overrides and embeddings, the isolates, the marks, a zero-width space, and a format
# character past U+FFFF (a tag: its JSON escape is a surrogate pair).
HIDDEN = "\u202e\u202a\u2066\u2069\u200e\u200f\u061c\u200b\U000e0041"


def test_bidirectional_and_invisible_characters_in_names_are_escaped_in_piped_output(tmp_path):
    """A right-to-left override in a file name ("invoice" RLO "gpj.md" reads
    "invoicedm.jpg") is escaped as a control character is, in plain lines, messages and
    JSON; JSON readers get the name back as it was."""
    name = f"invoice{HIDDEN}gpj.md"
    (tmp_path / name).write_text("invoice words")
    uploaded = run_in_process("upload", str(tmp_path / name), "--submit")
    document_id = run_in_process("status", "--json").record["document_id"]
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"question": f"invoice {HIDDEN}", "expected": [name]}))
    unsupported = tmp_path / f"bad{HIDDEN}.exe"
    unsupported.write_text("not a document")
    outputs = [
        uploaded,
        run_in_process("work"),
        run_in_process("publish", document_id),
        run_in_process("status"),
        run_in_process("status", document_id),
        run_in_process("status", "--json"),
        run_in_process("history", document_id),
        run_in_process("events"),
        run_in_process("events", "--json"),
        run_in_process("search", "invoice"),
        run_in_process("search", "invoice", "--json"),
        run_in_process("eval", str(questions)),
        run_in_process("eval", str(questions), "--json"),
    ]
    for result in outputs:
        assert result.code == 0, result.stderr
    refused = [run_in_process("upload", str(unsupported)), run_in_process("status", name)]
    assert [result.code for result in refused] == [6, 3]
    for result in [*outputs, *refused]:
        shown = result.stdout + result.stderr
        assert not set(HIDDEN) & set(shown), shown
    assert 'file="invoice\\u202e\\u202a' in outputs[3].stdout
    assert "bad\\u202e" in refused[0].stderr
    assert json.loads(outputs[5].stdout)["filename"] == name
    assert outputs[10].records[0]["filename"] == name
    assert outputs[12].records[0]["question"] == f"invoice {HIDDEN}"
    assert "\\udb40\\udc41" in outputs[5].stdout  # U+E0041 as JSON writes it


def test_a_token_that_is_not_utf8_is_forbidden():
    add_user("boss", "admin")
    token = os.fsdecode(b"kb_\xff\xfe_\xc3")
    result = run_in_process("status", "--json", env=kb_env(KB_TOKEN=token))
    assert result.code == 5 and result.error["error"] == "forbidden", result.stderr


def test_a_thousand_term_chinese_query_is_answered(tmp_path):
    rng = random.Random(7)
    text = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(3000))
    (tmp_path / "zh.txt").write_text(text)
    task = run_in_process("upload", str(tmp_path / "zh.txt"), "--submit", "--json").record
    env = kb_env(KB_EMBEDDINGS="none")
    assert run_in_process("work", "--json", env=env).code == 0
    assert run_in_process("publish", task["document_id"], "--json", env=env).code == 0
    # Words of 2 to 4 random characters: jieba cuts most of them into lone characters,
    # which do not rank, and still leaves more than the 200 ranking words allowed.
    query = " ".join(
        "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(rng.randint(2, 4)))
        for _ in range(2200)
    )
    result = run_in_process("search", query, "--json", "--mode", "lexical", env=env)
    assert result.code == 0, result.stderr
    assert "ranked by the first" in result.stderr


def test_an_overlong_query_or_worker_id_is_a_usage_error():
    assert run_in_process("db", "upgrade").code == 0  # read-only commands create no database
    assert run_in_process("search", "word " * 3000, "--json").code == 2
    assert run_in_process("work", "--worker-id", "w" * 500, "--json").code == 2
