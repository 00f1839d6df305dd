"""`kb eval` reads its question file with a bound (docs/limits.md, "What one command may
ask for"): what is not a regular file, /dev/zero or a FIFO no one writes to, is refused
at once (exit 2) in a real process whose address space is limited, where reading the
whole file first grew to gigabytes, or waited for a writer forever."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from tests.helpers import Result, check_error, kb_env

# Far more than `kb eval` needs to refuse a file, far less than reading /dev/zero takes.
ADDRESS_SPACE = 1 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _eval(path: str) -> Result:
    done = subprocess.run(
        [sys.executable, "-m", "kb_cli", "eval", path, "--json"],
        env=kb_env(OPENBLAS_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=20,
        preexec_fn=_limited,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def test_eval_refuses_dev_zero_in_bounded_memory():
    error = check_error(_eval("/dev/zero"), 2, "usage")
    assert "'zero' is not a regular file" in error["message"], error


def test_eval_refuses_a_fifo_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "questions.jsonl"
    os.mkfifo(fifo)
    error = check_error(_eval(str(fifo)), 2, "usage")
    assert "'questions.jsonl' is not a regular file" in error["message"], error
