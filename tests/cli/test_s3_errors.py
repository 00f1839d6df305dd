"""An S3 object store that is misconfigured or down, as a user meets it: a command exits
with the contract's code and one line that names what to fix and changes nothing; a
worker's task waits and retries when the store may come back, and fails for good when
only a person can fix it; no credential ever shows."""

from __future__ import annotations

import json

import pytest

from tests.helpers import check_error, db_rows, run_in_process
from tests.loopback import create_bucket, s3_store_env

SECRET = "kb-TOP-SECRET-never-shown-0123456789"
KEY_ID = "AKIAKBTESTNEVERSHOWN"


@pytest.fixture
def env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = s3_store_env(s3_endpoint)
    values.update(AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


@pytest.fixture
def keys_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the loopback server checks keys, and knows none: every key is wrong."""
    from moto import settings

    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)


def note(tmp_path, text: str = "words about herons") -> str:
    path = tmp_path / "note.txt"
    path.write_text(text)
    return str(path)


def everything_shown(*results) -> str:
    """Every output, audit event and task row: where a credential must never appear."""
    shown = [result.stdout + result.stderr for result in results]
    shown += [json.dumps(row, default=str) for row in db_rows("SELECT * FROM audit_events")]
    shown += [json.dumps(row, default=str) for row in db_rows("SELECT * FROM ingestion_tasks")]
    return "\n".join(shown)


def assert_nothing_changed() -> None:
    assert db_rows("SELECT id FROM documents") == []
    assert db_rows("SELECT id FROM ingestion_tasks") == []


def test_a_missing_bucket_changes_nothing_and_is_named(tmp_path, env, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_ROOT", "s3://no-such-bucket/kb")
    result = run_in_process("upload", note(tmp_path), "--submit", "--json")
    error = check_error(result, 2, "usage")
    assert "'no-such-bucket' does not exist" in error["message"]
    assert "OBJECT_STORE_ROOT" in error["message"]
    assert_nothing_changed()
    assert SECRET not in everything_shown(result)


def test_wrong_keys_refuse_an_upload_and_fail_a_task_for_good(tmp_path, env, request):
    task = run_in_process("upload", note(tmp_path), "--submit", "--json").record
    request.getfixturevalue("keys_checked")
    refused = run_in_process("upload", note(tmp_path, "more"), "--json")
    error = check_error(refused, 2, "usage")
    assert "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY" in error["message"]
    assert len(db_rows("SELECT id FROM documents")) == 1
    worked = run_in_process("work", "--json")
    failed = worked.record["task"]
    assert (failed["task_id"], failed["status"]) == (task["task_id"], "failed")
    assert failed["error_code"] == "internal_error"  # not retried: only a person can fix it
    assert "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY" in failed["error_detail"]
    shown = everything_shown(refused, worked)
    assert SECRET not in shown and KEY_ID not in shown


def test_an_endpoint_that_is_down_is_transient(tmp_path, env, monkeypatch):
    task = run_in_process("upload", note(tmp_path), "--submit", "--json").record
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens
    refused = run_in_process("upload", note(tmp_path, "more"), "--json")
    error = check_error(refused, 1, "internal_error")
    assert "check AWS_ENDPOINT_URL" in error["message"] and "run again" in error["message"]
    assert error["message"].startswith("cannot write to the object store")
    worked = run_in_process("work", "--json")
    waiting = worked.record["task"]
    assert waiting["task_id"] == task["task_id"]
    assert (waiting["status"], waiting["error_code"]) == ("retry_wait", "object_read_error")
    assert "127.0.0.1" not in waiting["error_detail"]  # no endpoint address either
    shown = everything_shown(refused, worked)
    assert SECRET not in shown and KEY_ID not in shown


def test_a_status_never_opens_the_store(tmp_path, env, monkeypatch):
    assert run_in_process("db", "upgrade", "--json").code == 0  # a knowledge base, no objects
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert run_in_process("status", "--json").code == 0


def test_the_bucket_can_be_created_after_a_refusal(tmp_path, env, s3_endpoint, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_ROOT", "s3://kb-late-bucket/kb")
    check_error(run_in_process("upload", note(tmp_path), "--json"), 2, "usage")
    create_bucket(s3_endpoint, "kb-late-bucket")
    assert run_in_process("upload", note(tmp_path), "--json").code == 0
