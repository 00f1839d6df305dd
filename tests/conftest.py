"""Every test gets its own KB_HOME: a real SQLite file and object directory in tmp_path.

Fixtures only; what tests share otherwise is in tests/helpers.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kb_cli.app import Kb
from kb_cli.config import resolve_settings
from tests.helpers import (
    ON_POSTGRES,
    ON_S3,
    STRIPPED,
    Result,
    postgres_database,
    run_in_process,
)
from tests.loopback import s3_server, s3_store_env


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


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The loopback S3-compatible server of this test process, started on first use."""
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(autouse=True)
def kb_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Path]:
    for name in STRIPPED:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "kbhome"
    monkeypatch.setenv("KB_HOME", str(home))
    if ON_S3:
        for name, value in s3_store_env(request.getfixturevalue("s3_endpoint")).items():
            monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    if not ON_POSTGRES:
        yield home
        return
    with postgres_database() as url:
        monkeypatch.setenv("DATABASE_URL", url)
        yield home


@pytest.fixture
def kb(kb_home: Path) -> Kb:
    """The service layer on this test's home, in process."""
    return Kb.open(resolve_settings(), actor="tester")


@pytest.fixture
def invoke():
    """Run the real CLI in this process (fast enough for large matrices), in this test's
    environment; `token` is KB_TOKEN for that one command (none by default)."""

    def run(*args: str, token: str | None = None) -> Result:
        env = dict(os.environ)
        env.pop("KB_TOKEN", None)
        if token is not None:
            env["KB_TOKEN"] = token
        return run_in_process(*args, env=env)

    return run
