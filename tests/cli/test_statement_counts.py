"""What SQL a command costs: an id prefix is looked up once (by the guard), and an
upload reads back nothing it wrote. Counted with SQLite's trace (benchmarks/statements.py
prints the full counts)."""

from __future__ import annotations

import pytest

from tests.helpers import sql_traced, sqlite_only

pytestmark = sqlite_only


@pytest.fixture
def reviewed(invoke, tmp_path) -> str:
    """A document waiting for review: its id."""
    path = tmp_path / "first.txt"
    path.write_text("alpha beta gamma\n", encoding="utf-8")
    document_id = invoke("upload", str(path), "--submit", "--json").record["document_id"]
    assert invoke("work", "--json").code == 0
    return document_id


def test_publish_by_prefix_looks_the_prefix_up_once(invoke, reviewed):
    with sql_traced() as trace:
        result = invoke("publish", reviewed[:8], "--json")
    assert result.code == 0 and result.record["document_id"] == reviewed, result.stderr
    assert trace.prefix_lookups == 1


def test_publish_by_prefix_with_a_token_looks_the_prefix_up_once(invoke, reviewed):
    token = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    with sql_traced() as trace:
        result = invoke("publish", reviewed[:8], "--json", token=token)
    assert result.code == 0 and result.record["status"] == "published", result.stderr
    assert trace.prefix_lookups == 1


def test_upload_and_submit_writes_once_and_reads_nothing_back(invoke, reviewed, tmp_path):
    path = tmp_path / "second.txt"
    path.write_text("alpha beta gamma\n", encoding="utf-8")  # the content of the first
    with sql_traced() as trace:
        result = invoke("upload", str(path), "--submit")
    assert result.code == 0, result.stderr
    assert "second.txt" in result.stdout  # the task's line names its file
    assert "same content as first.txt" in result.stderr
    # The schema check, the guard, the look for objects a killed command left (a read),
    # the object's pending record (committed before it is written: no orphan after a
    # kill -9), and the one write that also finds the duplicate.
    assert trace.transactions == 5


def test_a_missing_id_is_looked_up_once_in_the_guard(invoke):
    token = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    with sql_traced() as trace:
        result = invoke("publish", "ffffffff", "--json", token=token)
    assert result.code == 3 and result.error["error"] == "not_found", result.stderr
    assert trace.prefix_lookups == 2  # as a document, then as a task for the hint
    assert trace.transactions == 2  # no write began


def test_a_refusal_is_recorded_briefly_on_the_command_s_own_connection(invoke, reviewed):
    """The refusal waits at most 0.1 s for a lock (so a hidden id answers as fast as a
    missing one) without opening a second connection; the busy timeout comes back."""
    admin = invoke("user", "add", "root", "--role", "admin", "--json").record["token"]
    viewer = invoke("user", "add", "val", "--role", "viewer", "--json", token=admin)
    with sql_traced() as trace:
        result = invoke("publish", reviewed[:8], "--json", token=viewer.record["token"])
    assert result.code == 5 and result.error["error"] == "forbidden", result.stderr
    assert sum("journal_mode" in statement for statement in trace.statements) == 1
    waits = [s for s in trace.statements if s.startswith("PRAGMA busy_timeout")]
    assert waits[1:] == ["PRAGMA busy_timeout = 100", waits[0]]
    assert any(s.startswith("INSERT INTO audit_events") for s in trace.statements)


def test_a_drain_of_tiny_tasks_costs_about_one_transaction_each(invoke, tmp_path):
    """Tiny tasks are claimed several per transaction, and a quick parse is not kept
    when its attempt succeeds: a task's own transaction is its completion."""
    paths = []
    for i in range(40):
        path = tmp_path / f"tiny-{i}.txt"
        path.write_text(f"Tiny note {i} about invoices.\n", encoding="utf-8")
        paths.append(str(path))
    assert invoke("upload", *paths, "--submit").code == 0
    with sql_traced() as trace:
        result = invoke("work", "--drain", "--json")
    assert result.code == 0 and len(result.stdout.splitlines()) == 41  # and the last look
    claims = sum(
        s.startswith("UPDATE ingestion_tasks SET status = 'running'") for s in trace.statements
    )
    assert claims == 40
    assert trace.transactions <= 40 + 40 / 8 + 5  # completions, claims (a few), start
    assert not any("INSERT INTO parse_artefacts" in s for s in trace.statements)
