"""The README's `kb serve` walkthrough, run as written by bash against a real server:
each line's `# → TEXT` is what it must print, in order (`kb work` prints its own lines
between them)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import kb_env
from tests.serving import serving

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = "<!-- serve-walkthrough -->\n```sh\n"


def walkthrough() -> str:
    text = README.read_text(encoding="utf-8")
    assert MARK in text, "the README lost its marked walkthrough"
    return text.split(MARK, 1)[1].split("```", 1)[0]


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="needs curl and jq")
def test_the_readme_walkthrough_prints_what_it_says(tmp_path):
    script = walkthrough()
    expected = re.findall(r"# → (.+)$", script, flags=re.MULTILINE)
    assert len(expected) >= 6
    with serving() as server:
        env = kb_env(KB_URL=server.url)
        # `kb` as a reader who installed it has it: this interpreter's own.
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    printed = iter(done.stdout.splitlines())
    missing = [line.strip() for line in expected if line.strip() not in printed]
    assert missing == [], done.stdout
