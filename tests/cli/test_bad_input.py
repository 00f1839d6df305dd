"""Bad input and bad configuration: a clear message, the right exit code, no traceback."""

from __future__ import annotations

import os

import pytest

from tests.helpers import (
    ON_POSTGRES,
    POSTGRES_ADMIN_URL,
    kb_env,
    remove_objects,
    run_in_process,
    sqlite_only,
)


def no_traceback(result) -> None:
    assert "Traceback" not in result.stderr and "sqlalchemy" not in result.stderr.lower()


@pytest.mark.parametrize(
    ("env", "args"),
    [
        ({}, ["--database-url", "garbage", "status"]),
        ({}, ["--database-url", "mysql://x/y", "status"]),
        ({"KB_BUSY_TIMEOUT": "inf"}, ["status"]),
        ({"KB_BUSY_TIMEOUT": "nan"}, ["status"]),
        ({"KB_BUSY_TIMEOUT": "abc"}, ["status"]),
        ({"KB_MAX_UPLOAD_BYTES": "-1"}, ["status"]),
    ],
)
def test_bad_configuration_is_a_usage_error(env, args):
    result = run_in_process(*args, "--json", env=kb_env(**env))
    assert result.code == 2, result.stderr
    assert result.error["error"] == "usage"
    no_traceback(result)


# Every float option of every command: `nan` passes a range check (every comparison
# with it is false), and `inf` or 1e308 seconds make a wait that never ends or fails
# later. Each is refused before anything starts: no home is created.
FLOAT_OPTIONS = [
    ("relay", "--webhook", "http://127.0.0.1:9/", "--timeout"),
    ("status", "abcdef", "--wait", "--timeout"),
    ("work", "--stage-delay"),
    ("work", "--lease-seconds"),
    ("work", "--backoff-seconds"),
    ("work", "--loop", "--poll-seconds"),
    ("eval", "questions.jsonl", "--min-hit-rate"),
]


@pytest.mark.empty_database  # no home: the refusal must not make one
@pytest.mark.parametrize("value", ["nan", "inf", "1e308"])
@pytest.mark.parametrize("option", FLOAT_OPTIONS, ids=lambda option: option[-1])
def test_a_float_option_that_is_not_a_usable_number_is_a_usage_error(kb_home, option, value):
    result = run_in_process(*option, value, "--json", env=kb_env())
    assert result.code == 2, (result.stdout, result.stderr)
    assert result.error["error"] == "usage" and option[-1] in result.error["message"]
    no_traceback(result)
    assert not kb_home.exists()


@pytest.mark.empty_database  # no home: the refusal must not make one
@pytest.mark.parametrize("variable", ["KB_POLL_SECONDS", "KB_BACKOFF_SECONDS"])
def test_a_float_variable_of_an_option_is_checked_the_same_way(kb_home, variable):
    result = run_in_process("work", "--json", env=kb_env(**{variable: "nan"}))
    assert result.code == 2 and variable in result.error["message"]
    assert not kb_home.exists()


@sqlite_only
def test_a_database_in_a_missing_directory_is_a_usage_error(tmp_path):
    url = f"sqlite:///{tmp_path / 'missing' / 'kb.sqlite3'}"
    result = run_in_process("--database-url", url, "status", "--json")
    assert result.code == 2 and result.error["error"] == "usage"
    no_traceback(result)


@sqlite_only
def test_a_home_that_is_a_file_is_a_usage_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    result = run_in_process("--home", str(tmp_path / "afile"), "status")
    assert result.code == 2 and "not a directory" in result.stderr
    no_traceback(result)


def test_missing_object_detail_has_no_path_even_with_a_relative_home(tmp_path):
    env = kb_env()
    env.pop("KB_HOME")  # the default ./.kb, a relative path
    path = tmp_path / "a.txt"
    path.write_text("words")
    run_in_process("upload", str(path), "--submit", env=env)
    remove_objects(env.get("OBJECT_STORE_ROOT") or str(tmp_path / ".kb" / "objects"))
    task = run_in_process("work", "--json", "--max-attempts", "1", env=env).record["task"]
    assert task["error_code"] == "object_read_error"
    assert "/" not in task["error_detail"] and ".kb" not in task["error_detail"]


def test_a_directory_is_not_a_file(tmp_path):
    (tmp_path / "folder.txt").mkdir()
    result = run_in_process("upload", str(tmp_path / "folder.txt"), "--json")
    assert result.code == 2 and "not a regular file" in result.error["message"]
    assert f"kb upload {tmp_path / 'folder.txt'}/*" in result.error["message"]


def test_a_filename_that_is_not_utf8_is_stored_readably(tmp_path):
    name = os.fsdecode(b"bad\xffname.txt")
    (tmp_path / name).write_text("some text")
    result = run_in_process("upload", str(tmp_path / name), "--json")
    assert result.code == 0, result.stderr
    assert result.record["filename"] == "bad\ufffdname.txt"


def test_utf16_text_with_a_bom_is_parsed(tmp_path):
    path = tmp_path / "wide.txt"
    path.write_bytes("Unicode text in UTF-16 about retention.".encode("utf-16"))
    run_in_process("upload", str(path), "--submit")
    task = run_in_process("work", "--json").record["task"]
    assert task["status"] == "succeeded"


@pytest.mark.skipif(not ON_POSTGRES, reason="needs a PostgreSQL server")
def test_a_missing_postgresql_database_is_named_by_the_servers_reason():
    url = POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + "/kb_no_such_database"
    result = run_in_process("--database-url", url, "status", "--json")
    assert result.code == 1 and result.error["error"] == "internal_error"
    assert 'database "kb_no_such_database" does not exist' in result.error["message"]
    no_traceback(result)


def test_an_unreachable_database_server_is_a_plain_internal_error():
    url = "postgresql+psycopg://kb@127.0.0.1:1/kb"  # port 1: nothing listens there
    result = run_in_process("--database-url", url, "status", "--json")
    assert result.code == 1 and result.error["error"] == "internal_error"
    assert result.error["message"] == "cannot reach the database server (OperationalError)"
    no_traceback(result)
