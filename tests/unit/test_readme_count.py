"""The README's count of the default test suite is the number pytest collects: a
number quoted by hand drifts as tests are added."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# As the README says it is counted: `uv run pytest --collect-only -q`, the default
# group (pyproject's addopts leave out `slow`).
STATED = re.compile(
    r"runs the default test suite on SQLite, ([\d,]+) tests "
    r"\(as `uv run pytest --collect-only -q` counts"
)
COLLECTED = re.compile(r"^(\d+)(?:/\d+)? tests? collected", re.M)


def test_the_readme_states_the_collected_number_of_tests():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [stated] = STATED.findall(" ".join(readme.split()))
    # Collected in a process of its own, on SQLite as the README's command runs, in one
    # process (no workers to start: only the count is wanted).
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_TEST_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [collected] = COLLECTED.findall(done.stdout)
    assert int(stated.replace(",", "")) == int(collected), (
        f"README.md says {stated} tests, pytest collects {collected}: update the README"
    )
