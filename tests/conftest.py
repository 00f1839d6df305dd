"""Every test gets its own KB_HOME: a real SQLite file and object directory in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kb_cli.config import resolve_settings
from kb_cli.services.context import Kb

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_docs"
STRIPPED = (
    "DATABASE_URL",
    "OBJECT_STORE_ROOT",
    "KB_TOKEN",
    "KB_DEBUG",
    "KB_BUSY_TIMEOUT",
    "KB_MAX_UPLOAD_BYTES",
    "KB_BACKOFF_SECONDS",
    "NO_COLOR",
)


@pytest.fixture(scope="session", autouse=True)
def _bytecode_cache(tmp_path_factory: pytest.TempPathFactory):
    """Let the many `kb` subprocesses share compiled bytecode (in a temp dir, not the tree).

    Purely a speed-up: with PYTHONDONTWRITEBYTECODE set, every subprocess would
    recompile whatever has no .pyc yet.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        patch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.mktemp("pycache")))
        yield


@pytest.fixture(autouse=True)
def kb_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in STRIPPED:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "kbhome"
    monkeypatch.setenv("KB_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture
def kb(kb_home: Path) -> Kb:
    """The service layer on this test's home, in process."""
    return Kb.open(resolve_settings(), actor="tester")


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout.splitlines()]

    @property
    def record(self) -> dict:
        [only] = self.records
        return only

    @property
    def error(self) -> dict:
        return json.loads(self.stderr.strip().splitlines()[-1])


def kb_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def start_kb(*args: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    """Start `kb` as a real process (for races, signals and live output)."""
    return subprocess.Popen(
        [sys.executable, "-m", "kb_cli", *args],
        env=env or kb_env(),
        text=True,
        stdout=popen.pop("stdout", subprocess.PIPE),
        stderr=popen.pop("stderr", subprocess.PIPE),
        **popen,
    )


def run_kb(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60, input: str | None = None
) -> Result:
    done = subprocess.run(
        [sys.executable, "-m", "kb_cli", *args],
        env=env or kb_env(),
        text=True,
        capture_output=True,
        timeout=timeout,
        input=input,
    )
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli():
    return run_kb
