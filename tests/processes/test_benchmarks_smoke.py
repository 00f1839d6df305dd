"""The benchmark suite keeps working: every case runs on tiny sizes, and one can be run
alone by number or name. Nothing is timed here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, kb_env, sqlite_only


def run_benchmarks(tmp_path, *args: str) -> tuple[list[dict], str]:
    output = tmp_path / "bench.json"
    script = REPO / "benchmarks" / "run.py"
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--output", str(output), *args],
        env=kb_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(output.read_text())["rows"], done.stdout


@sqlite_only  # the benchmarks build SQLite databases of their own
@pytest.mark.slow
def test_benchmarks_run_on_tiny_sizes(tmp_path):
    rows, table = run_benchmarks(tmp_path)
    cases = {row["case"].split()[0] for row in rows}
    assert cases == {str(number) for number in range(1, 16)}
    contention = next(row for row in rows if row["case"].startswith("3"))
    assert contention["extra"]["lock_errors"] == 0 and contention["extra"]["exactly_once"]
    assert "| case | metric |" in table


@sqlite_only
@pytest.mark.slow
def test_chosen_cases_run_alone_in_the_suites_order(tmp_path):
    rows, _ = run_benchmarks(tmp_path, "--case", "chunker", "6")
    cases = [row["case"] for row in rows]
    assert list(dict.fromkeys(cases)) == ["6 write amplification", "12 chunker"]
