"""Real faults: a full or read-only disk is `storage_unavailable` (retried), an object
that vanishes between stages is `object_read_error`, a busy database is waited out.
(Encrypted and damaged PDFs parsed directly: tests/unit/test_hostile_input.py.)"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (
    db_rows,
    file_store_only,
    kb_env,
    remove_objects,
    run_in_process,
    run_kb,
    sqlite_only,
    start_kb,
    wait_until,
    write_lock_held,
)


@contextlib.contextmanager
def small_disk(path: Path, size: str = "2m") -> Iterator[Path]:
    """A real filesystem of `size` bytes (tmpfs), or the test is skipped."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root): no full disk to test on")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount_read_only(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)


@sqlite_only
def test_a_full_disk_under_the_database_is_storage_unavailable_and_retried(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        env = kb_env(
            KB_HOME=str(disk),
            OBJECT_STORE_ROOT=str(tmp_path / "objects"),
            KB_EMBEDDINGS="none",
        )
        document = tmp_path / "big.txt"  # 499 chunks, about 1.2 MB in the database
        document.write_text("\n\n".join(f"paragraph {i} " + "words " * 150 for i in range(250)))
        task = run_in_process("upload", str(document), "--submit", "--json", env=env).record
        filler = disk / "filler"
        filler.write_bytes(bytes(1_500_000))  # leaves about 450 KB
        worked = run_kb("work", "--json", "--backoff-seconds", "0.2", env=env)
        assert worked.code == 0, worked.stderr
        final = worked.record["task"]
        assert (final["status"], final["error_code"]) == ("retry_wait", "storage_unavailable")
        assert "no space left on device" in final["error_detail"]
        assert "/" not in final["error_detail"]
        filler.unlink()  # space again: the retry succeeds
        time.sleep(0.5)
        again = run_kb("work", "--json", env=env)
        assert again.record["task"]["status"] == "succeeded", again.stderr
        assert again.record["task_id"] == task["task_id"]


def test_a_full_object_store_names_the_cause_on_upload(tmp_path):
    with small_disk(tmp_path / "disk", size="1m") as disk:
        env = kb_env(OBJECT_STORE_ROOT=str(disk))
        big = tmp_path / "big.txt"
        big.write_text("x " * 1_500_000)
        result = run_kb("upload", str(big), "--json", env=env)
        assert result.code == 1 and "no space left on device" in result.error["message"]
        assert "free some space" in result.error["message"]
        assert not [p for p in disk.rglob("*") if p.is_file()]  # no half-written object


@sqlite_only
def test_a_read_only_database_is_named(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        env = kb_env(KB_HOME=str(disk), OBJECT_STORE_ROOT=str(tmp_path / "objects"))
        # A knowledge base on that disk (made in the test's process: a `kb` process that
        # makes one imports Alembic, seconds for nothing here).
        assert run_in_process("db", "upgrade", env=env).code == 0
        remount_read_only(disk)
        note = tmp_path / "a.txt"
        note.write_text("words")
        result = run_kb("upload", str(note), "--json", env=env)
        assert result.code != 0 and "read-only" in result.error["message"], result.stderr
        assert "Traceback" not in result.stderr


@file_store_only("only there does the parser open the object's own file; on S3 it reads its copy")
def test_an_object_that_vanishes_after_the_download_is_an_object_read_error(tmp_path, kb_home):
    path = tmp_path / "a.txt"
    path.write_text("some words to index")
    task = run_in_process("upload", str(path), "--submit", "--json").record
    env = kb_env(KB_EMBEDDINGS="none")
    worker = start_kb("work", "--json", "--stage-delay", "0.6", "--backoff-seconds", "30", env=env)

    def at_the_parse() -> bool:
        [row] = db_rows("SELECT stage FROM ingestion_tasks WHERE id = :id", id=task["task_id"])
        return row["stage"] == "parse"

    wait_until(
        at_the_parse, timeout=30, interval=0.02, message="the worker never reached the parse"
    )
    remove_objects()  # after the download checked it, before the parser opens it
    out, err = worker.communicate(timeout=30)
    [row] = db_rows(
        "SELECT status, stage, error_code, error_detail FROM ingestion_tasks WHERE id = :id",
        id=task["task_id"],
    )
    assert row["stage"] == "parse", err
    assert (row["status"], row["error_code"]) == ("retry_wait", "object_read_error"), row
    assert "parse_error" not in out


def test_a_busy_database_is_waited_out_not_the_end_of_the_worker(tmp_path, kb_home):
    path = tmp_path / "a.txt"
    path.write_text("words to index while the database is locked")
    task = run_in_process("upload", str(path), "--submit", "--json").record
    env = kb_env(KB_BUSY_TIMEOUT="0.2", KB_EMBEDDINGS="none")
    with write_lock_held(task["task_id"]):
        # By id: PostgreSQL's claim of the oldest task skips a locked row instead.
        worker = start_kb("work", task["task_id"], "--json", env=env)
        time.sleep(1.5)  # several busy timeouts pass
        assert worker.poll() is None, worker.communicate()
    _out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    [row] = db_rows("SELECT status FROM ingestion_tasks WHERE id = :id", id=task["task_id"])
    assert row["status"] == "succeeded"
