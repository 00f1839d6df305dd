"""CLI latency: `kb status --json` on many documents and `kb --help` against a minimal
Typer + rich + sqlite3 script doing the same job."""

from __future__ import annotations

import sqlite3
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.harness import DOCUMENT_ROWS, PY, Context, Row, env_for, kb

TITLE = "CLI latency"


# The same job as `kb status --json`: every document, newest first, with its latest
# task as a nested record, one JSON line each (the same bytes, field for field).
MINIMAL_STATUS = """
import json, sqlite3, sys
import typer, rich
app = typer.Typer()
TASK = ("task_id", "document_id", "status", "stage", "completed", "total", "attempt",
        "error_code", "error_detail", "worker_id", "created_at", "updated_at", "revision",
        "lease_expires_at", "retry_at")
@app.command()
def status(json_out: bool = typer.Option(False, "--json")):
    conn = sqlite3.connect(DB)
    rows = conn.execute(
        "SELECT d.id, d.filename, d.content_type, d.size_bytes, d.sha256, d.status, d.version,"
        " d.revision, d.published_revision, d.created_at, d.updated_at, t.id, t.document_id,"
        " t.status, t.stage, t.completed, t.total, t.attempt, t.error_code, t.error_detail,"
        " t.worker_id, t.created_at, t.updated_at, t.revision, t.lease_expires_at, t.retry_at"
        " FROM documents d LEFT JOIN ingestion_tasks t ON t.id = d.latest_task_id"
        " ORDER BY d.created_at DESC, d.id")
    out = sys.stdout
    for row in rows:
        record = dict(zip(("document_id", "filename", "content_type", "size_bytes", "sha256",
                           "status", "version", "revision", "published_revision",
                           "created_at", "updated_at"), row[:11]))
        record["latest_task"] = dict(zip(TASK, row[11:])) if row[11] else None
        out.write(json.dumps(record) + "\\n")
@app.command()
def other():
    pass
app()
"""


def run(ctx: Context) -> list[Row]:
    work, sizes = ctx.work, ctx.sizes
    home = Path(tempfile.mkdtemp(dir=work)) / "home"
    fill_documents(home, sizes.status_docs)
    script = work / "minimal_status.py"
    script.write_text(f"DB = {str(home / 'kb.sqlite3')!r}\n" + MINIMAL_STATUS)
    env = env_for(home)

    def wall(command: list[str]) -> float:
        start = time.perf_counter()
        subprocess.run(command, env=env, capture_output=True, check=True)
        return time.perf_counter() - start

    commands = {
        "kb_status": [PY, "-m", "kb_cli", "status", "--json"],
        "ref_status": [PY, str(script), "status", "--json"],
        "kb_help": [PY, "-m", "kb_cli", "--help"],
        "ref_help": [PY, str(script), "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(max(sizes.runs, 7)):  # interleaved: noise falls on kb and reference alike
        for name, command in commands.items():
            times[name].append(wall(command))
    kb_status, ref_status, kb_help, ref_help = (statistics.median(times[name]) for name in commands)
    imports = subprocess.run(
        [PY, "-X", "importtime", "-m", "kb_cli", "--help"], env=env, capture_output=True, text=True
    ).stderr
    heavy = sorted(
        {
            name
            for name in ("sqlalchemy", "pypdf", "docx", "pypdfium2")
            if f" {name}\n" in imports or f" {name}." in imports
        }
    )
    return [
        Row(
            f"kb status --json, {sizes.status_docs} documents",
            kb_status,
            ref_status,
            "s",
            "<= 1.3x",
            "reference: Typer + rich + stdlib sqlite3 script",
        ),
        Row(
            "kb --help",
            kb_help,
            ref_help,
            "s",
            "no SQLAlchemy/parser import",
            f"heavy modules imported by --help: {heavy or 'none'}",
            {"heavy_imports": heavy},
        ),
    ]


def fill_documents(home: Path, count: int) -> None:
    """Documents with a latest task each, written straight into a fresh kb database."""
    kb(home, "db", "upgrade")  # creates the schema
    conn = sqlite3.connect(home / "kb.sqlite3")
    now = "2026-01-01T00:00:00.000000Z"
    docs, tasks = [], []
    for i in range(count):
        doc_id, task_id = str(uuid.uuid4()), str(uuid.uuid4())
        stamp = f"2026-01-01T00:00:{i % 60:02d}.{i:06d}Z"
        docs.append(
            (
                doc_id,
                f"file{i}.txt",
                "text/plain",
                100,
                "0" * 64,
                uuid.uuid4().hex,
                "review_pending",
                3,
                1,
                None,
                task_id,
                stamp,
                now,
            )
        )
        tasks.append(
            (
                task_id,
                doc_id,
                1,
                "succeeded",
                "finalizing",
                1,
                1,
                1,
                None,
                None,
                "w",
                None,
                None,
                stamp,
                now,
            )
        )
    conn.executemany(DOCUMENT_ROWS, docs)
    conn.executemany(
        "INSERT INTO ingestion_tasks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'default',NULL)", tasks
    )
    conn.commit()
    conn.close()
