"""The contract's cases that need real `kb` processes (the rest of the contract runs in
process, in tests/cli/test_contract.py): the installed console script, a worker running
while another command cancels its task, waiters blocking until a task ends."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.helpers import (
    SAMPLES,
    Result,
    assert_task_record,
    assert_work_line,
    check_output_hygiene,
    doc_of,
    finish,
    kb_env,
    kb_json,
    start_kb,
    wait_until,
)
from tests.helpers import kb_checked as kb


def test_console_script_is_the_same_program():
    script = Path(sys.executable).with_name("kb")
    script = script if script.exists() else Path(shutil.which("kb") or "kb")
    assert script.exists(), "console script `kb` is not installed"
    done = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, env=kb_env(), timeout=30
    )
    assert done.returncode == 0
    assert done.stdout == kb("--version").stdout


def test_cancel_running_task_stops_the_worker():
    [task] = kb_json("upload", SAMPLES / "handbook.pdf", "--submit")
    args = ("work", "--worker-id", "w-slow", "--stage-delay", "0.5", "--json")
    worker = start_kb(*args)
    stderr_lines: list[str] = []
    reader = threading.Thread(
        target=lambda: stderr_lines.extend(iter(worker.stderr.readline, "")), daemon=True
    )
    reader.start()

    def claim_logged() -> bool:
        if any("claimed task=" in line for line in stderr_lines):
            return True
        assert worker.poll() is None, f"worker exited early: {stderr_lines}"
        return False

    wait_until(claim_logged, timeout=20, message="worker never logged its claim")

    [running] = kb_json("status", task["task_id"])
    assert (running["status"], running["worker_id"], running["attempt"]) == ("running", "w-slow", 1)
    assert doc_of(task)["status"] == "processing"

    [cancelled] = kb_json("cancel", task["task_id"])
    assert cancelled["status"] == "cancelled"

    worker.wait(timeout=30)
    reader.join(timeout=5)
    out = worker.stdout.read()
    result = Result(worker.returncode, out, "".join(stderr_lines))
    check_output_hygiene(args, result)
    assert result.code == 0, result.stderr
    [line] = result.records
    assert_work_line(line)
    assert line["claimed"] is True and line["task"]["status"] == "cancelled"

    doc = doc_of(task)
    assert doc["status"] == "draft"
    assert doc["latest_task"]["status"] == "cancelled"
    [final] = kb_json("status", task["task_id"])
    assert final["status"] == "cancelled"


def test_status_wait_blocks_until_the_task_ends():
    [task] = kb_json("upload", SAMPLES / "faq.txt", "--submit")
    wait_task = ("status", task["task_id"], "--wait", "--timeout", "30", "--json")
    wait_doc = ("status", task["document_id"], "--wait", "--timeout", "30", "--json")
    waiters = [start_kb(*wait_task), start_kb(*wait_doc)]
    time.sleep(1.0)
    assert [w.poll() for w in waiters] == [None, None], "--wait returned before the task ended"

    kb("work", "--json")

    task_result = finish(waiters[0], wait_task)
    doc_result = finish(waiters[1], wait_doc)
    assert task_result.code == 0 and doc_result.code == 0, (task_result, doc_result)
    [record] = task_result.records
    assert_task_record(record)
    assert (record["task_id"], record["status"]) == (task["task_id"], "succeeded")
    [record] = doc_result.records
    # with a document id: the task record of the document's latest task, once it has ended
    assert_task_record(record)
    assert (record["task_id"], record["status"]) == (task["task_id"], "succeeded")

    # an already finished task returns at once
    [again] = kb_json("status", task["task_id"][:8], "--wait", "--timeout", "5")
    assert again["status"] == "succeeded"
