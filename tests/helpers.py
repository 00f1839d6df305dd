"""What the tests share: running `kb` (in this process or as a real one), waiting for a
condition, reading the test's database, and the contract's record and error checks.

A plain module, not a conftest: test modules import from here, never from each other.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import create_engine, text

from kb_cli.cli import main

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_docs"
# kb's variables, removed from every test's environment (and from clean_env's).
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
    "KB_POLL_SECONDS",
    "KB_WAKE",
    "KB_RECONNECT_SECONDS",
    "KB_RELAY_SECRET",
    # An S3 store's place and keys: a test never reaches a real bucket by accident.
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
)
# What puts a test's object store on the loopback S3 server (tests/conftest.py).
S3_VARIABLES = (
    "OBJECT_STORE_ROOT",
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)

# Set by .ci/run for the second pass of the suite: every test then gets a database of
# its own on that PostgreSQL server instead of a SQLite file.
POSTGRES_ADMIN_URL = os.environ.get("KB_TEST_POSTGRES_URL")
ON_POSTGRES = bool(POSTGRES_ADMIN_URL)
sqlite_only = pytest.mark.skipif(ON_POSTGRES, reason="about the SQLite file itself")
# Set by .ci/run for the PostgreSQL pass too: every test's object store is then a prefix
# of its own in a bucket on a loopback S3-compatible server (moto), which the fixtures
# start, instead of a directory in its home.
ON_S3 = os.environ.get("KB_TEST_OBJECT_STORE") == "s3"


def file_store_only(reason: str) -> pytest.MarkDecorator:
    """For the few tests that handle the store's files themselves."""
    return pytest.mark.skipif(ON_S3, reason=f"handles object files on disk: {reason}")


T = TypeVar("T")


