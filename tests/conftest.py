"""Every test gets its own KB_HOME: a real SQLite file and object directory in tmp_path."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from kb_cli.app import Kb
from kb_cli.cli import main
from kb_cli.config import resolve_settings

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
    "KB_EMBEDDINGS",
    "KB_EMBEDDING_URL",
    "KB_EMBEDDING_MODEL",
    "KB_EMBEDDING_API_KEY",
    "KB_EMBEDDING_BATCH",
    "KB_EMBEDDING_TIMEOUT",
    "KB_VECTOR_FLOOR",
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


# Set by .ci/run for the second pass of the suite: every test then gets a database of
# its own on that PostgreSQL server instead of a SQLite file.
POSTGRES_ADMIN_URL = os.environ.get("KB_TEST_POSTGRES_URL")
ON_POSTGRES = bool(POSTGRES_ADMIN_URL)
sqlite_only = pytest.mark.skipif(ON_POSTGRES, reason="about the SQLite file itself")


@pytest.fixture(autouse=True)
def kb_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in STRIPPED:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "kbhome"
    monkeypatch.setenv("KB_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    if not ON_POSTGRES:
        yield home
        return
    with _postgres_database() as url:
        monkeypatch.setenv("DATABASE_URL", url)
        yield home


@contextlib.contextmanager
def _postgres_database() -> Iterator[str]:
    name = f"kbt_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def db_rows(query: str, **params) -> list[dict]:
    """Rows of a query against this test's database, whatever the engine."""
    from kb_cli.config import resolve_settings

    engine = create_engine(resolve_settings().database_url)
    try:
        with engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(text(query), params)]
    finally:
        engine.dispose()


@contextlib.contextmanager
def write_lock_held(task_id: str) -> Iterator[None]:
    """Hold the lock a writer of this task would need, from another connection."""
    from kb_cli.config import resolve_settings

    engine = create_engine(resolve_settings().database_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        if ON_POSTGRES:
            conn.exec_driver_sql("BEGIN")
            conn.execute(
                text("SELECT id FROM ingestion_tasks WHERE id = :id FOR UPDATE"), {"id": task_id}
            )
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.exec_driver_sql("ROLLBACK")
    engine.dispose()


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


def run_in_process(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run the real CLI entry point in this process, with exactly `env` as the
    environment; as a subprocess would, but without paying Python's start-up."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    saved_env = dict(os.environ)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(env or saved_env)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main(list(args))
                code = 0
            except SystemExit as done:
                code = done.code
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return run_kb


@pytest.fixture
def invoke(capsys, monkeypatch):
    """Run the real CLI in this process (fast enough for large matrices)."""

    def run(*args: str, token: str | None = None) -> Result:
        if token is None:
            monkeypatch.delenv("KB_TOKEN", raising=False)
        else:
            monkeypatch.setenv("KB_TOKEN", token)
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        capsys.readouterr()
        try:
            main(list(args))
        except SystemExit as done:
            code = done.code
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run
