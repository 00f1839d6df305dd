"""The benchmark suite keeps working: every case runs on tiny sizes, and cases are chosen
by number or name. Nothing is timed here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, kb_env, sqlite_only


@sqlite_only  # the benchmarks build SQLite databases of their own
@pytest.mark.slow
def test_benchmarks_run_on_tiny_sizes(tmp_path):
    output = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run.py"), "--quick", "--output", str(output)],
        env=kb_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(output.read_text())
    cases = {row["case"].split()[0] for row in report["rows"]}
    ocr = {"17"} if importlib.util.find_spec("rapidocr") else set()  # the `ocr` extra's case
    assert cases == {str(number) for number in range(1, 17)} | ocr
    contention = next(row for row in report["rows"] if row["case"].startswith("3"))
    assert contention["extra"]["lock_errors"] == 0 and contention["extra"]["exactly_once"]
    assert "| case | metric |" in done.stdout


@sqlite_only  # nothing here touches a database: once is enough
def test_cases_are_chosen_by_number_or_name_in_the_suites_order():
    script = str(REPO / "benchmarks" / "run.py")
    run = {"env": kb_env(), "capture_output": True, "text": True, "timeout": 60}
    listed = subprocess.run([sys.executable, script, "--list", "--case", "chunker", "6"], **run)
    assert listed.returncode == 0, listed.stderr[-2000:]
    chosen = [line.split()[:2] for line in listed.stdout.splitlines()]
    assert chosen == [["6", "amplification"], ["12", "chunker"]]
    unknown = subprocess.run([sys.executable, script, "--case", "99", "chunker"], **run)
    assert unknown.returncode != 0 and "no case 99" in unknown.stderr