@contextlib.contextmanager
def postgres_database(template: str | None = None, own_identity: bool = False) -> Iterator[str]:
    """A new database on the test server for the block's duration (a copy of the database
    at the URL `template`, if given: nobody may be connected to that one); its URL. With
    `own_identity`, the copy gets a database id of its own, as one made by its own
    migrations would (a copy that comes with a copy of its store keeps the store's)."""
    name = f"kbt_{uuid.uuid4().hex[:12]}"
    copy = f" TEMPLATE {template.rsplit('/', 1)[1]}" if template else ""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}{copy}"))
    url = POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        if own_identity:
            _new_database_id(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


class OwnPostgres:
    """A PostgreSQL server of the test's own (.ci/postgres.sh), to restart or stop
    under running `kb` processes without disturbing any other test's server."""

    def __init__(self, directory: str, url: str) -> None:
        self.directory = directory
        self.url = url

    def control(self, action: str) -> None:
        """restart, halt (a fast shutdown) or resume: pg_ctl, as the CI script runs it."""
        script = str(REPO / ".ci" / "postgres.sh")
        subprocess.run(["bash", script, action, self.directory], check=True, timeout=60)


@contextlib.contextmanager
def own_postgres(server: str | None = None) -> Iterator[OwnPostgres]:
    """A throwaway server for the block (a few seconds to start); its `postgres`
    database is the test's. `server="debian"`: Debian's PostgreSQL, which has no
    pgvector (.ci/postgres.sh, KB_TEST_POSTGRES_SERVER)."""
    import tempfile

    directory = tempfile.mkdtemp(prefix="kb-own-pg-")  # not under tmp_path: the server's
    script = str(REPO / ".ci" / "postgres.sh")  # user must reach it
    env = {**os.environ, "KB_TEST_POSTGRES_SERVER": server or ""}
    started = subprocess.run(
        ["bash", script, "start", directory], check=True, capture_output=True, text=True, env=env
    )
    url = started.stdout.strip().partition("=")[2]
    try:
        yield OwnPostgres(directory, url)
    finally:
        subprocess.run(["bash", script, "stop", directory], timeout=60)
        subprocess.run(["rm", "-rf", directory])


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str | Callable[[], object] = "timed out waiting",
) -> T:
    """Poll `predicate` until it returns something truthy, and return that; fail the test
    with `message` (or what a callable `message` returns) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(str(message() if callable(message) else message))
        time.sleep(interval)


# --- running kb ------------------------------------------------------------------------


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
    """This process's environment (the test's home) plus `extra`."""
    env = dict(os.environ)
    env.update(extra)
    return env


def run_in_process(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run the real CLI entry point in this process, with exactly `env` (default: this
    process's environment) as the environment; as a subprocess would, but without
    paying Python's start-up. The environment and the SIGINT/SIGTERM handlers are
    restored afterwards."""
    saved_env = dict(os.environ)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(saved_env if env is None else env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
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
    """Run `kb` as a real process to its end."""
    done = subprocess.run(
        [sys.executable, "-m", "kb_cli", *args],
        env=env or kb_env(),
        text=True,
        capture_output=True,
        timeout=timeout,
        input=input,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def clean_env(keep_engine: bool = True, **values: str | Path | None) -> dict[str, str]:
    """The environment of a fresh shell: none of kb's variables unless given here
    (except the test's PostgreSQL database, when the suite runs on PostgreSQL)."""
    env = kb_env()
    for name in (*STRIPPED, "KB_HOME"):
        env.pop(name, None)
    if keep_engine and ON_POSTGRES and "DATABASE_URL" in os.environ:  # not in module fixtures
        env["DATABASE_URL"] = os.environ["DATABASE_URL"]
    if keep_engine and ON_S3 and "OBJECT_STORE_ROOT" in os.environ:
        env.update({name: os.environ[name] for name in S3_VARIABLES})
    for name, value in values.items():
        if value is not None:
            env[name] = str(value)
    return env


# --- steps many tests take (an `invoke` is the fixture's runner) ------------------------


# What a base record says of a base created without --model: it follows KB_EMBEDDINGS.
FOLLOWS_SETTING = {"model": "local", "model_from": "KB_EMBEDDINGS", "switching_to": None}


def ingest(invoke, tmp_path: Path, name: str, text: str, token: str | None = None) -> dict:
    """Write, upload and submit a text file, run one worker; the submitted task record."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    task = invoke("upload", str(path), "--submit", "--json", token=token).record
    assert invoke("work", "--json", token=token).code == 0
    return task


def publish(invoke, document_id: str, token: str | None = None) -> None:
    assert invoke("publish", document_id, "--json", token=token).code == 0


def hits(invoke, query: str) -> list[dict]:
    result = invoke("search", query, "--json")
    assert result.code == 0, result.stderr
    return result.records


# Pieces a hostile query is made of: quotes of every kind (paired, lone, empty), the
# lexical index's operators and syntax, control characters, Chinese, a word that is
# very long.
_QUERY_PIECES = [
    '"', "“", "”", "「", "」", "'", "`", "«", "»", "‘", "’", '""', "“”", "「」", '" "', "<>",
    "AND", "OR", "NOT", "NEAR", "NEAR(a,b)", "*", "^", ":", "(", ")", "{", "}", "-", "+", "|",
    "&", "!", "<->", "%", "_", "\\", "col:x", "a*", "invoices", "budget", "review", "the", "é",
    "报销", "知识库", "锁", "\x00", "\x1b[31m", "\x7f", "\t", "\n", "\r", "\u200b", "\ufeff",
    '"in\x00voices"',
]  # fmt: skip


def hostile_queries(max_pieces: int = 12):
    """A hypothesis strategy of search queries made to break query parsing."""
    from hypothesis import strategies as st

    piece = st.one_of(
        st.sampled_from(_QUERY_PIECES),
        st.text(max_size=8),
        st.characters(max_codepoint=0x9F),  # control characters among ASCII
        st.text(alphabet="ab报", min_size=200, max_size=3000),  # a very long word
    )
    spaced = st.sampled_from(["", " ", "  ", "\u3000"])
    return st.lists(st.tuples(piece, spaced), max_size=max_pieces).map(
        lambda parts: "".join(text + space for text, space in parts)
    )


# --- the test's object store -----------------------------------------------------------


def object_keys(location: str | None = None) -> list[str]:
    """The keys in the test's object store (or the one at `location`), whichever kind it
    is; leftover temporary objects included, the quarantine not."""
    from kb_cli.config import resolve_settings
    from kb_cli.store import open_store

    store = open_store(location or resolve_settings().object_store)
    return sorted(key for key, _modified in store.entries())


def remove_objects(location: str | None = None) -> None:
    """Take every object out of the test's store (or the one at `location`), behind kb's
    back: a disk or a bucket that lost them."""
    from kb_cli.config import resolve_settings
    from kb_cli.store import open_store

    store = open_store(location or resolve_settings().object_store)
    for key in object_keys(location):
        store.delete(key)


# --- a knowledge base built once, shared by many tests (tests/conftest.py) --------------


@dataclass
class SharedHome:
    """A knowledge base a module builds once (`build_home`) instead of once per test: the
    variables that point kb at it, and what its builder returned (ids, tokens). A test that
    only reads uses it as it is (`enter_home`, checked unchanged afterwards); a test that
    writes gets a copy of its own (`enter_home(..., writes=True)`)."""

    env: dict[str, str]  # KB_HOME; DATABASE_URL on PostgreSQL; the S3 variables on S3
    value: object
    # On PostgreSQL, the database built, copied for every writer; readers use a copy of
    # their own (a template database takes no connections while it is copied).
    template_url: str | None = None


def home_runner(env: dict[str, str]) -> Callable[..., Result]:
    """The `invoke` fixture's runner, for the home of `env` outside any test."""

    def run(*args: str, token: str | None = None) -> Result:
        return run_in_process(*args, env={**env, **({"KB_TOKEN": token} if token else {})})

    return run


def _new_database_id(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(
            text("UPDATE kb_meta SET value = :id WHERE key = 'database_id'"),
            {"id": uuid.uuid4().hex},
        )
    engine.dispose()


@contextlib.contextmanager
def migrated_postgres_template() -> Iterator[str]:
    """A database with kb's schema and nothing else, made once by kb's own migrations,
    for every test's database to copy: migrating each anew cost half a second a test.
    With KB_TEST_BM25_INDEX=1 it also has pg_textsearch's BM25 index, made as
    docs/many-hosts.md has an operator make it (the server must preload pg_textsearch),
    so that every test's search ranks words through it."""
    from kb_cli.db import Database

    with postgres_database() as url:
        database = Database(url, 5.0, None)
        try:
            database.ensure_schema(create=True)
        finally:
            database.close()
        if os.environ.get("KB_TEST_BM25_INDEX") == "1":
            _create_bm25_index(url)
        disconnect_postgres(url)
        yield url


def _create_bm25_index(url: str) -> None:
    import psycopg

    from kb_cli.migrations import bm25

    with psycopg.connect(url.replace("+psycopg", "")) as raw:
        bm25.create_index(raw)


def migrated_sqlite_file(directory: Path) -> Path:
    """`directory`/kb.sqlite3 with kb's schema and nothing else, made by kb's own
    migrations once per test process, for every test's home to start from: migrating
    each home anew took 0.05 to 0.3 s in process, and a `kb` process that made one
    imported Alembic, half a second more. Whole in that one file: its write-ahead log
    checkpointed into it, and closed (each copy is made 0600, whatever this file's mode)."""
    import sqlite3

    from kb_cli.db import Database

    path = directory / "kb.sqlite3"
    database = Database(f"sqlite:///{path}", 5.0, None)
    try:
        database.ensure_schema(create=True)
    finally:
        database.close()
    with contextlib.closing(sqlite3.connect(path)) as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert not any(directory.glob("kb.sqlite3-*")), "the template is not whole in its file"
    return path


def sqlite_home_from(template: Path, home: Path) -> None:
    """`home` as kb's first command leaves it (the directory 0700, kb.sqlite3 0600 in it,
    nothing else until something is stored), its database a copy of `template` with a
    database id of its own, as one made by its own migrations has (migration 0005)."""
    import sqlite3

    home.mkdir(mode=0o700)
    target = home / "kb.sqlite3"
    with (
        open(template, "rb") as source,
        open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as copy,
    ):
        shutil.copyfileobj(source, copy)
    with contextlib.closing(sqlite3.connect(target)) as raw:
        raw.execute("PRAGMA synchronous = OFF")  # a test's file: no power cut to outlive
        with raw:
            raw.execute(
                "UPDATE kb_meta SET value = ? WHERE key = 'database_id'", (uuid.uuid4().hex,)
            )


def disconnect_postgres(url: str) -> None:
    """End every session on the database at `url`, so that it can be a template."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = :name AND pid <> pg_backend_pid()"
            ),
            {"name": url.rsplit("/", 1)[1]},
        )
    admin.dispose()


def copy_s3_objects(source: str, target: str) -> None:
    """Every object under the s3:// prefix `source` (marker and quarantine too), copied
    under the prefix `target` of the same bucket, on the loopback server of the test's
    S3 variables."""
    import obstore
    from obstore.store import S3Store

    from kb_cli.store.location import S3Location

    source_at, target_at = S3Location.parse(source), S3Location.parse(target)
    bucket = S3Store(
        source_at.bucket,
        endpoint=os.environ["AWS_ENDPOINT_URL"],
        region=os.environ["AWS_REGION"],
        access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        client_options={"allow_http": True},
    )
    for batch in obstore.list(bucket, prefix=source_at.prefix):
        for meta in batch:
            path = meta["path"]
            obstore.copy(bucket, path, target_at.prefix + path[len(source_at.prefix) :])


def home_digest(home: SharedHome) -> dict:
    """What a test that only reads must leave of `home` as it found it: the rows of every
    table (counted; documents, tasks and users whole but for when a token was last used)
    and the object store's keys. Read in the home's own environment, whatever the test
    set in its own."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(
        {
            name: value
            for name, value in saved.items()
            if not name.startswith("KB_") and name not in STRIPPED
        }
        | home.env
    )
    try:
        return _digest()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _digest() -> dict:
    from sqlalchemy import inspect

    from kb_cli.config import resolve_settings

    engine = create_engine(resolve_settings().database_url)
    try:
        with engine.connect() as conn:
            digest: dict = {
                table: conn.execute(text(f"SELECT count(*) FROM {table}")).scalar()
                for table in inspect(conn).get_table_names()
            }
            for table, columns in (
                ("documents", "*"),
                ("ingestion_tasks", "*"),
                # A token's use is written, at most once a minute, by any command.
                ("users", "name, role, token_id, token_hash, created_at, disabled_at"),
            ):
                rows = conn.execute(text(f"SELECT {columns} FROM {table}"))
                digest[f"{table} rows"] = sorted(map(repr, rows))
    finally:
        engine.dispose()
    digest["objects"] = object_keys()
    return digest


# --- the test's database ---------------------------------------------------------------


def later(seconds: float):
    """This test's knowledge base as a worker or doctor sees it `seconds` from now: a
    lease runs out by moving the clock, never by sleeping through it."""
    from datetime import UTC

    from kb_cli.app import Kb
    from kb_cli.clock import ManualClock
    from kb_cli.config import resolve_settings

    kb = Kb.open(resolve_settings(), actor="tester")
    kb.clock = ManualClock(datetime.now(UTC) + timedelta(seconds=seconds))
    return kb


def work_later(
    seconds: float, worker_id: str, task_id: str | None = None, timeout: float = 60, **options
):
    """One claim attempt by an in-process worker whose clock is `seconds` ahead, logging
    to stderr as `kb work` does: its result (claimed, task record). A worker still
    waiting for the database after `timeout` seconds is told to stop, as Ctrl-C would."""
    import threading

    from kb_cli.console import PlainWorkerLog
    from kb_cli.worker import Worker, WorkerOptions

    listener = PlainWorkerLog(worker_id)
    stop = threading.Event()
    options = WorkerOptions(worker_id=worker_id, **options)
    worker = Worker(later(seconds), options, listener, stop)
    deadline = threading.Timer(timeout, stop.set)
    deadline.daemon = True
    deadline.start()
    try:
        [result] = list(worker.run(task_id))
    finally:
        deadline.cancel()
        worker.kb.db.close()
    assert not stop.is_set(), f"worker {worker_id} did not finish within {timeout} s"
    return result


def db_rows(query: str, **params) -> list[dict]:
    """Rows of a query against this test's database, whatever the engine."""
    from kb_cli.config import resolve_settings

    engine = create_engine(resolve_settings().database_url)
    try:
        with engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(text(query), params)]
    finally:
        engine.dispose()


def db_execute(statement: str, **params) -> None:
    """A change made behind kb's back (no notification, no event), committed."""
    from kb_cli.config import resolve_settings

    engine = create_engine(resolve_settings().database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(statement), params)
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


@contextlib.contextmanager
def audit_writes_locked() -> Iterator[None]:
    """Keep every other connection from writing the audit trail while reads go on: the
    write lock on SQLite, a lock on the audit table on PostgreSQL."""
    from kb_cli.config import resolve_settings

    engine = create_engine(resolve_settings().database_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN" if ON_POSTGRES else "BEGIN IMMEDIATE")
        if ON_POSTGRES:
            conn.exec_driver_sql("LOCK TABLE audit_events IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.exec_driver_sql("ROLLBACK")
    engine.dispose()


def first_revision_database():
    """A database as the first schema revision left it, with one published document."""
    from kb_cli import migrations
    from kb_cli.config import resolve_settings
    from kb_cli.db import Database

    now = "2026-01-01T00:00:00.000000Z"
    settings = resolve_settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    database = Database(settings.database_url, settings.busy_timeout_seconds)
    engine = database.engine.sqlalchemy_engine(settings.database_url, 5.0)
    with engine.begin() as conn:  # Alembic runs on SQLAlchemy, as `Database.upgrade` does
        migrations.upgrade(conn, "0001")
        conn.execute(
            text(
                "INSERT INTO documents VALUES ('d0000000-0000-0000-0000-000000000001', 'old.txt', "
                "'text/plain', 5, :sha, 'k', 'published', 4, 1, 1, NULL, :now, :now)"
            ),
            {"sha": "0" * 64, "now": now},
        )
        conn.execute(
            text(
                "INSERT INTO chunks (document_id, revision, chunk_index, task_id, text) VALUES "
                "('d0000000-0000-0000-0000-000000000001', 1, 0, 't', 'legacy wombat notes')"
            )
        )
    engine.dispose()
    return database


# --- the contract: records, errors, output ----------------------------------------------

TASK_KEYS = {
    "task_id",
    "document_id",
    "status",
    "stage",
    "completed",
    "total",
    "attempt",
    "error_code",
    "error_detail",
    "worker_id",
    "created_at",
    "updated_at",
}
DOC_KEYS = {
    "document_id",
    "filename",
    "content_type",
    "size_bytes",
    "sha256",
    "status",
    "version",
    "revision",
    "published_revision",
    "created_at",
    "updated_at",
    "latest_task",
}
WORK_KEYS = {"claimed", "worker_id", "task_id", "task"}
SEARCH_KEYS = {"document_id", "filename", "revision", "chunk_index", "score", "text"}
STAGES = ("download", "parse", "embedding", "indexing", "finalizing")
TASK_STATUSES = {"queued", "running", "succeeded", "failed", "cancelled", "retry_wait"}
DOC_STATUSES = {"draft", "processing", "review_pending", "published", "failed", "archived"}


def is_rfc3339_utc(value: str) -> bool:
    if not isinstance(value, str) or "T" not in value:
        return False
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    return parsed.utcoffset() == timedelta(0)


def assert_task_record(record: dict) -> None:
    """Every key of a task record, each of its type."""
    missing = TASK_KEYS - record.keys()
    assert not missing, f"task record lacks {missing}: {record}"
    uuid.UUID(record["task_id"])
    uuid.UUID(record["document_id"])
    assert record["status"] in TASK_STATUSES
    assert record["stage"] in STAGES
    for key in ("completed", "total", "attempt"):
        assert isinstance(record[key], int) and record[key] >= 0, (key, record)
    assert is_rfc3339_utc(record["created_at"]), record["created_at"]
    assert is_rfc3339_utc(record["updated_at"]), record["updated_at"]


def assert_doc_record(record: dict) -> None:
    """Every key of a document record, each of its type; its latest task a task record."""
    missing = DOC_KEYS - record.keys()
    assert not missing, f"document record lacks {missing}: {record}"
    uuid.UUID(record["document_id"])
    assert record["status"] in DOC_STATUSES
    assert isinstance(record["version"], int) and record["version"] >= 1
    assert isinstance(record["revision"], int) and record["revision"] >= 1
    assert is_rfc3339_utc(record["created_at"]), record["created_at"]
    assert is_rfc3339_utc(record["updated_at"]), record["updated_at"]
    if record["latest_task"] is not None:
        assert_task_record(record["latest_task"])
        assert record["latest_task"]["document_id"] == record["document_id"]


def assert_queued_fresh(task: dict, attempt: int = 0) -> None:
    """The shape of a task just (re)queued: queued / download / 0 / 0, clean fields."""
    assert_task_record(task)
    assert (task["status"], task["stage"], task["completed"], task["total"]) == (
        "queued",
        "download",
        0,
        0,
    )
    assert task["attempt"] == attempt
    assert task["error_code"] is None and task["error_detail"] is None
    assert task["worker_id"] is None


def assert_work_line(line: dict) -> None:
    """One line of `kb work --json`."""
    assert set(line) == WORK_KEYS, f"work --json line keys {set(line)}"
    assert isinstance(line["claimed"], bool)
    if line["task"] is not None:
        assert_task_record(line["task"])


def check_output_hygiene(args: tuple[str, ...], result: Result) -> None:
    """What must hold for every single invocation of `kb` in a pipe."""
    for stream in (result.stdout, result.stderr):
        assert "Traceback (most recent call last)" not in stream, (args, stream)
        assert "\x1b[" not in stream, f"ANSI escapes while piped: {args}"
    if "--json" in args:
        for line in result.stdout.splitlines():
            assert isinstance(json.loads(line), dict), f"non-object JSON line {line!r}"
        if result.code != 0:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert lines, f"no error on stderr: {args}"
            error = json.loads(lines[-1])
            assert {"error", "message"} <= error.keys(), error
            assert isinstance(error["message"], str) and error["message"]


def check_error(result: Result, exit: int, code: str) -> dict:
    """A refused command: exit `exit`, exactly one JSON error line `code` on stderr and
    nothing on stdout; the error object."""
    assert result.code == exit, (
        f"exit {result.code}, expected {exit}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line on stderr, got {lines}"
    error = json.loads(lines[0])
    assert error["error"] == code, error
    assert result.stdout.strip() == "", f"failed command printed records: {result.stdout}"
    return error


def kb_checked(
    *args: str | Path, expect: int | None = 0, env: dict[str, str] | None = None
) -> Result:
    """`kb` in this process, its output checked as every invocation's must be, its exit
    code `expect` (unless None)."""
    argv = tuple(str(a) for a in args)
    result = run_in_process(*argv, env=env)
    check_output_hygiene(argv, result)
    if expect is not None:
        assert result.code == expect, (
            f"kb {' '.join(argv)} -> exit {result.code}, expected {expect}\n"
            f"stdout: {result.stdout}\nstderr: {result.stderr}"
        )
    return result


def kb_json(*args: str | Path, env: dict[str, str] | None = None) -> list[dict]:
    """The records of a command that must succeed, run with --json."""
    return kb_checked(*args, "--json", env=env).records


def doc_of(task: dict, env: dict[str, str] | None = None) -> dict:
    """The document record of a task's document, checked as one."""
    [record] = kb_json("status", task["document_id"], env=env)
    assert_doc_record(record)
    return record


def finish(proc: subprocess.Popen, args: tuple = (), timeout: float = 60) -> Result:
    """The result of a started `kb` (start_kb), its output checked as kb_checked's."""
    out, err = proc.communicate(timeout=timeout)
    result = Result(proc.returncode, out, err)
    check_output_hygiene(tuple(str(a) for a in args), result)
    return result


# --- what SQL a command runs (SQLite's trace callback) ----------------------------------


@dataclass
class SqlTrace:
    """The statements run on every SQLite connection opened while tracing."""

    statements: list[str]

    @property
    def transactions(self) -> int:
        return sum(statement.startswith("BEGIN") for statement in self.statements)

    @property
    def prefix_lookups(self) -> int:
        """The `LIKE 'prefix%'` lookups of an id (queries.find_ids)."""
        return sum(" LIKE " in s and s.endswith("LIMIT 2") for s in self.statements)


@contextlib.contextmanager
def sql_traced() -> Iterator[SqlTrace]:
    """Trace the SQL of what runs inside the block (kb's SQLite connections are opened
    per command, so a command's are all new)."""
    import sqlite3

    trace = SqlTrace([])
    connect = sqlite3.connect

    def tracing_connect(*args, **kwargs):
        raw = connect(*args, **kwargs)
        raw.set_trace_callback(trace.statements.append)
        return raw

    sqlite3.connect = tracing_connect  # type: ignore[assignment]
    try:
        yield trace
    finally:
        sqlite3.connect = connect  # type: ignore[assignment]
